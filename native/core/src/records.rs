//! A records field read: its magic 2 batches and legacy magic 0/1 messages, the cut-off last
//! batch and the anomalies that end a set (`RecordSet::scan`); the set's summary as a JSON object
//! (`summary_json`, and `json_summary_v2`'s fast path); what an exchange's row says of its record
//! fields (`Records::record_columns`); and the records themselves for the records table
//! (`each_record`, the records before a fault kept).
//!
//! tests/test_native_records.py holds all of it to protocol/records.py: the summary JSON byte for
//! byte, each batch's facts, and the anomaly and fault texts, which are part of the output.
//! V2_LAYOUT is the header layout that module unpacks too (tests/test_native_boundary.py).

use crate::compression::{Decompressor, CODEC_NAMES};
use crate::json::{json_int, json_str};

const ATTR_CODEC: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The magic 2 batch header, field by field: (field, struct format code: q i64, i i32, I u32,
/// h i16, b i8, all big-endian). The offsets this module reads are derived from it.
pub const V2_LAYOUT: [(&str, u8); 13] = [
    ("base_offset", b'q'),
    ("batch_length", b'i'),
    ("partition_leader_epoch", b'i'),
    ("magic", b'b'),
    ("crc", b'I'),
    ("attributes", b'h'),
    ("last_offset_delta", b'i'),
    ("base_timestamp", b'q'),
    ("max_timestamp", b'q'),
    ("producer_id", b'q'),
    ("producer_epoch", b'h'),
    ("base_sequence", b'i'),
    ("record_count", b'i'),
];

const fn code_size(code: u8) -> usize {
    match code {
        b'q' => 8,
        b'i' | b'I' => 4,
        b'h' => 2,
        _ => 1,
    }
}

/// The offset of V2_LAYOUT's field `i` in the batch (V2_LAYOUT.len(): the header's size).
pub const fn v2_offset(i: usize) -> usize {
    let mut at = 0;
    let mut k = 0;
    while k < i {
        at += code_size(V2_LAYOUT[k].1);
        k += 1;
    }
    at
}

const V2_BATCH_LENGTH: usize = v2_offset(1);
const V2_LEADER_EPOCH: usize = v2_offset(2);
const V2_MAGIC: usize = v2_offset(3);
const V2_CRC: usize = v2_offset(4);
const V2_ATTRIBUTES: usize = v2_offset(5);
const V2_LAST_OFFSET_DELTA: usize = v2_offset(6);
const V2_BASE_TIMESTAMP: usize = v2_offset(7);
const V2_MAX_TIMESTAMP: usize = v2_offset(8);
const V2_PRODUCER_ID: usize = v2_offset(9);
const V2_PRODUCER_EPOCH: usize = v2_offset(10);
const V2_BASE_SEQUENCE: usize = v2_offset(11);
const V2_RECORD_COUNT: usize = v2_offset(12);
/// the CRC covers attributes..end
const V2_CRC_START: usize = V2_ATTRIBUTES;
const V2_OVERHEAD: usize = v2_offset(V2_LAYOUT.len()); // 61
const LOG_OVERHEAD: usize = 12;
const MAX_BATCH: i32 = 1 << 30;

/// The smallest legal length field per magic (None: no such magic).
fn min_size(magic: u8) -> Option<i32> {
    match magic {
        0 => Some(14),
        1 => Some(22),
        2 => Some(V2_OVERHEAD as i32 - 12),
        _ => None,
    }
}

fn i64_at(d: &[u8], p: usize) -> i64 {
    i64::from_be_bytes(d[p..p + 8].try_into().unwrap())
}
fn i32_at(d: &[u8], p: usize) -> i32 {
    i32::from_be_bytes(d[p..p + 4].try_into().unwrap())
}
fn u32_at(d: &[u8], p: usize) -> u32 {
    u32::from_be_bytes(d[p..p + 4].try_into().unwrap())
}
fn i16_at(d: &[u8], p: usize) -> i16 {
    i16::from_be_bytes(d[p..p + 2].try_into().unwrap())
}

/// A magic 2 batch's header fields but those every batch has (base offset, magic, crc and
/// attributes: on Batch).
#[allow(dead_code)] // all of the header, for rows.rs's records table
#[derive(Clone, Copy, Debug, Default)]
pub struct V2Header {
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl V2Header {
    fn parse(d: &[u8], p: usize) -> Self {
        V2Header {
            batch_length: i32_at(d, p + V2_BATCH_LENGTH),
            partition_leader_epoch: i32_at(d, p + V2_LEADER_EPOCH),
            last_offset_delta: i32_at(d, p + V2_LAST_OFFSET_DELTA),
            base_timestamp: i64_at(d, p + V2_BASE_TIMESTAMP),
            max_timestamp: i64_at(d, p + V2_MAX_TIMESTAMP),
            producer_id: i64_at(d, p + V2_PRODUCER_ID),
            producer_epoch: i16_at(d, p + V2_PRODUCER_EPOCH),
            base_sequence: i32_at(d, p + V2_BASE_SEQUENCE),
            record_count: i32_at(d, p + V2_RECORD_COUNT),
        }
    }
}

/// One magic 2 batch or legacy magic 0/1 message: its place in the records field
/// (field[position..end]) and its header.
#[allow(dead_code)] // the legacy timestamp and key, for rows.rs's records table
#[derive(Clone, Debug)]
pub struct Batch {
    pub position: usize,
    pub end: usize,
    pub magic: u8,
    /// int16 for magic 2; for a legacy message its attribute byte, signed
    pub attributes: i16,
    pub crc: u32,
    pub base_offset: i64,
    /// magic 2 only
    pub v2: Option<V2Header>,
    /// legacy only: timestamp (magic 1), key and value as ranges of the field
    pub timestamp: Option<i64>,
    pub key: Option<(usize, usize)>,
    pub value: Option<(usize, usize)>,
}

impl Batch {
    pub fn size(&self) -> usize {
        self.end - self.position
    }

    pub fn codec(&self) -> u8 {
        (self.attributes & ATTR_CODEC) as u8
    }

    pub fn codec_name(&self) -> &'static str {
        CODEC_NAMES[self.codec() as usize]
    }

    pub fn transactional(&self) -> bool {
        self.v2.is_some() && self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn control(&self) -> bool {
        self.v2.is_some() && self.attributes & ATTR_CONTROL != 0
    }

    /// CRC-32C over attributes..end for magic 2, CRC-32 (IEEE) over magic..end for legacy.
    pub fn crc_ok(&self, field: &[u8]) -> bool {
        let data = &field[self.position..self.end];
        let got = if self.v2.is_some() {
            crc32c::crc32c(&data[V2_CRC_START..])
        } else {
            crc32fast::hash(&data[16..])
        };
        got == self.crc
    }

    /// The batch's record count field for magic 2, 1 for a plain message, None for a compressed
    /// wrapper: its count needs a decompression (wrapper_facts), which a summary never does.
    pub fn record_count(&self) -> Option<i64> {
        match self.v2 {
            Some(h) => Some(h.record_count as i64),
            None if self.codec() == 0 => Some(1),
            None => None,
        }
    }

    pub fn producer_id(&self) -> Option<i64> {
        self.v2.map(|h| h.producer_id)
    }

    /// LogAppendTime when the attributes say so, else CreateTime.
    pub fn timestamp_type(&self) -> &'static str {
        if self.attributes & ATTR_LOG_APPEND_TIME != 0 {
            "LogAppendTime"
        } else {
            "CreateTime"
        }
    }

    /// The (possibly compressed) payload uncompressed_size decompresses, with the `legacy_lz4`
    /// flag it passes; None for a legacy message with a null value.
    fn payload<'a>(&self, field: &'a [u8]) -> Option<(&'a [u8], bool)> {
        match self.v2 {
            Some(_) => Some((&field[self.position + V2_OVERHEAD..self.end], false)),
            None => self.value.map(|(a, b)| (&field[a..b], true)),
        }
    }

    /// The batch's size with its payload decompressed: size() without a codec; else size() -
    /// the payload's length + its decompressed length, None when the payload does not
    /// decompress (or is null).
    pub fn uncompressed_size(
        &self,
        field: &[u8],
        cap: usize,
        dec: &mut Decompressor,
    ) -> Option<usize> {
        if self.codec() == 0 {
            return Some(self.size());
        }
        let (payload, legacy) = self.payload(field)?;
        let n = dec
            .decompress(self.codec() as i64, payload, cap, legacy)
            .ok()?
            .len();
        Some(self.size() - payload.len() + n)
    }

    /// (record count, uncompressed size) of a legacy wrapper from one decompression: its value
    /// decompressed, the inner set scanned with partial batches not allowed, its messages
    /// counted up to the first compressed or magic 2 one (the records each_record gives before
    /// its fault).
    pub fn wrapper_facts(
        &self,
        field: &[u8],
        cap: usize,
        dec: &mut Decompressor,
        inner: &mut RecordSet,
    ) -> (usize, Option<usize>) {
        let Some((va, vb)) = self.value else {
            return (0, None); // "compressed wrapper message with a null value"
        };
        let value = &field[va..vb];
        let Ok(out) = dec.decompress(self.codec() as i64, value, cap, true) else {
            return (0, None);
        };
        let usize_ = self.size() - value.len() + out.len();
        inner.scan(out, false);
        let mut count = 0;
        for m in &inner.batches {
            if m.codec() != 0 {
                break; // "nested compressed message at inner offset ..."
            }
            if m.v2.is_some() {
                break; // "record batch (magic 2) inside a magic N wrapper ..."
            }
            count += 1;
        }
        (count, Some(usize_))
    }
}

/// A record set's anomalies as a JSON list of {"kind", "offset", "detail"}.
pub fn anomalies_json(out: &mut Vec<u8>, anomalies: &[Anomaly]) {
    out.push(b'[');
    for (i, a) in anomalies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"kind\":");
        json_str(out, a.kind);
        out.extend_from_slice(b",\"offset\":");
        json_int(out, a.offset as i64);
        out.extend_from_slice(b",\"detail\":");
        json_str(out, &a.detail);
        out.push(b'}');
    }
    out.push(b']');
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub kind: &'static str,
    pub offset: usize,
    pub detail: String,
}

/// What is known of the cut-off last batch: as much of its header as its bytes hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partial {
    pub offset: usize,
    pub base_offset: Option<i64>,
    pub length: Option<i32>,
    pub magic: Option<u8>,
    pub available: usize,
}

/// A records field's batches after scan(), with the cut-off last batch and the anomalies that
/// ended the set. Reusable: scan() clears it.
#[derive(Default, Debug)]
pub struct RecordSet {
    pub batches: Vec<Batch>,
    pub truncated: bool,
    pub partial: Option<Partial>,
    pub anomalies: Vec<Anomaly>,
    /// the field's length
    pub bytes: usize,
}

impl RecordSet {
    /// `data`'s batches, up to its end, a cut-off batch (see `partial`) or the first fault (an
    /// anomaly). `allow_partial`: a cut-off last batch is normal (as in a Fetch response).
    pub fn scan(&mut self, data: &[u8], allow_partial: bool) {
        self.batches.clear();
        self.truncated = false;
        self.partial = None;
        self.anomalies.clear();
        self.bytes = data.len();
        let n = data.len();
        let mut pos = 0;
        while pos < n {
            if n - pos < 17 {
                let base = (n - pos >= 8).then(|| i64_at(data, pos));
                let length = (n - pos >= 12).then(|| i32_at(data, pos + 8));
                self.partial(data, pos, base, length, None, allow_partial);
                break;
            }
            let (base, length) = (i64_at(data, pos), i32_at(data, pos + 8));
            let magic = data[pos + 16];
            let Some(min) = min_size(magic) else {
                self.anomaly(
                    "bad_magic",
                    pos,
                    format!("magic byte {magic} (expected 0, 1 or 2)"),
                );
                break;
            };
            if length < min {
                self.anomaly(
                    "bad_length",
                    pos,
                    format!("length {length} is below the {min}-byte minimum for magic {magic}"),
                );
                break;
            }
            let end = pos + LOG_OVERHEAD + length as usize;
            if end > n {
                self.partial(
                    data,
                    pos,
                    Some(base),
                    Some(length),
                    Some(magic),
                    allow_partial,
                );
                break;
            }
            if magic == 2 {
                self.batches.push(Batch {
                    position: pos,
                    end,
                    magic,
                    attributes: i16_at(data, pos + V2_ATTRIBUTES),
                    crc: u32_at(data, pos + V2_CRC),
                    base_offset: base,
                    v2: Some(V2Header::parse(data, pos)),
                    timestamp: None,
                    key: None,
                    value: None,
                });
            } else {
                match legacy(data, pos, end, magic) {
                    Ok(m) => self.batches.push(m),
                    Err(detail) => {
                        self.anomaly("bad_message", pos, detail);
                        break;
                    }
                }
            }
            pos = end;
        }
    }

    fn anomaly(&mut self, kind: &'static str, offset: usize, detail: String) {
        self.anomalies.push(Anomaly {
            kind,
            offset,
            detail,
        });
    }

    /// A cut-off batch is `truncated` when partial batches are allowed and
    /// its header (if whole) is plausible, else a length_past_end anomaly.
    fn partial(
        &mut self,
        data: &[u8],
        pos: usize,
        base_offset: Option<i64>,
        length: Option<i32>,
        magic: Option<u8>,
        allow_partial: bool,
    ) {
        let n = data.len();
        self.partial = Some(Partial {
            offset: pos,
            base_offset,
            length,
            magic,
            available: n - pos,
        });
        let mut why = (!allow_partial)
            .then(|| "a cut-off batch is only normal in a Fetch response".to_string());
        if why.is_none() && magic == Some(2) && n - pos >= V2_OVERHEAD {
            why = implausible_v2(data, pos);
        }
        match why {
            None => self.truncated = true,
            Some(why) => {
                let need = match length {
                    None => "?".to_string(),
                    Some(l) => (LOG_OVERHEAD as i64 + l as i64).to_string(),
                };
                self.anomaly(
                    "length_past_end",
                    pos,
                    format!("batch needs {need} bytes, {} left; {why}", n - pos),
                );
            }
        }
    }

    /// The set's summary as a compact JSON object: batches, records, codecs (sorted names),
    /// magic (sorted), crc_ok, truncated, bytes, anomalies, and wrappers_not_counted when a
    /// legacy wrapper's count is unknown.
    pub fn summary_json(&self, data: &[u8], out: &mut Vec<u8>) {
        let (mut codecs, mut magics) = (0u8, 0u8);
        let (mut records, mut unknown) = (0i64, 0i64);
        let mut crc_ok = true;
        for b in &self.batches {
            codecs |= 1 << b.codec();
            magics |= 1 << b.magic;
            match b.record_count() {
                Some(c) => records += c,
                None => unknown += 1,
            }
            if crc_ok && !b.crc_ok(data) {
                crc_ok = false;
            }
        }
        out.extend_from_slice(b"{\"batches\":");
        json_int(out, self.batches.len() as i64);
        out.extend_from_slice(b",\"records\":");
        json_int(out, records);
        out.extend_from_slice(b",\"codecs\":[");
        json_codecs(out, codecs);
        out.extend_from_slice(b"],\"magic\":[");
        let mut first = true;
        for m in 0..3u8 {
            if magics >> m & 1 == 1 {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.push(b'0' + m);
            }
        }
        out.extend_from_slice(b"],\"crc_ok\":");
        out.extend_from_slice(if crc_ok { b"true" } else { b"false" });
        out.extend_from_slice(b",\"truncated\":");
        out.extend_from_slice(if self.truncated { b"true" } else { b"false" });
        out.extend_from_slice(b",\"bytes\":");
        json_int(out, self.bytes as i64);
        out.extend_from_slice(b",\"anomalies\":");
        anomalies_json(out, &self.anomalies);
        if unknown > 0 {
            out.extend_from_slice(b",\"wrappers_not_counted\":");
            json_int(out, unknown);
        }
        out.push(b'}');
    }
}

/// The names of the codec bits set in `mask`, sorted, as JSON strings.
fn json_codecs(out: &mut Vec<u8>, mask: u8) {
    let mut names: [&str; 8] = [""; 8];
    let mut k = 0;
    for (c, name) in CODEC_NAMES.iter().enumerate() {
        if mask >> c & 1 == 1 {
            names[k] = *name;
            k += 1;
        }
    }
    names[..k].sort_unstable();
    for (i, name) in names[..k].iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(out, name);
    }
}

/// Why a cut-off v2 header is not the start of a real batch (None: it may be).
fn implausible_v2(d: &[u8], pos: usize) -> Option<String> {
    let attributes = i16_at(d, pos + V2_ATTRIBUTES);
    let h = V2Header::parse(d, pos);
    if attributes & !0x7F != 0 || attributes & ATTR_CODEC > 4 {
        return Some(format!(
            "attributes 0x{:04x} are not a record batch's",
            attributes as u16
        ));
    }
    let (count, last_delta, length) = (h.record_count, h.last_offset_delta, h.batch_length);
    if count < 0 || last_delta < 0 || count > length {
        return Some(format!(
            "record count {count} / last offset delta {last_delta} are impossible"
        ));
    }
    if length > MAX_BATCH {
        return Some(format!("length {length} is beyond any broker's limit"));
    }
    None
}

/// One magic 0/1 message spanning data[pos..end]; Err is the fault's detail.
fn legacy(data: &[u8], pos: usize, end: usize, magic: u8) -> Result<Batch, String> {
    let mut p = pos + 18;
    let timestamp = if magic == 1 {
        p += 8;
        Some(i64_at(data, pos + 18))
    } else {
        None
    };
    let mut fields: [Option<(usize, usize)>; 2] = [None, None];
    for (i, name) in ["key", "value"].iter().enumerate() {
        if end - p < 4 {
            return Err(format!("{name} length runs past the message end"));
        }
        let n = i32_at(data, p);
        p += 4;
        if n < 0 {
            if n != -1 {
                return Err(format!("negative {name} length {n}"));
            }
            continue;
        }
        let n = n as usize;
        if n > end - p {
            return Err(format!("{name} of {n} bytes runs past the message end"));
        }
        fields[i] = Some((p, p + n));
        p += n;
    }
    if p != end {
        return Err(format!("{} bytes left over after the value", end - p));
    }
    Ok(Batch {
        position: pos,
        end,
        magic,
        attributes: data[pos + 17] as i8 as i16,
        crc: u32_at(data, pos + 12),
        base_offset: i64_at(data, pos),
        v2: None,
        timestamp,
        key: fields[0],
        value: fields[1],
    })
}

// -- an exchange row's record columns ------------------------------------------------------

/// What an exchange's row says of its record fields, summed over them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordColumns {
    pub record_count: i64,
    pub record_bytes: i64,
    pub record_bytes_uncompressed: i64,
    /// codec names in first-seen order
    pub codecs: Vec<&'static str>,
    /// the producer id of the first magic 2 batch that has one (>= 0)
    pub producer_id: Option<i64>,
    /// each batch's (records, decompressed size), in the order the fields and their batches
    /// were read: the batches table's, which need not decompress them again
    pub batches: Vec<(i64, Option<usize>)>,
}

/// The reading of record fields, with its buffers kept between calls (a land calls it for
/// every Produce and Fetch).
#[derive(Default)]
pub struct Records {
    pub set: RecordSet,
    pub inner: RecordSet,
    pub dec: Decompressor,
}

impl Records {
    pub fn new() -> Self {
        Self::default()
    }

    /// The summary of records field `data` as JSON, appended to `out`.
    pub fn summary_json(&mut self, data: &[u8], allow_partial: bool, out: &mut Vec<u8>) {
        self.set.scan(data, allow_partial);
        self.set.summary_json(data, out);
    }

    /// One record field into `cols`: scanned (partial batches allowed), its summary as JSON
    /// appended to `summary` (when given), its batches added to the sums (payloads decompressed
    /// up to `cap` bytes for the uncompressed size and a wrapper's count).
    pub fn add_field(
        &mut self,
        field: &[u8],
        cap: usize,
        cols: &mut RecordColumns,
        summary: Option<&mut Vec<u8>>,
    ) {
        self.set.scan(field, true);
        if let Some(out) = summary {
            self.set.summary_json(field, out);
        }
        cols.record_bytes += field.len() as i64;
        for b in &self.set.batches {
            let name = b.codec_name();
            if !cols.codecs.contains(&name) {
                cols.codecs.push(name);
            }
            if let Some(pid) = b.producer_id() {
                if cols.producer_id.is_none() && pid >= 0 {
                    cols.producer_id = Some(pid);
                }
            }
            let (n, u) = match b.record_count() {
                Some(n) => (n, b.uncompressed_size(field, cap, &mut self.dec)),
                None => {
                    let (n, u) = b.wrapper_facts(field, cap, &mut self.dec, &mut self.inner);
                    (n as i64, u)
                }
            };
            cols.record_bytes_uncompressed += u.unwrap_or(b.size()) as i64;
            cols.record_count += n;
            cols.batches.push((n, u));
        }
    }

    /// The record columns of an exchange's record fields, given in the order its row visits
    /// them (which decides the codecs' order and the producer id); the summaries of the fields,
    /// in order, into `summaries` when given.
    pub fn record_columns(
        &mut self,
        fields: &[&[u8]],
        cap: usize,
        mut summaries: Option<&mut Vec<Vec<u8>>>,
    ) -> RecordColumns {
        let mut cols = RecordColumns::default();
        for field in fields {
            match summaries.as_deref_mut() {
                Some(list) => {
                    let mut s = Vec::with_capacity(160);
                    self.add_field(field, cap, &mut cols, Some(&mut s));
                    list.push(s);
                }
                None => self.add_field(field, cap, &mut cols, None),
            }
        }
        cols
    }
}

// -- the records themselves ----------------------------------------------------------------

/// A byte range of the buffer a record is handed over with.
pub type Span = (usize, usize);

/// One record; its fields are ranges of the buffer it comes with (the records field, or the
/// decompressed records).
#[derive(Default, Debug)]
pub struct Rec {
    pub offset: i64,
    /// the record's timestamp, None when unknown (magic 0) or negative, as the table has it
    pub timestamp: Option<i64>,
    /// offset and timestamp as the batch makes them, unbounded: a base plus a varint delta
    pub offset_raw: i128,
    pub timestamp_raw: Option<i128>,
    pub key: Option<Span>,
    pub value: Option<Span>,
    /// (key, value); a header with a null key is kept too (None)
    pub headers: Vec<(Option<Span>, Option<Span>)>,
}

/// Why a batch's records stop before their count, and whether it was the decompression cap
/// (`too_large`). The records before it stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub text: String,
    pub too_large: bool,
}

impl Fault {
    fn new(text: String) -> Self {
        Fault {
            text,
            too_large: false,
        }
    }

    fn compression(codec: u8, e: crate::compression::Error) -> Self {
        use crate::compression::{codec_label, Error};
        let label = codec_label(codec as i64);
        match e {
            Error::Compression(why) => Fault::new(format!("{label}: {why}")),
            Error::TooLarge => Fault {
                text: String::new(), // set by the caller, which knows the cap
                too_large: true,
            },
        }
    }
}

/// What a split stops on: a fault, by its text, or the data running out (worded by the caller,
/// which knows the record it was in).
enum Stop {
    Fault(String),
    Short,
}

type Split<T> = Result<T, Stop>;

fn byte(buf: &[u8], pos: usize) -> Split<u8> {
    buf.get(pos).copied().ok_or(Stop::Short)
}

/// An unsigned varint of up to 10 bytes; the tenth may carry bits past 64, which are kept, not
/// wrapped (u128).
fn uvarint(buf: &[u8], pos: &mut usize) -> Split<u128> {
    let (mut result, mut shift) = (0u128, 0u32);
    loop {
        let b = byte(buf, *pos)?;
        *pos += 1;
        result |= ((b & 0x7F) as u128) << shift;
        if b < 0x80 {
            return Ok(result);
        }
        shift += 7;
        if shift > 63 {
            return Err(Stop::Fault(format!(
                "varint longer than 10 bytes at byte {}",
                *pos
            )));
        }
    }
}

fn zigzag(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

/// pos + n, saturating: a position past the end is no fault of its own; the next read there
/// fails (Stop::Short).
fn skip(pos: usize, n: u128) -> usize {
    pos.saturating_add(usize::try_from(n).unwrap_or(usize::MAX))
}

/// A nullable length-prefixed field of a record (key or value).
fn field(buf: &[u8], pos: &mut usize, index: usize, what: &str) -> Split<Option<Span>> {
    let v = uvarint(buf, pos)?;
    if v & 1 == 1 {
        if v != 1 {
            let n = -((v >> 1) as i128) - 1;
            return Err(Stop::Fault(format!(
                "record {index}: negative {what} length {n}"
            )));
        }
        return Ok(None);
    }
    let a = *pos;
    *pos = skip(a, v >> 1);
    Ok(Some((a, *pos)))
}

/// A record's headers (a count, then each key and value) into rec.headers.
fn headers(buf: &[u8], pos: &mut usize, rend: usize, index: usize, rec: &mut Rec) -> Split<()> {
    let nh = zigzag(uvarint(buf, pos)?);
    if nh < 0 || nh > rend as i128 - *pos as i128 {
        return Err(Stop::Fault(format!(
            "record {index}: bad header count {nh}"
        )));
    }
    for _ in 0..nh {
        let v = uvarint(buf, pos)?;
        let key = (v & 1 == 0).then(|| {
            let a = *pos;
            *pos = skip(a, v >> 1);
            (a, *pos)
        });
        let v = uvarint(buf, pos)?;
        let value = (v & 1 == 0).then(|| {
            let a = *pos;
            *pos = skip(a, v >> 1);
            (a, *pos)
        });
        rec.headers.push((key, value));
    }
    Ok(())
}

fn table_ts(t: Option<i128>) -> Option<i64> {
    t.filter(|t| *t >= 0).and_then(|t| i64::try_from(t).ok())
}

/// Each of a magic 2 batch's `count` records in `buf` (its payload, decompressed) to `f` as it is
/// split; a fault ends the records (those before it stay) with its text.
fn split_v2(
    buf: &[u8],
    count: i32,
    base_offset: i64,
    base_ts: i64,
    log_append_ts: Option<i64>,
    rec: &mut Rec,
    f: &mut impl FnMut(&[u8], &Rec),
) -> Result<(), String> {
    let end = buf.len();
    let mut pos = 0usize;
    for index in 0..count.max(0) as usize {
        let one = (|| -> Split<()> {
            if pos >= end {
                return Err(Stop::Fault(format!(
                    "record {index} missing: batch says {count} records, data ends after {index}"
                )));
            }
            let length = zigzag(uvarint(buf, &mut pos)?);
            let start = pos;
            if length < 6 || start as i128 + length > end as i128 {
                return Err(Stop::Fault(format!(
                    "record {index} at byte {start} has bad length {length}"
                )));
            }
            let rend = start + length as usize;
            pos += 1; // attributes
            let ts_delta = zigzag(uvarint(buf, &mut pos)?);
            let off_delta = zigzag(uvarint(buf, &mut pos)?);
            let key = field(buf, &mut pos, index, "key")?;
            let value = field(buf, &mut pos, index, "value")?;
            rec.headers.clear();
            if byte(buf, pos)? == 0 {
                pos += 1;
            } else {
                headers(buf, &mut pos, rend, index, rec)?;
            }
            if pos != rend {
                return Err(Stop::Fault(format!(
                    "record {index} at byte {start}: fields end at {pos}, length says {rend}"
                )));
            }
            rec.offset_raw = base_offset as i128 + off_delta;
            rec.offset = rec.offset_raw as i64;
            rec.timestamp_raw = Some(match log_append_ts {
                None => base_ts as i128 + ts_delta,
                Some(t) => t as i128,
            });
            rec.timestamp = table_ts(rec.timestamp_raw);
            rec.key = key;
            rec.value = value;
            f(buf, rec);
            Ok(())
        })();
        match one {
            Ok(()) => {}
            Err(Stop::Fault(t)) => return Err(t),
            Err(Stop::Short) => return Err(format!("record {index}: data ends inside the record")),
        }
    }
    if pos != end {
        return Err(format!("{} bytes left after {count} records", end - pos));
    }
    Ok(())
}

/// The records of batch `b` of `field`, each to `f` with the buffer its ranges are in (the field,
/// or the decompressed payload). A fault (compression, structure) ends the records with its
/// text; those before it stay.
pub fn each_record(
    field: &[u8],
    b: &Batch,
    cap: usize,
    dec: &mut Decompressor,
    inner: &mut RecordSet,
    rec: &mut Rec,
    mut f: impl FnMut(&[u8], &Rec),
) -> Result<(), Fault> {
    let too_large = |codec: u8| Fault {
        text: format!(
            "{}: decompressed size exceeds the {cap}-byte cap",
            crate::compression::codec_label(codec as i64)
        ),
        too_large: true,
    };
    let failed = |codec: u8, e: crate::compression::Error| match Fault::compression(codec, e) {
        f if f.too_large => too_large(codec),
        f => f,
    };
    match b.v2 {
        Some(h) => {
            if h.record_count < 0 {
                return Err(Fault::new(format!(
                    "negative record count {}",
                    h.record_count
                )));
            }
            let payload = &field[b.position + V2_OVERHEAD..b.end];
            let buf = if b.codec() == 0 {
                payload
            } else {
                match dec.decompress(b.codec() as i64, payload, cap, false) {
                    Ok(out) => out,
                    Err(e) => return Err(failed(b.codec(), e)),
                }
            };
            let log_append = (b.attributes & ATTR_LOG_APPEND_TIME != 0).then_some(h.max_timestamp);
            split_v2(
                buf,
                h.record_count,
                b.base_offset,
                h.base_timestamp,
                log_append,
                rec,
                &mut f,
            )
            .map_err(Fault::new)
        }
        None if b.codec() == 0 => {
            rec.offset = b.base_offset;
            rec.offset_raw = b.base_offset as i128;
            rec.timestamp_raw = b.timestamp.map(i128::from);
            rec.timestamp = table_ts(rec.timestamp_raw);
            rec.key = b.key;
            rec.value = b.value;
            rec.headers.clear();
            f(field, rec);
            Ok(())
        }
        None => {
            let Some((va, vb)) = b.value else {
                return Err(Fault::new(
                    "compressed wrapper message with a null value".into(),
                ));
            };
            let out = match dec.decompress(b.codec() as i64, &field[va..vb], cap, true) {
                Ok(out) => out,
                Err(e) => return Err(failed(b.codec(), e)),
            };
            inner.scan(out, false);
            // v1 wrappers carry the absolute offset of the last inner message; inner offsets are
            // relative (0..n-1). v0 inner offsets are absolute already.
            let shift = match inner.batches.last() {
                Some(last) if b.magic == 1 => b.base_offset as i128 - last.base_offset as i128,
                _ => 0,
            };
            let log_append = b.attributes & ATTR_LOG_APPEND_TIME != 0 && b.timestamp.is_some();
            rec.headers.clear();
            for m in &inner.batches {
                if m.codec() != 0 {
                    return Err(Fault::new(format!(
                        "nested compressed message at inner offset {}",
                        m.base_offset
                    )));
                }
                if m.v2.is_some() {
                    return Err(Fault::new(format!(
                        "record batch (magic 2) inside a magic {} wrapper at inner offset {}",
                        b.magic, m.base_offset
                    )));
                }
                rec.offset_raw = m.base_offset as i128 + shift;
                rec.offset = rec.offset_raw as i64;
                let ts = if log_append { b.timestamp } else { m.timestamp };
                rec.timestamp_raw = ts.map(i128::from);
                rec.timestamp = table_ts(rec.timestamp_raw);
                rec.key = m.key;
                rec.value = m.value;
                f(out, rec);
            }
            match inner.anomalies.first() {
                Some(a) => Err(Fault::new(format!(
                    "inner message set: {} at byte {}: {}",
                    a.kind, a.offset, a.detail
                ))),
                None => Ok(()),
            }
        }
    }
}

// -- the summary's fast path -------------------------------------------------------------

/// The summary of `data` as RecordSet::summary_json writes it, for whole magic 2 batches only
/// (the common case: a Produce of small records is one per exchange), without building batches;
/// false (nothing written) for anything else, which the caller then scans.
pub fn json_summary_v2(out: &mut Vec<u8>, data: &[u8]) -> bool {
    let n = data.len();
    if n == 0 {
        return false;
    }
    let (mut pos, mut batches, mut records) = (0usize, 0u64, 0i64);
    let mut codecs = 0u8;
    let mut crc_ok = true;
    while pos < n {
        if n - pos < V2_OVERHEAD {
            return false;
        }
        let length = i32_at(data, pos + V2_BATCH_LENGTH);
        let magic = data[pos + V2_MAGIC] as i8;
        let crc = u32_at(data, pos + V2_CRC);
        let attributes = i16_at(data, pos + V2_ATTRIBUTES);
        if magic != 2 || (length as i64) < (V2_OVERHEAD as i64 - 12) {
            return false;
        }
        let end = pos + LOG_OVERHEAD + length as usize;
        if end > n {
            return false;
        }
        codecs |= 1 << (attributes & 7);
        records += i32_at(data, pos + V2_RECORD_COUNT) as i64;
        if crc_ok && crc32c::crc32c(&data[pos + V2_CRC_START..end]) != crc {
            crc_ok = false;
        }
        batches += 1;
        pos = end;
    }
    out.extend_from_slice(b"{\"batches\":");
    json_int(out, batches as i64);
    out.extend_from_slice(b",\"records\":");
    json_int(out, records);
    out.extend_from_slice(b",\"codecs\":[");
    json_codecs(out, codecs);
    out.extend_from_slice(b"],\"magic\":[2],\"crc_ok\":");
    out.extend_from_slice(if crc_ok { b"true" } else { b"false" });
    out.extend_from_slice(b",\"truncated\":false,\"bytes\":");
    json_int(out, n as i64);
    out.extend_from_slice(b",\"anomalies\":[]}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::DEFAULT_MAX_DECOMPRESSED;

    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn record(delta: i64, key: Option<&[u8]>, value: &[u8], header: (&str, &[u8])) -> Vec<u8> {
        let mut body = vec![0u8]; // attributes
        varint(&mut body, 5 * delta); // timestamp delta
        varint(&mut body, delta); // offset delta
        match key {
            Some(k) => {
                varint(&mut body, k.len() as i64);
                body.extend_from_slice(k);
            }
            None => varint(&mut body, -1),
        }
        varint(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        varint(&mut body, 1);
        varint(&mut body, header.0.len() as i64);
        body.extend_from_slice(header.0.as_bytes());
        varint(&mut body, header.1.len() as i64);
        body.extend_from_slice(header.1);
        let mut out = Vec::new();
        varint(&mut out, body.len() as i64);
        out.extend(body);
        out
    }

    /// A magic 2 batch of `records` at base offset 100, its CRC-32C right, `codec` applied.
    fn batch(records: &[Vec<u8>], codec: i16) -> Vec<u8> {
        let mut payload: Vec<u8> = records.concat();
        if codec == 4 {
            payload = zstd::bulk::compress(&payload, 3).unwrap();
        }
        let mut tail = Vec::new(); // from attributes on: what the CRC covers
        tail.extend_from_slice(&codec.to_be_bytes());
        tail.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes()); // last offset delta
        tail.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        tail.extend_from_slice(&1_700_000_000_010i64.to_be_bytes());
        tail.extend_from_slice(&7i64.to_be_bytes()); // producer id
        tail.extend_from_slice(&0i16.to_be_bytes());
        tail.extend_from_slice(&0i32.to_be_bytes());
        tail.extend_from_slice(&(records.len() as i32).to_be_bytes());
        tail.extend(payload);
        let mut b = 100i64.to_be_bytes().to_vec();
        b.extend_from_slice(&((tail.len() + 9) as i32).to_be_bytes()); // epoch, magic, crc, tail
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&crc32c::crc32c(&tail).to_be_bytes());
        b.extend(tail);
        b
    }

    /// (offset, key, value, header count) of a record
    type Got = (i64, Option<Vec<u8>>, Vec<u8>, usize);

    fn read_all(field: &[u8]) -> (RecordSet, Vec<Got>) {
        let mut set = RecordSet::default();
        set.scan(field, true);
        let (mut dec, mut inner, mut rec) =
            (Decompressor::new(), RecordSet::default(), Rec::default());
        let mut got = Vec::new();
        for b in &set.batches {
            let _ = each_record(
                field,
                b,
                DEFAULT_MAX_DECOMPRESSED,
                &mut dec,
                &mut inner,
                &mut rec,
                |buf, r| {
                    let key = r.key.map(|(a, z)| buf[a..z].to_vec());
                    let value = r.value.map(|(a, z)| buf[a..z].to_vec()).unwrap_or_default();
                    got.push((r.offset, key, value, r.headers.len()));
                },
            );
        }
        (set, got)
    }

    #[test]
    fn records_of_a_plain_and_a_zstd_batch() {
        let recs = vec![
            record(0, Some(b"k0"), b"value-0", ("h", b"1")),
            record(1, None, b"value-1", ("trace", b"abc")),
        ];
        for codec in [0i16, 4] {
            let field = batch(&recs, codec);
            let (set, got) = read_all(&field);
            assert_eq!(set.batches.len(), 1);
            let b = &set.batches[0];
            assert!(b.crc_ok(&field), "codec {codec}");
            assert_eq!(
                (b.record_count(), b.producer_id(), b.codec()),
                (Some(2), Some(7), codec as u8)
            );
            assert_eq!(
                got,
                [
                    (100, Some(b"k0".to_vec()), b"value-0".to_vec(), 1),
                    (101, None, b"value-1".to_vec(), 1)
                ]
            );
            assert!(set.anomalies.is_empty() && !set.truncated);
        }
    }

    #[test]
    fn a_cut_batch_is_partial_and_a_flipped_byte_fails_the_crc() {
        let field = batch(&[record(0, None, b"payload", ("h", b""))], 0);
        let mut set = RecordSet::default();
        set.scan(&field[..field.len() - 3], true);
        assert!(set.batches.is_empty() && set.truncated);
        let p = set.partial.clone().expect("a partial batch");
        assert_eq!(
            (p.base_offset, p.magic, p.available),
            (Some(100), Some(2), field.len() - 3)
        );
        let mut bad = field.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        set.scan(&bad, true);
        assert!(!set.batches[0].crc_ok(&bad));
    }
}
