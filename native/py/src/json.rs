//! The JSON writer's test entry points.
pub use kafkawire_core::json::*;

use pyo3::prelude::*;

// -- test entry points ------------------------------------------------------------------

#[pyfunction]
fn _json_f64(v: f64) -> Vec<u8> {
    let mut out = Vec::new();
    json_f64(&mut out, v);
    out
}

#[pyfunction]
fn _json_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    json_bytes(&mut out, b);
    out
}

/// The code points str.isprintable() is false for, as the table has them, and its Unicode version.
#[pyfunction]
fn _not_printable() -> (&'static str, Vec<(u32, u32)>) {
    (
        kafkawire_core::printable::UNICODE_VERSION,
        kafkawire_core::printable::NOT_PRINTABLE.to_vec(),
    )
}

#[pyfunction]
fn _json_str(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    json_str(&mut out, s);
    out
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_json_f64, m)?)?;
    m.add_function(wrap_pyfunction!(_json_str, m)?)?;
    m.add_function(wrap_pyfunction!(_json_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_not_printable, m)?)?;
    Ok(())
}
