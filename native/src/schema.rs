//! The registry's schema data (protocol/_generated/registry_data.py, handed over by
//! Python at start) -> one decode plan per (api key, version, direction).
use pyo3::prelude::*;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Dir {
    Request,
    Response,
}

pub struct Registry {}

impl Registry {
    /// messages, headers: protocol.registry.MESSAGES and HEADERS.
    pub fn from_py(_messages: &Bound<'_, PyAny>, _headers: &Bound<'_, PyAny>) -> PyResult<Self> {
        todo!("schema.rs")
    }
}
