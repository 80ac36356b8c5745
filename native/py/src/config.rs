//! The engine's configuration: one object built by keyword on the Python side
//! (dissector/native.py's `config()`), holding everything this crate needs from Python. The crate
//! imports none of its consumers: the registry's data, the item classes, the tables' columns and
//! the callbacks all come down through here, and the facts both sides define (item fields, anomaly
//! kinds, table columns, API keys) are checked when the configuration is built, so a mismatch
//! fails there rather than in a run.
//!
//!   EngineConfig(ports=, connections=, limits=Limits(...), protocol=Protocol(...),
//!                items=Items(...), opener=, file_errors=, columns=, tls_keylogs=)
use std::collections::HashMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use kafkawire_core::anomalies;

use crate::tls::PyKeyLog;

/// The budgets and sizes of the layers: frames, TCP reassembly, the release order, decompression.
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct Limits {
    /// frames.DEFAULT_MAX_FRAME_SIZE or the command's --max-frame-size
    pub max_frame_size: i64,
    /// tcp.MAX_BUFFER_PER_DIRECTION, tcp.LOST_AFTER, tcp.MAX_BUFFER_TOTAL
    pub max_buffer_per_direction: u64,
    pub lost_after: u64,
    pub max_buffer_total: u64,
    /// the reordering window in seconds (order.WINDOW; 0 for a land run), order.MAX_ITEMS, order.MAX_BYTES
    pub window: f64,
    pub max_items: usize,
    pub max_bytes: u64,
    /// compression.DEFAULT_MAX_DECOMPRESSED: the cap on a record set's decompressed size (rows)
    pub max_decompressed: usize,
}

#[pymethods]
impl Limits {
    #[new]
    #[pyo3(signature = (*, max_frame_size, max_buffer_per_direction, lost_after, max_buffer_total,
                        window, max_items, max_bytes, max_decompressed))]
    // keyword-only: each argument is named at the call, so their number is no hazard
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_frame_size: i64,
        max_buffer_per_direction: u64,
        lost_after: u64,
        max_buffer_total: u64,
        window: f64,
        max_items: usize,
        max_bytes: u64,
        max_decompressed: usize,
    ) -> Self {
        Limits {
            max_frame_size,
            max_buffer_per_direction,
            lost_after,
            max_buffer_total,
            window,
            max_items,
            max_bytes,
            max_decompressed,
        }
    }
}

/// The protocol's facts Python holds, checked against the core's: the core decodes with its own
/// copy of the registry (kafkawire_core::spec), generated from the same specs as Python's.
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct Protocol {
    /// registry.API_NAMES: equal to the core's, or the two registries are not one generation
    pub api_names: HashMap<i16, String>,
    /// protocol.secrets.SECRET_APIS: the core's (kafkawire_core::redact) checked equal to them
    pub secret_apis: Vec<i16>,
    /// dissector.topics.RECORD_APIS: the APIs whose bodies carry record sets
    pub record_apis: Vec<i16>,
}

/// The API keys this crate names (RECORD_APIS is checked against dissector.topics').
/// The fields of the item classes in the order Convert::item passes them; the config's Items holds
/// the Python classes' fields (dataclasses.fields) to these, so a field added, removed, renamed or
/// moved on one side stops the engine from being built.
pub const EXCHANGE_FIELDS: [&str; 23] = [
    "ts",
    "response_ts",
    "latency_ms",
    "connection",
    "client",
    "broker",
    "api_key",
    "api_name",
    "api_version",
    "correlation_id",
    "client_id",
    "status",
    "error_codes",
    "request",
    "response",
    "request_size",
    "response_size",
    "request_raw",
    "response_raw",
    "response_version",
    "flags",
    "tls",
    "topics",
];
pub const ANOMALY_FIELDS: [&str; 4] = ["connection", "ts", "kind", "detail"];
pub const CONNECTION_FIELDS: [&str; 24] = [
    "connection",
    "client",
    "broker",
    "first_ts",
    "last_ts",
    "bytes_to_broker",
    "bytes_to_client",
    "frames_to_broker",
    "frames_to_client",
    "gaps",
    "gap_bytes",
    "retransmissions",
    "out_of_order",
    "resyncs",
    "client_ids",
    "detected_by",
    "exchanges",
    "frame_bytes_to_broker",
    "frame_bytes_to_client",
    "skipped_bytes_to_broker",
    "skipped_bytes_to_client",
    "gap_bytes_to_broker",
    "gap_bytes_to_client",
    "tls",
];

pub use kafkawire_core::api::{self, API_KEYS};

/// Err unless the core's list of APIs (of one kind) and Python's hold the same keys.
fn same_apis(what: &str, core: &[i16], python: &[i16]) -> PyResult<()> {
    let (mut mine, mut theirs) = (core.to_vec(), python.to_vec());
    mine.sort_unstable();
    theirs.sort_unstable();
    if mine != theirs {
        return Err(PyValueError::new_err(format!(
            "{what} APIs differ: the native core has {mine:?}, {what}_apis {theirs:?}"
        )));
    }
    Ok(())
}

#[pymethods]
impl Protocol {
    #[new]
    #[pyo3(signature = (*, api_names, secret_apis, record_apis))]
    fn new(
        api_names: HashMap<i16, String>,
        secret_apis: Vec<i16>,
        record_apis: Vec<i16>,
    ) -> PyResult<Self> {
        for (key, name) in API_KEYS {
            if api_names.get(&key).map(String::as_str) != Some(name) {
                return Err(PyValueError::new_err(format!(
                    "the native core takes API key {key} for {name}; the registry names it {:?}",
                    api_names.get(&key)
                )));
            }
        }
        if &api_names != kafkawire_core::spec::api_names() {
            return Err(PyValueError::new_err(
                "the registry's API names are not the native core's: regenerate \
                 native/core/data/registry.json (native/tools/gen_registry.py)",
            ));
        }
        same_apis("secret", &kafkawire_core::redact::SECRET_APIS, &secret_apis)?;
        same_apis("record", &api::RECORD_APIS, &record_apis)?;
        Ok(Protocol {
            api_names,
            secret_apis,
            record_apis,
        })
    }
}

/// The items the engine gives: their classes, each class's field names (checked against the order
/// this crate builds them in), and the anomaly table (checked against the core's).
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct Items {
    pub exchange: Py<PyAny>,
    pub anomaly: Py<PyAny>,
    pub connection: Py<PyAny>,
    /// dissector.anomalies.TABLE: (kind, severity, group, layer, summary) per kind
    pub anomaly_table: Vec<Vec<String>>,
    /// dissector.anomalies.FILE_FAULTS: anomalies that are always Python items too, so the caller
    /// sees them (a command's one-line error and exit status)
    pub file_faults: Vec<String>,
}

fn same_fields(class: &str, python: &[String], mine: &[&str]) -> PyResult<()> {
    if python.iter().map(String::as_str).eq(mine.iter().copied()) {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{class}'s fields differ between Python and the native core (native/py/src/engine.rs): \
         {python:?} vs {mine:?}"
    )))
}

#[pymethods]
impl Items {
    /// exchange_fields etc.: the classes' field names in their constructors' order
    /// (dataclasses.fields), which must be the order this crate passes them in.
    #[new]
    #[pyo3(signature = (*, exchange, exchange_fields, anomaly, anomaly_fields, connection, connection_fields,
                        anomaly_table, file_faults))]
    // keyword-only: each argument is named at the call, so their number is no hazard
    #[allow(clippy::too_many_arguments)]
    fn new(
        exchange: Py<PyAny>,
        exchange_fields: Vec<String>,
        anomaly: Py<PyAny>,
        anomaly_fields: Vec<String>,
        connection: Py<PyAny>,
        connection_fields: Vec<String>,
        anomaly_table: Vec<Vec<String>>,
        file_faults: Vec<String>,
    ) -> PyResult<Self> {
        same_fields("Exchange", &exchange_fields, &EXCHANGE_FIELDS)?;
        same_fields("Anomaly", &anomaly_fields, &ANOMALY_FIELDS)?;
        same_fields("Connection", &connection_fields, &CONNECTION_FIELDS)?;
        anomalies::check(&anomaly_table).map_err(PyValueError::new_err)?;
        if let Some(f) = file_faults
            .iter()
            .find(|f| !anomaly_table.iter().any(|r| r.first() == Some(f)))
        {
            return Err(PyValueError::new_err(format!(
                "file fault {f:?} is no anomaly kind"
            )));
        }
        Ok(Items {
            exchange,
            anomaly,
            connection,
            anomaly_table,
            file_faults,
        })
    }
}

/// Everything an Engine is made with but what it reads (files or packets) and its run's mode.
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct EngineConfig {
    /// the Kafka ports (others are recognised by their traffic)
    pub ports: Vec<u16>,
    /// whether connections' accounting items are given when they close
    pub connections: bool,
    pub limits: Py<Limits>,
    pub protocol: Py<Protocol>,
    pub items: Py<Items>,
    /// opener(path) -> a binary file object (gzip, bz2 and xz read as the capture reader reads them)
    pub opener: Py<PyAny>,
    /// the exceptions (besides OSError, EOFError and ValueError) reading a file raises for a
    /// damaged one: they become corrupt_file anomalies
    pub file_errors: Py<PyTuple>,
    /// table -> its column names (the landing tables' schemas), needed by an engine writing rows;
    /// checked against the columns this crate writes
    pub columns: Option<HashMap<String, Vec<String>>>,
    /// NSS key logs (--tls-keylog's files, read and parsed by dissector.tls; a text given here
    /// instead, as a Spark task has them, is parsed as the config is built): the secrets TLS
    /// connections are decrypted with (tls.rs)
    pub tls_keylogs: Vec<Py<PyKeyLog>>,
}

#[pymethods]
impl EngineConfig {
    #[new]
    #[pyo3(signature = (*, ports, connections, limits, protocol, items, opener, file_errors, columns=None,
                        tls_keylogs=Vec::new()))]
    // keyword-only: each argument is named at the call, so their number is no hazard
    #[allow(clippy::too_many_arguments)]
    fn new(
        ports: Vec<u16>,
        connections: bool,
        limits: Py<Limits>,
        protocol: Py<Protocol>,
        items: Py<Items>,
        opener: Py<PyAny>,
        file_errors: Py<PyTuple>,
        columns: Option<HashMap<String, Vec<String>>>,
        tls_keylogs: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // a KeyLog is taken as it is; a text (bytes) is parsed here, once
        let tls_keylogs = tls_keylogs
            .into_iter()
            .map(|k| match k.cast_into::<PyKeyLog>() {
                Ok(parsed) => Ok(parsed.unbind()),
                Err(e) => {
                    let text = e.into_inner().cast_into::<PyBytes>().map_err(|_| {
                        PyTypeError::new_err("tls_keylogs takes KeyLog objects or bytes")
                    })?;
                    Py::new(text.py(), PyKeyLog::parse(&text))
                }
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(EngineConfig {
            ports,
            connections,
            limits,
            protocol,
            items,
            opener,
            file_errors,
            columns,
            tls_keylogs,
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Limits>()?;
    m.add_class::<Protocol>()?;
    m.add_class::<Items>()?;
    m.add_class::<EngineConfig>()?;
    Ok(())
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let rows = anomalies::table()
        .into_iter()
        .map(|r| PyTuple::new(m.py(), r))
        .collect::<PyResult<Vec<_>>>()?;
    m.add("ANOMALY_TABLE", PyTuple::new(m.py(), rows)?)?;
    Ok(())
}
