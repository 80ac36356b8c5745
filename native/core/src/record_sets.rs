//! `--records`: a records field written out whole, each batch with its header, its records
//! (key, value and headers, control records decoded) and why its records stop early, as
//! `dissect --records` writes it. The internal topics' records get `key_decoded` and
//! `value_decoded` beside their bytes; `--no-payloads` keeps keys, values and header values out
//! and their sizes in. The same splitter (records::each_record) makes the records table's rows.
use crate::internal::{self, Internal};
use crate::json::{json_bytes, json_hex, json_int, json_str};
use crate::records::{anomalies_json, each_record, Batch, Rec, Records, Span};

const ATTR_DELETE_HORIZON: i16 = 0x40;

fn json_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

fn json_opt_int(out: &mut Vec<u8>, v: Option<i128>) {
    match v {
        Some(n) => out.extend_from_slice(n.to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

fn span(buf: &[u8], s: Option<Span>) -> Option<&[u8]> {
    s.map(|(a, b)| &buf[a.min(buf.len())..b.min(buf.len())])
}

fn opt_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => json_bytes(out, b),
        None => out.extend_from_slice(b"null"),
    }
}

/// What a record is written with.
struct Ctx<'a> {
    no_payloads: bool,
    control: bool,
    /// the internal topic's decoder, when the records are of one (and payloads are shown)
    internal: Option<(&'a Internal, &'a str)>,
    decoder: &'a Internal,
}

fn record_json(out: &mut Vec<u8>, buf: &[u8], r: &Rec, cx: &Ctx<'_>) {
    let (key, value) = (span(buf, r.key), span(buf, r.value));
    out.extend_from_slice(b"{\"offset\":");
    out.extend_from_slice(r.offset_raw.to_string().as_bytes());
    out.extend_from_slice(b",\"timestamp\":");
    json_opt_int(out, r.timestamp_raw);
    let decoded = cx
        .internal
        .map(|(dec, topic)| dec.decode(Some(topic), false, key, value));
    out.extend_from_slice(b",\"key\":");
    opt_bytes(out, key.filter(|_| !cx.no_payloads));
    out.extend_from_slice(b",\"value\":");
    if decoded.as_ref().is_some_and(|d| d.secret()) {
        json_str(out, "<redacted>");
    } else {
        opt_bytes(out, value.filter(|_| !cx.no_payloads));
    }
    out.extend_from_slice(b",\"headers\":[");
    for (i, (k, v)) in r.headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'[');
        match span(buf, *k) {
            // a header key is a string, and one that is not UTF-8 is written as its hex
            Some(k) => match std::str::from_utf8(k) {
                Ok(text) => json_str(out, text),
                Err(_) => json_hex(out, k),
            },
            None => out.extend_from_slice(b"null"),
        }
        out.push(b',');
        opt_bytes(out, span(buf, *v).filter(|_| !cx.no_payloads));
        out.push(b']');
    }
    out.push(b']');
    if cx.control {
        out.extend_from_slice(b",\"control\":");
        cx.decoder.control_json(out, key, value);
    }
    if let Some(d) = decoded {
        for (name, j) in [("key_decoded", d.key), ("value_decoded", d.value)] {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            match j {
                Some(j) => out.extend_from_slice(&j),
                None => out.extend_from_slice(b"null"),
            }
        }
    }
    if cx.no_payloads {
        let size = |s: Option<&[u8]>| s.map_or(-1, |b| b.len() as i64);
        out.extend_from_slice(b",\"key_size\":");
        json_int(out, size(key));
        out.extend_from_slice(b",\"value_size\":");
        json_int(out, size(value));
    }
    out.push(b'}');
}

fn header_json(out: &mut Vec<u8>, b: &Batch, field: &[u8]) {
    out.extend_from_slice(b"{\"position\":");
    json_int(out, b.position as i64);
    out.extend_from_slice(b",\"magic\":");
    json_int(out, b.magic as i64);
    out.extend_from_slice(b",\"base_offset\":");
    json_int(out, b.base_offset);
    if let Some(h) = &b.v2 {
        out.extend_from_slice(b",\"batch_length\":");
        json_int(out, h.batch_length as i64);
        out.extend_from_slice(b",\"partition_leader_epoch\":");
        json_int(out, h.partition_leader_epoch as i64);
    }
    out.extend_from_slice(b",\"crc\":");
    json_int(out, b.crc as i64);
    out.extend_from_slice(b",\"crc_ok\":");
    json_bool(out, b.crc_ok(field));
    out.extend_from_slice(b",\"attributes\":");
    json_int(out, b.attributes as i64);
    out.extend_from_slice(b",\"codec\":");
    json_str(out, b.codec_name());
    out.extend_from_slice(b",\"timestamp_type\":");
    json_str(out, b.timestamp_type());
    match &b.v2 {
        Some(h) => {
            out.extend_from_slice(b",\"transactional\":");
            json_bool(out, b.transactional());
            out.extend_from_slice(b",\"control\":");
            json_bool(out, b.control());
            out.extend_from_slice(b",\"has_delete_horizon\":");
            json_bool(out, b.attributes & ATTR_DELETE_HORIZON != 0);
            out.extend_from_slice(b",\"last_offset_delta\":");
            json_int(out, h.last_offset_delta as i64);
            out.extend_from_slice(b",\"base_timestamp\":");
            json_int(out, h.base_timestamp);
            out.extend_from_slice(b",\"max_timestamp\":");
            json_int(out, h.max_timestamp);
            out.extend_from_slice(b",\"producer_id\":");
            json_int(out, h.producer_id);
            out.extend_from_slice(b",\"producer_epoch\":");
            json_int(out, h.producer_epoch as i64);
            out.extend_from_slice(b",\"base_sequence\":");
            json_int(out, h.base_sequence as i64);
        }
        None => {
            out.extend_from_slice(b",\"timestamp\":");
            json_opt_int(out, b.timestamp.map(i128::from));
        }
    }
}

impl Records {
    /// A records field as `dissect --records` writes it: scanned (a cut-off last batch
    /// allowed), every batch with its records, as JSON appended to `out`. `topic`: the
    /// topic the field is of (an internal topic's records are decoded with Kafka's schemas).
    pub fn decoded_json(
        &mut self,
        out: &mut Vec<u8>,
        data: &[u8],
        cap: usize,
        topic: Option<&str>,
        no_payloads: bool,
    ) {
        let decoder = internal::decoder();
        let internal = topic
            .filter(|t| !no_payloads && internal::is_internal(t))
            .map(|t| (&*decoder, t));
        self.set.scan(data, true);
        let Records { set, inner, dec } = self;
        let mut rec = Rec::default();
        out.extend_from_slice(b"{\"batches\":[");
        for (i, b) in set.batches.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            header_json(out, b, data);
            let cx = Ctx {
                no_payloads,
                control: b.control(),
                // a control batch's records say what they are in their `control`
                internal: internal.filter(|_| !b.control()),
                decoder: &decoder,
            };
            out.extend_from_slice(b",\"record_count\":");
            let at = out.len();
            if let Some(h) = &b.v2 {
                json_int(out, h.record_count as i64);
            }
            out.extend_from_slice(b",\"records\":[");
            let mut n = 0usize;
            let fault = each_record(data, b, cap, dec, inner, &mut rec, |buf, r| {
                if n > 0 {
                    out.push(b',');
                }
                n += 1;
                record_json(out, buf, r, &cx);
            });
            out.push(b']');
            if b.v2.is_none() {
                // a legacy message's count is known once its records are read: 1, or a
                // wrapper's inner messages
                let count = if b.codec() == 0 { 1 } else { n };
                let text = count.to_string();
                out.splice(at..at, text.bytes());
            }
            out.extend_from_slice(b",\"error\":");
            match &fault {
                Err(f) => json_str(out, &f.text),
                Ok(()) => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(b",\"too_large\":");
            json_bool(out, fault.as_ref().is_err_and(|f| f.too_large));
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"truncated\":");
        json_bool(out, set.truncated);
        out.extend_from_slice(b",\"partial\":");
        match &set.partial {
            Some(p) => {
                out.extend_from_slice(b"{\"offset\":");
                json_int(out, p.offset as i64);
                out.extend_from_slice(b",\"base_offset\":");
                json_opt_int(out, p.base_offset.map(i128::from));
                out.extend_from_slice(b",\"length\":");
                json_opt_int(out, p.length.map(i128::from));
                out.extend_from_slice(b",\"magic\":");
                json_opt_int(out, p.magic.map(i128::from));
                out.extend_from_slice(b",\"available\":");
                json_int(out, p.available as i64);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"anomalies\":");
        anomalies_json(out, &set.anomalies);
        out.push(b'}');
    }
}
