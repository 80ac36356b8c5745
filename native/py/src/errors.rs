//! The core's errors as Python exceptions: the core knows nothing of Python.
use pyo3::prelude::*;

use kafkawire_core::carry;

/// The core's carried-state errors as Python's ValueError (the core knows nothing of Python).
pub(crate) trait PyCarry<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> PyCarry<T> for carry::R<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| pyo3::exceptions::PyValueError::new_err(e.0))
    }
}
