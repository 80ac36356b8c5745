//! The internal topics' decoder's entry points (`kafkawire apis --internal`, the differential tests).
use pyo3::prelude::*;

pub use kafkawire_core::internal::*;

/// protocol.registry.internal() as `kafkawire apis --internal` lists it: (topic, record type id, key
/// type or None, value type).
#[pyfunction]
fn internal_schemas() -> Vec<(String, i64, Option<String>, String)> {
    decoder().listing()
}

/// One record of `topic` decoded: (key JSON, value JSON, whether its value holds a secret and
/// stays out of the tables); None where there is nothing to say.
#[pyfunction]
#[pyo3(signature = (topic, key, value, control=false))]
fn internal_row(
    topic: Option<&str>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    control: bool,
) -> (Option<String>, Option<String>, bool) {
    let d = decoder().decode(topic, control, key, value);
    let secret = d.secret();
    let s = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
    (s(d.key), s(d.value), secret)
}

/// The (TopicId bytes, Name) pairs of the TopicRecords in a `__cluster_metadata` records field:
/// what `learn` teaches the names table, for the frames Python decodes (dissector.lenient).
#[pyfunction]
fn metadata_topic_names(field: &[u8]) -> Vec<(Vec<u8>, String)> {
    let mut out = Vec::new();
    decoder().topic_records(field, |id, name| out.push((id.to_vec(), name.to_string())));
    out
}

/// TOPICS: the topics whose records are decoded.
#[pyfunction]
fn internal_topics() -> Vec<&'static str> {
    TOPICS.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(internal_topics, m)?)?;
    m.add_function(wrap_pyfunction!(metadata_topic_names, m)?)?;
    m.add_function(wrap_pyfunction!(internal_schemas, m)?)?;
    m.add_function(wrap_pyfunction!(internal_row, m)?)?;
    Ok(())
}
