//! The general decoding path: frames the fast decoder (decode.rs) refuses.
//!
//! Most frames fit their message version exactly and never come here. The rest are real too:
//! requests with bytes after their last field (older librdkafka pads ApiVersions v0), responses
//! whose body only decodes as another version (Tansu answers Metadata v13 with a v12 body),
//! ApiVersions exchanges before the peers agree on a version, and frames that do not decode at
//! all, which keep their error's text in place of a body.
//!
//! The error texts are part of the output (`_decode_error`), and `protocol`'s Python decoder
//! writes the same ones for library users, so they follow its rules: the field path of the
//! statement that failed (`Topics[].Partitions[].Partition.FetchOffset` for a run of fixed-width
//! fields read at once, `<tagged fields>` for a tag section), the offset the decoder stood at
//! then, and the reason. A failure is explained by a second, slower walk over the same plan
//! (`Explain`), so the fast decoder carries no bookkeeping for the rare frame that fails.
use std::fmt;

use crate::decode::{self, Rd, Value};
use crate::json::is_printable;
use crate::schema::{Dir, Fixed, Kind, Registry, StructPlan, Ty};

const API_VERSIONS: i16 = 18;
const UNSUPPORTED_VERSION: i16 = 35;
const SHORT: &str = "frame ends in the middle of the field";

/// Why a frame did not decode, in the words `_decode_error` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The reason alone ("frame ends in the middle of the field", ...)
    pub reason: String,
    /// The whole text: where (api, version, direction, field, byte) and the reason.
    pub text: String,
}

impl DecodeError {
    fn new(
        reg: &Registry,
        reason: String,
        api: Option<(i16, i16, Dir)>,
        field: &str,
        offset: Option<usize>,
    ) -> Self {
        let mut at = Vec::new();
        if let Some((k, v, dir)) = api {
            let dir = match dir {
                Dir::Request => "request",
                Dir::Response => "response",
            };
            at.push(format!("{} v{v} {dir}", reg.api_name(k)));
        }
        if !field.is_empty() {
            at.push(format!("field {field}"));
        }
        if let Some(o) = offset {
            at.push(format!("byte {o}"));
        }
        let text = if at.is_empty() {
            reason.clone()
        } else {
            format!("{}: {reason}", at.join(", "))
        };
        DecodeError { reason, text }
    }

    fn of(reg: &Registry, why: Why, api: Option<(i16, i16, Dir)>) -> Self {
        DecodeError::new(reg, why.reason, api, &why.field, Some(why.pos))
    }

    /// The bytes ran out (a length or count past the end, a field cut in the middle): a frame
    /// cut short by the capture may still be this message.
    pub fn is_short(&self) -> bool {
        self.reason.contains("past the end") || self.reason.contains("ends in the middle")
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A frame decoded by the general path.
pub struct Decoded {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// A request's client id (None for a response, or a request without one)
    pub client_id: Option<String>,
    pub body: Value,
    /// The version the body was decoded as (ApiVersions falls back; a mismatched answer)
    pub body_version: i16,
    /// Bytes left over after the body's last field (lenient decoding only)
    pub trailing: usize,
    /// The body decodes only as another version than asked, and was decoded as that
    pub version_mismatch: bool,
}

/// A request, by the fast decoder or else this path: one whose bytes do not fit its version
/// exactly is decoded, when `lenient`, up to its last field, the bytes after it counted.
pub fn request(reg: &Registry, frame: &[u8], lenient: bool) -> Result<Decoded, DecodeError> {
    if let Ok(m) = decode::decode_request(reg, frame) {
        return Ok(fast(m));
    }
    if frame.len() < 8 {
        let reason = format!("request of {} bytes is shorter than a header", frame.len());
        return Err(DecodeError::new(reg, reason, None, "", None));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let hv = reg.request_header_version(api_key, api_version);
    let (correlation_id, client_id, pos) = header(reg, frame, Dir::Request, hv)?;
    let versions = reg.body_versions(api_key, api_version);
    let dir = Dir::Request;
    let (body, body_version, trailing) = match first(reg, frame, pos, api_key, &versions, dir, true)
    {
        Ok((body, v, _)) => (body, v, 0),
        Err(e) if !lenient => return Err(e),
        Err(_) => {
            let (body, v, end) = first(reg, frame, pos, api_key, &versions, dir, false)?;
            (body, v, frame.len() - end)
        }
    };
    Ok(Decoded {
        api_key,
        api_version,
        correlation_id,
        client_id,
        body,
        body_version,
        trailing,
        version_mismatch: false,
    })
}

/// The answer to a version `api_version` request of `api_key`: when `lenient`, a body that
/// does not decode as the asked version is decoded as the nearest version it decodes as whole
/// (version_mismatch), else as the asked version up to its last field (trailing). Strict or
/// not, the error names the versions the body would decode as whole.
pub fn response(
    reg: &Registry,
    frame: &[u8],
    api_key: i16,
    api_version: i16,
    lenient: bool,
) -> Result<Decoded, DecodeError> {
    if let Ok(m) = decode::decode_response(reg, frame, api_key, api_version) {
        return Ok(fast(m));
    }
    let dir = Dir::Response;
    let hv = reg.response_header_version(api_key, api_version);
    let (correlation_id, _, pos) = header(reg, frame, dir, hv)?;
    let mut versions = reg.body_versions(api_key, api_version);
    // A broker that does not speak the requested ApiVersions version answers UNSUPPORTED_VERSION
    // with a v0 body, so that any client can read it.
    if api_key == API_VERSIONS
        && api_version > 0
        && frame.len() >= pos + 2
        && i16::from_be_bytes([frame[pos], frame[pos + 1]]) == UNSUPPORTED_VERSION
    {
        versions = vec![0];
    }
    let decoded = |body, body_version, trailing, version_mismatch| Decoded {
        api_key,
        api_version,
        correlation_id,
        client_id: None,
        body,
        body_version,
        trailing,
        version_mismatch,
    };
    let mut err = match first(reg, frame, pos, api_key, &versions, dir, true) {
        Ok((body, v, _)) => return Ok(decoded(body, v, 0, false)),
        Err(e) => e,
    };
    let decodes_as: Vec<i16> = reg
        .request_versions(api_key)
        .iter()
        .map(|&v| v as i16)
        .filter(|&v| v != versions[0] && decodes_whole(reg, frame, pos, api_key, v, dir))
        .collect();
    if !decodes_as.is_empty() {
        let listed: Vec<String> = decodes_as.iter().map(i16::to_string).collect();
        err.text = format!(
            "{} (the body decodes whole as v{})",
            err.text,
            listed.join(", v")
        );
    }
    if !lenient {
        return Err(err);
    }
    // the nearest version, the newer of two as near
    if let Some(&v) = decodes_as
        .iter()
        .min_by_key(|&&v| ((v as i32 - api_version as i32).abs(), -(v as i32)))
    {
        let (b, _) = body(reg, frame, pos, api_key, v, dir, true)?;
        return Ok(decoded(b, v, 0, true));
    }
    match first(reg, frame, pos, api_key, &versions, dir, false) {
        Ok((b, v, end)) => Ok(decoded(b, v, frame.len() - end, false)),
        Err(_) => Err(err),
    }
}

/// API key, version, correlation id and client id straight from a
/// request's bytes, for a frame that does not decode (None when it is shorter than 8 bytes).
pub fn peek_request(frame: &[u8]) -> Option<(i16, i16, i32, Option<String>)> {
    if frame.len() < 8 {
        return None;
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let corr = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if frame.len() < 10 {
        return Some((api_key, version, corr, None));
    }
    let n = i16::from_be_bytes([frame[8], frame[9]]);
    let client_id = (n >= 0 && n as usize <= frame.len() - 10)
        .then(|| String::from_utf8_lossy(&frame[10..10 + n as usize]).into_owned());
    Some((api_key, version, corr, client_id))
}

/// An optional str as anomaly details quote a client id: None, or the text in single quotes
/// (double ones when it holds a single quote and no double one), with backslash, tab, newline,
/// carriage return and the quote escaped, and controls and characters that are not printable
/// as \xNN, \uNNNN or \UNNNNNNNN.
pub fn py_repr(s: Option<&str>) -> String {
    let Some(s) = s else {
        return "None".to_owned();
    };
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if (c as u32) < 0x7f || is_printable(c) => out.push(c),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

fn fast(m: decode::Message) -> Decoded {
    Decoded {
        api_key: m.api_key,
        api_version: m.api_version,
        correlation_id: m.correlation_id,
        client_id: m.client_id,
        body: m.body,
        body_version: m.api_version,
        trailing: 0,
        version_mismatch: false,
    }
}

/// The header (correlation id, client id) and where the body starts. A header that does not
/// decode is named by its field alone: the api is not known to be what its bytes say.
fn header(
    reg: &Registry,
    frame: &[u8],
    dir: Dir,
    hv: i16,
) -> Result<(i32, Option<String>, usize), DecodeError> {
    let plan = reg.header_plan(dir, hv as i64);
    let mut ex = Explain { buf: frame, pos: 0 };
    ex.struct_body(&plan, Path::Root)
        .map_err(|w| DecodeError::of(reg, w, None))?;
    let mut rd = Rd { buf: frame, pos: 0 };
    let (corr, client_id) = rd.header(&plan).map_err(|_| disagree(reg))?;
    Ok((corr, client_id, rd.pos))
}

/// A body at `version` from `pos`; `whole`: nothing may follow it. (body, where it ends)
fn body(
    reg: &Registry,
    frame: &[u8],
    pos: usize,
    api_key: i16,
    version: i16,
    dir: Dir,
    whole: bool,
) -> Result<(Value, usize), DecodeError> {
    let api = Some((api_key, version, dir));
    let Some(plan) = reg.body_plan(api_key, version, dir) else {
        let reason = "the registry has no such message version".to_owned();
        return Err(DecodeError::new(reg, reason, api, "", Some(pos)));
    };
    let mut ex = Explain { buf: frame, pos };
    ex.struct_body(&plan, Path::Root)
        .map_err(|w| DecodeError::of(reg, w, api))?;
    if whole && ex.pos != frame.len() {
        let reason = format!("{} bytes left over after the message", frame.len() - ex.pos);
        return Err(DecodeError::new(reg, reason, api, "", Some(ex.pos)));
    }
    #[cfg(test)]
    tests::BODIES_BUILT.with(|n| n.set(n.get() + 1));
    let mut rd = Rd { buf: frame, pos };
    let d = rd.struct_body(&plan).map_err(|_| disagree(reg))?;
    Ok((Value::Struct(d), rd.pos))
}

/// Whether the body at `version` from `pos` decodes, every byte of it: body(.., true).is_ok()
/// without building the value, by the Explain walk alone (the walk body() makes first).
fn decodes_whole(
    reg: &Registry,
    frame: &[u8],
    pos: usize,
    api_key: i16,
    version: i16,
    dir: Dir,
) -> bool {
    let Some(plan) = reg.body_plan(api_key, version, dir) else {
        return false;
    };
    let mut ex = Explain { buf: frame, pos };
    ex.struct_body(&plan, Path::Root).is_ok() && ex.pos == frame.len()
}

/// The two walks over a plan are meant to agree; were they ever not to, the frame is an error
/// that says so rather than a panic.
fn disagree(reg: &Registry) -> DecodeError {
    let reason = "the decoder and its explanation disagree (a kafkawire bug)".to_owned();
    DecodeError::new(reg, reason, None, "", None)
}

/// The first of `versions` the body decodes as (`whole`: every byte of it, else up to its last
/// field), else the last one's error: (body, version, end).
fn first(
    reg: &Registry,
    frame: &[u8],
    pos: usize,
    api_key: i16,
    versions: &[i16],
    dir: Dir,
    whole: bool,
) -> Result<(Value, i16, usize), DecodeError> {
    let mut last = None;
    for &v in versions {
        match body(reg, frame, pos, api_key, v, dir, whole) {
            Ok((b, end)) => return Ok((b, v, end)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| disagree(reg)))
}

// -- explaining a failure ----------------------------------------------------------

/// Where decoding stopped and why: the field path, the offset, the reason.
struct Why {
    field: String,
    pos: usize,
    reason: String,
}

type X<T = ()> = Result<T, Why>;

/// Where the walk is, as a field path ("Topics[].Partitions[].Index"): built from the stack's
/// segments only when a failure names it, so a walk that succeeds formats nothing.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Push(&'a Path<'a>, &'a str),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Push(parent, seg) => parent.render() + seg,
        }
    }
}

/// A walk over a plan that reads nothing into values and fails as the decoder does, at the
/// same read, saying where. It follows the fast decoder's reads (decode.rs): a run of
/// fixed-width fields is one read (its failure names the run and its first byte); a length's
/// failure leaves the offset before it, a payload's after it.
struct Explain<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn ty_name(t: Ty) -> &'static str {
    match t {
        Ty::Fixed(f) => fixed_name(f),
        Ty::Str => "string",
        Ty::Bytes => "bytes",
        Ty::Records => "records",
        Ty::Struct => "struct",
    }
}

fn fixed_name(f: Fixed) -> &'static str {
    match f {
        Fixed::I8 => "int8",
        Fixed::I16 => "int16",
        Fixed::U16 => "uint16",
        Fixed::I32 => "int32",
        Fixed::U32 => "uint32",
        Fixed::I64 => "int64",
        Fixed::F64 => "float64",
        Fixed::Bool => "bool",
        Fixed::Uuid => "uuid",
    }
}

/// Why bytes are not UTF-8, in the words error texts use: "unexpected end of data", "invalid
/// start byte" or "invalid continuation byte".
fn utf8_reason(b: &[u8], e: std::str::Utf8Error) -> &'static str {
    match e.error_len() {
        None => "unexpected end of data",
        Some(_) => match b[e.valid_up_to()] {
            0x80..=0xC1 | 0xF5..=0xFF => "invalid start byte",
            _ => "invalid continuation byte",
        },
    }
}

impl Explain<'_> {
    fn fail(&self, path: Path<'_>, reason: impl Into<String>) -> Why {
        Why {
            field: path.render(),
            pos: self.pos,
            reason: reason.into(),
        }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&self, at: usize, path: Path<'_>) -> X<u8> {
        self.buf
            .get(at)
            .copied()
            .ok_or_else(|| self.fail(path, SHORT))
    }

    /// An unsigned varint of at most 5 bytes; the offset stays before it when it fails.
    fn uvarint(&mut self, path: Path<'_>) -> X<u64> {
        let mut r: u64 = 0;
        for i in 0..5 {
            let b = self.byte(self.pos + i, path)? as u64;
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(r | (b << (7 * i)));
            }
            r |= (b & 0x7F) << (7 * i);
        }
        Err(self.fail(path, "unsigned varint longer than 5 bytes"))
    }

    fn length(&mut self, compact: bool, wide: bool, path: Path<'_>) -> X<i64> {
        if compact {
            let n = self.byte(self.pos, path)? as i64 - 1;
            if n < 127 {
                self.pos += 1;
                return Ok(n);
            }
            return Ok(self.uvarint(path)? as i64 - 1);
        }
        let size = if wide { 4 } else { 2 };
        if self.left() < size {
            return Err(self.fail(path, SHORT));
        }
        let b = &self.buf[self.pos..self.pos + size];
        self.pos += size;
        Ok(if wide {
            i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64
        } else {
            i16::from_be_bytes([b[0], b[1]]) as i64
        })
    }

    fn utf8(&self, start: usize, end: usize, path: Path<'_>) -> X {
        let b = &self.buf[start..end];
        match std::str::from_utf8(b) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.fail(
                path,
                format!("invalid UTF-8 in string: {}", utf8_reason(b, e)),
            )),
        }
    }

    /// A string, bytes or records field (`kind` names it in the error).
    fn blob(&mut self, kind: &str, compact: bool, path: Path<'_>) -> X {
        let string = kind == "string";
        if compact {
            let n = self.byte(self.pos, path)? as usize;
            if 0 < n && n < 128 && self.pos + n <= self.buf.len() {
                if string {
                    self.utf8(self.pos + 1, self.pos + n, path)?;
                }
                self.pos += n;
                return Ok(());
            }
        }
        let n = self.length(compact, !string, path)?;
        if n < 0 {
            return Ok(());
        }
        if n as u64 > self.left() as u64 {
            let left = self.left();
            return Err(self.fail(
                path,
                format!("{kind} length {n} runs past the end ({left} bytes left)"),
            ));
        }
        if string {
            self.utf8(self.pos, self.pos + n as usize, path)?;
        }
        self.pos += n as usize;
        Ok(())
    }

    /// `n` things of `size` bytes each must fit in what is left.
    fn fits(&self, n: i64, size: i64, what: &str, path: Path<'_>) -> X {
        if n as i128 * size as i128 > self.left() as i128 {
            let left = self.left();
            return Err(self.fail(
                path,
                format!("array of {n} {what} runs past the end ({left} bytes left)"),
            ));
        }
        Ok(())
    }

    fn struct_body(&mut self, plan: &StructPlan, path: Path<'_>) -> X {
        // a run of fixed-width fields is read at once
        let mut run: Vec<&str> = Vec::new();
        let mut run_size = 0;
        let flush = |ex: &mut Self, run: &mut Vec<&str>, run_size: &mut usize| -> X {
            if run.is_empty() {
                return Ok(());
            }
            if *run_size > ex.left() {
                return Err(ex.fail(Path::Push(&path, &run.join(".")), SHORT));
            }
            ex.pos += *run_size;
            run.clear();
            *run_size = 0;
            Ok(())
        };
        for f in &plan.fields {
            let name = crate::schema::key_name(f.key);
            if let Kind::Fixed(t) = f.kind {
                run.push(name);
                run_size += t.size();
                continue;
            }
            flush(self, &mut run, &mut run_size)?;
            self.field(f, plan.flex, Path::Push(&path, name))?;
        }
        flush(self, &mut run, &mut run_size)?;
        if plan.flex {
            self.tag_section(plan, path)?;
        }
        Ok(())
    }

    fn field(&mut self, f: &crate::schema::FieldPlan, flex: bool, path: Path<'_>) -> X {
        match &f.kind {
            Kind::Fixed(t) => {
                if t.size() > self.left() {
                    return Err(self.fail(path, SHORT));
                }
                self.pos += t.size();
            }
            Kind::Blob { compact, .. } => self.blob(ty_name(f.ty), *compact, path)?,
            Kind::Numbers(t) => {
                let size = t.size();
                if flex {
                    let k = self.byte(self.pos, path)? as usize;
                    if 0 < k && k <= 64 {
                        if (k - 1) * size > self.buf.len() - (self.pos + 1) {
                            return Err(self.fail(path, SHORT));
                        }
                        self.pos += 1 + (k - 1) * size;
                        return Ok(());
                    }
                    let n = self.length(true, true, path)?;
                    if n >= 0 {
                        self.fits(n, size as i64, fixed_name(*t), path)?;
                        self.pos += n as usize * size;
                    }
                    return Ok(());
                }
                let n = self.length(false, true, path)?;
                if n < 0 {
                    return Ok(());
                }
                if n < 64 && n as usize * size > self.left() {
                    return Err(self.fail(path, SHORT));
                }
                self.fits(n, size as i64, fixed_name(*t), path)?;
                self.pos += n as usize * size;
            }
            Kind::Uuids => {
                let n = self.length(flex, true, path)?;
                if n >= 0 {
                    self.fits(n, 16, "uuid", path)?;
                    self.pos += n as usize * 16;
                }
            }
            Kind::Blobs { string } => {
                let n = self.length(flex, true, path)?;
                if n < 0 {
                    return Ok(());
                }
                let least = if flex {
                    1
                } else if *string {
                    2
                } else {
                    4
                };
                self.fits(n, least, "elements", path)?;
                let kind = ty_name(f.ty);
                for _ in 0..n {
                    self.blob(kind, flex, Path::Push(&path, "[]"))?;
                }
            }
            Kind::Structs { plan, least } => {
                let n = self.length(flex, true, path)?;
                if n < 0 {
                    return Ok(());
                }
                self.fits(n, (*least).max(1), "elements", path)?;
                let inner = Path::Push(&path, "[].");
                for _ in 0..n {
                    self.struct_body(plan, inner)?;
                }
            }
            Kind::Struct { plan, nullable } => {
                if *nullable {
                    let marker = self.byte(self.pos, path)?;
                    self.pos += 1;
                    if marker >= 128 {
                        return Ok(());
                    }
                }
                self.struct_body(plan, Path::Push(&path, "."))?;
            }
        }
        Ok(())
    }

    fn tag_section(&mut self, plan: &StructPlan, path: Path<'_>) -> X {
        let p = Path::Push(&path, "<tagged fields>");
        if self.byte(self.pos, p)? == 0 {
            self.pos += 1;
            return Ok(());
        }
        let n = self.uvarint(p)?;
        if n * 2 > self.left() as u64 {
            return Err(self.fail(p, format!("{n} tagged fields run past the end")));
        }
        for _ in 0..n {
            let tag = self.uvarint(p)?;
            let size = self.uvarint(p)?;
            let te = self.pos as u64 + size;
            if te > self.buf.len() as u64 {
                return Err(self.fail(
                    p,
                    format!("tagged field {tag} of {size} bytes runs past the end"),
                ));
            }
            let te = te as usize;
            match plan.tagged.iter().find(|(t, _)| *t == tag) {
                Some((_, f)) => {
                    let name = crate::schema::key_name(f.key);
                    self.field(f, plan.flex, Path::Push(&path, name))?;
                    if self.pos != te {
                        let decoded = self.pos as i64 - te as i64 + size as i64;
                        return Err(self.fail(
                            p,
                            format!("tagged field {name} is {size} bytes, decoded {decoded}"),
                        ));
                    }
                }
                None => self.pos = te,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::tests::{metadata_v12, registry};

    fn reg() -> Registry {
        registry().with_api_names([(3, "Metadata".to_owned())].into())
    }

    thread_local! {
        /// bodies body() built into values, on this test's thread
        pub(super) static BODIES_BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn the_versions_a_body_decodes_as_are_found_without_building_it() {
        // a v8 body answering a v9 request: it decodes whole as v3..v8
        let frame = [0, 0, 0, 5, 0, 0, 0, 0, 42];
        let reg = reg();
        BODIES_BUILT.with(|n| n.set(0));
        let e = response(&reg, &frame, 3, 9, false).err().unwrap();
        assert!(e
            .text
            .ends_with("(the body decodes whole as v3, v4, v5, v6, v7, v8)"));
        assert_eq!(
            BODIES_BUILT.with(|n| n.get()),
            0,
            "strict: no body is built"
        );
        let d = response(&reg, &frame, 3, 9, true).unwrap();
        assert_eq!(d.body_version, 8);
        assert_eq!(
            BODIES_BUILT.with(|n| n.get()),
            1,
            "lenient: the nearest version's alone"
        );
        // the test is body(.., whole).is_ok(), for every version and frames cut or padded
        let mut padded = frame.to_vec();
        padded.push(0);
        for f in [&frame[..], &frame[..8], &padded[..]] {
            let Ok((_, _, pos)) = header(&reg, f, Dir::Response, 1) else {
                continue;
            };
            for v in 0..=13 {
                let built = body(&reg, f, pos, 3, v, Dir::Response, true).is_ok();
                assert_eq!(
                    decodes_whole(&reg, f, pos, 3, v, Dir::Response),
                    built,
                    "v{v}"
                );
            }
        }
    }

    #[test]
    fn a_request_with_bytes_after_its_last_field_is_read_leniently_and_refused_strictly() {
        let mut frame = metadata_v12(7, &["a", "bc"]);
        let end = frame.len();
        frame.extend_from_slice(&[0, 0, 0, 0]);
        let d = request(&reg(), &frame, true).unwrap();
        assert_eq!(
            (d.correlation_id, d.client_id.as_deref()),
            (7, Some("rdkafka"))
        );
        assert_eq!(
            (d.trailing, d.body_version, d.version_mismatch),
            (4, 12, false)
        );
        let e = request(&reg(), &frame, false).err().unwrap();
        let want = format!("Metadata v12 request, byte {end}: 4 bytes left over after the message");
        assert_eq!(e.text, want);
        assert!(!e.is_short());
    }

    #[test]
    fn a_cut_frame_names_the_field_and_the_offset_it_stopped_at() {
        let frame = metadata_v12(7, &["abc"]);
        // the header is 2+2+4+2+7+1 = 18 bytes; the topics' count at 18, the name's length at 19:
        // a length is read first, so its payload's failure stands after it
        let e = request(&reg(), &frame[..21], true).err().unwrap();
        assert_eq!(
            e.text,
            "Metadata v12 request, field Topics[].Name, byte 20: string length 3 runs past the end (1 bytes left)"
        );
        let e = request(&reg(), &frame[..19], true).err().unwrap();
        assert_eq!(
            e.text,
            "Metadata v12 request, field Topics, byte 19: array of 1 elements runs past the end (0 bytes left)"
        );
        let e = request(&reg(), &frame[..18], true).err().unwrap();
        assert_eq!(
            e.text,
            "Metadata v12 request, field Topics, byte 18: frame ends in the middle of the field"
        );
        assert!(e.is_short());
        let e = request(&reg(), &frame[..6], true).err().unwrap();
        assert_eq!(e.text, "request of 6 bytes is shorter than a header");
    }

    #[test]
    fn bad_utf8_is_explained_as_python_explains_it() {
        let mut frame = metadata_v12(7, &["abc"]);
        frame[20] = 0xC3; // 'a' becomes a lead byte whose continuation ('b') is not one
        let e = request(&reg(), &frame, true).err().unwrap();
        assert_eq!(
            e.text,
            "Metadata v12 request, field Topics[].Name, byte 19: invalid UTF-8 in string: invalid continuation byte"
        );
        frame[20] = 0x80;
        let e = request(&reg(), &frame, true).err().unwrap();
        assert!(e.text.ends_with("invalid start byte"), "{}", e.text);
    }

    #[test]
    fn an_answer_in_another_versions_layout_is_decoded_as_the_nearest_one() {
        // a v8 body (ThrottleTimeMs, no tag section) answering a v9 request (flexible)
        let frame = [0, 0, 0, 5, 0, 0, 0, 0, 42]; // its header (v1) has a tag section
        let d = response(&reg(), &frame, 3, 9, true).unwrap();
        assert_eq!(
            (d.correlation_id, d.body_version, d.version_mismatch),
            (5, 8, true)
        );
        let e = response(&reg(), &frame, 3, 9, false).err().unwrap();
        assert!(
            e.text
                .starts_with("Metadata v9 response, field <tagged fields>, byte 9:"),
            "{}",
            e.text
        );
        assert!(
            e.text
                .ends_with("(the body decodes whole as v3, v4, v5, v6, v7, v8)"),
            "{}",
            e.text
        );
    }

    #[test]
    fn a_request_peeked_and_a_client_id_quoted_as_python_would() {
        let frame = metadata_v12(7, &["a"]);
        assert_eq!(
            peek_request(&frame),
            Some((3, 12, 7, Some("rdkafka".to_owned())))
        );
        assert_eq!(peek_request(&frame[..9]), Some((3, 12, 7, None)));
        assert_eq!(peek_request(&frame[..7]), None);
        assert_eq!(py_repr(None), "None");
        assert_eq!(py_repr(Some("it's")), "\"it's\"");
        assert_eq!(
            py_repr(Some("a'\"b\\\n\u{7f}é\u{a0}")),
            "'a\\'\"b\\\\\\n\\x7fé\\xa0'"
        );
    }
}
