//! The line renderer's test entry points (kafkawire_core::render).
use pyo3::prelude::*;

pub use kafkawire_core::render::*;

#[pyfunction]
fn _clock(ts: Option<f64>) -> String {
    let mut out = String::new();
    clock(&mut out, ts, &mut (0, String::new()));
    out
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_clock, m)?)?;
    Ok(())
}
