//! What a capture's reader hands the TCP layer: a packet, or an anomaly of the file (where its
//! records stop making sense), in file order.
use std::rc::Rc;

use bytes::Bytes;

/// One TCP segment; its addresses `H`: Rc<str> in a pipeline, Arc<str> on the way to another
/// thread's (parallel.rs).
#[derive(Debug, Clone)]
pub struct Packet<H = Rc<str>> {
    pub ts: f64,
    pub src: H,
    pub sport: u16,
    pub dst: H,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Bytes,
    /// Payload bytes the IP length promised that the capture does not hold (snaplen). Signed: a
    /// TCP data offset pointing past a short IP length makes it negative, and the TCP layer's
    /// FIN and admission arithmetic takes it as it is.
    pub missing: i64,
    pub index: u64,
    /// Where the payload's bytes sit in the capture file, when it was read as a byte range
    /// (dissector.ranges), else -1: Spark's stage 1 ships this instead of the bytes.
    pub at: i64,
}

impl<H> Packet<H> {
    /// The packet with its addresses made into another kind (for another thread).
    pub fn with_hosts<K>(self, mut host: impl FnMut(H) -> K) -> Packet<K> {
        Packet {
            ts: self.ts,
            src: host(self.src),
            sport: self.sport,
            dst: host(self.dst),
            dport: self.dport,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            payload: self.payload,
            missing: self.missing,
            index: self.index,
            at: self.at,
        }
    }
}

/// What is wrong with a capture file at a point (a corrupt record, a cut packet, ...).
#[derive(Debug, Clone)]
pub struct CaptureAnomaly {
    pub ts: f64,
    pub kind: String,
    pub detail: String,
    pub index: u64,
}

pub enum Rec {
    Packet(Packet),
    Anomaly(CaptureAnomaly),
    /// a live stream (a pipe) had no bytes for a while: nothing is lost, the next call reads on
    Idle,
}

/// HashMaps keyed by what a capture says (addresses, 4-tuples) use std's randomly seeded
/// SipHash: with a fixed fast hash, a crafted capture could
/// put every key in one bucket (IPv4 addresses sharing their last octets do that to FxHash).
pub type KeyHash = std::collections::hash_map::RandomState;

/// `socket.inet_ntop(AF_INET6, b)` as glibc formats it: the first longest run of two or
/// more zero words becomes "::", and ::a.b.c.d / ::ffff:a.b.c.d are written with the
/// IPv4 address in dotted form.
pub fn ip6_text(b: &[u8; 16]) -> String {
    use std::fmt::Write;
    let mut w = [0u16; 8];
    for (i, x) in w.iter_mut().enumerate() {
        *x = ((b[2 * i] as u16) << 8) | b[2 * i + 1] as u16;
    }
    let (mut best_base, mut best_len) = (-1i32, 0i32);
    let (mut cur_base, mut cur_len) = (-1i32, 0i32);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            if cur_base == -1 {
                cur_base = i as i32;
                cur_len = 1;
            } else {
                cur_len += 1;
            }
        } else if cur_base != -1 {
            if best_base == -1 || cur_len > best_len {
                best_base = cur_base;
                best_len = cur_len;
            }
            cur_base = -1;
        }
    }
    if cur_base != -1 && (best_base == -1 || cur_len > best_len) {
        best_base = cur_base;
        best_len = cur_len;
    }
    if best_base != -1 && best_len < 2 {
        best_base = -1;
    }
    let mut s = String::with_capacity(40);
    let mut i = 0i32;
    while i < 8 {
        if best_base != -1 && i >= best_base && i < best_base + best_len {
            if i == best_base {
                s.push(':');
            }
            i += 1;
            continue;
        }
        if i != 0 {
            s.push(':');
        }
        if i == 6 && best_base == 0 && (best_len == 6 || (best_len == 5 && w[5] == 0xffff)) {
            let _ = write!(s, "{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
            break;
        }
        let _ = write!(s, "{:x}", w[i as usize]);
        i += 1;
    }
    if best_base != -1 && best_base + best_len == 8 {
        s.push(':');
    }
    s
}
