//! The TLS layer's entry point for key logs read in Python (dissector/tls.py).
pub use kafkawire_core::tls::*;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// KeyLog(text): an NSS key log's text parsed by the core (tls.rs), the one parse it gets in this
/// process: dissector.tls checks a file by what it took, and an engine made with it takes the
/// parsed secrets as they are. It travels (pickle) as its text, parsed again where it lands.
/// Nothing it shows (repr, errors) holds the text.
#[pyclass(frozen, name = "KeyLog", module = "dissector._native")]
pub struct PyKeyLog {
    pub log: KeyLog,
    text: Py<PyBytes>,
    /// lines taken (labels this layer does not use count as taken)
    #[pyo3(get)]
    taken: usize,
    /// lines not understood (blank and comment lines are neither)
    #[pyo3(get)]
    not_understood: usize,
}

impl PyKeyLog {
    pub fn parse(text: &Bound<'_, PyBytes>) -> Self {
        let mut log = KeyLog::default();
        let bytes = text.as_bytes();
        let (taken, not_understood) = text.py().detach(|| log.add(bytes));
        PyKeyLog {
            log,
            text: text.clone().unbind(),
            taken,
            not_understood,
        }
    }
}

#[pymethods]
impl PyKeyLog {
    #[new]
    fn new(text: &Bound<'_, PyBytes>) -> Self {
        PyKeyLog::parse(text)
    }

    /// the text it was parsed from
    fn __bytes__(&self, py: Python<'_>) -> Py<PyBytes> {
        self.text.clone_ref(py)
    }

    /// (bytes, (text,)): unpickled, it is its text, which needs no kafkawire to unpickle (a
    /// Spark task's arguments are unpickled before the task finds its kafkawire)
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let args = PyTuple::new(py, [self.text.clone_ref(py)])?;
        PyTuple::new(py, [py.get_type::<PyBytes>().into_any(), args.into_any()])
    }

    fn __repr__(&self) -> String {
        format!(
            "<KeyLog: {} lines taken, {} not understood>",
            self.taken, self.not_understood
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKeyLog>()?;
    Ok(())
}
