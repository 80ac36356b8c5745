//! JSON, compact, byte for byte in orjson's layout (the JSON lines and the tables' JSON bodies
//! have always had it, and tests/test_dissect_golden.py holds them to golden outputs), and the
//! other text forms values take (a UUID's canonical text).

use crate::decode::Value;
use crate::schema::Fixed;

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

/// A float as orjson writes it: the shortest digits that read back to it,
/// fixed notation for decimal exponents -5..15 ("1.0", "0.00001"), else "1.5e-7" / "1e+16";
/// NaN and infinities as null.
pub fn json_f64(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if v == 0.0 {
        out.extend_from_slice(if v.is_sign_negative() {
            b"-0.0"
        } else {
            b"0.0"
        });
        return;
    }
    // ryu: the shortest digits that read back, the closest of them when several do (orjson's
    // digits; Rust's own {:e} sometimes picks another in the 17th digit)
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
        // the mantissa: d or d.ddd
        out.extend_from_slice(&digits.as_bytes()[..1]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits.as_bytes()[1..]);
        }
        out.push(b'e');
        if exp > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(exp.to_string().as_bytes());
    }
}

pub fn json_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
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

/// Whether a character is printable: not in Unicode's categories Cc, Cf, Cs, Co, Cn, Zl, Zp or
/// Zs, the space excepted (printable.rs's table, of the Unicode version it records).
pub fn is_printable(c: char) -> bool {
    let c = c as u32;
    if (0x20..0x7f).contains(&c) {
        return true;
    }
    use crate::printable::NOT_PRINTABLE;
    let i = NOT_PRINTABLE.partition_point(|r| r.1 < c);
    !(i < NOT_PRINTABLE.len() && NOT_PRINTABLE[i].0 <= c)
}

/// Bytes as JSON: a string when they are UTF-8 text whose every character is printable
/// (is_printable) or a separator (tab, newline, CR, NUL, 0x01), else {"hex": ...}.
pub fn json_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let sep = |c: char| matches!(c, '\t' | '\n' | '\r' | '\0' | '\x01');
    match std::str::from_utf8(b) {
        Ok(s) if s.chars().all(|c| is_printable(c) || sep(c)) => json_str(out, s),
        _ => json_hex(out, b),
    }
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

/// A UUID's canonical text: 8-4-4-4-12 lowercase hex digits.
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

/// A decoded value that holds no other (scalars, number and UUID arrays, unknown tagged
/// fields), its ranges in `frame`, as the jsonl writes it; false (nothing written) for a
/// struct, a list or bytes, which their writers treat each in their own way.
pub fn leaf_json(out: &mut Vec<u8>, v: &Value, frame: &[u8]) -> bool {
    let slice = |a: usize, b: usize| frame.get(a..b).unwrap_or_default();
    match v {
        Value::None => out.extend_from_slice(b"null"),
        Value::Int(i) => json_int(out, *i),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Float(f) => json_f64(out, *f),
        Value::Uuid(u) => json_str(out, &uuid_text(u)),
        Value::Str(s) => json_str(out, s),
        Value::Text { start, end } => {
            json_str(out, std::str::from_utf8(slice(*start, *end)).unwrap_or(""))
        }
        Value::Numbers { ty, start, count } => {
            out.push(b'[');
            let size = ty.size();
            for i in 0..*count {
                if i > 0 {
                    out.push(b',');
                }
                let p = start + i * size;
                let b = slice(p, p + size);
                if b.len() < size {
                    out.extend_from_slice(b"null");
                    continue;
                }
                match ty {
                    Fixed::I8 => json_int(out, b[0] as i8 as i64),
                    Fixed::I16 => json_int(out, i16::from_be_bytes([b[0], b[1]]) as i64),
                    Fixed::U16 => json_int(out, u16::from_be_bytes([b[0], b[1]]) as i64),
                    Fixed::I32 => {
                        json_int(out, i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64)
                    }
                    Fixed::U32 => {
                        json_int(out, u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64)
                    }
                    Fixed::I64 => json_int(out, i64::from_be_bytes(b.try_into().unwrap_or([0; 8]))),
                    Fixed::F64 => json_f64(out, f64::from_be_bytes(b.try_into().unwrap_or([0; 8]))),
                    Fixed::Bool => {
                        out.extend_from_slice(if b[0] != 0 { b"true" } else { b"false" })
                    }
                    Fixed::Uuid => json_str(out, &uuid_text(&b.try_into().unwrap_or([0; 16]))),
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
                json_str(
                    out,
                    &uuid_text(&slice(p, p + 16).try_into().unwrap_or([0; 16])),
                );
            }
            out.push(b']');
        }
        Value::Tagged(tags) => {
            // {tag: bytes}: the tags as string keys; the bytes as bytes, never as a records
            // field (even in the body of an API that carries record data)
            out.push(b'{');
            for (i, (tag, start, end)) in tags.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_str(out, &tag.to_string());
                out.push(b':');
                json_bytes(out, slice(*start, *end));
            }
            out.push(b'}');
        }
        Value::Bytes(b) => json_bytes(out, b),
        Value::View { .. } | Value::List(_) | Value::Struct(_) => return false,
    }
    true
}
