//! Byte ranges of one capture file, for Spark's stage 1: cut at record boundaries so each is
//! read on its own, and a range's packets bucketed per connection as packet-batch columns.
//!
//! An uncompressed pcap or pcapng is walked header by header (seeking past the packet
//! bytes). A pcapng range carries the section and interface blocks in force at its start
//! (its preamble), so it decodes alone. Compressed files, and files whose headers go
//! wrong, are one range (no start): their reader reports the fault where it is. A range's
//! frame count lets the ranges after it number their frames like the whole file does.
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, Read};
use std::rc::Rc;

use crate::capture::{pcap_magic, PCAPNG_SHB};
use crate::columns::Col;
use crate::packet::{CaptureAnomaly, KeyHash, Packet, Rec};

const MAX_RECORD: u64 = 1 << 28; // the capture reader's largest record
const CACHE_MAX: usize = 1 << 20;

/// One range: (start, end, frames, preamble); no start is the whole file through its reader.
pub type Cut = (Option<u64>, Option<u64>, Option<u64>, Vec<u8>);

/// A connection's two ends in order.
type ConnKey = (Rc<str>, u16, Rc<str>, u16);

fn u32_of(b: &[u8], big: bool) -> u32 {
    let x = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

/// The ranges of a file, or None when it is one range read whole.
pub fn split(path: &str, target: u64) -> std::io::Result<Option<Vec<Cut>>> {
    let mut f = File::open(path)?;
    let size = f.metadata()?.len();
    let mut head = Vec::with_capacity(24);
    (&mut f).take(24).read_to_end(&mut head)?;
    let magic = (head.len() >= 4).then(|| u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    let mut f = BufReader::with_capacity(1 << 16, f);
    if let (Some((big, _, hlen)), 24) = (pcap_magic(magic), head.len()) {
        return split_pcap(&mut f, size, head, big, hlen as u64, target).map(Some);
    }
    if magic == Some(PCAPNG_SHB) {
        return split_pcapng(&mut f, head.len() as u64, size, target);
    }
    Ok(None)
}

/// Moves `f` (whose position is `at`) to `pos`, within its buffer when it can.
fn goto(f: &mut BufReader<File>, at: &mut u64, pos: u64) -> std::io::Result<()> {
    if pos != *at {
        f.seek_relative(pos as i64 - *at as i64)?;
        *at = pos;
    }
    Ok(())
}

fn read_at(f: &mut BufReader<File>, at: &mut u64, pos: u64, buf: &mut [u8]) -> std::io::Result<()> {
    goto(f, at, pos)?;
    f.read_exact(buf)?;
    *at += buf.len() as u64;
    Ok(())
}

fn split_pcap(
    f: &mut BufReader<File>,
    size: u64,
    head: Vec<u8>,
    big: bool,
    hlen: u64,
    target: u64,
) -> std::io::Result<Vec<Cut>> {
    let mut out = Vec::new();
    let (mut start, mut pos, mut n) = (24u64, 24u64, 0u64);
    let mut at = 24u64;
    let mut h = [0u8; 24];
    while pos + hlen <= size {
        read_at(f, &mut at, pos, &mut h[..hlen as usize])?;
        let caplen = u32_of(&h[8..12], big) as u64;
        if caplen > MAX_RECORD || pos + hlen + caplen > size {
            break; // the reader of the last range reports it
        }
        if pos - start >= target {
            out.push((Some(start), Some(pos), Some(n), head.clone()));
            (start, n) = (pos, 0);
        }
        pos += hlen + caplen;
        n += 1;
    }
    out.push((Some(start), Some(size), (pos >= size).then_some(n), head));
    Ok(out)
}

fn split_pcapng(
    f: &mut BufReader<File>,
    at: u64,
    size: u64,
    target: u64,
) -> std::io::Result<Option<Vec<Cut>>> {
    let mut out = Vec::new();
    let mut preamble: Vec<u8> = Vec::new(); // the SHB and IDBs in force
    let mut start: Option<u64> = None;
    let mut start_pre: Vec<u8> = Vec::new();
    let (mut pos, mut n, mut at) = (0u64, 0u64, at);
    let mut big = false;
    let mut h = [0u8; 12];
    while pos + 12 <= size {
        read_at(f, &mut at, pos, &mut h)?;
        if u32_of(&h[0..4], false) == PCAPNG_SHB {
            big = h[8..12] != [0x4d, 0x3c, 0x2b, 0x1a];
        }
        let blen = u32_of(&h[4..8], big) as u64;
        let btype = u32_of(&h[0..4], big);
        if blen < 12 || !blen.is_multiple_of(4) || blen > MAX_RECORD || pos + blen > size {
            break;
        }
        if btype == PCAPNG_SHB || btype == 1 {
            let mut block = vec![0u8; blen as usize];
            read_at(f, &mut at, pos, &mut block)?;
            if btype == PCAPNG_SHB {
                preamble.clear();
            }
            preamble.extend_from_slice(&block);
        } else if matches!(btype, 2 | 3 | 6) {
            match start {
                None => (start, start_pre) = (Some(0), Vec::new()), // the first range reads the file from its start
                Some(s) if pos - s >= target => {
                    out.push((Some(s), Some(pos), Some(n), std::mem::take(&mut start_pre)));
                    (start, start_pre, n) = (Some(pos), preamble.clone(), 0);
                }
                Some(_) => {}
            }
            n += 1;
        }
        pos += blen;
    }
    let Some(s) = start else { return Ok(None) };
    out.push((Some(s), Some(size), (pos >= size).then_some(n), start_pre));
    Ok(Some(out))
}

/// The text landing.spark's _bucket hashes: repr(conn_key(pkt)), the 4-tuple's two ends in
/// order, ((host, port), (host, port)).
fn key_repr(a: (&str, u16), b: (&str, u16)) -> String {
    let (a, b) = if a <= b { (a, b) } else { (b, a) };
    format!("(('{}', {}), ('{}', {}))", a.0, a.1, b.0, b.1)
}

/// landing.spark._bucket(conn_key(pkt), n): zlib.crc32(repr(key).encode()) % n.
pub fn bucket(a: (&str, u16), b: (&str, u16), n: u32) -> u32 {
    crc32fast::hash(key_repr(a, b).as_bytes()) % n
}

/// Each connection's bucket (either direction), its hash computed once per 4-tuple.
pub struct ConnBuckets {
    n: u32,
    conns: HashMap<ConnKey, u32, KeyHash>,
}

impl ConnBuckets {
    pub fn new(n: u32) -> Self {
        ConnBuckets {
            n: n.max(1),
            conns: HashMap::default(),
        }
    }

    pub fn of(&mut self, p: &Packet) -> u32 {
        let key = if (&*p.src, p.sport) <= (&*p.dst, p.dport) {
            (p.src.clone(), p.sport, p.dst.clone(), p.dport)
        } else {
            (p.dst.clone(), p.dport, p.src.clone(), p.sport)
        };
        if let Some(&b) = self.conns.get(&key) {
            return b;
        }
        let b = bucket((&key.0, key.1), (&key.2, key.3), self.n);
        if self.conns.len() > CACHE_MAX {
            self.conns.clear();
        }
        self.conns.insert(key, b);
        b
    }
}

/// The columns of a packet batch, in dissector.ranges.PACKET_SCHEMA's order: a Packet's fields,
/// or for a capture anomaly its ts and index with `anomaly` (its kind) and `detail` set.
pub struct PacketCols {
    cols: Vec<Col>,
    payload: usize,
    /// payloads read from a range's window leave as (at, size), their bytes staying in the file
    refs: bool,
}

impl PacketCols {
    pub fn new(refs: bool) -> Self {
        PacketCols {
            cols: vec![
                Col::f64(),    // ts
                Col::str(),    // src
                Col::i32(),    // sport
                Col::str(),    // dst
                Col::i32(),    // dport
                Col::i64(),    // seq
                Col::i64(),    // ack
                Col::i16(),    // flags
                Col::binary(), // payload
                Col::i64(),    // missing
                Col::i64(),    // index
                Col::str(),    // anomaly
                Col::str(),    // detail
                Col::i64(),    // at
                Col::i32(),    // size
            ],
            payload: 0,
            refs,
        }
    }

    pub fn len(&self) -> usize {
        self.cols[0].len()
    }

    pub fn packet(&mut self, p: &Packet) {
        let c = &mut self.cols;
        c[0].float(Some(p.ts));
        c[1].text(Some(&p.src));
        c[2].int(Some(p.sport as i64));
        c[3].text(Some(&p.dst));
        c[4].int(Some(p.dport as i64));
        c[5].int(Some(p.seq as i64));
        c[6].int(Some(p.ack as i64));
        c[7].int(Some(p.flags as i64));
        let by_ref = self.refs && p.at >= 0;
        c[8].bytes(Some(if by_ref { b"" } else { &p.payload }));
        c[9].int(Some(p.missing));
        c[10].int(Some(p.index as i64));
        c[11].text(None);
        c[12].text(None);
        c[13].int(Some(if by_ref { p.at } else { -1 }));
        c[14].int(Some(p.payload.len() as i64));
        if !by_ref {
            self.payload += p.payload.len();
        }
    }

    pub fn anomaly(&mut self, a: &CaptureAnomaly) {
        let c = &mut self.cols;
        c[0].float(Some(a.ts));
        c[1].text(Some(""));
        c[2].int(Some(0));
        c[3].text(Some(""));
        for col in &mut c[4..8] {
            col.int(Some(0));
        }
        c[8].bytes(Some(b""));
        c[9].int(Some(0));
        c[10].int(Some(a.index as i64));
        c[11].text(Some(&a.kind));
        c[12].text(Some(&a.detail));
        c[13].int(Some(-1));
        c[14].int(Some(0));
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (rows, columns), the columns emptied.
    pub fn take(&mut self) -> (usize, Vec<Col>) {
        let n = self.len();
        self.payload = 0;
        (n, self.cols.iter_mut().map(Col::take).collect())
    }
}

/// Spark's stage 1 over one range: each record read goes to the bucket of its connection's
/// 4-tuple (anomalies to bucket 0), as packet-batch columns; a bucket's chunk is ready whenever
/// it holds `chunk_rows` rows or `chunk_bytes` payload bytes, and what the buckets hold at the
/// end is ready in bucket order. `keep`: only that bucket's rows.
pub struct Buckets {
    keep: Option<u32>,
    chunk_rows: usize,
    chunk_bytes: usize,
    cols: Vec<PacketCols>,
    chunk: Vec<u64>,
    ready: VecDeque<(u32, u64)>,
    conns: ConnBuckets,
    /// the last packet's time and the latest packet time, of the packets read so far
    pub last: Option<f64>,
    pub top: Option<f64>,
    done: bool,
}

impl Buckets {
    /// None when `buckets` is 0.
    pub fn new(
        buckets: u32,
        keep: Option<u32>,
        chunk_rows: usize,
        chunk_bytes: usize,
        refs: bool,
    ) -> Option<Self> {
        if buckets == 0 {
            return None;
        }
        let n = buckets as usize;
        Some(Buckets {
            keep,
            chunk_rows: chunk_rows.max(1),
            chunk_bytes,
            cols: (0..n).map(|_| PacketCols::new(refs)).collect(),
            chunk: vec![0; n],
            ready: VecDeque::new(),
            conns: ConnBuckets::new(buckets),
            last: None,
            top: None,
            done: false,
        })
    }

    /// After a row went into bucket b: is its chunk full?
    fn filled(&mut self, b: u32) {
        let c = &self.cols[b as usize];
        if c.len() >= self.chunk_rows || c.payload >= self.chunk_bytes {
            self.ready.push_back((b, self.chunk[b as usize]));
            self.chunk[b as usize] += 1;
        }
    }

    /// One record of the range.
    pub fn push(&mut self, rec: Rec) {
        match rec {
            Rec::Idle => {} // a range is a file: it never waits
            Rec::Anomaly(a) => {
                if self.keep.unwrap_or(0) == 0 {
                    self.cols[0].anomaly(&a);
                    self.filled(0);
                }
            }
            Rec::Packet(p) => {
                let ts = p.ts;
                self.last = Some(ts);
                if self.top.is_none_or(|t| ts > t) {
                    self.top = Some(ts);
                }
                let b = self.conns.of(&p);
                if self.keep.is_none_or(|k| k == b) {
                    self.cols[b as usize].packet(&p);
                    self.filled(b);
                }
            }
        }
    }

    /// The range is read: what every bucket holds is ready.
    pub fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        for i in 0..self.cols.len() {
            if !self.cols[i].is_empty() {
                self.ready.push_back((i as u32, self.chunk[i]));
                self.chunk[i] += 1;
            }
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// The next ready chunk: (bucket, chunk number, rows, columns).
    pub fn next_chunk(&mut self) -> Option<(u32, u64, usize, Vec<Col>)> {
        let (b, c) = self.ready.pop_front()?;
        let (n, cols) = self.cols[b as usize].take();
        Some((b, c, n, cols))
    }
}
