//! The nested payloads' listing for `kafkawire apis --nested`.
pub use kafkawire_core::nested::*;

use pyo3::prelude::*;

/// PAYLOADS, for Python.
#[pyfunction]
fn nested_payloads() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    PAYLOADS.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nested_payloads, m)?)?;
    Ok(())
}
