//! The frame splitter driven from Python, for the differential tests.
pub use kafkawire_core::frames::*;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

// -- test entry point --------------------------------------------------------

/// `_native.FrameSplitter`: the splitter driven from Python with Python plausible
/// functions, for tests/test_native_frames.py (not used by the pipeline).
#[pyclass(name = "FrameSplitter", module = "dissector._native")]
struct PyFrameSplitter {
    inner: FrameSplitter,
    plausible: Option<Py<PyAny>>,
    plausible_first: Option<Py<PyAny>>,
}

fn verdict(r: &Bound<'_, PyAny>) -> PyResult<Option<Verdict>> {
    if r.is_none() {
        return Ok(None);
    }
    // frames.py compares with `ok == VERIFIED` and otherwise tests truthiness
    Ok(Some(if r.eq(2)? {
        Verdict::Verified
    } else if r.is_truthy()? {
        Verdict::Yes
    } else {
        Verdict::No
    }))
}

impl PyFrameSplitter {
    fn outputs<'py>(py: Python<'py>, out: Vec<FrameOut>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for o in out {
            match o {
                FrameOut::Frame { ts, offset, data } => {
                    list.append(("frame", ts, offset, PyBytes::new(py, &data)))?;
                }
                FrameOut::Anomaly {
                    ts,
                    kind,
                    detail,
                    head,
                } => {
                    list.append(("anomaly", ts, kind, detail, PyBytes::new(py, &head)))?;
                }
            }
        }
        Ok(list)
    }
}

#[pymethods]
impl PyFrameSplitter {
    #[new]
    #[pyo3(signature = (plausible=None, *, max_frame_size=DEFAULT_MAX_FRAME_SIZE, min_frame_size=0,
                        hunting=false, plausible_first=None))]
    fn py_new(
        plausible: Option<Py<PyAny>>,
        max_frame_size: i64,
        min_frame_size: i64,
        hunting: bool,
        plausible_first: Option<Py<PyAny>>,
    ) -> Self {
        PyFrameSplitter {
            inner: FrameSplitter::new(
                max_frame_size,
                min_frame_size,
                hunting,
                plausible_first.is_some(),
            ),
            plausible,
            plausible_first,
        }
    }

    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8], ts: f64) -> PyResult<Bound<'py, PyList>> {
        let data = Bytes::copy_from_slice(data);
        let plausible = self.plausible.as_ref().map(|p| p.bind(py));
        let plausible_first = self.plausible_first.as_ref().map(|p| p.bind(py));
        let mut err: Option<PyErr> = None;
        // one bytes object per buffer judged (a hunt asks about many offsets of the same buffer)
        let mut last: Option<(usize, usize, Bound<'py, PyBytes>)> = None;
        let mut cb = |buf: &[u8], pos: usize, end: usize, first: bool| -> Option<Verdict> {
            if err.is_some() {
                return None;
            }
            let f = if first { plausible_first } else { plausible };
            let Some(f) = f else {
                return Some(Verdict::Yes);
            }; // frames.py's _always
            let b = match &last {
                Some((p, n, b)) if *p == buf.as_ptr() as usize && *n == buf.len() => b.clone(),
                _ => {
                    let b = PyBytes::new(py, buf);
                    last = Some((buf.as_ptr() as usize, buf.len(), b.clone()));
                    b
                }
            };
            match f.call1((b, pos, end)).and_then(|r| verdict(&r)) {
                Ok(v) => v,
                Err(e) => {
                    err = Some(e);
                    None
                }
            }
        };
        let mut out = Vec::new();
        self.inner.feed(&data, ts, &mut cb, &mut out);
        if let Some(e) = err {
            return Err(e);
        }
        Self::outputs(py, out)
    }

    fn gap<'py>(&mut self, py: Python<'py>, size: i64, ts: f64) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        self.inner.gap(size, ts, &mut out);
        Self::outputs(py, out)
    }

    #[pyo3(name = "drop")]
    fn drop_partial<'py>(
        &mut self,
        py: Python<'py>,
        ts: f64,
        why: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        self.inner.drop_partial(ts, why, &mut out);
        Self::outputs(py, out)
    }

    fn finish<'py>(&mut self, py: Python<'py>, ts: f64) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        self.inner.finish(ts, &mut out);
        Self::outputs(py, out)
    }

    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped
    }

    #[getter]
    fn buffered(&self) -> u64 {
        self.inner.buffered()
    }

    #[getter]
    fn hunting(&self) -> bool {
        self.inner.hunting()
    }

    #[getter]
    fn partial_ts(&self) -> Option<f64> {
        self.inner.partial_ts()
    }
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFrameSplitter>()?;
    Ok(())
}
