//! Output lines without Python objects: the text line of dissector/output.py's format_text
//! and the JSON line of its _Encoder (orjson's layout, byte for byte: json.rs), for the items
//! that need nothing only Python knows. The tables (rows.rs) use its body JSON and clock.
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::decode::Value;
use crate::exchanges::{AnomalyItem, Body, Errors, ExchangeItem};
use crate::json::{
    json_ascii_bytes, json_f64, json_int, json_opt_f64, json_opt_int, json_opt_str, json_str,
    uuid_text,
};
use crate::records::json_summary_v2;
use crate::schema::{key_name, Dir, Fixed};
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

/// output._clock: "YYYY-MM-DD HH:MM:SS.ffffff" in UTC, "-" for None. `last` keeps the last
/// whole second formatted (lines come many to a second).
pub fn clock(out: &mut String, ts: Option<f64>, last: &mut (i64, String)) {
    let Some(ts) = ts else {
        out.push('-');
        return;
    };
    let sec = ts.floor() as i64; // Python: int(ts // 1)
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
    // Python: f"{int(ts % 1 * 1e6):06d}" (float %, then truncation)
    let frac = (ts.rem_euclid(1.0) * 1e6) as i64;
    out.push_str(&format!(".{frac:06}"));
}

/// Python's f"{s:>w}" / f"{s:<w}": pad to w characters (code points).
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

/// Python's str.isspace(), for rstrip()
fn py_space(c: char) -> bool {
    matches!(c as u32, 0x09..=0x0d | 0x1c..=0x20 | 0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029
        | 0x202f | 0x205f | 0x3000)
}

/// What rendering keeps between lines: the clock's last second, error names, topic plans,
/// each field name's JSON key, and Python's helpers for the rare values only it can write.
pub struct Render {
    clock: (i64, String),
    /// protocol.errors.ERRORS: code -> (name, retriable)
    errors: HashMap<i64, (String, bool)>,
    pub plans: Plans,
    keys: Vec<Option<Vec<u8>>>,
    /// dissector.output: _bytes (str.isprintable) and _records (record sets this module does not read)
    output: Py<PyAny>,
    orjson_dumps: Py<PyAny>,
    records: crate::records::Records,
}

/// A records field's summary JSON by its place in the frame (start, end): rows.rs makes them
/// with an exchange's record totals, sorted by place, as rows.record_totals' `summaries`.
pub type Summary = ((usize, usize), Vec<u8>);

pub const RECORD_APIS: [i16; 4] = [0, 1, 59, 78]; // output.RECORD_APIS

impl Render {
    pub fn new(py: Python<'_>) -> PyResult<Self> {
        let errors = py.import("protocol.errors")?.getattr("ERRORS")?;
        let mut table = HashMap::new();
        for (k, v) in errors.cast::<PyDict>()?.iter() {
            table.insert(
                k.extract::<i64>()?,
                (
                    v.get_item(0)?.extract::<String>()?,
                    v.get_item(1)?.is_truthy()?,
                ),
            );
        }
        Ok(Render {
            clock: (0, String::new()),
            errors: table,
            plans: Plans::default(),
            keys: Vec::new(),
            output: py.import("dissector.output")?.unbind().into_any(),
            orjson_dumps: py.import("orjson")?.getattr("dumps")?.unbind(),
            records: crate::records::Records::new(),
        })
    }

    /// protocol.errors.error_name
    pub fn error_name(&self, code: i64) -> String {
        match self.errors.get(&code) {
            Some((n, _)) => n.clone(),
            None => format!("UNKNOWN_ERROR_{code}"),
        }
    }

    /// ERRORS' retriable flag of a code, None for a code it lacks
    pub fn retriable(&self, code: i64) -> Option<bool> {
        self.errors.get(&code).map(|e| e.1)
    }

    /// output.format_text for an anomaly
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

    /// output.format_text for an exchange; None when its bodies or error codes are Python's
    /// (the caller renders those with output.format_text).
    pub fn exchange_text(&mut self, py: Python<'_>, x: &ExchangeItem) -> PyResult<Option<String>> {
        let errors = match &x.error_codes {
            Errors::Native(v) => v,
            Errors::Py(_) => return Ok(None),
        };
        if matches!(x.request, Some(Body::Py(_))) || matches!(x.response, Some(Body::Py(_))) {
            return Ok(None);
        }
        let mut line = String::with_capacity(160);
        clock(&mut line, x.ts.or(x.response_ts), &mut self.clock);
        line.push(' ');
        pad(&mut line, &x.client, 21, true);
        line.push_str(" -> ");
        pad(&mut line, &x.broker, 21, false);
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
        let cid = x
            .client_id
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or("-");
        pad(&mut line, cid, 20, false);
        let names = self.topics(py, x)?;
        if !names.is_empty() {
            line.push_str(" topics=");
            line.push_str(&names.join(","));
        }
        if x.status != "ok" {
            line.push(' ');
            line.push_str(&x.status.to_uppercase());
        }
        if !errors.is_empty() {
            line.push_str(" errors=");
            let names: Vec<String> = errors.iter().map(|c| self.error_name(*c)).collect();
            line.push_str(&names.join(","));
        }
        if !x.flags.is_empty() {
            line.push_str(" flags=");
            line.push_str(&x.flags.join(","));
        }
        let keep = line.trim_end_matches(py_space).len();
        line.truncate(keep);
        Ok(Some(line))
    }

    /// dissector.topics.topics: the request's topics, else the response's, in order, no repeats.
    pub fn topics(&self, py: Python<'_>, x: &ExchangeItem) -> PyResult<Vec<std::rc::Rc<str>>> {
        let (Some(api), Some(version)) = (x.api_key, x.api_version) else {
            return Ok(Vec::new());
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
                if let Some(plan) = self.plans.get(py, api, v, dir)? {
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
        Ok(out)
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

    /// Bytes only Python can judge (output._bytes on non-ASCII): Python's value, written by orjson.
    fn py_bytes(&self, py: Python<'_>, out: &mut Vec<u8>, data: &[u8]) -> PyResult<()> {
        let v = self
            .output
            .bind(py)
            .call_method1("_bytes", (PyBytes::new(py, data),))?;
        let b = self.orjson_dumps.bind(py).call1((v,))?;
        out.extend_from_slice(b.cast::<PyBytes>()?.as_bytes());
        Ok(())
    }

    fn json_bytes(&self, py: Python<'_>, out: &mut Vec<u8>, b: &[u8]) -> PyResult<()> {
        if !json_ascii_bytes(out, b) {
            self.py_bytes(py, out, b)?;
        }
        Ok(())
    }

    /// A decoded value as orjson writes the decoder's Python object, with output._Encoder's
    /// rules for what orjson cannot write (memoryviews in record APIs are record sets; `known`
    /// has the summaries already made of some of them, body_json's `summaries`).
    pub fn json_value(
        &mut self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        v: &Value,
        frame: &[u8],
        record_api: bool,
        known: &[Summary],
    ) -> PyResult<()> {
        match v {
            Value::None => out.extend_from_slice(b"null"),
            Value::Int(i) => json_int(out, *i),
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Float(f) => json_f64(out, *f),
            Value::Uuid(u) => json_str(out, &uuid_text(u)),
            Value::Str(s) => json_str(out, s),
            Value::Text { start, end } => {
                json_str(out, std::str::from_utf8(&frame[*start..*end]).unwrap_or(""))
            }
            Value::View { start, end } => {
                let data = &frame[*start..*end];
                if record_api {
                    if let Ok(i) = known.binary_search_by_key(&(*start, *end), |s| s.0) {
                        out.extend_from_slice(&known[i].1);
                    // records.summarize: the fast path for whole v2 batches, else the full scan
                    } else if !json_summary_v2(out, data) {
                        self.records.summary_json(data, true, out);
                    }
                } else {
                    self.json_bytes(py, out, data)?;
                }
            }
            Value::Numbers { ty, start, count } => {
                out.push(b'[');
                let size = ty.size();
                for i in 0..*count {
                    if i > 0 {
                        out.push(b',');
                    }
                    let p = start + i * size;
                    let b = &frame[p..p + size];
                    match ty {
                        Fixed::I8 => json_int(out, b[0] as i8 as i64),
                        Fixed::I16 => json_int(out, i16::from_be_bytes([b[0], b[1]]) as i64),
                        Fixed::U16 => json_int(out, u16::from_be_bytes([b[0], b[1]]) as i64),
                        Fixed::I32 => {
                            json_int(out, i32::from_be_bytes(b.try_into().unwrap()) as i64)
                        }
                        Fixed::U32 => {
                            json_int(out, u32::from_be_bytes(b.try_into().unwrap()) as i64)
                        }
                        Fixed::I64 => json_int(out, i64::from_be_bytes(b.try_into().unwrap())),
                        Fixed::F64 => json_f64(out, f64::from_be_bytes(b.try_into().unwrap())),
                        Fixed::Bool => {
                            out.extend_from_slice(if b[0] != 0 { b"true" } else { b"false" })
                        }
                        Fixed::Uuid => json_str(out, &uuid_text(b.try_into().unwrap())),
                    }
                }
                out.push(b']');
            }
            Value::Uuids { start, count } => {
                out.push(b'[');
                for i in 0..*count {
                    if i > 0 {
                        out.push(b',');
                    }
                    let p = start + i * 16;
                    json_str(out, &uuid_text(frame[p..p + 16].try_into().unwrap()));
                }
                out.push(b']');
            }
            Value::List(items) => {
                out.push(b'[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.json_value(py, out, x, frame, record_api, known)?;
                }
                out.push(b']');
            }
            Value::Struct(fields) => {
                out.push(b'{');
                for (i, (k, x)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(self.key(*k));
                    self.json_value(py, out, x, frame, record_api, known)?;
                }
                out.push(b'}');
            }
            Value::Tagged(tags) => {
                // {tag: bytes}: int keys as strings (OPT_NON_STR_KEYS); bytes, not memoryviews
                out.push(b'{');
                for (i, (tag, start, end)) in tags.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    json_str(out, &tag.to_string());
                    out.push(b':');
                    self.json_bytes(py, out, &frame[*start..*end])?;
                }
                out.push(b'}');
            }
        }
        Ok(())
    }

    pub fn json_body(
        &mut self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        body: &Option<Body>,
        frame: Option<&[u8]>,
        record_api: bool,
        known: &[Summary],
    ) -> PyResult<()> {
        match body {
            None => out.extend_from_slice(b"null"),
            Some(Body::Native(v)) => {
                self.json_value(py, out, v, frame.unwrap_or(&[]), record_api, known)?
            }
            Some(Body::Error(text)) => {
                out.extend_from_slice(b"{\"_decode_error\":");
                json_str(out, text);
                out.push(b'}');
            }
            Some(Body::Raw(b)) => {
                out.extend_from_slice(b"{\"_raw_body\":");
                self.json_bytes(py, out, b)?;
                out.push(b'}');
            }
            Some(Body::Token) | Some(Body::Py(_)) => unreachable!("rendered by Python"),
        }
        Ok(())
    }

    /// output._Encoder.line (default options) for an exchange; None when Python must write it:
    /// bodies or error codes Python made, and whatever redaction may touch (APIs that carry
    /// secrets, raw SASL tokens, orphan responses).
    pub fn exchange_json(
        &mut self,
        py: Python<'_>,
        x: &ExchangeItem,
        secret_apis: &[i16],
    ) -> PyResult<Option<Vec<u8>>> {
        if !native_writable(x, secret_apis) {
            return Ok(None);
        }
        let Errors::Native(errors) = &x.error_codes else {
            return Ok(None);
        };
        let record_api = x.api_key.is_some_and(|k| RECORD_APIS.contains(&k));
        let mut out = Vec::with_capacity(256 + x.request_size.unwrap_or(0) / 4);
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
        self.json_body(
            py,
            &mut out,
            &x.request,
            x.request_raw.as_deref(),
            record_api,
            &[],
        )?;
        out.extend_from_slice(b",\"response\":");
        self.json_body(
            py,
            &mut out,
            &x.response,
            x.response_raw.as_deref(),
            record_api,
            &[],
        )?;
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
        out.extend_from_slice(b"]}\n");
        Ok(Some(out))
    }

    /// output._Encoder.line for an anomaly
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

/// Whether this side can write an exchange (its JSON line, its table rows): bodies and error
/// codes decoded here, and nothing redaction may touch (APIs that carry secrets, raw SASL
/// tokens, orphan responses without an api_key); Python writes the rest, redacted.
pub fn native_writable(x: &ExchangeItem, secret_apis: &[i16]) -> bool {
    let py_body = |b: &Option<Body>| matches!(b, Some(Body::Py(_)) | Some(Body::Token));
    matches!(x.error_codes, Errors::Native(_))
        && !py_body(&x.request)
        && !py_body(&x.response)
        && x.api_key.is_some_and(|k| !secret_apis.contains(&k))
}

// -- test entry points ------------------------------------------------------------------

#[pyfunction]
fn _clock(ts: Option<f64>) -> String {
    let mut out = String::new();
    clock(&mut out, ts, &mut (0, String::new()));
    out
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_clock, m)?)?;
    Ok(())
}
