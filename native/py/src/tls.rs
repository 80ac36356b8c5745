//! The TLS layer's entry point for key logs read in Python (dissector/tls.py).
pub use kafkawire_core::tls::*;

use pyo3::prelude::*;

/// keylog_lines(text) -> (lines taken, lines not understood): how much of a key log this layer reads
#[pyfunction]
fn keylog_lines(text: &[u8]) -> (usize, usize) {
    KeyLog::default().add(text)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(keylog_lines, m)?)?;
    Ok(())
}
