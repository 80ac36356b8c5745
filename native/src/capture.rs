//! Capture files -> TCP packets: a port of dissector/capture.py (read_packets).
use std::rc::Rc;

use bytes::Bytes;
use pyo3::prelude::*;

/// One TCP segment (capture.py's Packet).
pub struct Packet {
    pub ts: f64,
    pub src: Rc<str>,
    pub sport: u16,
    pub dst: Rc<str>,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Bytes,
    pub missing: u64,
    pub index: u64,
}

/// capture.py's CaptureAnomaly.
pub struct CaptureAnomaly {
    pub ts: f64,
    pub kind: String,
    pub detail: String,
    pub index: u64,
}

pub enum Rec {
    Packet(Packet),
    Anomaly(CaptureAnomaly),
}

/// read_packets(files): `files` is what capture._capture_files gives; each is opened with
/// `opener(path)` (capture._open), so gzip/bz2/xz and every file fault read as in Python.
pub struct PacketReader {}

impl PacketReader {
    pub fn new(_files: Vec<String>, _opener: Py<PyAny>) -> Self {
        todo!("capture.rs")
    }

    pub fn next(&mut self, _py: Python<'_>) -> PyResult<Option<Rec>> {
        todo!("capture.rs")
    }
}

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
