//! kafkawire's native core (Python module `dissector._native`).
//!
//! The same pipeline as the Python dissector, one module per layer and each a
//! port of its Python twin, so that the two give the same items for the same
//! capture (tests/test_native_*.py compare them):
//!
//!   capture.rs   dissector/capture.py    files -> TCP packets
//!   tcp.rs       dissector/tcp.py        packets -> per-direction byte-stream events
//!   frames.rs    dissector/frames.py     a direction's bytes -> size-prefixed frames
//!   schema.rs    protocol/registry.py    the registry's schema data -> decode plans
//!   decode.rs    protocol/compiler.py    frames -> decoded values (+ dissector/walk.py)
//!   exchanges.rs dissector/exchanges.py  frames -> paired exchanges and anomalies
//!   order.rs     dissector/order.py      -> request-time order
//!   engine.rs    dissector/__init__.py   dissect(): the loop, and items as Python objects
//!   render.rs    dissector/output.py     text and JSON lines without Python objects
//!   json.rs      (orjson)                JSON in orjson's layout, byte for byte
//!   lines.rs     dissector/output.py     the lines of the items Python holds (redacted, Python-decoded)
//!   filter.rs    dissector/filters.py    which items `dissect` keeps
//!   topics.rs    dissector/topics.py     where a body's topics, partitions and record data sit
//!   compression.rs protocol/compression.py decompress() with its cap, on cramjam's crates
//!   records.rs   protocol/records.py     record-set scans, summaries, the records themselves
//!   rows.rs      tests/oracle/rows.py    the tables' rows as Arrow buffers (arrow.rs), of every item
//!   config.rs    dissector/native.py     EngineConfig: what the engine is given, built by keyword
//!   anomalies.rs dissector/anomalies.py  the anomaly kinds (checked equal when a config is built)
//!   ranges.rs    dissector/ranges.py     byte ranges of a capture, read alone; Spark stage 1's bucketed rows
//!
//! The Python modules stay the reference: anything rare (a frame only the
//! lenient decoder reads, ApiVersions' fallback layouts, an error message) is
//! asked of them through callbacks rather than written twice.
//!
//! The boundary runs one way: Python hands down data and callables (config.rs), and this crate
//! imports none of its consumers (landing, replay, dissector.output, private names); the facts
//! both sides define are checked when the configuration is built. dissector/_native.pyi types it.
use pyo3::prelude::*;

mod anomalies;
mod arrow;
mod capture;
mod compression;
mod config;
mod decode;
mod engine;
mod exchanges;
mod filter;
mod frames;
mod json;
mod lines;
mod order;
mod printable;
mod ranges;
mod records;
mod render;
mod rows;
mod schema;
mod tcp;
mod topics;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    config::register(m)?;
    capture::register(m)?;
    tcp::register(m)?;
    frames::register(m)?;
    decode::register(m)?;
    engine::register(m)?;
    render::register(m)?;
    json::register(m)?;
    lines::register(m)?;
    filter::register(m)?;
    compression::register(m)?;
    records::register(m)?;
    rows::register(m)?;
    ranges::register(m)?;
    Ok(())
}
