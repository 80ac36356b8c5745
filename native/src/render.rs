//! Output lines without Python objects: the text line of dissector/output.py's format_text
//! and the JSON line of its _Encoder (orjson's layout, byte for byte), for the items that need
//! nothing only Python knows. The primitives here are shared with the tables (rows.rs).
use pyo3::prelude::*;

// -- JSON, as orjson writes it ------------------------------------------------------------

/// A str as orjson writes it: `"` and `\` escaped, \b \t \n \f \r short, other controls
/// as \u00xx, everything else (DEL, non-ASCII) as its UTF-8.
pub fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A float as orjson writes it: the shortest digits that read back to it (as Python's repr),
/// fixed notation for decimal exponents -5..15 ("1.0", "0.00001"), else "1.5e-7" / "1e+16";
/// NaN and infinities as null.
pub fn json_f64(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if v == 0.0 {
        out.extend_from_slice(if v.is_sign_negative() { b"-0.0" } else { b"0.0" });
        return;
    }
    // ryu: the shortest digits that read back, the closest of them when several do (Python's
    // repr picks the same; Rust's own {:e} sometimes another in the 17th digit)
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(v);
    let (neg, text) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    // ryu writes "1.5E-7"-like or plain "123.45"/"0.001": bring both to digits + exponent
    let (body, mut exp) = match text.split_once(['e', 'E']) {
        Some((b, e)) => (b, e.parse::<i32>().unwrap()),
        None => (text, 0),
    };
    let (int_part, frac_part) = body.split_once('.').unwrap_or((body, ""));
    let mut digits: String = format!("{int_part}{frac_part}");
    exp += int_part.len() as i32 - 1;
    let lead = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..lead);
    exp -= lead as i32;
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let mant = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits.to_string() };
    if neg {
        out.push(b'-');
    }
    if (-5..16).contains(&exp) {
        let n = digits.len() as i32;
        if exp < 0 {
            out.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend_from_slice(digits.as_bytes());
        } else if exp + 1 >= n {
            out.extend_from_slice(digits.as_bytes());
            for _ in 0..(exp + 1 - n) {
                out.push(b'0');
            }
            out.extend_from_slice(b".0");
        } else {
            let (a, b) = digits.split_at((exp + 1) as usize);
            out.extend_from_slice(a.as_bytes());
            out.push(b'.');
            out.extend_from_slice(b.as_bytes());
        }
    } else {
        out.extend_from_slice(mant.as_bytes());
        out.push(b'e');
        if exp > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(exp.to_string().as_bytes());
    }
}

pub fn json_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(v.to_string().as_bytes());
}

pub fn json_opt_f64(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => json_f64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn json_opt_int(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => json_int(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn json_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(v) => json_str(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// output._bytes for bytes that are all ASCII: a str when every byte is printable or one of
/// the separators (tab, newline, CR, NUL, 0x01), else {"hex": ...}. None when a byte is not
/// ASCII: Python's str.isprintable() decides those (Unicode categories), so the caller asks it.
pub fn json_ascii_bytes(out: &mut Vec<u8>, b: &[u8]) -> bool {
    if !b.is_ascii() {
        return false;
    }
    if b.iter().all(|&c| (0x20..0x7f).contains(&c) || matches!(c, b'\t' | b'\n' | b'\r' | 0 | 1)) {
        json_str(out, std::str::from_utf8(b).unwrap());
    } else {
        json_hex(out, b);
    }
    true
}

/// {"hex": "..."}
pub fn json_hex(out: &mut Vec<u8>, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"{\"hex\":\"");
    for &c in b {
        out.push(HEX[(c >> 4) as usize]);
        out.push(HEX[(c & 15) as usize]);
    }
    out.extend_from_slice(b"\"}");
}

/// A UUID's canonical text (str(uuid.UUID)).
pub fn uuid_text(u: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, &c) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[(c >> 4) as usize] as char);
        s.push(HEX[(c & 15) as usize] as char);
    }
    s
}

// -- record data ------------------------------------------------------------------------

const CODEC_NAMES: [&str; 8] = ["none", "gzip", "snappy", "lz4", "zstd", "unknown(5)", "unknown(6)", "unknown(7)"];
const V2_OVERHEAD: usize = 61;
const LOG_OVERHEAD: usize = 12;
const V2_CRC_START: usize = 21;

/// records._summary_v2: RecordSet(data).summary() for whole magic 2 batches only, as its JSON
/// object; false (nothing written) for anything else, which Python's summarize() describes.
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
        let length = i32::from_be_bytes(data[pos + 8..pos + 12].try_into().unwrap());
        let magic = data[pos + 16] as i8;
        let crc = u32::from_be_bytes(data[pos + 17..pos + 21].try_into().unwrap());
        let attributes = i16::from_be_bytes(data[pos + 21..pos + 23].try_into().unwrap());
        if magic != 2 || (length as i64) < (V2_OVERHEAD as i64 - 12) {
            return false;
        }
        let end = pos + LOG_OVERHEAD + length as usize;
        if end > n {
            return false;
        }
        codecs |= 1 << (attributes & 7);
        records += i32::from_be_bytes(data[pos + 57..pos + 61].try_into().unwrap()) as i64;
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
    // sorted by name, as _codec_names sorts them
    let mut names: Vec<&str> = (0..8).filter(|c| codecs >> c & 1 == 1).map(|c| CODEC_NAMES[c]).collect();
    names.sort_unstable();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(out, name);
    }
    out.extend_from_slice(b"],\"magic\":[2],\"crc_ok\":");
    out.extend_from_slice(if crc_ok { b"true" } else { b"false" });
    out.extend_from_slice(b",\"truncated\":false,\"bytes\":");
    json_int(out, n as i64);
    out.extend_from_slice(b",\"anomalies\":[]}");
    true
}

// -- text -------------------------------------------------------------------------------

/// The civil date of a day count since 1970-01-01 (H. Hinnant's days_from_civil, inverted).
fn civil(days: i64) -> (i64, u32, u32) {
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
    let sec = ts.floor() as i64;   // Python: int(ts // 1)
    if sec != last.0 || last.1.is_empty() {
        let (days, rest) = (sec.div_euclid(86400), sec.rem_euclid(86400));
        let (y, m, d) = civil(days);
        last.0 = sec;
        last.1 = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60);
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

// -- test entry points ------------------------------------------------------------------

#[pyfunction]
fn _json_f64(v: f64) -> Vec<u8> {
    let mut out = Vec::new();
    json_f64(&mut out, v);
    out
}

#[pyfunction]
fn _json_str(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    json_str(&mut out, s);
    out
}

#[pyfunction]
fn _summary_v2(data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    json_summary_v2(&mut out, data).then_some(out)
}

#[pyfunction]
fn _clock(ts: Option<f64>) -> String {
    let mut out = String::new();
    clock(&mut out, ts, &mut (0, String::new()));
    out
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_json_f64, m)?)?;
    m.add_function(wrap_pyfunction!(_json_str, m)?)?;
    m.add_function(wrap_pyfunction!(_summary_v2, m)?)?;
    m.add_function(wrap_pyfunction!(_clock, m)?)?;
    Ok(())
}
