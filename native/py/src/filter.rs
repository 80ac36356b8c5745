//! dissector.filters.Filter as the core's filter (kafkawire_core::filter).
use pyo3::prelude::*;

pub use kafkawire_core::filter::*;

/// The core's filter of a dissector.filters.Filter.
pub fn from_py(f: &Bound<'_, PyAny>) -> PyResult<Filter> {
    let strings = |name: &str| -> PyResult<Vec<String>> {
        f.getattr(name)?
            .try_iter()?
            .map(|x| x?.extract::<String>())
            .collect()
    };
    Ok(Filter::new(FilterSpec {
        apis: strings("apis")?,
        client_ids: strings("client_ids")?,
        topics: strings("topics")?,
        errors_only: f.getattr("errors_only")?.is_truthy()?,
        min_latency: f.getattr("min_latency")?.extract()?,
        connections: f
            .getattr("connections")?
            .try_iter()?
            .map(|x| x?.extract::<i64>())
            .collect::<PyResult<_>>()?,
        time_from: f.getattr("time_from")?.extract()?,
        time_to: f.getattr("time_to")?.extract()?,
    }))
}

// -- test entry points ------------------------------------------------------------------

#[pyfunction]
fn _fnmatchcase(name: &str, pat: &str) -> bool {
    Pattern::new(pat).matches(name)
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_fnmatchcase, m)?)?;
    Ok(())
}
