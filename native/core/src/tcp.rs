//! TCP packets -> per-direction byte-stream events: data in order, gaps where a hole is given
//! up, a connection's open and close, overlap conflicts. tests/test_native_tcp.py holds the
//! events to the frozen oracle's reassembler (tests/oracle/tcp.py); where several orders would
//! do (the directions shed first, the half a self-loop's packets land on), the one here is the
//! one that comparison expects.
//!
//! Sequence numbers are unwrapped into i64: `nxt` starts below 2**32 + 1 and only grows by
//! bytes delivered or declared lost (each packet moves it by under 2**32), so 2**63 is out of
//! reach of any capture; starts below nxt (retransmissions) stay above -2**32.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use bytes::Bytes;

use crate::anomalies::kind;
use crate::carry::{Dec, Enc};
use crate::packet::{KeyHash, Packet};

pub use crate::stream::{Addr, Event};

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;
const M32: i64 = 0xFFFF_FFFF;
const KEEP_DELIVERED: i64 = 64 << 10; // kept for overlap checks; up to twice that between trims
const CLOSED_MEMORY: usize = 4096; // closed 4-tuples remembered so stray ACKs/retransmissions don't reopen them
pub const ACK_PROOF: u64 = 8; // packets of a connection after an ACK past a hole before the hole is declared lost

type Key = (Rc<str>, u16, Rc<str>, u16);

/// An out-of-order piece: bytes, or that many bytes known lost (a snaplen-cut tail).
enum PieceData {
    Data(Bytes),
    Lost(i64),
}

/// Out-of-order data held for a direction: where it starts, its bytes (or a lost run), when it came.
struct Piece {
    start: i64,
    data: PieceData,
    ts: f64,
}

impl Piece {
    fn len(&self) -> i64 {
        match &self.data {
            PieceData::Data(b) => b.len() as i64,
            PieceData::Lost(n) => *n,
        }
    }
}

/// b[a..z] with both ends clamped into b (empty when a >= z).
fn sl(b: &[u8], a: i64, z: i64) -> &[u8] {
    let n = b.len() as i64;
    let a = a.clamp(0, n);
    let z = z.clamp(0, n);
    if a >= z {
        &[]
    } else {
        &b[a as usize..z as usize]
    }
}

fn mismatches(a: &[u8], b: &[u8]) -> i64 {
    a.iter().zip(b).filter(|(x, y)| x != y).count() as i64
}

/// The delivered tail of a direction, for overlap checks. The bytes are copied into one buffer
/// per direction, because a payload is a slice of a whole read chunk (1-4 MiB) and an idle
/// connection would otherwise pin its chunk: memory stays about 128 KiB per direction.
/// Entries ascend and do not overlap (each starts at the nxt of its time, and nxt only grows).
#[derive(Default)]
struct Recent {
    buf: Vec<u8>,
    base: u64,                            // absolute position of buf[0]
    entries: VecDeque<(i64, u64, usize)>, // (start seq, absolute position, length)
    len: i64,                             // bytes in entries
}

impl Recent {
    fn push(&mut self, start: i64, data: &[u8]) {
        let at = self.base + self.buf.len() as u64;
        self.buf.extend_from_slice(data);
        self.entries.push_back((start, at, data.len()));
        self.len += data.len() as i64;
    }

    fn get(&self, at: u64, n: usize) -> &[u8] {
        let i = (at - self.base) as usize;
        &self.buf[i..i + n]
    }

    /// Drops the oldest entries while at least KEEP_DELIVERED bytes stay, and compacts the
    /// buffer once more than half of it is dead.
    fn trim(&mut self) {
        while let Some(&(_, _, n)) = self.entries.front() {
            if self.len - n as i64 >= KEEP_DELIVERED {
                self.entries.pop_front();
                self.len -= n as i64;
            } else {
                break;
            }
        }
        let live = match self.entries.front() {
            Some(&(_, at, _)) => (at - self.base) as usize,
            None => self.buf.len(),
        };
        if live > self.buf.len() / 2 {
            self.buf.drain(..live);
            self.base += live as u64;
            if self.buf.capacity() > 4 * self.buf.len() + (1 << 20) {
                self.buf.shrink_to(2 * self.buf.len());
            }
        }
    }

    fn clear(&mut self) {
        self.buf = Vec::new();
        self.entries.clear();
        self.base = 0;
        self.len = 0;
    }
}

/// One direction of a connection.
struct Half {
    sender: Addr,
    receiver: Addr,
    nxt: Option<i64>, // unwrapped next expected seq
    isn: Option<u32>, // seq of this side's SYN
    pieces: VecDeque<Piece>,
    buffered: i64,
    recent: Recent,
    fin: Option<i64>,   // unwrapped seq of FIN
    done: bool,         // everything up to FIN delivered, or flushed
    acked: Option<i64>, // highest unwrapped ACK from the peer past nxt ...
    acked_at: u64,      // ... first seen at this packet count of the connection
}

impl Half {
    fn new(sender: Addr, receiver: Addr) -> Self {
        Half {
            sender,
            receiver,
            nxt: None,
            isn: None,
            pieces: VecDeque::new(),
            buffered: 0,
            recent: Recent::default(),
            fin: None,
            done: false,
            acked: None,
            acked_at: 0,
        }
    }

    fn unwrap(&self, seq: i64) -> i64 {
        let nxt = self.nxt.unwrap_or(0);
        nxt + ((seq - nxt + 0x8000_0000) & M32) - 0x8000_0000
    }
}

struct Conn {
    id: u64,
    keys: [Key; 2],
    halves: [Half; 2],
    /// src == dst and sport == dport: both directions have one key, which ends on half 1, so
    /// closing, shedding and oldest_held see only half 1, while the packet that opened the
    /// connection went to half 0.
    selfloop: bool,
    n: u64, // packets seen
    retrans: u64,
    ooo: u64,
}

impl Conn {
    /// The halves closing, shedding and oldest_held look at, in order
    fn sides(&self) -> &'static [usize] {
        if self.selfloop {
            &[1]
        } else {
            &[0, 1]
        }
    }
}

fn pair(halves: &mut [Half; 2], side: usize) -> (&mut Half, &mut Half) {
    let (a, b) = halves.split_at_mut(1);
    if side == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    }
}

/// Closed 4-tuples remembered (key -> nxt of that direction), oldest first, so that stray
/// packets of a closed connection do not open it again.
#[derive(Default)]
struct Closed {
    map: HashMap<Key, (u32, u64), KeyHash>,
    order: BTreeMap<u64, Key>,
    next: u64,
}

impl Closed {
    fn get(&self, key: &Key) -> Option<u32> {
        self.map.get(key).map(|v| v.0)
    }

    fn pop(&mut self, key: &Key) {
        if let Some((_, stamp)) = self.map.remove(key) {
            self.order.remove(&stamp);
        }
    }

    /// Remembers `key`'s nxt `v`: a key already there keeps its place (its age)
    fn set(&mut self, key: Key, v: u32) {
        if let Some(e) = self.map.get_mut(&key) {
            e.0 = v;
            return;
        }
        let stamp = self.next;
        self.next += 1;
        self.order.insert(stamp, key.clone());
        self.map.insert(key, (v, stamp));
    }

    fn pop_oldest(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            self.map.remove(&key);
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

pub struct Reassembler {
    max_buffer: i64,
    max_buffer_total: i64,
    shed_to: i64,  // where shedding stops: 3/4 of max_buffer_total
    buffered: i64, // out-of-order data over all connections
    halves: HashMap<Key, (u64, usize), KeyHash>, // 4-tuple -> (connection id, half)
    conns: BTreeMap<u64, Conn>, // by id: the order they opened in
    closed: Closed,
    next_id: u64,
    pub last_ts: f64,
}

fn clamp64(x: u128) -> i64 {
    x.min(i64::MAX as u128) as i64
}

// ------------------------------------------------------------ one direction
// Free functions over a half and what of its connection they need, so a half and its
// peer can be borrowed together.

/// Bytes from `start` come out in order: nxt moves past them, the overlap check keeps them.
fn deliver(id: u64, half: &mut Half, start: i64, data: Bytes, ts: f64, out: &mut Vec<Event>) {
    half.nxt = Some(start + data.len() as i64);
    remember(half, start, &data);
    out.push(Event::Data {
        conn: id,
        sender: half.sender.clone(),
        receiver: half.receiver.clone(),
        ts,
        data,
    });
}

/// `size` bytes from nxt are given up: a Gap, and nxt moves past them.
fn lose(id: u64, half: &mut Half, size: i64, ts: f64, out: &mut Vec<Event>) {
    out.push(Event::Gap {
        conn: id,
        sender: half.sender.clone(),
        receiver: half.receiver.clone(),
        ts,
        size,
    });
    half.nxt = Some(half.nxt.unwrap_or(0) + size);
}

fn remember(half: &mut Half, start: i64, data: &[u8]) {
    half.recent.push(start, data);
    if half.recent.len > 2 * KEEP_DELIVERED {
        half.recent.trim();
    }
}

fn conflict(id: u64, half: &Half, ts: f64, start: i64, count: i64, out: &mut Vec<Event>) {
    out.push(Event::StreamAnomaly {
        conn: id,
        ts,
        kind: kind::OVERLAP_CONFLICT,
        detail: format!(
            "{}:{} -> {}:{}: {} byte(s) from seq {} differ from the first-seen data; first-seen kept",
            half.sender.0,
            half.sender.1,
            half.receiver.0,
            half.receiver.1,
            count,
            start & M32
        ),
    });
}

/// Compares the already-delivered part of a segment with what was delivered.
fn check_delivered(id: u64, half: &Half, start: i64, data: &[u8], ts: f64, out: &mut Vec<Event>) {
    let end = start + data.len() as i64;
    if data.len() <= 1 && Some(end) == half.nxt {
        return; // keep-alive probe: one garbage byte below nxt by design
    }
    let mut diff = 0i64;
    let mut at: Option<i64> = None;
    let r = &half.recent;
    // entries ascend without overlap: skip those ending before `start`, stop past `end`
    let first = r
        .entries
        .partition_point(|&(s, _, n)| s + n as i64 <= start);
    for &(rstart, pos, n) in r.entries.range(first..) {
        if rstart >= end {
            break;
        }
        let rend = rstart + n as i64;
        let (lo, hi) = (start.max(rstart), end.min(rend));
        if lo < hi {
            let rdata = r.get(pos, n);
            let d = mismatches(
                sl(data, lo - start, hi - start),
                sl(rdata, lo - rstart, hi - rstart),
            );
            if d > 0 {
                diff += d;
                at.get_or_insert(lo);
            }
        }
    }
    if diff > 0 {
        conflict(id, half, ts, at.unwrap_or(0), diff, out);
    }
}

/// One part of a segment for insert(): [pstart, pstart + plen) of bytes (pdata) or of lost
/// bytes, merged among the held pieces; a differing overlap adds to `diff` (first at `at`).
// the state insert() keeps across its parts, passed to each
#[allow(clippy::too_many_arguments)]
fn insert_part(
    half: &mut Half,
    total: &mut i64,
    pstart: i64,
    pdata: Option<&[u8]>,
    plen: i64,
    ts: f64,
    diff: &mut i64,
    at: &mut Option<i64>,
) {
    let pend = pstart + plen;
    let pieces = &mut half.pieces;
    let mut i = pieces
        .partition_point(|p| p.start <= pstart)
        .saturating_sub(1);
    let mut cursor = pstart;
    let mut new: Vec<(i64, i64)> = Vec::new();
    while i < pieces.len() && pieces[i].start < pend {
        let s = pieces[i].start;
        let e = s + pieces[i].len();
        if e <= cursor {
            i += 1;
            continue;
        }
        if s > cursor {
            new.push((cursor, s));
        }
        let (lo, hi) = (cursor.max(s), pend.min(e));
        if let (PieceData::Data(old), Some(pd)) = (&pieces[i].data, pdata) {
            let d = mismatches(sl(pd, lo - pstart, hi - pstart), sl(old, lo - s, hi - s));
            if d > 0 {
                *diff += d;
                at.get_or_insert(lo);
            }
        }
        cursor = cursor.max(e);
        i += 1;
    }
    if cursor < pend {
        new.push((cursor, pend));
    }
    for (lo, hi) in new {
        // held data gets its own allocation: it may wait long, and must not pin a read chunk
        let data = match pdata {
            Some(pd) => {
                let piece = Bytes::copy_from_slice(sl(pd, lo - pstart, hi - pstart));
                half.buffered += piece.len() as i64;
                *total += piece.len() as i64;
                PieceData::Data(piece)
            }
            None => PieceData::Lost(hi - lo),
        };
        let j = pieces.partition_point(|p| p.start <= lo);
        pieces.insert(
            j,
            Piece {
                start: lo,
                data,
                ts,
            },
        );
    }
}

/// A segment at `start` (`data`, then `missing` bytes known lost: a snaplen-cut tail): what
/// lies below nxt is a retransmission, checked against what was delivered; the rest is held as
/// out-of-order pieces, differing overlaps reported as a conflict.
// the half and the connection's counters borrowed apart (see above), then the segment
#[allow(clippy::too_many_arguments)]
fn insert(
    id: u64,
    half: &mut Half,
    retrans: &mut u64,
    ooo: &mut u64,
    total: &mut i64,
    mut start: i64,
    data: &[u8],
    mut missing: i64,
    ts: f64,
    out: &mut Vec<Event>,
) {
    let nxt = half.nxt.unwrap_or(0);
    let mut data = data;
    if start > nxt {
        *ooo += 1;
    } else if start < nxt {
        *retrans += 1;
        let cut = nxt - start;
        let n = data.len() as i64;
        if n > 0 {
            check_delivered(id, half, start, sl(data, 0, cut), ts, out);
        }
        if cut >= n {
            missing -= cut - n;
            data = &[];
            start = nxt;
            if missing <= 0 {
                return;
            }
        } else {
            data = sl(data, cut, n);
            start = nxt;
        }
    }
    let mut diff = 0i64;
    let mut at: Option<i64> = None;
    if !data.is_empty() {
        insert_part(
            half,
            total,
            start,
            Some(data),
            data.len() as i64,
            ts,
            &mut diff,
            &mut at,
        );
    }
    if missing > 0 {
        insert_part(
            half,
            total,
            start + data.len() as i64,
            None,
            missing,
            ts,
            &mut diff,
            &mut at,
        );
    }
    if diff > 0 {
        conflict(id, half, ts, at.unwrap_or(0), diff, out);
    }
}

/// Delivers the pieces now in order, each with the time of its own packet.
fn drain(id: u64, half: &mut Half, total: &mut i64, out: &mut Vec<Event>) {
    while let Some(p) = half.pieces.front() {
        if Some(p.start) != half.nxt {
            break;
        }
        let Some(p) = half.pieces.pop_front() else {
            break;
        };
        match p.data {
            PieceData::Data(piece) => {
                let n = piece.len() as i64;
                half.buffered -= n;
                *total -= n;
                deliver(id, half, p.start, piece, p.ts, out);
            }
            PieceData::Lost(n) => lose(id, half, n, p.ts, out), // p.start is nxt
        }
    }
}

/// Bytes from nxt up to `to` are lost; `ts` is that of the bytes after them.
fn skip_hole(id: u64, half: &mut Half, to: i64, ts: f64, total: &mut i64, out: &mut Vec<Event>) {
    lose(id, half, to - half.nxt.unwrap_or(0), ts, out);
    drain(id, half, total, out);
}

/// skip_hole up to the first piece (every loop that calls it ends: the piece is drained)
fn skip_first(id: u64, half: &mut Half, total: &mut i64, out: &mut Vec<Event>) {
    if let Some(p) = half.pieces.front() {
        let (to, ts) = (p.start, p.ts);
        skip_hole(id, half, to, ts, total, out);
    }
}

/// Too much data waits behind the oldest hole: give it up.
fn force(id: u64, half: &mut Half, max_buffer: i64, total: &mut i64, out: &mut Vec<Event>) {
    while half.buffered > max_buffer && !half.pieces.is_empty() {
        skip_first(id, half, total, out);
    }
}

/// Notes an ACK for `half` from its receiver (None: no ACK in this packet), then gives
/// up what ACKs proved lost ACK_PROOF packets ago.
fn acked(
    id: u64,
    n: u64,
    half: &mut Half,
    ack: Option<u32>,
    ts: f64,
    total: &mut i64,
    out: &mut Vec<Event>,
) {
    let Some(nxt) = half.nxt else { return };
    if let Some(ack) = ack {
        let a = half.unwrap(ack as i64);
        if a > nxt {
            match half.acked {
                Some(h) if h > nxt => {
                    if a > h {
                        half.acked = Some(a);
                    }
                }
                _ => {
                    half.acked = Some(a); // fresh evidence
                    half.acked_at = n;
                }
            }
        }
    }
    let Some(acked) = half.acked else { return };
    if acked <= nxt || n - half.acked_at < ACK_PROOF {
        // acked_at is an earlier n of this connection
        return;
    }
    while let Some(p) = half.pieces.front() {
        if half.nxt.is_some_and(|x| x >= acked) {
            break;
        }
        if p.start <= acked {
            skip_first(id, half, total, out);
        } else {
            // only the acked part of the hole is known lost
            skip_hole(id, half, acked, ts, total, out);
        }
    }
}

/// The holes of this direction can no longer be filled: each is given up, in order.
fn flush(id: u64, half: &mut Half, ts: f64, total: &mut i64, out: &mut Vec<Event>) {
    let Some(_) = half.nxt else { return };
    while !half.pieces.is_empty() {
        skip_first(id, half, total, out);
    }
    if let (Some(fin), Some(nxt)) = (half.fin, half.nxt) {
        if nxt < fin {
            lose(id, half, fin - nxt, ts, out);
        }
    }
}

impl Reassembler {
    pub fn new(max_buffer_per_direction: u64, lost_after: u64, max_buffer_total: u64) -> Self {
        Reassembler {
            max_buffer: clamp64(max_buffer_per_direction.min(lost_after) as u128),
            max_buffer_total: clamp64(max_buffer_total as u128),
            shed_to: clamp64(max_buffer_total as u128 * 3 / 4),
            buffered: 0,
            halves: HashMap::default(),
            conns: BTreeMap::new(),
            closed: Closed::default(),
            next_id: 0,
            last_ts: 0.0,
        }
    }

    pub fn feed(&mut self, pkt: &Packet, out: &mut Vec<Event>) {
        let ts = pkt.ts;
        self.last_ts = ts;
        let flags = pkt.flags;
        let key: Key = (pkt.src.clone(), pkt.sport, pkt.dst.clone(), pkt.dport);
        let found = self.halves.get(&key).copied();
        if let Some((id, side)) = found {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            conn.n += 1;
            let (half, peer) = pair(&mut conn.halves, side);
            let acks_past_peer = flags & ACK != 0
                && peer.nxt.is_some_and(|pn| {
                    let d = (pkt.ack as i64 - pn) & M32;
                    0 < d && d < 0x8000_0000
                });
            if flags & 0x07 == 0
                && half.fin.is_none()
                && half.pieces.is_empty()
                && peer.pieces.is_empty()
                && peer.fin.is_none()
                && !acks_past_peer
            {
                // Fast path: established, no SYN/FIN/RST, no hole either way (holes age
                // by packets), the peer not acknowledged past what we saw of it.
                let payload = &pkt.payload;
                if payload.is_empty() && pkt.missing == 0 {
                    return;
                }
                if let Some(nxt) = half.nxt {
                    if (pkt.seq as i64 - nxt) & M32 == 0 && pkt.missing == 0 {
                        deliver(id, half, nxt, payload.clone(), ts, out);
                        return;
                    }
                }
            }
        }
        let (id, side) = match found {
            None => {
                if !self.admit(&key, pkt) {
                    return;
                }
                self.open(key, pkt, out)
            }
            Some((id, side)) => {
                let supersedes = flags & SYN != 0
                    && self.conns.get(&id).is_some_and(|c| {
                        let h = &c.halves[side];
                        h.nxt.is_some() && Some(pkt.seq) != h.isn
                    });
                if supersedes {
                    self.close(id, ts, "superseded", out);
                    self.open(key, pkt, out)
                } else {
                    (id, side)
                }
            }
        };
        let mut seq = pkt.seq as i64;
        let n = pkt.payload.len() as i64;
        let missing = pkt.missing;
        {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            let Conn {
                halves,
                retrans,
                ooo,
                ..
            } = conn;
            let half = &mut halves[side];
            if half.nxt.is_none() {
                half.nxt = Some(if flags & SYN != 0 { seq + 1 } else { seq });
            }
            if flags & SYN != 0 {
                if half.isn.is_none() {
                    half.isn = Some(pkt.seq);
                }
                seq = (seq + 1) & M32;
            }
            if n != 0 || missing != 0 {
                let start = half.unwrap(seq);
                if Some(start) == half.nxt && half.pieces.is_empty() && missing == 0 {
                    // In-order fast path.
                    deliver(id, half, start, pkt.payload.clone(), ts, out);
                } else {
                    let total = &mut self.buffered;
                    insert(
                        id,
                        half,
                        retrans,
                        ooo,
                        total,
                        start,
                        &pkt.payload,
                        missing,
                        ts,
                        out,
                    );
                    drain(id, half, total, out);
                    if half.buffered > self.max_buffer {
                        force(id, half, self.max_buffer, total, out);
                    }
                    if self.buffered > self.max_buffer_total {
                        self.shed(out);
                    }
                }
            }
        }
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let cn = conn.n;
        let (half, peer) = pair(&mut conn.halves, side);
        if flags & FIN != 0 && half.fin.is_none() {
            half.fin = Some(half.unwrap(seq) + n + missing);
        }
        if flags & RST != 0 {
            self.close(id, ts, "rst", out);
            return;
        }
        if let Some(fin) = half.fin {
            if !half.done && half.nxt.is_some_and(|x| x >= fin) && half.pieces.is_empty() {
                half.done = true; // _check_fin
            }
        }
        let total = &mut self.buffered;
        if flags & ACK != 0 && peer.nxt.is_some() {
            acked(id, cn, peer, Some(pkt.ack), ts, total, out);
        } else if !peer.pieces.is_empty() {
            acked(id, cn, peer, None, ts, total, out);
        }
        if !half.pieces.is_empty() {
            acked(id, cn, half, None, ts, total, out);
        }
        if flags & ACK != 0 && !peer.done && peer.nxt.is_some() {
            if let Some(pfin) = peer.fin {
                // The receiver acknowledged the peer's FIN: nothing before it will be
                // sent again, so holes there can no longer be filled.
                if ((pkt.ack as i64 - (pfin + 1)) & M32) < 0x8000_0000 {
                    flush(id, peer, ts, total, out);
                    peer.done = true;
                }
            }
        }
        if half.done && peer.done {
            self.close(id, ts, "fin", out);
        }
    }

    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id, self.last_ts, "end_of_capture", out);
        }
        self.closed.clear();
    }

    /// Time of the oldest data waiting behind a hole (it will come out with that time), or None.
    pub fn oldest_held(&self) -> Option<f64> {
        let mut oldest: Option<f64> = None;
        for conn in self.conns.values() {
            for &side in conn.sides() {
                let mut it = conn.halves[side].pieces.iter();
                let Some(first) = it.next() else { continue };
                // the first of equal times wins: a later piece replaces only when strictly older
                let mut t = first.ts;
                for p in it {
                    if p.ts < t {
                        t = p.ts;
                    }
                }
                if oldest.is_none_or(|o| t < o) {
                    oldest = Some(t);
                }
            }
        }
        oldest
    }

    // ------------------------------------------------------------ connections

    /// Packets of a recently closed 4-tuple only reopen it with a SYN or new data.
    fn admit(&self, key: &Key, pkt: &Packet) -> bool {
        let old = self.closed.get(key);
        if pkt.flags & SYN != 0 {
            return true;
        }
        let Some(old) = old else {
            return !(pkt.flags & RST != 0 && pkt.payload.is_empty()); // a lone RST opens nothing
        };
        let end = (pkt.seq as i64 + pkt.payload.len() as i64 + pkt.missing) & M32;
        let ahead = (end - old as i64) & M32; // it ends past what was seen
        (!pkt.payload.is_empty() || pkt.missing != 0) && 0 < ahead && ahead < 0x8000_0000
    }

    fn open(&mut self, key: Key, pkt: &Packet, out: &mut Vec<Event>) -> (u64, usize) {
        let (src, sport, dst, dport) = key.clone();
        let rkey: Key = (dst.clone(), dport, src.clone(), sport);
        self.closed.pop(&key);
        self.closed.pop(&rkey);
        let id = self.next_id;
        self.next_id += 1;
        let a = Half::new((src.clone(), sport), (dst.clone(), dport));
        let b = Half::new((dst, dport), (src, sport));
        let selfloop = key == rkey;
        self.halves.insert(key.clone(), (id, 0));
        self.halves.insert(rkey.clone(), (id, 1)); // a self-loop's one key ends on half 1
        let syn = pkt.flags & SYN != 0;
        let (client, server) = if syn {
            if pkt.flags & ACK == 0 {
                (Some(a.sender.clone()), Some(a.receiver.clone()))
            } else {
                (Some(a.receiver.clone()), Some(a.sender.clone()))
            }
        } else {
            (None, None)
        };
        self.conns.insert(
            id,
            Conn {
                id,
                keys: [key, rkey],
                halves: [a, b],
                selfloop,
                n: 1,
                retrans: 0,
                ooo: 0,
            },
        );
        out.push(Event::Open {
            conn: id,
            client,
            server,
            ts: pkt.ts,
            syn_seen: syn,
        });
        (id, 0)
    }

    fn close(&mut self, id: u64, ts: f64, reason: &'static str, out: &mut Vec<Event>) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        for &side in conn.sides() {
            flush(conn.id, &mut conn.halves[side], ts, &mut self.buffered, out);
        }
        out.push(Event::Close {
            conn: conn.id,
            ts,
            reason,
            retransmissions: conn.retrans,
            out_of_order: conn.ooo,
        });
        for &side in conn.sides() {
            let key = &conn.keys[side];
            self.halves.remove(key);
            self.closed.set(
                key.clone(),
                (conn.halves[side].nxt.unwrap_or(0) & M32) as u32,
            );
            if self.closed.len() > CLOSED_MEMORY {
                self.closed.pop_oldest();
            }
        }
    }

    /// Out-of-order data over all connections is above max_buffer_total: the holes of the
    /// directions holding the most are given up (Gaps), until a quarter of the budget is free.
    fn shed(&mut self, out: &mut Vec<Event>) {
        let mut hs: Vec<(i64, u64, usize)> = Vec::new();
        for (&id, conn) in &self.conns {
            for &side in conn.sides() {
                let h = &conn.halves[side];
                if !h.pieces.is_empty() {
                    hs.push((h.buffered, id, side));
                }
            }
        }
        hs.sort_by_key(|h| std::cmp::Reverse(h.0)); // the most first; stable on ties
        for (_, id, side) in hs {
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            let half = &mut conn.halves[side];
            while !half.pieces.is_empty() && self.buffered > self.shed_to {
                skip_first(id, half, &mut self.buffered, out);
            }
            // what came out would stay alive as overlap-check history: a shed direction starts that afresh
            half.recent.clear();
            if self.buffered <= self.shed_to {
                break;
            }
        }
    }
}

// ------------------------------------------------------------ carried between land runs
// (carry.rs): every open connection's halves whole (next seqs, out-of-order pieces, the
// delivered tail overlap checks compare against), the closed 4-tuples remembered, the id counter.

fn put_key(e: &mut Enc, k: &Key) {
    e.str(&k.0);
    e.u16(k.1);
    e.str(&k.2);
    e.u16(k.3);
}

fn get_key(d: &mut Dec<'_>) -> crate::carry::R<Key> {
    Ok((d.rc()?, d.u16()?, d.rc()?, d.u16()?))
}

fn put_half(e: &mut Enc, h: &Half) {
    e.addr(&h.sender);
    e.addr(&h.receiver);
    e.opt_i64(h.nxt);
    e.opt(&h.isn, |e, v| e.u32(*v));
    e.seq(h.pieces.iter(), |e, p| {
        e.i64(p.start);
        match &p.data {
            PieceData::Data(b) => {
                e.u8(0);
                e.bytes(b);
            }
            PieceData::Lost(n) => {
                e.u8(1);
                e.i64(*n);
            }
        }
        e.f64(p.ts);
    });
    e.i64(h.buffered);
    // only the live tail: the buffer's dead front is trimmed lazily
    let r = &h.recent;
    let live = r
        .entries
        .front()
        .map_or(r.base + r.buf.len() as u64, |x| x.1);
    e.bytes(&r.buf[(live - r.base) as usize..]);
    e.seq(r.entries.iter(), |e, x| {
        e.i64(x.0);
        e.u64(x.1 - live);
        e.usize(x.2);
    });
    e.i64(r.len);
    e.opt_i64(h.fin);
    e.bool(h.done);
    e.opt_i64(h.acked);
    e.u64(h.acked_at);
}

fn get_half(d: &mut Dec<'_>) -> crate::carry::R<Half> {
    let sender = d.addr()?;
    let receiver = d.addr()?;
    let mut h = Half::new(sender, receiver);
    h.nxt = d.opt_i64()?;
    h.isn = d.opt(|d| d.u32())?;
    h.pieces = d.deque(|d| {
        let start = d.i64()?;
        let data = if d.u8()? == 0 {
            PieceData::Data(d.bytes()?)
        } else {
            PieceData::Lost(d.i64()?)
        };
        Ok(Piece {
            start,
            data,
            ts: d.f64()?,
        })
    })?;
    h.buffered = d.i64()?;
    h.recent.buf = d.raw()?.to_vec();
    h.recent.entries = d.deque(|d| Ok((d.i64()?, d.u64()?, d.usize()?)))?;
    h.recent.len = d.i64()?;
    h.fin = d.opt_i64()?;
    h.done = d.bool()?;
    h.acked = d.opt_i64()?;
    h.acked_at = d.u64()?;
    Ok(h)
}

impl Reassembler {
    /// Ids of the connections still open.
    pub fn open_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.conns.keys().copied()
    }

    pub fn carry(&self, e: &mut Enc) {
        e.i64(self.buffered);
        e.usize(self.halves.len());
        let mut halves: Vec<_> = self.halves.iter().collect();
        // a fixed order, so the same state always gives the same bytes
        halves.sort_by(|a, b| a.1.cmp(b.1));
        for (k, (id, side)) in halves {
            put_key(e, k);
            e.u64(*id);
            e.usize(*side);
        }
        e.seq(self.conns.values(), |e, c| {
            e.u64(c.id);
            put_key(e, &c.keys[0]);
            put_key(e, &c.keys[1]);
            put_half(e, &c.halves[0]);
            put_half(e, &c.halves[1]);
            e.bool(c.selfloop);
            e.u64(c.n);
            e.u64(c.retrans);
            e.u64(c.ooo);
        });
        // oldest first, as they are evicted
        e.seq(self.closed.order.values(), |e, k| {
            put_key(e, k);
            e.u32(self.closed.get(k).unwrap_or(0));
        });
        e.u64(self.next_id);
        e.f64(self.last_ts);
    }

    pub fn restore(&mut self, d: &mut Dec<'_>) -> crate::carry::R<()> {
        self.buffered = d.i64()?;
        let n = d.usize()?;
        for _ in 0..n {
            let k = get_key(d)?;
            let v = (d.u64()?, d.usize()?);
            self.halves.insert(k, v);
        }
        for c in d.vec(|d| {
            Ok(Conn {
                id: d.u64()?,
                keys: [get_key(d)?, get_key(d)?],
                halves: [get_half(d)?, get_half(d)?],
                selfloop: d.bool()?,
                n: d.u64()?,
                retrans: d.u64()?,
                ooo: d.u64()?,
            })
        })? {
            self.conns.insert(c.id, c);
        }
        for (k, v) in d.vec(|d| Ok((get_key(d)?, d.u32()?)))? {
            self.closed.set(k, v);
        }
        self.next_id = d.u64()?;
        self.last_ts = d.f64()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: (&str, u16) = ("10.0.0.1", 40000);
    const S: (&str, u16) = ("10.0.0.2", 9092);

    struct Wire {
        r: Reassembler,
        out: Vec<Event>,
        n: u64,
    }

    impl Wire {
        fn new() -> Self {
            Wire {
                r: Reassembler::new(1 << 20, 32, 64 << 20),
                out: Vec::new(),
                n: 0,
            }
        }
        fn pkt(&mut self, from_client: bool, seq: u32, flags: u8, data: &[u8]) {
            let ((s, sp), (d, dp)) = if from_client { (C, S) } else { (S, C) };
            self.n += 1;
            let p = Packet {
                ts: self.n as f64,
                src: Rc::from(s),
                sport: sp,
                dst: Rc::from(d),
                dport: dp,
                seq,
                ack: 0,
                flags,
                payload: Bytes::copy_from_slice(data),
                missing: 0,
                index: self.n,
                at: -1,
            };
            self.r.feed(&p, &mut self.out);
        }
        fn handshake(&mut self) {
            self.pkt(true, 999, SYN, b"");
            self.pkt(false, 4999, SYN | ACK, b"");
        }
        fn finish(mut self) -> Vec<Event> {
            self.r.finish(&mut self.out);
            self.out
        }
    }

    /// The client's bytes as delivered, gaps as `?` per byte, and every stream anomaly.
    fn client_stream(evs: &[Event]) -> (Vec<u8>, Vec<&'static str>, Vec<&'static str>) {
        let (mut bytes, mut anomalies, mut closes) = (Vec::new(), Vec::new(), Vec::new());
        for e in evs {
            match e {
                Event::Data { sender, data, .. } if &*sender.0 == C.0 => {
                    bytes.extend_from_slice(data)
                }
                Event::Gap { sender, size, .. } if &*sender.0 == C.0 => {
                    bytes.extend(std::iter::repeat_n(b'?', *size as usize))
                }
                Event::StreamAnomaly { kind, .. } => anomalies.push(*kind),
                Event::Close { reason, .. } => closes.push(*reason),
                _ => {}
            }
        }
        (bytes, anomalies, closes)
    }

    #[test]
    fn out_of_order_segments_come_out_in_order() {
        let mut w = Wire::new();
        w.handshake();
        w.pkt(true, 1006, ACK, b"world");
        w.pkt(true, 1000, ACK, b"hello ");
        w.pkt(true, 1011, ACK | FIN, b"!");
        w.pkt(false, 5000, ACK | FIN, b"");
        let (bytes, anomalies, closes) = client_stream(&w.finish());
        assert_eq!(bytes, b"hello world!");
        assert!(anomalies.is_empty(), "{anomalies:?}");
        assert_eq!(closes.len(), 1);
    }

    #[test]
    fn a_hole_never_filled_is_a_gap_of_its_size() {
        let mut w = Wire::new();
        w.handshake();
        w.pkt(true, 1000, ACK, b"abc");
        w.pkt(true, 1010, ACK, b"xyz"); // 7 bytes never arrive
        let (bytes, _, closes) = client_stream(&w.finish());
        assert_eq!(bytes, b"abc???????xyz");
        assert_eq!(closes, ["end_of_capture"]);
    }

    #[test]
    fn a_retransmission_is_delivered_once_and_a_conflict_is_named() {
        let mut w = Wire::new();
        w.handshake();
        w.pkt(true, 1000, ACK, b"abcdef");
        w.pkt(true, 1000, ACK, b"abcdef"); // the same bytes again: a retransmission
        w.pkt(true, 1003, ACK, b"XYZghi"); // overlaps 3 delivered bytes with other ones
        let (bytes, anomalies, _) = client_stream(&w.finish());
        assert_eq!(bytes, b"abcdefghi", "first-seen data kept");
        assert_eq!(anomalies, [kind::OVERLAP_CONFLICT]);
    }

    #[test]
    fn sequence_numbers_wrap_around() {
        let mut w = Wire::new();
        w.pkt(true, u32::MAX - 2, SYN, b"");
        w.pkt(true, u32::MAX - 1, ACK, b"ab");
        w.pkt(true, 0, ACK, b"cd"); // past 2**32
        let (bytes, anomalies, _) = client_stream(&w.finish());
        assert_eq!((bytes.as_slice(), anomalies.len()), (&b"abcd"[..], 0));
    }

    #[test]
    fn a_reset_closes_and_a_new_syn_supersedes() {
        let mut w = Wire::new();
        w.handshake();
        w.pkt(true, 1000, ACK, b"one");
        w.pkt(true, 7000, SYN, b""); // the same 4-tuple, a new connection
        w.pkt(true, 7001, ACK, b"two");
        w.pkt(false, 5000, RST, b"");
        let (bytes, _, closes) = client_stream(&w.finish());
        assert_eq!(bytes, b"onetwo");
        assert_eq!(closes, ["superseded", "rst"]);
    }

    #[test]
    fn the_buffer_bound_gives_up_a_hole_rather_than_grow() {
        let mut w = Wire::new();
        w.r = Reassembler::new(1000, 1 << 30, 64 << 20);
        w.handshake();
        w.pkt(true, 1000, ACK, b"a");
        for k in 0..20u32 {
            w.pkt(true, 1101 + 100 * k, ACK, &[b'b'; 100]); // 100 bytes missing before them
        }
        assert!(w.r.buffered <= 1000, "{} bytes held", w.r.buffered);
        let (bytes, _, _) = client_stream(&w.finish());
        assert_eq!(
            bytes.len(),
            1 + 100 + 2000,
            "every byte delivered or named lost"
        );
        assert_eq!(bytes.iter().filter(|b| **b == b'?').count(), 100);
    }

    #[test]
    fn what_is_carried_restores_the_same_stream() {
        let mut w = Wire::new();
        w.handshake();
        w.pkt(true, 1000, ACK, b"abc");
        w.pkt(true, 1006, ACK, b"ghi"); // held behind a hole
        let mut e = Enc::new();
        w.r.carry(&mut e);
        let raw = Dec::unpack(&e.finish().unwrap()).unwrap();
        let mut d = Dec::new(&raw).unwrap();
        let mut r = Reassembler::new(1 << 20, 32, 64 << 20);
        r.restore(&mut d).unwrap();
        d.done().unwrap();
        let mut after = Wire {
            r,
            out: Vec::new(),
            n: 10,
        };
        after.pkt(true, 1003, ACK, b"def");
        let (bytes, _, _) = client_stream(&after.finish());
        assert_eq!(bytes, b"defghi");
    }
}
