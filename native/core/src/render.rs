//! Output lines: an item's text line and its JSON line (orjson's layout, byte for byte:
//! json.rs), with `kafkawire dissect`'s options (--raw, --no-payloads, --records, the filters:
//! filter.rs). The tables (rows.rs) use its body JSON and clock.
//!
//! The lines are those tests/oracle/output.py wrote before the core did, and
//! tests/test_dissect_golden.py holds them to golden outputs made then: the columns, widths,
//! number formats and key orders here are that format's.
use std::collections::HashMap;

use crate::compression::DEFAULT_MAX_DECOMPRESSED;
use crate::decode::Value;
use crate::exchanges::{AnomalyItem, Body, ExchangeItem};
use crate::json::{
    json_bytes, json_f64, json_int, json_opt_f64, json_opt_int, json_opt_str, json_str, leaf_json,
};
use crate::records::json_summary_v2;
use crate::schema::{key_name, Dir};
use crate::topics::{self, Plans};

// -- text -------------------------------------------------------------------------------

/// The civil date of a day count since 1970-01-01 (H. Hinnant's days_from_civil, inverted).
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A time as "YYYY-MM-DD HH:MM:SS.ffffff" in UTC, "-" for None. `last` keeps the last
/// whole second formatted (lines come many to a second).
pub fn clock(out: &mut String, ts: Option<f64>, last: &mut (i64, String)) {
    let Some(ts) = ts else {
        out.push('-');
        return;
    };
    let sec = ts.floor() as i64; // floored: a time before 1970 too
    if sec != last.0 || last.1.is_empty() {
        let (days, rest) = (sec.div_euclid(86400), sec.rem_euclid(86400));
        let (y, m, d) = civil(days);
        last.0 = sec;
        last.1 = format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
            rest / 3600,
            rest / 60 % 60,
            rest % 60
        );
    }
    out.push_str(&last.1);
    // the microseconds of the float fraction, truncated rather than rounded
    let frac = (ts.rem_euclid(1.0) * 1e6) as i64;
    out.push_str(&format!(".{frac:06}"));
}

/// `s` padded with spaces to `width` characters (code points, not bytes), right-aligned when
/// `right`; a longer `s` is not cut.
pub fn pad(out: &mut String, s: &str, width: usize, right: bool) {
    let n = s.chars().count();
    if right {
        for _ in n..width {
            out.push(' ');
        }
        out.push_str(s);
    } else {
        out.push_str(s);
        for _ in n..width {
            out.push(' ');
        }
    }
}

/// The whitespace the text line's end is trimmed of: Unicode's White_Space characters and the
/// separators 0x1c..=0x1f (which char::is_whitespace leaves out)
fn py_space(c: char) -> bool {
    matches!(c as u32, 0x09..=0x0d | 0x1c..=0x20 | 0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029
        | 0x202f | 0x205f | 0x3000)
}

/// The fields of an exchange's text line.
pub struct TextFields<'a> {
    pub ts: Option<f64>,
    pub client: &'a str,
    pub broker: &'a str,
    pub api_name: &'a str,
    pub api_version: Option<i64>,
    pub correlation_id: Option<i64>,
    pub latency_ms: Option<f64>,
    pub client_id: Option<&'a str>,
    pub topics: &'a [&'a str],
    /// what the nested payloads say (nested::summary): `assigned=N`, `inner=API vN`, ...
    pub detail: Option<&'a str>,
    pub status: &'a str,
    pub errors: &'a [i64],
    pub flags: &'a [&'a str],
}

/// What rendering keeps between lines: the clock's last second, error and API names, topic
/// plans, each field name's JSON key, the records reader and the output options.
pub struct Render {
    clock: (i64, String),
    /// Kafka's error codes: code -> (name, retriable)
    errors: &'static HashMap<i64, (String, bool)>,
    /// API key -> name, for the APIs an Envelope carries
    api_names: &'static HashMap<i16, String>,
    pub plans: Plans,
    keys: Vec<Option<Vec<u8>>>,
    records: crate::records::Records,
    /// the output options (--records, --raw, --no-payloads, the filters)
    pub opts: Options,
    /// --raw --no-payloads: the records fields' bytes noted while writing an exchange's bodies
    collect: bool,
    found: Vec<Vec<u8>>,
    /// --records: the topic of the struct being written (internal topics' records are decoded)
    topic: Option<String>,
}

/// `,"tls":{...}` of a TLS connection's exchange: version, cipher_suite, sni, decrypted.
fn tls_json(out: &mut Vec<u8>, t: &crate::tls::Facts) {
    out.extend_from_slice(b",\"tls\":{\"version\":");
    json_str(out, &t.version);
    out.extend_from_slice(b",\"cipher_suite\":");
    json_str(out, &t.cipher_suite);
    out.extend_from_slice(b",\"sni\":");
    match &t.sni {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"decrypted\":");
    out.extend_from_slice(if t.decrypted { b"true" } else { b"false" });
    out.push(b'}');
}

/// `kafkawire dissect`'s options that change the lines: --records, --raw, --no-payloads and the
/// filters (filter.rs).
#[derive(Default)]
pub struct Options {
    pub records: bool,
    pub raw: bool,
    pub no_payloads: bool,
    pub filter: Option<crate::filter::Filter>,
}

/// A records field's summary JSON by its place in the frame (start, end): rows.rs makes them
/// with an exchange's record totals, sorted by place (Rows::record_totals' `summaries`).
pub type Summary = ((usize, usize), Vec<u8>);

pub use crate::api::RECORD_APIS;

impl Default for Render {
    fn default() -> Self {
        Self::new()
    }
}

impl Render {
    pub fn new() -> Self {
        Render {
            clock: (0, String::new()),
            errors: crate::spec::errors(),
            api_names: crate::spec::api_names(),
            plans: Plans::default(),
            keys: Vec::new(),
            records: crate::records::Records::new(),
            opts: Options::default(),
            collect: false,
            found: Vec::new(),
            topic: None,
        }
    }

    /// Sets the output options: --records, --raw, --no-payloads and the filters.
    pub fn set_options(&mut self, opts: Options) {
        self.opts = opts;
    }

    /// Starts (or ends) noting the records fields' bytes as the bodies are written (--raw
    /// --no-payloads stars them in the raw frames).
    pub fn start_collect(&mut self, on: bool) {
        self.collect = on;
        self.found.clear();
    }

    /// A records field's JSON: its summary (`known` when made already), or with --records its
    /// decoded batches (--no-payloads: without keys,
    /// values and header values). With `collect` on, its bytes are noted for --raw's starring.
    pub fn record_field(&mut self, out: &mut Vec<u8>, data: &[u8], known: Option<&[u8]>) {
        if self.collect {
            self.found.push(data.to_vec());
        }
        if !self.opts.records {
            if let Some(k) = known {
                out.extend_from_slice(k);
            // the fast path for whole v2 batches, else the full scan
            } else if !json_summary_v2(out, data) {
                self.records.summary_json(data, true, out);
            }
            return;
        }
        self.records.decoded_json(
            out,
            data,
            DEFAULT_MAX_DECOMPRESSED,
            self.topic.as_deref(),
            self.opts.no_payloads,
        );
    }

    /// An API key's name, for the APIs an Envelope carries.
    pub fn api_name(&self, key: i16) -> Option<String> {
        self.api_names.get(&key).cloned()
    }

    /// An error code's name (UNKNOWN_ERROR_N for a code Kafka does not define).
    pub fn error_name(&self, code: i64) -> String {
        match self.errors.get(&code) {
            Some((n, _)) => n.clone(),
            None => format!("UNKNOWN_ERROR_{code}"),
        }
    }

    /// Whether an error code is retriable; None for a code Kafka does not define
    pub fn retriable(&self, code: i64) -> Option<bool> {
        self.errors.get(&code).map(|e| e.1)
    }

    /// The filter's verdict on an item: None when there is no filter, or for a connection
    /// (which has no line).
    pub fn keeps(&self, item: &crate::exchanges::Item) -> Option<bool> {
        use crate::exchanges::Item;
        let f = self.opts.filter.as_ref()?;
        match item {
            Item::Connection(_) => None,
            Item::Anomaly(a) => Some(f.keeps(item, a.connection, Vec::new)),
            Item::Exchange(x) => Some(f.keeps(item, Some(x.connection), || self.topics(x))),
        }
    }

    /// An item's output line, text or JSON (newline included); empty when the filter drops it;
    /// None for a connection (no line).
    pub fn line(&mut self, text: bool, item: &crate::exchanges::Item) -> Option<Vec<u8>> {
        use crate::exchanges::Item;
        // filtered out: no line (the caller still passes a file fault on as an item, to be noted)
        if self.keeps(item) == Some(false) {
            return Some(Vec::new());
        }
        match item {
            Item::Anomaly(a) if text => {
                let mut s = self.anomaly_text(a);
                s.push('\n');
                Some(s.into_bytes())
            }
            Item::Anomaly(a) => Some(self.anomaly_json(a)),
            Item::Exchange(x) if text => {
                let mut s = self.exchange_text(x);
                s.push('\n');
                Some(s.into_bytes())
            }
            Item::Exchange(x) => Some(self.exchange_json(x)),
            Item::Connection(_) => None,
        }
    }

    /// An anomaly's text line: time, ANOMALY, its connection, kind and detail.
    pub fn anomaly_text(&mut self, a: &AnomalyItem) -> String {
        let mut line = String::with_capacity(64 + a.detail.len());
        clock(&mut line, Some(a.ts), &mut self.clock);
        line.push_str(" ANOMALY");
        if let Some(c) = a.connection {
            line.push_str(&format!(" conn={c}"));
        }
        line.push(' ');
        line.push_str(&a.kind);
        line.push_str(": ");
        line.push_str(&a.detail);
        line
    }

    /// An exchange's text line (text_line), with its topics and its nested payloads' summary.
    pub fn exchange_text(&mut self, x: &ExchangeItem) -> String {
        let errors = &x.error_codes;
        let names = self.topics(x);
        let names: Vec<&str> = names.iter().map(|t| t.as_ref()).collect();
        let detail = crate::nested::summary(
            x.api_key,
            native_body(&x.request),
            native_body(&x.response),
            |k| self.api_name(k),
        )
        .or_else(
            || match (x.api_key, native_body(&x.response), &x.response_raw) {
                (Some(crate::api::FETCH), Some(b), Some(frame)) => {
                    crate::internal::summary(b, frame)
                }
                _ => None,
            },
        );
        self.text_line(&TextFields {
            ts: x.ts.or(x.response_ts),
            client: &x.client,
            broker: &x.broker,
            api_name: &x.api_name,
            api_version: x.api_version.map(|v| v as i64),
            correlation_id: x.correlation_id.map(|v| v as i64),
            latency_ms: x.latency_ms,
            client_id: x.client_id.as_deref(),
            topics: &names,
            detail: detail.as_deref(),
            status: x.status,
            errors,
            flags: &x.flags,
        })
    }

    /// An exchange's text line from its fields, in aligned columns (tshark's summary style):
    /// time, client -> broker, API and version, correlation id, latency, client id, then topics,
    /// the nested payloads' summary, status, errors and flags when there are any.
    pub fn text_line(&mut self, x: &TextFields<'_>) -> String {
        let mut line = String::with_capacity(160);
        clock(&mut line, x.ts, &mut self.clock);
        line.push(' ');
        pad(&mut line, x.client, 21, true);
        line.push_str(" -> ");
        pad(&mut line, x.broker, 21, false);
        line.push(' ');
        let mut api = if x.api_name.is_empty() {
            "?".to_string()
        } else {
            x.api_name.to_string()
        };
        if let Some(v) = x.api_version {
            api.push_str(&format!(" v{v}"));
        }
        pad(&mut line, &api, 30, false);
        line.push(' ');
        let corr = x
            .correlation_id
            .map(|c| format!("corr={c}"))
            .unwrap_or_default();
        pad(&mut line, &corr, 11, false);
        line.push(' ');
        let latency = x
            .latency_ms
            .map(|l| format!("{l:.3}ms"))
            .unwrap_or_else(|| "-".to_string());
        pad(&mut line, &latency, 11, true);
        line.push_str(" client=");
        let cid = x.client_id.filter(|c| !c.is_empty()).unwrap_or("-");
        pad(&mut line, cid, 20, false);
        if !x.topics.is_empty() {
            line.push_str(" topics=");
            line.push_str(&x.topics.join(","));
        }
        if let Some(d) = x.detail {
            line.push(' ');
            line.push_str(d);
        }
        if x.status != "ok" {
            line.push(' ');
            line.push_str(&x.status.to_uppercase());
        }
        if !x.errors.is_empty() {
            line.push_str(" errors=");
            let names: Vec<String> = x.errors.iter().map(|c| self.error_name(*c)).collect();
            line.push_str(&names.join(","));
        }
        if !x.flags.is_empty() {
            line.push_str(" flags=");
            line.push_str(&x.flags.join(","));
        }
        let keep = line.trim_end_matches(py_space).len();
        line.truncate(keep);
        line
    }

    /// An exchange's topic names: the request's, else the response's, in order, no repeats.
    pub fn topics(&self, x: &ExchangeItem) -> Vec<std::rc::Rc<str>> {
        let (Some(api), Some(version)) = (x.api_key, x.api_version) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for (body, dir, v, frame) in [
            (&x.request, Dir::Request, version, &x.request_raw),
            (
                &x.response,
                Dir::Response,
                x.response_version.unwrap_or(version),
                &x.response_raw,
            ),
        ] {
            if let Some(Body::Native(Value::Struct(s))) = body {
                if let Some(plan) = self.plans.get(api, v, dir) {
                    topics::visit(
                        s,
                        &plan,
                        None,
                        &mut found,
                        false,
                        frame.as_deref().unwrap_or(&[]),
                    );
                }
            }
            if !found.is_empty() {
                break;
            }
        }
        let mut out: Vec<std::rc::Rc<str>> = Vec::new();
        for (t, _, _) in found {
            if let Some(t) = t {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    fn key(&mut self, id: u32) -> &[u8] {
        let i = id as usize;
        if self.keys.len() <= i {
            self.keys.resize(i + 1, None);
        }
        if self.keys[i].is_none() {
            let mut k = Vec::new();
            json_str(&mut k, key_name(id));
            k.push(b':');
            self.keys[i] = Some(k);
        }
        self.keys[i].as_deref().unwrap()
    }

    /// A decoded value as JSON. In a body of an API that carries record data (`record_api`), a
    /// bytes field left in the frame is a records field, written by record_field (`known`: the
    /// summaries made already of some, by place: Summary).
    pub fn json_value(
        &mut self,
        out: &mut Vec<u8>,
        v: &Value,
        frame: &[u8],
        record_api: bool,
        known: &[Summary],
    ) {
        match v {
            Value::Bytes(b) => json_bytes(out, b),
            Value::View { start, end } => {
                let data = &frame[*start..*end];
                if record_api {
                    let known = known
                        .binary_search_by_key(&(*start, *end), |s| s.0)
                        .ok()
                        .map(|i| known[i].1.as_slice());
                    self.record_field(out, data, known);
                } else {
                    json_bytes(out, data);
                }
            }
            Value::List(items) => {
                out.push(b'[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.json_value(out, x, frame, record_api, known);
                }
                out.push(b']');
            }
            Value::Struct(fields) => {
                // --records decodes an internal topic's records: note the topic they are under
                let outer = if record_api && self.opts.records {
                    topic_of(fields, frame).map(|t| std::mem::replace(&mut self.topic, t))
                } else {
                    None
                };
                out.push(b'{');
                for (i, (k, x)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(self.key(*k));
                    self.json_value(out, x, frame, record_api, known);
                }
                out.push(b'}');
                if let Some(t) = outer {
                    self.topic = t;
                }
            }
            leaf => {
                leaf_json(out, leaf, frame);
            }
        }
    }

    pub fn json_body(
        &mut self,
        out: &mut Vec<u8>,
        body: &Option<Body>,
        frame: Option<&[u8]>,
        record_api: bool,
        known: &[Summary],
    ) {
        match body {
            None => out.extend_from_slice(b"null"),
            Some(Body::Native(v)) => {
                self.json_value(out, v, frame.unwrap_or(&[]), record_api, known)
            }
            Some(Body::Error(text)) => {
                out.extend_from_slice(b"{\"_decode_error\":");
                json_str(out, text);
                out.push(b'}');
            }
            Some(Body::Raw(b)) => {
                out.extend_from_slice(b"{\"_raw_body\":");
                json_bytes(out, b);
                out.push(b'}');
            }
            Some(Body::Token) => {
                out.extend_from_slice(b"{\"token\":");
                json_bytes(out, frame.unwrap_or(&[]));
                out.push(b'}');
            }
        }
    }

    /// An exchange's JSON line (the caller redacts the exchange first, unless secrets are shown).
    pub fn exchange_json(&mut self, x: &ExchangeItem) -> Vec<u8> {
        let errors = &x.error_codes;
        let record_api = x.api_key.is_some_and(|k| RECORD_APIS.contains(&k));
        // a body's JSON is about twice its frame (field names, quotes); records beyond 32 KiB are
        // summed up, not written out, so the guess stops there
        let frames = x.request_size.unwrap_or(0) + x.response_size.unwrap_or(0);
        let mut out = Vec::with_capacity(256 + 2 * frames.min(32 << 10));
        out.extend_from_slice(b"{\"type\":\"exchange\",\"ts\":");
        json_opt_f64(&mut out, x.ts);
        out.extend_from_slice(b",\"response_ts\":");
        json_opt_f64(&mut out, x.response_ts);
        out.extend_from_slice(b",\"latency_ms\":");
        json_opt_f64(&mut out, x.latency_ms);
        out.extend_from_slice(b",\"connection\":");
        json_int(&mut out, x.connection as i64);
        out.extend_from_slice(b",\"client\":");
        json_str(&mut out, &x.client);
        out.extend_from_slice(b",\"broker\":");
        json_str(&mut out, &x.broker);
        out.extend_from_slice(b",\"api_key\":");
        json_opt_int(&mut out, x.api_key.map(|k| k as i64));
        out.extend_from_slice(b",\"api_name\":");
        json_str(&mut out, &x.api_name);
        out.extend_from_slice(b",\"api_version\":");
        json_opt_int(&mut out, x.api_version.map(|k| k as i64));
        out.extend_from_slice(b",\"correlation_id\":");
        json_opt_int(&mut out, x.correlation_id.map(|k| k as i64));
        out.extend_from_slice(b",\"client_id\":");
        json_opt_str(&mut out, x.client_id.as_deref());
        out.extend_from_slice(b",\"status\":");
        json_str(&mut out, x.status);
        out.extend_from_slice(b",\"error_codes\":[");
        for (i, c) in errors.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_int(&mut out, *c);
        }
        out.extend_from_slice(b"],\"request\":");
        self.start_collect(record_api && self.opts.raw && self.opts.no_payloads);
        self.json_body(
            &mut out,
            &x.request,
            x.request_raw.as_deref(),
            record_api,
            &[],
        );
        out.extend_from_slice(b",\"response\":");
        match &x.response {
            Some(Body::Raw(b)) if self.opts.no_payloads => {
                out.extend_from_slice(b"{\"_raw_body\":");
                dropped_raw_body(&mut out, b.len());
                out.push(b'}');
            }
            _ => self.json_body(
                &mut out,
                &x.response,
                x.response_raw.as_deref(),
                record_api,
                &[],
            ),
        }
        self.collect = false;
        out.extend_from_slice(b",\"request_size\":");
        json_opt_int(&mut out, x.request_size.map(|k| k as i64));
        out.extend_from_slice(b",\"response_size\":");
        json_opt_int(&mut out, x.response_size.map(|k| k as i64));
        out.extend_from_slice(b",\"response_version\":");
        json_opt_int(&mut out, x.response_version.map(|k| k as i64));
        out.extend_from_slice(b",\"flags\":[");
        for (i, f) in x.flags.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_str(&mut out, f);
        }
        out.push(b']');
        if let Some(t) = &x.tls {
            tls_json(&mut out, t);
        }
        if self.opts.raw {
            let opaque = |b: &Option<Body>| {
                matches!(b, Some(Body::Raw(_))) || record_api && matches!(b, Some(Body::Error(_)))
            };
            // the metadata log's credentials stay starred in a Fetch answer's raw frame
            let secrets = match (x.api_key, native_body(&x.response), &x.response_raw) {
                (Some(crate::api::FETCH), Some(b), Some(frame)) => {
                    crate::internal::secret_spans(b, frame)
                }
                _ => Vec::new(),
            };
            for (name, raw, body, keep, stars) in [
                (
                    &b",\"request_raw\":"[..],
                    &x.request_raw,
                    &x.request,
                    8,
                    &[][..],
                ),
                (
                    &b",\"response_raw\":"[..],
                    &x.response_raw,
                    &x.response,
                    4,
                    &secrets[..],
                ),
            ] {
                out.extend_from_slice(name);
                self.raw_hex(
                    &mut out,
                    raw.as_deref(),
                    self.opts.no_payloads && opaque(body),
                    keep,
                    stars,
                );
            }
        }
        out.extend_from_slice(b"}\n");
        out
    }

    /// --raw: a raw frame's hex (null for None), the `stars` spans starred (secrets); --no-payloads:
    /// starred from `keep` on when `opaque`, and the records fields noted while writing the bodies
    /// starred where they are found (as redact::star_after and redact::star_spans star).
    pub fn raw_hex(
        &self,
        out: &mut Vec<u8>,
        raw: Option<&[u8]>,
        opaque: bool,
        keep: usize,
        stars: &[(usize, usize)],
    ) {
        let Some(raw) = raw else {
            out.extend_from_slice(b"null");
            return;
        };
        let mut buf = std::borrow::Cow::Borrowed(raw);
        for &(a, z) in stars {
            if let Some(s) = buf.to_mut().get_mut(a..z) {
                s.fill(b'*');
            }
        }
        if opaque && raw.len() > keep {
            let b = buf.to_mut();
            b[keep..].fill(b'*');
        }
        if self.opts.no_payloads && !raw.is_empty() {
            for blob in &self.found {
                if let Some(at) = find(&buf, blob) {
                    buf.to_mut()[at..at + blob.len()].fill(b'*');
                }
            }
        }
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.reserve(raw.len() * 2 + 2);
        out.push(b'"');
        for &c in buf.iter() {
            out.push(HEX[(c >> 4) as usize]);
            out.push(HEX[(c & 15) as usize]);
        }
        out.push(b'"');
    }

    /// An anomaly's JSON line.
    pub fn anomaly_json(&self, a: &AnomalyItem) -> Vec<u8> {
        let mut out = Vec::with_capacity(96 + a.detail.len());
        out.extend_from_slice(b"{\"type\":\"anomaly\",\"connection\":");
        json_opt_int(&mut out, a.connection.map(|c| c as i64));
        out.extend_from_slice(b",\"ts\":");
        json_f64(&mut out, a.ts);
        out.extend_from_slice(b",\"kind\":");
        json_str(&mut out, &a.kind);
        out.extend_from_slice(b",\"detail\":");
        json_str(&mut out, &a.detail);
        out.extend_from_slice(b"}\n");
        out
    }
}

/// --no-payloads: an orphan response's undecoded body (it may be a Fetch answer full of
/// records) reduced to its size.
pub fn dropped_raw_body(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(b"{\"bytes\":");
    json_int(out, n as i64);
    out.extend_from_slice(b",\"dropped\":\"--no-payloads\"}");
}

/// Where `needle` first occurs in `hay` (0 for an empty needle).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    if needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The name a struct gives its topic (TopicName, Name or Topic), with its records under it.
fn topic_of(fields: &[(u32, Value)], frame: &[u8]) -> Option<Option<String>> {
    let keys = [crate::schema::K_TOPIC_NAME, crate::schema::K_NAME]
        .into_iter()
        .chain(crate::schema::known_key("Topic"));
    for k in keys {
        match crate::decode::get(fields, k) {
            Some(Value::Str(s)) => return Some(Some(s.to_string())),
            Some(Value::Text { start, end }) => {
                return Some(
                    std::str::from_utf8(&frame[*start..*end])
                        .ok()
                        .map(str::to_owned),
                )
            }
            _ => {}
        }
    }
    None
}

/// A body the core decoded (None: an error, a raw body or token, none).
fn native_body(b: &Option<Body>) -> Option<&crate::decode::Value> {
    match b {
        Some(Body::Native(v)) => Some(v),
        _ => None,
    }
}
