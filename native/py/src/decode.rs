//! The decoder's Python side: decoded values as the Python objects the Python decoders give
//! (dicts, lists, tuples, str, int, UUID, memoryview into the frame), the topic names as a dict
//! Python's walks share, and the decoder's test entry points.
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyList, PyMemoryView, PySlice, PyString, PyTuple,
};

pub use kafkawire_core::decode::*;

use kafkawire_core::schema::{direction, key_name, Dir, Fixed, Registry};

static UUID_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// uuid.UUID (the standard library's, which the Python decoders give)
fn uuid_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(UUID_TYPE
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("uuid")?.getattr("UUID")?.unbind())
        })?
        .bind(py))
}

/// The 16 bytes of a uuid.UUID (None for anything else: no such key in a dict of UUIDs).
pub(crate) fn uuid_bytes(key: &Bound<'_, PyAny>) -> PyResult<Option<[u8; 16]>> {
    let py = key.py();
    if !key.is_instance(uuid_type(py)?)? {
        return Ok(None);
    }
    let n: u128 = key.getattr(pyo3::intern!(py, "int"))?.extract()?;
    Ok(Some(n.to_be_bytes()))
}

/// uuid.UUID(bytes=raw): equal to the UUID the Python decoders give (callers cache them).
fn make_uuid<'py>(py: Python<'py>, raw: &[u8; 16]) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item(pyo3::intern!(py, "bytes"), PyBytes::new(py, raw))?;
    uuid_type(py)?.call((), Some(&kwargs))
}

/// The core's topic names as Python sees them, shared with Python's walks for the bodies Python
/// decodes: a dict of UUID -> str (`names[tid] = name`, `names.get(tid)`, `in`, `len`).
#[pyclass(name = "Names", unsendable, module = "dissector._native")]
#[derive(Default)]
pub struct PyNames(pub SharedNames);

impl PyNames {
    fn get(&self, id: &[u8; 16]) -> Option<Rc<str>> {
        self.0.borrow().get(id).cloned()
    }
}

#[pymethods]
impl PyNames {
    #[new]
    fn py_new() -> Self {
        PyNames::default()
    }

    fn __setitem__(&mut self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let id =
            uuid_bytes(key)?.ok_or_else(|| PyTypeError::new_err("Names keys are uuid.UUID"))?;
        let name: &str = value
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("Names values are str"))?
            .to_str()?;
        self.0.borrow_mut().insert(id, Rc::from(name));
        Ok(())
    }

    fn __getitem__<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
        match uuid_bytes(key)?.and_then(|id| self.get(&id)) {
            Some(name) => Ok(PyString::new(key.py(), &name)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    #[pyo3(name = "get", signature = (key, default = None))]
    fn py_get<'py>(
        &self,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        Ok(match uuid_bytes(key)?.and_then(|id| self.get(&id)) {
            Some(name) => PyString::new(py, &name).into_any(),
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        })
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(uuid_bytes(key)?.is_some_and(|id| self.0.borrow().contains(&id)))
    }

    fn __len__(&self) -> usize {
        self.0.borrow().len()
    }

    /// [(UUID, name)] in insertion order, as dict.items() would list them.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for (id, name) in self.0.borrow().iter() {
            list.append((make_uuid(py, id)?, PyString::new(py, name)))?;
        }
        Ok(list)
    }

    /// A plain dict copy.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (id, name) in self.0.borrow().iter() {
            d.set_item(make_uuid(py, id)?, PyString::new(py, name))?;
        }
        Ok(d)
    }
}

// -- to Python --------------------------------------------------------------------

const UUID_CACHE_MAX: usize = 1 << 16;

/// Caches kept across to_py calls (UUID objects, interned keys).
#[derive(Default)]
pub struct ToPy {
    keys: Vec<Option<Py<PyString>>>,
    uuids: HashMap<[u8; 16], Py<PyAny>>,
}

impl ToPy {
    pub fn new() -> Self {
        ToPy::default()
    }

    fn key<'py>(&mut self, py: Python<'py>, id: u32) -> Bound<'py, PyString> {
        let i = id as usize;
        if i >= self.keys.len() {
            self.keys.resize_with(i + 1, || None);
        }
        self.keys[i]
            .get_or_insert_with(|| PyString::intern(py, key_name(id)).unbind())
            .bind(py)
            .clone()
    }

    fn uuid<'py>(&mut self, py: Python<'py>, raw: &[u8; 16]) -> PyResult<Bound<'py, PyAny>> {
        if let Some(u) = self.uuids.get(raw) {
            return Ok(u.bind(py).clone());
        }
        if self.uuids.len() >= UUID_CACHE_MAX {
            self.uuids.clear();
        }
        let u = make_uuid(py, raw)?;
        self.uuids.insert(*raw, u.clone().unbind());
        Ok(u)
    }
}

struct Conv<'py, 'a> {
    py: Python<'py>,
    frame: &'a Bound<'py, PyBytes>,
    data: &'a [u8],
    mv: Option<Bound<'py, PyMemoryView>>,
    ctx: &'a mut ToPy,
}

fn foreign() -> PyErr {
    PyValueError::new_err("the value was not decoded from this frame")
}

impl<'py, 'a> Conv<'py, 'a> {
    fn bytes(&self, start: usize, end: usize) -> PyResult<&'a [u8]> {
        let data: &'a [u8] = self.data;
        data.get(start..end).ok_or_else(foreign)
    }

    fn conv(&mut self, v: &Value) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        Ok(match v {
            Value::None => py.None().into_bound(py),
            Value::Int(x) => x.into_pyobject(py)?.into_any(),
            Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
            Value::Float(x) => PyFloat::new(py, *x).into_any(),
            Value::Uuid(raw) => self.ctx.uuid(py, raw)?,
            Value::Str(s) => PyString::new(py, s).into_any(),
            Value::Text { start, end } => {
                let text = std::str::from_utf8(self.bytes(*start, *end)?).map_err(|_| foreign())?;
                PyString::new(py, text).into_any()
            }
            Value::Bytes(b) => PyBytes::new(py, b).into_any(),
            Value::View { start, end } => {
                self.bytes(*start, *end)?;
                if self.mv.is_none() {
                    self.mv = Some(PyMemoryView::from(self.frame.as_any())?);
                }
                let mv = self.mv.as_ref().ok_or_else(foreign)?;
                mv.get_item(PySlice::new(py, *start as isize, *end as isize, 1))?
            }
            Value::Numbers { ty, start, count } => {
                let size = ty.size();
                let raw = self.bytes(*start, start.saturating_add(count.saturating_mul(size)))?;
                numbers(py, *ty, raw)?.into_any()
            }
            Value::Uuids { start, count } => {
                let raw = self.bytes(*start, start.saturating_add(count.saturating_mul(16)))?;
                let list = PyList::empty(py);
                for chunk in raw.chunks_exact(16) {
                    list.append(self.ctx.uuid(py, chunk.try_into().unwrap_or(&[0; 16]))?)?;
                }
                list.into_any()
            }
            Value::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.conv(item)?);
                }
                PyList::new(py, out)?.into_any()
            }
            Value::Struct(d) => {
                let dict = PyDict::new(py);
                for (k, item) in d {
                    let key = self.ctx.key(py, *k);
                    dict.set_item(key, self.conv(item)?)?;
                }
                dict.into_any()
            }
            Value::Tagged(items) => {
                let dict = PyDict::new(py);
                for (tag, start, end) in items {
                    dict.set_item(*tag, PyBytes::new(py, self.bytes(*start, *end)?))?;
                }
                dict.into_any()
            }
        })
    }
}

/// struct.unpack_from(">%d<code>"): a tuple.
fn numbers<'py>(py: Python<'py>, ty: Fixed, raw: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    let size = ty.size();
    let mut out: Vec<Bound<'py, PyAny>> = Vec::with_capacity(raw.len() / size);
    for b in raw.chunks_exact(size) {
        out.push(match read_fixed(ty, b) {
            Value::Int(x) => x.into_pyobject(py)?.into_any(),
            Value::Float(x) => PyFloat::new(py, x).into_any(),
            Value::Bool(x) => PyBool::new(py, x).to_owned().into_any(),
            _ => return Err(PyValueError::new_err("uuid arrays are lists")),
        });
    }
    PyTuple::new(py, out)
}

/// The Python object the generated decoder gives for this value; bytes and records
/// fields are memoryview slices of `frame`.
pub fn to_py(
    py: Python<'_>,
    value: &Value,
    frame: &Bound<'_, PyBytes>,
    ctx: &mut ToPy,
) -> PyResult<Py<PyAny>> {
    let data = frame.as_bytes();
    let mut c = Conv {
        py,
        frame,
        data,
        mv: None,
        ctx,
    };
    Ok(c.conv(value)?.unbind())
}

// -- test entry points ----------------------------------------------------------------

/// The decoder alone, for tests and timings: `_native.Registry(MESSAGES, HEADERS, DATA)`.
#[pyclass(name = "Registry", unsendable, module = "dissector._native")]
pub struct PyRegistry {
    reg: Registry,
    topy: ToPy,
}

impl PyRegistry {
    fn message<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        m: &Message,
    ) -> PyResult<Bound<'py, PyAny>> {
        let body = to_py(py, &m.body, frame, &mut self.topy)?;
        Ok((
            body,
            m.api_key,
            m.api_version,
            m.correlation_id,
            m.client_id.clone(),
        )
            .into_pyobject(py)?
            .into_any())
    }

    fn decode_dir(
        &self,
        frame: &[u8],
        dir: Dir,
        api_key: i16,
        api_version: i16,
    ) -> Result<Message, Fail> {
        match dir {
            Dir::Request => decode_request(&self.reg, frame),
            Dir::Response => decode_response(&self.reg, frame, api_key, api_version),
        }
    }

    /// generic: the walk of a version the registry lacks (exchanges.py's _walk), whatever the frame's.
    // the walk's inputs, passed on unchanged from walk_request and walk_response
    #[allow(clippy::too_many_arguments)]
    fn walked<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        dir: Dir,
        api_key: i16,
        api_version: i16,
        names: &mut Names,
        generic: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.decode_dir(frame.as_bytes(), dir, api_key, api_version) {
            Err(f) => Ok(PyString::new(py, f.name()).into_any()),
            Ok(mut m) => {
                // exchanges.py hands requests' walks no error list
                let mut errors = Vec::new();
                let list = if dir == Dir::Response {
                    Some(&mut errors)
                } else {
                    None
                };
                if generic {
                    generic_walk(&mut m.body, list, names, dir == Dir::Response);
                } else {
                    walk(
                        &self.reg,
                        m.api_key,
                        m.api_version,
                        dir,
                        &mut m.body,
                        list,
                        names,
                    );
                }
                let msg = self.message(py, frame, &m)?;
                Ok((msg, errors).into_pyobject(py)?.into_any())
            }
        }
    }
}

fn parse_dir(dir: &str) -> PyResult<Dir> {
    direction(dir).ok_or_else(|| PyValueError::new_err("direction is 'request' or 'response'"))
}

#[pymethods]
impl PyRegistry {
    #[new]
    #[pyo3(signature = (*, nested=true))]
    fn py_new(nested: bool) -> PyResult<Self> {
        let reg = kafkawire_core::spec::registry();
        Ok(PyRegistry {
            reg: if nested { reg } else { reg.without_data() },
            topy: ToPy::new(),
        })
    }

    /// The general path (core lenient.rs): a request (api_key None) or a response decoded as
    /// protocol.decode_request/decode_response(frame, lenient=...) would: (body, api_key,
    /// api_version, correlation_id, client_id, body_version, trailing, version_mismatch), or
    /// ("error", text, short) when it does not decode.
    #[pyo3(signature = (frame, api_key=None, api_version=0, lenient=true))]
    fn general<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        api_key: Option<i16>,
        api_version: i16,
        lenient: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        use kafkawire_core::lenient;
        let b = frame.as_bytes();
        let r = match api_key {
            None => lenient::request(&self.reg, b, lenient),
            Some(k) => lenient::response(&self.reg, b, k, api_version, lenient),
        };
        match r {
            Ok(d) => {
                let body = to_py(py, &d.body, frame, &mut self.topy)?;
                Ok((
                    body,
                    d.api_key,
                    d.api_version,
                    d.correlation_id,
                    d.client_id,
                    d.body_version,
                    d.trailing,
                    d.version_mismatch,
                )
                    .into_pyobject(py)?
                    .into_any())
            }
            Err(e) => {
                let short = e.is_short();
                Ok(("error", e.text, short).into_pyobject(py)?.into_any())
            }
        }
    }

    /// (body, api_key, api_version, correlation_id, client_id), or the Fail: "short", "other", "noplan".
    fn decode_request<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match decode_request(&self.reg, frame.as_bytes()) {
            Ok(m) => self.message(py, frame, &m),
            Err(f) => Ok(PyString::new(py, f.name()).into_any()),
        }
    }

    fn decode_response<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        api_key: i16,
        api_version: i16,
    ) -> PyResult<Bound<'py, PyAny>> {
        match decode_response(&self.reg, frame.as_bytes(), api_key, api_version) {
            Ok(m) => self.message(py, frame, &m),
            Err(f) => Ok(PyString::new(py, f.name()).into_any()),
        }
    }

    /// ((body, ...), errors) after the walk, names learned into `names`; or the Fail.
    #[pyo3(signature = (frame, names, generic = false))]
    fn walk_request<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        names: PyRef<'py, PyNames>,
        generic: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.walked(
            py,
            frame,
            Dir::Request,
            0,
            0,
            &mut names.0.borrow_mut(),
            generic,
        )
    }

    #[pyo3(signature = (frame, api_key, api_version, names, generic = false))]
    fn walk_response<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        api_key: i16,
        api_version: i16,
        names: PyRef<'py, PyNames>,
        generic: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.walked(
            py,
            frame,
            Dir::Response,
            api_key,
            api_version,
            &mut names.0.borrow_mut(),
            generic,
        )
    }

    fn request_header_version(&self, api_key: i16, api_version: i16) -> i16 {
        self.reg.request_header_version(api_key, api_version)
    }

    fn response_header_version(&self, api_key: i16, api_version: i16) -> i16 {
        self.reg.response_header_version(api_key, api_version)
    }

    fn field_int(
        &self,
        frame: &Bound<'_, PyBytes>,
        dir: &str,
        api_key: i16,
        api_version: i16,
        name: &str,
    ) -> PyResult<Option<i64>> {
        Ok(self
            .decode_dir(frame.as_bytes(), parse_dir(dir)?, api_key, api_version)
            .ok()
            .and_then(|m| field_int(&m.body, name)))
    }

    /// Seconds per decode (and to_py when `objects`) of one frame, over n runs.
    // a benchmark entry point taking a decode's own arguments
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (frame, dir, api_key, api_version, n, objects = true))]
    fn time<'py>(
        &mut self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
        dir: &str,
        api_key: i16,
        api_version: i16,
        n: u32,
        objects: bool,
    ) -> PyResult<f64> {
        let dir = parse_dir(dir)?;
        let t0 = Instant::now();
        for _ in 0..n {
            let m = self.decode_dir(frame.as_bytes(), dir, api_key, api_version);
            if let (Ok(m), true) = (m, objects) {
                to_py(py, &m.body, frame, &mut self.topy)?;
            }
        }
        Ok(t0.elapsed().as_secs_f64() / n.max(1) as f64)
    }
}

// carried between land runs (carry.rs): a pending request's decoded body, and the names learned

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNames>()?;
    m.add_class::<PyRegistry>()?;
    Ok(())
}
