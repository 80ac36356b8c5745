//! What the TCP layer hands on and the TLS layer passes through to the frames: one direction's
//! bytes, gaps, a connection's open and close, its stream anomalies, and a TLS connection's facts.
use std::rc::Rc;

use bytes::Bytes;

use crate::carry::{Dec, Enc, R};

/// (address text, port): a connection's sender or receiver.
pub type Addr = (Rc<str>, u16);

pub enum Event {
    Data {
        conn: u64,
        sender: Addr,
        receiver: Addr,
        ts: f64,
        data: Bytes,
    },
    Gap {
        conn: u64,
        sender: Addr,
        receiver: Addr,
        ts: f64,
        size: i64,
    },
    Open {
        conn: u64,
        client: Option<Addr>,
        server: Option<Addr>,
        ts: f64,
        syn_seen: bool,
    },
    Close {
        conn: u64,
        ts: f64,
        reason: &'static str,
        retransmissions: u64,
        out_of_order: u64,
    },
    StreamAnomaly {
        conn: u64,
        ts: f64,
        kind: &'static str,
        detail: String,
    },
    /// from the TLS layer (tls.rs), before a TLS connection's first decrypted bytes: what its
    /// hellos told and whether it is decrypted
    Tls { conn: u64, facts: Rc<Facts> },
}

/// What the hellos told and whether the records are read: the `tls` facts of a connection and its
/// exchanges.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    pub version: String,
    pub cipher_suite: String,
    pub sni: Option<String>,
    pub decrypted: bool,
}

impl Facts {
    pub fn carry(&self, e: &mut Enc) {
        e.str(&self.version);
        e.str(&self.cipher_suite);
        e.opt(&self.sni, |e, v| e.str(v));
        e.bool(self.decrypted);
    }

    pub fn restore(d: &mut Dec<'_>) -> R<Facts> {
        Ok(Facts {
            version: d.string()?,
            cipher_suite: d.string()?,
            sni: d.opt(|d| d.string())?,
            decrypted: d.bool()?,
        })
    }
}
