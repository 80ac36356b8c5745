//! kafkawire's native core (Python module `dissector._native`): its one engine.
//!
//! One module per layer. The pipeline's layers were ported from a Python pipeline that is now a
//! frozen test oracle (tests/oracle/); the differential tests (tests/test_native_*.py) hold each
//! layer to its counterpart there, and golden outputs (tests/golden/) hold the lines and tables:
//!
//!   capture.rs   tests/oracle/capture.py    files -> TCP packets
//!   tcp.rs       tests/oracle/tcp.py        packets -> per-direction byte-stream events
//!   tls.rs       (new, no oracle)           TLS connections' records -> their decrypted bytes
//!   frames.rs    tests/oracle/frames.py     a direction's bytes -> size-prefixed frames
//!   schema.rs    protocol/registry.py       the registry's schema data -> decode plans
//!   decode.rs    protocol/compiler.py       frames -> decoded values (+ tests/lenient_reference.py)
//!   nested.rs    tests/oracle/nested.py     payloads inside bytes fields (consumer protocol, Envelope)
//!   exchanges.rs tests/oracle/exchanges.py  frames -> paired exchanges and anomalies
//!   order.rs     tests/oracle/order.py      -> request-time order
//!   engine.rs    dissector/native.py        the loop, and items as Python objects
//!   render.rs    tests/oracle/output.py     text and JSON lines without Python objects
//!   json.rs      (orjson)                   JSON in orjson's layout, byte for byte
//!   filter.rs    dissector/filters.py       which items `dissect` keeps
//!   topics.rs    dissector/topics.py        where a body's topics, partitions and record data sit
//!   compression.rs protocol/compression.py  decompress() with its cap, on cramjam's crates
//!   records.rs   protocol/records.py        record-set scans, summaries, the records themselves
//!   rows.rs      tests/oracle/rows.py       the tables' rows as Arrow buffers (arrow.rs), of every item
//!   config.rs    dissector/native.py        EngineConfig: what the engine is given, built by keyword
//!   anomalies.rs dissector/anomalies.py     the anomaly kinds (checked equal when a config is built)
//!   ranges.rs    tests/ranges_reference.py  byte ranges of a capture, read alone; Spark stage 1's bucketed rows
//!
//! Every frame is decoded by the core, whichever path (the fast decoder, or the general path's
//! lenient decoding, ApiVersions' fallback layouts and error texts: kafkawire_core::lenient).
//! Secrets leave every exchange in the core as well (kafkawire_core::redact).
//!
//! The boundary runs one way: Python hands down data and callables (config.rs), and this crate
//! imports none of its consumers (landing, report, replay, kafkawire, private names); the facts
//! both sides define are checked when the configuration is built. dissector/_native.pyi types it.
use pyo3::prelude::*;

mod arrow;
mod capture;
mod compression;
mod config;
mod decode;
mod engine;
mod errors;
mod filter;
mod frames;
mod internal;
mod json;
mod nested;
mod py_json;
mod ranges;
mod records;
mod render;
mod rows;
mod schema;
mod tcp;
mod tls;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    capture::register(m)?;
    config::register(m)?;
    engine::register(m)?;
    internal::register(m)?;
    nested::register(m)?;
    ranges::register(m)?;
    rows::register(m)?;
    tls::register(m)?;
    // the differential tests' and benchmarks' entry points: an editable (development) install
    // builds with them (setup.py), a wheel without
    if cfg!(feature = "test-hooks") {
        capture::hooks(m)?;
        compression::hooks(m)?;
        config::hooks(m)?;
        decode::hooks(m)?;
        engine::hooks(m)?;
        filter::hooks(m)?;
        frames::hooks(m)?;
        json::hooks(m)?;
        records::hooks(m)?;
        render::hooks(m)?;
        tcp::hooks(m)?;
    }
    Ok(())
}
