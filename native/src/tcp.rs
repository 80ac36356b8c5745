//! TCP packets -> per-direction byte-stream events: a port of dissector/tcp.py.
use std::rc::Rc;

use bytes::Bytes;
use pyo3::prelude::*;

use crate::capture::Packet;

/// (address text, port), as tcp.py's sender/receiver tuples.
pub type Addr = (Rc<str>, u16);

pub enum Event {
    Data { conn: u64, sender: Addr, receiver: Addr, ts: f64, data: Bytes },
    Gap { conn: u64, sender: Addr, receiver: Addr, ts: f64, size: i64 },
    Open { conn: u64, client: Option<Addr>, server: Option<Addr>, ts: f64, syn_seen: bool },
    Close { conn: u64, ts: f64, reason: &'static str, retransmissions: u64, out_of_order: u64 },
    StreamAnomaly { conn: u64, ts: f64, kind: &'static str, detail: String },
}

pub struct Reassembler {}

impl Reassembler {
    pub fn new(_max_buffer_per_direction: u64, _lost_after: u64, _max_buffer_total: u64) -> Self {
        todo!("tcp.rs")
    }

    pub fn feed(&mut self, _pkt: &Packet, _out: &mut Vec<Event>) {
        todo!("tcp.rs")
    }

    pub fn finish(&mut self, _out: &mut Vec<Event>) {
        todo!("tcp.rs")
    }

    pub fn oldest_held(&self) -> Option<f64> {
        todo!("tcp.rs")
    }
}

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
