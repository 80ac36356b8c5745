//! kafkawire's Python bindings (module `dissector._native`) over the core crate, kafkawire_core,
//! which holds every layer from capture files to lines. This crate converts at the edge:
//!
//!   capture.rs   Python's file objects (capture._open) behind the core's `Files`; Spark's rows
//!   engine.rs    Engine: the core's Pipeline, its items as Python objects, a lander's rows
//!   config.rs    EngineConfig: what the engine is given, built by keyword, checked against the core
//!   decode.rs    decoded values as Python objects; the topic names table as a dict
//!   rows.rs      the core's rows as a lander hands them over: taken columns, counts, names
//!   arrow.rs     ArrowColumn: a column's export through the Arrow C data interface
//!   ranges.rs    the core's byte ranges read through Python's opener; Spark stage 1's chunks
//!   tls.rs       KeyLog: a key log parsed once, handed to engines
//!   internal.rs, nested.rs   `kafkawire apis`' listings and the records table's internal rows
//!   errors.rs    the core's carried-state errors as ValueError
//!   tcp.rs, frames.rs, records.rs, compression.rs, json.rs, render.rs, filter.rs
//!                the differential tests' entry points (hooks(): the `test-hooks` feature)
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
mod ranges;
mod records;
mod render;
mod rows;
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
