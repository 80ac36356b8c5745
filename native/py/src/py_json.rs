//! Python values as the JSON lines write them (orjson with output._Encoder's default), for the
//! rows of items Python holds (ItemRows: `land_local` over items from anywhere). The engine's own
//! items never come here: the core writes their JSON.
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};

use kafkawire_core::json::{json_bytes, json_f64, json_int, json_str};
use kafkawire_core::records::{json_summary_v2, Records};

#[derive(Default)]
pub struct PyJson {
    uuid: Option<Py<PyAny>>,
    records: Records,
}

impl PyJson {
    /// A Python value as orjson writes it with output._Encoder's default (bytes by
    /// output._bytes, memoryviews of a record API as records fields, UUIDs as text, anything
    /// else by str()).
    pub fn py_json(
        &mut self,
        py: Python<'_>,
        out: &mut Vec<u8>,
        v: &Bound<'_, PyAny>,
        record_api: bool,
    ) -> PyResult<()> {
        if v.is_none() {
            out.extend_from_slice(b"null");
        } else if let Ok(s) = v.cast::<PyString>() {
            json_str(out, s.to_str()?);
        } else if let Ok(b) = v.cast::<PyBool>() {
            out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
        } else if let Ok(i) = v.cast::<PyInt>() {
            match i.extract::<i64>() {
                Ok(n) => json_int(out, n),
                Err(_) => out
                    .extend_from_slice(itoa::Buffer::new().format(i.extract::<u64>()?).as_bytes()),
            }
        } else if let Ok(f) = v.cast::<PyFloat>() {
            json_f64(out, f.value());
        } else if let Ok(d) = v.cast::<PyDict>() {
            out.push(b'{');
            for (i, (k, x)) in d.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self.py_key(out, &k)?;
                out.push(b':');
                self.py_json(py, out, &x, record_api)?;
            }
            out.push(b'}');
        } else if let Ok(l) = v.cast::<PyList>() {
            out.push(b'[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self.py_json(py, out, &x, record_api)?;
            }
            out.push(b']');
        } else if let Ok(t) = v.cast::<PyTuple>() {
            out.push(b'[');
            for (i, x) in t.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self.py_json(py, out, &x, record_api)?;
            }
            out.push(b']');
        } else if let Ok(b) = v.cast::<PyBytes>() {
            json_bytes(out, b.as_bytes());
        } else if v.is_instance_of::<PyMemoryView>() || v.is_instance_of::<PyByteArray>() {
            let data: Vec<u8> = <PyBytes as pyo3::PyTypeInfo>::type_object(py)
                .call1((v,))?
                .cast::<PyBytes>()?
                .as_bytes()
                .to_vec();
            if record_api && v.is_exact_instance_of::<PyMemoryView>() {
                if !json_summary_v2(out, &data) {
                    self.records.summary_json(&data, true, out);
                }
            } else {
                json_bytes(out, &data);
            }
        } else if v.is_instance(self.uuid_class(py)?.bind(py))? {
            json_str(out, v.str()?.to_str()?);
        } else if let Ok(fields) = v.getattr("__dataclass_fields__") {
            out.push(b'{');
            for (i, k) in fields.try_iter()?.enumerate() {
                let k = k?;
                if i > 0 {
                    out.push(b',');
                }
                self.py_key(out, &k)?;
                out.push(b':');
                self.py_json(py, out, &v.getattr(k.cast::<PyString>()?)?, false)?;
            }
            out.push(b'}');
        } else {
            json_str(out, v.str()?.to_str()?);
        }
        Ok(())
    }

    /// A dict key as orjson writes it with OPT_NON_STR_KEYS.
    pub fn py_key(&self, out: &mut Vec<u8>, k: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(s) = k.cast::<PyString>() {
            json_str(out, s.to_str()?);
        } else if let Ok(b) = k.cast::<PyBool>() {
            json_str(out, if b.is_true() { "true" } else { "false" });
        } else if k.is_none() {
            json_str(out, "null");
        } else if let Ok(f) = k.cast::<PyFloat>() {
            let mut t = Vec::new();
            json_f64(&mut t, f.value());
            json_str(out, std::str::from_utf8(&t).unwrap());
        } else {
            json_str(out, k.str()?.to_str()?);
        }
        Ok(())
    }

    pub fn uuid_class(&mut self, py: Python<'_>) -> PyResult<&Py<PyAny>> {
        if self.uuid.is_none() {
            self.uuid = Some(py.import("uuid")?.getattr("UUID")?.unbind());
        }
        Ok(self.uuid.as_ref().unwrap())
    }
}
