//! The codecs' test entry points (the core's compression layer, called from the differential tests).
pub use kafkawire_core::compression::*;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

// -- test entry points ------------------------------------------------------------------

/// _native.decompress(codec, data, max_size, legacy_lz4) -> ("ok", bytes) |
/// ("error", str(CompressionError)) | ("too_large", None), for the differential tests.
#[pyfunction]
#[pyo3(signature = (codec, data, max_size=DEFAULT_MAX_DECOMPRESSED, legacy_lz4=false))]
fn decompress<'py>(
    py: Python<'py>,
    codec: i64,
    data: &[u8],
    max_size: usize,
    legacy_lz4: bool,
) -> (&'static str, Option<Bound<'py, PyAny>>) {
    result(
        py,
        &mut Decompressor::new(),
        codec,
        data,
        max_size,
        legacy_lz4,
    )
}

fn result<'py>(
    py: Python<'py>,
    d: &mut Decompressor,
    codec: i64,
    data: &[u8],
    max_size: usize,
    legacy_lz4: bool,
) -> (&'static str, Option<Bound<'py, PyAny>>) {
    match d.decompress(codec, data, max_size, legacy_lz4) {
        Ok(out) => ("ok", Some(PyBytes::new(py, out).into_any())),
        Err(Error::Compression(reason)) => {
            let msg = format!("{}: {}", codec_label(codec), reason);
            (
                "error",
                Some(pyo3::types::PyString::new(py, &msg).into_any()),
            )
        }
        Err(Error::TooLarge) => ("too_large", None),
    }
}

/// _native.decompress_many([(codec, data, max_size, legacy_lz4), ...]): decompress's results
/// for each, all through one Decompressor (its buffers and zstd context reused, as a land
/// reuses them).
#[pyfunction]
fn decompress_many<'py>(
    py: Python<'py>,
    items: Vec<(i64, Vec<u8>, usize, bool)>,
) -> Vec<(&'static str, Option<Bound<'py, PyAny>>)> {
    let mut d = Decompressor::new();
    items
        .iter()
        .map(|(codec, data, cap, legacy)| result(py, &mut d, *codec, data, *cap, *legacy))
        .collect()
}

#[pyfunction]
fn _xxh32(data: &[u8]) -> u32 {
    xxh32(data, 0)
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decompress, m)?)?;
    m.add_function(wrap_pyfunction!(decompress_many, m)?)?;
    m.add_function(wrap_pyfunction!(_xxh32, m)?)?;
    Ok(())
}
