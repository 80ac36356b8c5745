//! Frames -> decoded values (the fast path: a message read whole by its version's plan), and
//! the body walk (error codes collected, topic ids named).
//!
//! The decoders interpret the plans of schema.rs. tests/test_native_decode.py holds them to the
//! generated decoders of protocol/compiler.py (protocol/codec.py's fast path): the same values,
//! a frame refused exactly when those refuse it, and Fail::Short exactly when the reason is that
//! the bytes ran out. So they keep the same fast paths (a compact length byte read as
//! `buf[pos] - 1`, short blobs tested with `0 < n < 128 && pos + n <= end`) and the same bounds
//! checks in the same order. A comment quoting a reason gives the text crate::lenient writes for
//! that failure.
use std::collections::HashMap;
use std::rc::Rc;

use crate::schema::Dir;
use crate::schema::{
    key_name, known_key, FieldPlan, Fixed, Kind, Registry, StructPlan, WalkPlan, WalkStep,
    WalkStruct, K_API_KEY, K_API_VERSION, K_BODY, K_CLIENT_ID, K_CORRELATION_ID, K_HEADER, K_NAME,
    K_TOPIC_ID, K_TOPIC_NAME, K_UNKNOWN_TAGGED, K_VERSION,
};

/// A decoded value. Offsets are into the frame the value was decoded from: bytes
/// fields, number arrays and unknown tagged fields are read from it only by to_py.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Int(i64),
    Bool(bool),
    Float(f64),
    Uuid([u8; 16]),
    Str(Rc<str>),
    /// A string left in the frame (checked UTF-8): only a Name, which the walk may
    /// learn, is worth a copy of its own.
    Text {
        start: usize,
        end: usize,
    },
    /// A bytes or records field: frame[start..end], not copied.
    View {
        start: usize,
        end: usize,
    },
    /// Bytes of its own, not the frame's: what redaction puts in place of a secret.
    Bytes(Rc<[u8]>),
    /// An array of fixed-width numbers: `count` values from frame[start..], read when used.
    Numbers {
        ty: Fixed,
        start: usize,
        count: usize,
    },
    /// An array of uuids: `count` UUIDs from frame[start..].
    Uuids {
        start: usize,
        count: usize,
    },
    List(Vec<Value>),
    /// A struct: (field name id, value) in field order, the regular fields then the tagged
    /// ones; each key once.
    Struct(Vec<(u32, Value)>),
    /// A struct's unknown tagged fields (its `_unknown_tagged_fields`): (tag, start, end) of
    /// each in the frame, in first-seen order; a tag seen again keeps its place, with the later
    /// bytes.
    Tagged(Vec<(u64, usize, usize)>),
}

/// A message the fast path decoded: its header's facts and its body, every byte of the frame
/// read.
pub struct Message {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub body: Value,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fail {
    /// The bytes ran out inside a field (the general path's reason says "past the end" or
    /// "ends in the middle": DecodeError::is_short): a frame cut short may still be this message.
    Short,
    /// Anything else that makes the decoder fail (bad UTF-8, a bad length, ...).
    Other,
    /// The whole message decoded and bytes were left after it: what real clients sometimes send,
    /// which the lenient decoder reads (flagged trailing_bytes) as it reads any other frame.
    Trailing,
    /// No plan for this message (ApiVersions, a version the registry lacks): the general path
    /// (crate::lenient) decides.
    NoPlan,
}

impl Fail {
    pub fn name(self) -> &'static str {
        match self {
            Fail::Short => "short",
            Fail::Other | Fail::Trailing => "other",
            Fail::NoPlan => "noplan",
        }
    }
}

type R<T> = Result<T, Fail>;

// -- the decoder ------------------------------------------------------------------

/// One fixed-width value from its t.size() big-endian bytes `b`.
#[inline(always)]
pub fn read_fixed(t: Fixed, b: &[u8]) -> Value {
    match t {
        Fixed::I8 => Value::Int(b[0] as i8 as i64),
        Fixed::I16 => Value::Int(i16::from_be_bytes([b[0], b[1]]) as i64),
        Fixed::U16 => Value::Int(u16::from_be_bytes([b[0], b[1]]) as i64),
        Fixed::I32 => Value::Int(i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64),
        Fixed::U32 => Value::Int(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64),
        Fixed::I64 => Value::Int(i64::from_be_bytes(b.try_into().unwrap_or([0; 8]))),
        Fixed::F64 => Value::Float(f64::from_be_bytes(b.try_into().unwrap_or([0; 8]))),
        Fixed::Bool => Value::Bool(b[0] != 0), // any non-zero byte is true
        Fixed::Uuid => Value::Uuid(b.try_into().unwrap_or([0; 16])),
    }
}

/// A reader over a frame: `buf` (its end the frame's) and the position read up to.
pub(crate) struct Rd<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Rd<'a> {
    /// buf[at]; Short past the end ("ends in the middle").
    #[inline]
    fn byte(&self, at: usize) -> R<u8> {
        self.buf.get(at).copied().ok_or(Fail::Short)
    }

    #[inline]
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes; Short when fewer are left.
    #[inline]
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.left() {
            return Err(Fail::Short);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// An unsigned varint of at most 5 bytes (up to 35 bits).
    fn uvarint(&mut self) -> R<u64> {
        let mut r: u64 = 0;
        for i in 0..5 {
            let b = self.byte(self.pos + i)? as u64;
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(r | (b << (7 * i)));
            }
            r |= (b & 0x7F) << (7 * i);
        }
        Err(Fail::Other) // "unsigned varint longer than 5 bytes"
    }

    /// A length: compact (an unsigned varint of length + 1), int32 (`wide`) or int16; -1 (or
    /// any negative) is null.
    #[inline]
    fn length(&mut self, compact: bool, wide: bool) -> R<i64> {
        if compact {
            let n = self.byte(self.pos)? as i64 - 1;
            if n < 127 {
                self.pos += 1;
                Ok(n)
            } else {
                Ok(self.uvarint()? as i64 - 1)
            }
        } else if wide {
            let b = self.take(4)?;
            Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64)
        } else {
            let b = self.take(2)?;
            Ok(i16::from_be_bytes([b[0], b[1]]) as i64)
        }
    }

    fn blob_value(&self, start: usize, end: usize, string: bool, own: bool) -> R<Value> {
        if string {
            match std::str::from_utf8(&self.buf[start..end]) {
                Ok(s) if own => Ok(Value::Str(Rc::from(s))),
                Ok(_) => Ok(Value::Text { start, end }),
                Err(_) => Err(Fail::Other), // "invalid UTF-8 in string"
            }
        } else {
            Ok(Value::View { start, end })
        }
    }

    /// A string (`own`: copied out of the frame), bytes or records field; None when null.
    fn blob(&mut self, string: bool, compact: bool, own: bool) -> R<Value> {
        if compact {
            // short non-null values (one length byte, inside the frame) in one test
            let n = self.byte(self.pos)? as usize;
            if 0 < n && n < 128 && self.pos + n <= self.buf.len() {
                let v = self.blob_value(self.pos + 1, self.pos + n, string, own)?;
                self.pos += n;
                return Ok(v);
            }
        }
        let n = self.length(compact, !string)?;
        if n < 0 {
            return Ok(Value::None);
        }
        if n as u64 > self.left() as u64 {
            return Err(Fail::Short); // "... length %d runs past the end"
        }
        let v = self.blob_value(self.pos, self.pos + n as usize, string, own)?;
        self.pos += n as usize;
        Ok(v)
    }

    #[inline(always)]
    fn fixed(&mut self, t: Fixed) -> R<Value> {
        let size = t.size();
        if size > self.left() {
            return Err(Fail::Short);
        }
        Ok(self.fixed_unchecked(t))
    }

    /// A fixed-width value whose bytes are known to be there.
    #[inline(always)]
    fn fixed_unchecked(&mut self, t: Fixed) -> Value {
        let v = read_fixed(t, &self.buf[self.pos..self.pos + t.size()]);
        self.pos += t.size();
        v
    }

    /// n elements of `size` bytes each must fit in what is left ("array of %d ... runs past the end").
    #[inline]
    fn fits(&self, n: i64, size: i64) -> R<()> {
        // n < 2**35 and size <= 16 or a struct's min_size: no overflow in i128
        if n as i128 * size as i128 > self.left() as i128 {
            Err(Fail::Short)
        } else {
            Ok(())
        }
    }

    /// One field's value alone (a tagged field's).
    fn field(&mut self, f: &FieldPlan, flex: bool) -> R<Value> {
        let mut one = Vec::with_capacity(1);
        self.field_into(f, flex, &mut one)?;
        Ok(one.pop().map_or(Value::None, |(_, v)| v))
    }

    /// One field, its (key, value) pushed onto d (a Result<Value> returned per field
    /// measured slower).
    fn field_into(&mut self, f: &FieldPlan, flex: bool, d: &mut Vec<(u32, Value)>) -> R<()> {
        let key = f.key;
        match &f.kind {
            Kind::Fixed(t) => {
                if t.size() > self.left() {
                    return Err(Fail::Short);
                }
                d.push((key, self.fixed_unchecked(*t)));
            }
            Kind::Blob { string, compact } => {
                let v = self.blob(*string, *compact, key == K_NAME)?;
                d.push((key, v));
            }
            Kind::Numbers(t) => {
                let size = t.size();
                if flex {
                    // a one-byte compact count (k - 1 elements, k up to 64) skips the varint
                    let k = self.byte(self.pos)? as usize;
                    if 0 < k && k <= 64 {
                        let start = self.pos + 1;
                        if (k - 1) * size > self.buf.len() - start {
                            return Err(Fail::Short);
                        }
                        self.pos = start + (k - 1) * size;
                        d.push((
                            key,
                            Value::Numbers {
                                ty: *t,
                                start,
                                count: k - 1,
                            },
                        ));
                        return Ok(());
                    }
                }
                let n = self.length(flex, true)?;
                if n < 0 {
                    d.push((key, Value::None));
                    return Ok(());
                }
                // any count: its bytes must all be there before one is read
                self.fits(n, size as i64)?;
                let start = self.pos;
                self.pos += n as usize * size;
                d.push((
                    key,
                    Value::Numbers {
                        ty: *t,
                        start,
                        count: n as usize,
                    },
                ));
            }
            Kind::Uuids => {
                let n = self.length(flex, true)?;
                if n < 0 {
                    d.push((key, Value::None));
                    return Ok(());
                }
                self.fits(n, 16)?;
                let start = self.pos;
                self.pos += n as usize * 16;
                d.push((
                    key,
                    Value::Uuids {
                        start,
                        count: n as usize,
                    },
                ));
            }
            Kind::Blobs { string } => {
                let n = self.length(flex, true)?;
                if n < 0 {
                    d.push((key, Value::None));
                    return Ok(());
                }
                self.fits(
                    n,
                    if flex {
                        1
                    } else if *string {
                        2
                    } else {
                        4
                    },
                )?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.blob(*string, flex, false)?);
                }
                d.push((key, Value::List(items)));
            }
            Kind::Structs { plan, least } => {
                let n = self.length(flex, true)?;
                if n < 0 {
                    d.push((key, Value::None));
                    return Ok(());
                }
                // No struct of the registry has a min_size of 0; were there one, the count
                // would still be bounded by the bytes left rather than trusted.
                self.fits(n, (*least).max(1))?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(Value::Struct(self.struct_body(plan)?));
                }
                d.push((key, Value::List(items)));
            }
            Kind::Struct { plan, nullable } => {
                if *nullable {
                    let marker = self.byte(self.pos)?;
                    self.pos += 1;
                    if marker >= 128 {
                        d.push((key, Value::None));
                        return Ok(());
                    }
                }
                let v = self.struct_body(plan)?;
                d.push((key, Value::Struct(v)));
            }
        }
        Ok(())
    }

    /// A struct: its regular fields, then (flexible versions) its tag section's.
    pub(crate) fn struct_body(&mut self, plan: &StructPlan) -> R<Vec<(u32, Value)>> {
        let mut d = Vec::with_capacity(plan.fields.len());
        for f in &plan.fields {
            self.field_into(f, plan.flex, &mut d)?;
        }
        if plan.flex {
            self.tag_section(plan, &mut d)?;
        }
        Ok(d)
    }

    /// A tag section: each known tag decoded into its field (held to its announced size), the
    /// unknown ones kept as byte ranges under K_UNKNOWN_TAGGED.
    fn tag_section(&mut self, plan: &StructPlan, d: &mut Vec<(u32, Value)>) -> R<()> {
        if self.byte(self.pos)? == 0 {
            self.pos += 1;
            return Ok(());
        }
        let n = self.uvarint()?;
        if n * 2 > self.left() as u64 {
            return Err(Fail::Short); // "%d tagged fields run past the end"
        }
        for _ in 0..n {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            let te = self.pos as u64 + size;
            if te > self.buf.len() as u64 {
                return Err(Fail::Short); // "tagged field %d of %d bytes runs past the end"
            }
            let te = te as usize;
            if let Some((_, f)) = plan.tagged.iter().find(|(t, _)| *t == tag) {
                // decoded against the whole frame, then held to its announced size
                let v = self.field(f, plan.flex)?;
                if self.pos != te {
                    return Err(Fail::Other); // "tagged field %s is %d bytes, decoded %d"
                }
                set(d, f.key, v);
            } else {
                let start = self.pos;
                let i = match d.iter().position(|(k, _)| *k == K_UNKNOWN_TAGGED) {
                    Some(i) => i,
                    None => {
                        d.push((K_UNKNOWN_TAGGED, Value::Tagged(Vec::new())));
                        d.len() - 1
                    }
                };
                if let Value::Tagged(items) = &mut d[i].1 {
                    match items.iter_mut().find(|(t, _, _)| *t == tag) {
                        Some(item) => *item = (tag, start, te),
                        None => items.push((tag, start, te)),
                    }
                }
                self.pos = te;
            }
        }
        Ok(())
    }
}

/// Sets `key` to `v` in a struct's fields: a key already there keeps its place.
fn set(d: &mut Vec<(u32, Value)>, key: u32, v: Value) {
    match d.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = v,
        None => d.push((key, v)),
    }
}

/// The value of `key` in a struct's fields.
pub fn get(d: &[(u32, Value)], key: u32) -> Option<&Value> {
    d.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// Whether a struct's fields have `key`.
pub fn has(d: &[(u32, Value)], key: u32) -> bool {
    d.iter().any(|(k, _)| *k == key)
}

impl Rd<'_> {
    /// The header, keeping only CorrelationId and ClientId (its other fields are read past).
    pub(crate) fn header(&mut self, plan: &StructPlan) -> R<(i32, Option<String>)> {
        let (mut corr, mut client_id) = (0, None);
        let mut rest = Vec::new(); // no allocation unless a field other than these two comes
        for f in &plan.fields {
            match (&f.kind, f.key) {
                (Kind::Fixed(Fixed::I32), K_CORRELATION_ID) => {
                    if let Value::Int(c) = self.fixed(Fixed::I32)? {
                        corr = c as i32;
                    }
                }
                (
                    Kind::Blob {
                        string: true,
                        compact,
                    },
                    K_CLIENT_ID,
                ) => {
                    if let Value::Text { start, end } = self.blob(true, *compact, false)? {
                        client_id = std::str::from_utf8(&self.buf[start..end])
                            .ok()
                            .map(str::to_owned);
                    }
                }
                _ => self.field_into(f, plan.flex, &mut rest)?,
            }
        }
        if plan.flex {
            self.tag_section(plan, &mut rest)?;
        }
        Ok((corr, client_id))
    }
}

/// A message by its version's plan: header, body, nothing left over.
fn decode(reg: &Registry, frame: &[u8], api_key: i16, api_version: i16, dir: Dir) -> R<Message> {
    let plan = reg.plan(api_key, api_version, dir).ok_or(Fail::NoPlan)?;
    let mut rd = Rd { buf: frame, pos: 0 };
    let (correlation_id, client_id) = rd.header(&plan.header)?;
    let body = rd.struct_body(&plan.body)?;
    if rd.pos != frame.len() {
        return Err(Fail::Trailing); // "%d bytes left over after the message"
    }
    Ok(Message {
        api_key,
        api_version,
        correlation_id,
        client_id,
        body: Value::Struct(body),
    })
}

/// A request by the fast path, its API key and version read from the frame.
pub fn decode_request(reg: &Registry, frame: &[u8]) -> Result<Message, Fail> {
    if frame.len() < 8 {
        return Err(Fail::Other); // "request of %d bytes is shorter than a header"
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    decode(reg, frame, api_key, api_version, Dir::Request)
}

/// The answer to a version `api_version` request of `api_key`, by the fast path.
pub fn decode_response(
    reg: &Registry,
    frame: &[u8],
    api_key: i16,
    api_version: i16,
) -> Result<Message, Fail> {
    decode(reg, frame, api_key, api_version, Dir::Response)
}

// -- payloads inside bytes fields (nested.rs decides which) -------------------------

/// Why a nested payload did not decode, in words for its `_error` value.
fn nested_fail(what: &str, f: Fail) -> String {
    match f {
        Fail::Short => format!("{what}: ends in the middle of a field"),
        Fail::Other | Fail::Trailing => {
            format!("{what}: does not decode (bad length, UTF-8 or bytes left over)")
        }
        Fail::NoPlan => format!("{what}: not in the registry"),
    }
}

/// A version-prefixed data type of the registry at frame[start..end] (the consumer protocol's
/// Subscription and Assignment): {"Version": v, fields...}, offsets into `frame`. A newer
/// version than the registry knows is read with the newest layout and its tail left,
/// as Kafka reads these forward-compatible types.
pub fn decode_data(
    reg: &Registry,
    name: &'static str,
    frame: &[u8],
    start: usize,
    end: usize,
) -> Result<Vec<(u32, Value)>, String> {
    if end < start + 2 || end > frame.len() {
        return Err(format!(
            "{name}: {} bytes, no version prefix",
            end.saturating_sub(start)
        ));
    }
    let version = i16::from_be_bytes([frame[start], frame[start + 1]]) as i64;
    let mut d = vec![(K_VERSION, Value::Int(version))];
    d.extend(decode_at(reg, name, version, frame, start + 2, end)?);
    Ok(d)
}

/// A data type of the registry at `version`, its fields at frame[start..end] with no prefix.
/// A newer version than the registry knows is read with the newest layout and its tail
/// left, as Kafka reads these forward-compatible types.
pub fn decode_at(
    reg: &Registry,
    name: &'static str,
    version: i64,
    frame: &[u8],
    start: usize,
    end: usize,
) -> Result<Vec<(u32, Value)>, String> {
    if start > end || end > frame.len() {
        return Err(format!("{name}: no bytes"));
    }
    let (lo, hi) = reg
        .data_versions(name)
        .ok_or_else(|| format!("{name}: not in the registry"))?;
    if version < lo {
        return Err(format!("{name}: version {version} predates v{lo}"));
    }
    let used = version.min(hi);
    let plan = reg
        .data_plan(name, used)
        .ok_or_else(|| format!("{name}: no v{used} in the registry"))?;
    let what = format!("{name} v{used}");
    let mut rd = Rd {
        buf: &frame[..end],
        pos: start,
    };
    let d = rd.struct_body(&plan).map_err(|f| nested_fail(&what, f))?;
    if used == version && rd.pos != end {
        return Err(format!("{what}: {} bytes left over", end - rd.pos));
    }
    Ok(d)
}

/// A whole Kafka message at frame[start..end] (Envelope's RequestData and ResponseData):
/// {"api_key", "api_version", "header": {...}, "body": {...}}, offsets into `frame`. A
/// request names its own key and version; a response takes its request's, `answers`.
pub fn decode_inner(
    reg: &Registry,
    frame: &[u8],
    start: usize,
    end: usize,
    answers: Option<(i16, i16)>,
) -> Result<Vec<(u32, Value)>, String> {
    let buf = frame.get(start..end).unwrap_or_default();
    let (api_key, api_version, dir) = match answers {
        Some((k, v)) => (k, v, Dir::Response),
        None if buf.len() >= 8 => (
            i16::from_be_bytes([buf[0], buf[1]]),
            i16::from_be_bytes([buf[2], buf[3]]),
            Dir::Request,
        ),
        None => {
            return Err(format!(
                "a {}-byte request is shorter than a header",
                buf.len()
            ))
        }
    };
    let what = format!(
        "{} v{api_version} {}",
        api_key,
        if dir == Dir::Request {
            "request"
        } else {
            "response"
        }
    );
    let plan = reg
        .plan(api_key, api_version, dir)
        .ok_or_else(|| format!("{what}: not in the registry"))?;
    let mut rd = Rd {
        buf: &frame[..end],
        pos: start,
    };
    let header = rd
        .struct_body(&plan.header)
        .map_err(|f| nested_fail(&what, f))?;
    let body = rd
        .struct_body(&plan.body)
        .map_err(|f| nested_fail(&what, f))?;
    if rd.pos != end {
        return Err(format!("{what}: {} bytes left over", end - rd.pos));
    }
    Ok(vec![
        (K_API_KEY, Value::Int(api_key as i64)),
        (K_API_VERSION, Value::Int(api_version as i64)),
        (K_HEADER, Value::Struct(header)),
        (K_BODY, Value::Struct(body)),
    ])
}

// -- topic names ------------------------------------------------------------------

/// One Names table shared by the layers that learn and read it (exchanges, rows).
pub type SharedNames = std::rc::Rc<std::cell::RefCell<Names>>;

/// TopicId -> Name pairs learned from responses, in insertion order.
#[derive(Default)]
pub struct Names {
    index: HashMap<[u8; 16], usize>,
    items: Vec<([u8; 16], Rc<str>)>,
}

impl Names {
    pub fn new() -> Self {
        Names::default()
    }

    pub fn get(&self, id: &[u8; 16]) -> Option<&Rc<str>> {
        self.index.get(id).map(|&i| &self.items[i].1)
    }

    /// names[id] = name: a known id keeps its place.
    pub fn insert(&mut self, id: [u8; 16], name: Rc<str>) {
        match self.index.get(&id) {
            Some(&i) => self.items[i].1 = name,
            None => {
                self.index.insert(id, self.items.len());
                self.items.push((id, name));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn contains(&self, id: &[u8; 16]) -> bool {
        self.index.contains_key(id)
    }

    /// (id, name) in insertion order
    pub fn iter(&self) -> impl Iterator<Item = &([u8; 16], Rc<str>)> {
        self.items.iter()
    }
}

// -- the walk ---------------------------------------------------------------------

/// A body walked along its schema's walk plan (schema.rs): the non-zero error codes collected
/// into `errors` in body order, TopicId -> Name pairs learned from a response, and a bare
/// TopicId given its name; a version the registry lacks is walked whole (generic_walk).
pub fn walk(
    reg: &Registry,
    api_key: i16,
    version: i16,
    dir: Dir,
    body: &mut Value,
    errors: Option<&mut Vec<i64>>,
    names: &mut Names,
) {
    let learn = dir == Dir::Response;
    let plan = reg.walk_plan(api_key, version, dir);
    match &*plan {
        WalkPlan::Nothing => {}
        WalkPlan::Walk(ws) => {
            let mut scratch = Vec::new(); // a request's error codes are not kept
            let errors = errors.unwrap_or(&mut scratch);
            if let Value::Struct(d) = body {
                walk_struct(ws, d, errors, names, learn);
            }
        }
        WalkPlan::NoSchema => generic_walk(body, errors, names, learn),
    }
}

/// names[TopicId] = Name when the struct has a non-zero TopicId and a str Name.
fn learn_name(d: &[(u32, Value)], names: &mut Names) {
    if let (Some(Value::Uuid(tid)), Some(Value::Str(nm))) = (get(d, K_TOPIC_ID), get(d, K_NAME)) {
        if *tid != [0; 16] {
            names.insert(*tid, nm.clone());
        }
    }
}

/// A UUID TopicId with neither Name nor TopicName beside it: annotate() gives it its name.
fn bare_topic_id(d: &[(u32, Value)]) -> bool {
    matches!(get(d, K_TOPIC_ID), Some(Value::Uuid(_))) && !has(d, K_NAME) && !has(d, K_TOPIC_NAME)
}

fn walk_struct(
    ws: &WalkStruct,
    d: &mut Vec<(u32, Value)>,
    errors: &mut Vec<i64>,
    names: &mut Names,
    learn: bool,
) {
    if ws.learn && learn {
        learn_name(d, names);
    }
    for step in &ws.steps {
        match step {
            WalkStep::Error(key) => {
                if let Some(Value::Int(x)) = get(d, *key) {
                    if *x != 0 {
                        errors.push(*x);
                    }
                }
            }
            WalkStep::Child { key, array, sub } => {
                let Some((_, v)) = d.iter_mut().find(|(k, _)| k == key) else {
                    continue;
                };
                match (array, v) {
                    (true, Value::List(items)) => {
                        for item in items {
                            if let Value::Struct(c) = item {
                                walk_struct(sub, c, errors, names, learn);
                            }
                        }
                    }
                    (false, Value::Struct(c)) => walk_struct(sub, c, errors, names, learn),
                    _ => {}
                }
            }
        }
    }
    if ws.annotate && bare_topic_id(d) {
        annotate(d, names);
    }
}

/// TopicName (the name learned for the id, else None) inserted right after TopicId.
fn annotate(d: &mut Vec<(u32, Value)>, names: &Names) {
    let Some(i) = d.iter().position(|(k, _)| *k == K_TOPIC_ID) else {
        return;
    };
    let name = match &d[i].1 {
        Value::Uuid(tid) => names.get(tid).cloned(),
        _ => None,
    };
    d.insert(i + 1, (K_TOPIC_NAME, name.map_or(Value::None, Value::Str)));
}

/// The walk of a body without a schema: every struct and list visited, any int field whose
/// name ends in ErrorCode collected.
pub fn generic_walk(
    v: &mut Value,
    mut errors: Option<&mut Vec<i64>>,
    names: &mut Names,
    learn: bool,
) {
    match v {
        Value::List(items) => {
            for item in items {
                if matches!(item, Value::List(_) | Value::Struct(_)) {
                    generic_walk(item, errors.as_deref_mut(), names, learn);
                }
            }
        }
        Value::Struct(d) => {
            if learn {
                learn_name(d, names);
            }
            // the loop leaves TopicId, Name and TopicName as they are (keys are unique)
            let annotate_it = bare_topic_id(d);
            for (k, item) in d.iter_mut() {
                match item {
                    Value::List(_) | Value::Struct(_) => {
                        generic_walk(item, errors.as_deref_mut(), names, learn)
                    }
                    Value::Int(x) if *x != 0 => {
                        if let Some(e) = errors.as_deref_mut() {
                            if key_name(*k).ends_with("ErrorCode") {
                                e.push(*x);
                            }
                        }
                    }
                    _ => {}
                }
            }
            if annotate_it {
                annotate(d, names);
            }
        }
        _ => {}
    }
}

/// The body's top-level field `name` when it is an integer (Produce's "Acks", SaslHandshake's
/// "ErrorCode").
pub fn field_int(body: &Value, name: &str) -> Option<i64> {
    let Value::Struct(d) = body else { return None };
    match get(d, known_key(name)?) {
        Some(Value::Int(x)) => Some(*x),
        _ => None,
    }
}

pub fn put_value(e: &mut crate::carry::Enc, v: &Value) {
    match v {
        Value::None => e.u8(0),
        Value::Int(i) => {
            e.u8(1);
            e.i64(*i);
        }
        Value::Bool(b) => {
            e.u8(2);
            e.bool(*b);
        }
        Value::Float(f) => {
            e.u8(3);
            e.f64(*f);
        }
        Value::Uuid(u) => {
            e.u8(4);
            e.bytes(u);
        }
        Value::Str(s) => {
            e.u8(5);
            e.str(s);
        }
        Value::Text { start, end } => {
            e.u8(6);
            e.usize(*start);
            e.usize(*end);
        }
        Value::View { start, end } => {
            e.u8(7);
            e.usize(*start);
            e.usize(*end);
        }
        Value::Bytes(b) => {
            e.u8(13);
            e.bytes(b);
        }
        Value::Numbers { ty, start, count } => {
            e.u8(8);
            e.u8(ty.code());
            e.usize(*start);
            e.usize(*count);
        }
        Value::Uuids { start, count } => {
            e.u8(9);
            e.usize(*start);
            e.usize(*count);
        }
        Value::List(items) => {
            e.u8(10);
            e.seq(items.iter(), put_value);
        }
        Value::Struct(fields) => {
            e.u8(11);
            e.seq(fields.iter(), |e, (k, v)| {
                e.u32(*k);
                put_value(e, v);
            });
        }
        Value::Tagged(t) => {
            e.u8(12);
            e.seq(t.iter(), |e, (tag, a, z)| {
                e.u64(*tag);
                e.usize(*a);
                e.usize(*z);
            });
        }
    }
}

pub fn get_value(d: &mut crate::carry::Dec<'_>) -> crate::carry::R<Value> {
    let bad = || crate::carry::Damaged("carried state is damaged (value)".into());
    Ok(match d.u8()? {
        0 => Value::None,
        1 => Value::Int(d.i64()?),
        2 => Value::Bool(d.bool()?),
        3 => Value::Float(d.f64()?),
        4 => Value::Uuid(d.raw()?.try_into().map_err(|_| bad())?),
        5 => Value::Str(d.rc()?),
        6 => Value::Text {
            start: d.usize()?,
            end: d.usize()?,
        },
        7 => Value::View {
            start: d.usize()?,
            end: d.usize()?,
        },
        8 => Value::Numbers {
            ty: Fixed::from_code(d.u8()?).ok_or_else(bad)?,
            start: d.usize()?,
            count: d.usize()?,
        },
        9 => Value::Uuids {
            start: d.usize()?,
            count: d.usize()?,
        },
        10 => Value::List(d.vec(get_value)?),
        11 => Value::Struct(d.vec(|d| Ok((d.u32()?, get_value(d)?)))?),
        12 => Value::Tagged(d.vec(|d| Ok((d.u64()?, d.usize()?, d.usize()?)))?),
        13 => Value::Bytes(Rc::from(d.raw()?)),
        _ => return Err(bad()),
    })
}

impl Names {
    pub fn carry(&self, e: &mut crate::carry::Enc) {
        e.seq(self.items.iter(), |e, (id, name)| {
            e.bytes(id);
            e.str(name);
        });
    }

    pub fn restore(&mut self, d: &mut crate::carry::Dec<'_>) -> crate::carry::R<()> {
        for (id, name) in d.vec(|d| Ok((d.raw()?.to_vec(), d.rc()?)))? {
            let id: [u8; 16] = id
                .try_into()
                .map_err(|_| crate::carry::Damaged("carried state is damaged (topic id)".into()))?;
            self.insert(id, name);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schema::{key_id, RawField, RawSeg, Ty};

    fn field(name: &str, ty: Ty, versions: (i64, i64)) -> RawField {
        RawField {
            key: key_id(name),
            name: name.into(),
            versions: Some(versions),
            ty,
            array: false,
            nullable: None,
            tagged: None,
            has_tag: false,
            tag: -1,
            flexible: None,
            entity: None,
            fields: Vec::new(),
        }
    }

    fn seg(flexible: Option<(i64, i64)>, fields: Vec<RawField>) -> RawSeg {
        RawSeg {
            flexible,
            fields: Rc::new(fields),
        }
    }

    /// Kafka's request and response headers and a Metadata-like API 3, v0-12 (flexible from 9):
    /// Topics [ { Name string } ], AllowAutoTopicCreation bool (v4+).
    pub(crate) fn registry() -> Registry {
        let mut client_id = field("ClientId", Ty::Str, (1, 2));
        client_id.nullable = Some((1, 2));
        client_id.flexible = Some(None); // the header's ClientId is never compact
        let request_header = seg(
            Some((2, 2)),
            vec![
                field("RequestApiKey", Ty::Fixed(Fixed::I16), (0, 2)),
                field("RequestApiVersion", Ty::Fixed(Fixed::I16), (0, 2)),
                field("CorrelationId", Ty::Fixed(Fixed::I32), (0, 2)),
                client_id,
            ],
        );
        let response_header = seg(
            Some((1, 1)),
            vec![field("CorrelationId", Ty::Fixed(Fixed::I32), (0, 1))],
        );
        let mut topics = field("Topics", Ty::Struct, (0, 12));
        topics.array = true;
        topics.fields = vec![field("Name", Ty::Str, (0, 12))];
        let request = seg(
            Some((9, 12)),
            vec![
                topics,
                field("AllowAutoTopicCreation", Ty::Fixed(Fixed::Bool), (4, 12)),
            ],
        );
        let response = seg(
            Some((9, 12)),
            vec![field("ThrottleTimeMs", Ty::Fixed(Fixed::I32), (3, 12))],
        );
        let versions: Vec<i64> = (0..=12).collect();
        Registry::new(
            vec![
                (3, Dir::Request, vec![(request, versions.clone())]),
                (3, Dir::Response, vec![(response, versions)]),
            ],
            request_header,
            response_header,
            HashMap::new(),
        )
    }

    /// A Metadata v12 request (flexible: compact arrays and strings, tag sections), header v2.
    pub(crate) fn metadata_v12(corr: i32, topics: &[&str]) -> Vec<u8> {
        let mut f = vec![0, 3, 0, 12];
        f.extend_from_slice(&corr.to_be_bytes());
        f.extend_from_slice(&[0, 7]);
        f.extend_from_slice(b"rdkafka");
        f.push(0); // header tags
        f.push(topics.len() as u8 + 1);
        for t in topics {
            f.push(t.len() as u8 + 1);
            f.extend_from_slice(t.as_bytes());
            f.push(0); // the topic's tags
        }
        f.push(1); // AllowAutoTopicCreation
        f.push(0); // body tags
        f
    }

    fn topic_names(m: &Message, frame: &[u8]) -> Vec<String> {
        let Value::Struct(body) = &m.body else {
            panic!("not a struct")
        };
        let Some(Value::List(topics)) = get(body, key_id("Topics")) else {
            panic!("no Topics")
        };
        topics
            .iter()
            .map(|t| match t {
                Value::Struct(d) => match get(d, key_id("Name")) {
                    Some(Value::Text { start, end }) => {
                        String::from_utf8(frame[*start..*end].to_vec()).unwrap()
                    }
                    Some(Value::Str(s)) => s.to_string(), // short texts are held, not pointed to
                    other => panic!("Name is {other:?}"),
                },
                other => panic!("topic is {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_flexible_request_decodes_header_and_body() {
        let reg = registry();
        let frame = metadata_v12(42, &["orders", "events"]);
        let m = decode_request(&reg, &frame).unwrap();
        assert_eq!((m.api_key, m.api_version, m.correlation_id), (3, 12, 42));
        assert_eq!(m.client_id.as_deref(), Some("rdkafka"));
        assert_eq!(topic_names(&m, &frame), ["orders", "events"]);
        assert_eq!(reg.request_header_version(3, 12), 2);
        assert_eq!(reg.request_header_version(3, 8), 1);
        assert_eq!(reg.response_header_version(3, 12), 1);
    }

    #[test]
    fn every_cut_is_short_and_bytes_after_the_message_are_trailing() {
        let reg = registry();
        let frame = metadata_v12(1, &["orders"]);
        for cut in 8..frame.len() {
            assert_eq!(
                decode_request(&reg, &frame[..cut]).err(),
                Some(Fail::Short),
                "cut at {cut}"
            );
        }
        let mut longer = frame.clone();
        longer.extend_from_slice(&[0, 0, 0]);
        assert_eq!(decode_request(&reg, &longer).err(), Some(Fail::Trailing));
        assert_eq!(decode_request(&reg, &frame[..7]).err(), Some(Fail::Other));
    }

    #[test]
    fn bad_utf8_is_other_and_an_unknown_version_has_no_plan() {
        let reg = registry();
        let mut frame = metadata_v12(1, &["orders"]);
        let at = frame.iter().position(|b| *b == b'o').unwrap();
        frame[at] = 0xff;
        assert_eq!(decode_request(&reg, &frame).err(), Some(Fail::Other));
        let mut v13 = metadata_v12(1, &["orders"]);
        v13[3] = 13;
        assert_eq!(decode_request(&reg, &v13).err(), Some(Fail::NoPlan));
    }

    #[test]
    fn a_value_carried_and_restored_is_equal() {
        let reg = registry();
        let frame = metadata_v12(7, &["a", "b", "c"]);
        let m = decode_request(&reg, &frame).unwrap();
        let mut e = crate::carry::Enc::new();
        put_value(&mut e, &m.body);
        let raw = crate::carry::Dec::unpack(&e.finish().unwrap()).unwrap();
        let mut d = crate::carry::Dec::new(&raw).unwrap();
        assert_eq!(get_value(&mut d).unwrap(), m.body);
        d.done().unwrap();
    }

    #[test]
    fn names_keep_their_first_place() {
        let mut n = Names::new();
        n.insert([1; 16], Rc::from("first"));
        n.insert([2; 16], Rc::from("second"));
        n.insert([1; 16], Rc::from("renamed"));
        let order: Vec<&str> = n.iter().map(|(_, s)| &**s).collect();
        assert_eq!(order, ["renamed", "second"]);
        assert!(n.contains(&[2; 16]) && !n.contains(&[3; 16]) && n.len() == 2);
    }
}
