//! Frames -> decoded values, exactly as protocol/compiler.py's generated decoders and
//! protocol/codec.py's fast path read them; the body walk of dissector/walk.py; and
//! values -> the Python objects the Python decoders give (dicts, lists, tuples, str,
//! int, UUID, memoryview into the frame).
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::schema::{Dir, Registry};

/// A decoded value (internal layout is decode.rs's own business).
pub struct Value {}

/// A message codec._fast() would return: header and body decoded whole.
pub struct Message {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub body: Value,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fail {
    /// The bytes ran out inside a field (Python's reason says "past the end" or
    /// "ends in the middle"): a frame cut short may still be this message.
    Short,
    /// Anything else that makes the decoder fail (bad UTF-8, bytes left over, ...).
    Other,
    /// codec._plan() is None (ApiVersions, a version the registry lacks): ask Python.
    NoPlan,
}

/// codec._fast(frame, key, version, "request") with key and version from the frame.
pub fn decode_request(_reg: &Registry, _frame: &[u8]) -> Result<Message, Fail> {
    todo!("decode.rs")
}

/// codec._fast(frame, api_key, api_version, "response").
pub fn decode_response(_reg: &Registry, _frame: &[u8], _api_key: i16, _api_version: i16) -> Result<Message, Fail> {
    todo!("decode.rs")
}

/// TopicId -> Name pairs learned from responses (Exchanges.topic_names), shared with
/// Python's walks for the bodies Python decodes.
#[pyclass(unsendable, module = "dissector._native")]
pub struct Names {}

impl Names {
    pub fn new() -> Self {
        todo!("decode.rs")
    }
}

/// dissector/walk.py's walker(api_key, version, dir)(body, errors, names, learn=dir == Response).
pub fn walk(_reg: &Registry, _api_key: i16, _version: i16, _dir: Dir, _body: &mut Value,
            _errors: Option<&mut Vec<i64>>, _names: &mut Names) {
    todo!("decode.rs")
}

/// body.get(name) when it is an int (Produce's "Acks", SaslHandshake's "ErrorCode").
pub fn field_int(_body: &Value, _name: &str) -> Option<i64> {
    todo!("decode.rs")
}

/// Caches kept across to_py calls (UUID objects, interned keys).
pub struct ToPy {}

impl ToPy {
    pub fn new() -> Self {
        todo!("decode.rs")
    }
}

/// The Python object the generated decoder gives for this value; bytes and records
/// fields are memoryview slices of `frame`.
pub fn to_py(_py: Python<'_>, _reg: &Registry, _value: &Value, _frame: &Bound<'_, PyBytes>, _ctx: &mut ToPy) -> PyResult<Py<PyAny>> {
    todo!("decode.rs")
}

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
