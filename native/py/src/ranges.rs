//! Byte ranges of one capture file (dissector/ranges.py's engine): cut at record
//! boundaries, each read on its own, and a range's packets as the rows landing.spark's
//! stage 1 ships, already bucketed per connection.
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

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::arrow::ArrowColumn;
use crate::arrow::Col;

use crate::capture::{KeyHash, PacketReader, RangeSpec, Rec};

const MAX_RECORD: u64 = 1 << 28; // capture._MAX_RECORD
const PCAPNG_SHB: u32 = 0x0A0D0D0A;
const CACHE_MAX: usize = 1 << 20;

/// One range: (start, end, frames, preamble); no start is the whole file through its reader.
type Cut = (Option<u64>, Option<u64>, Option<u64>, Vec<u8>);

/// A connection's two ends in order (landing.stitch.conn_key).
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
fn split(path: &str, target: u64) -> std::io::Result<Option<Vec<Cut>>> {
    let mut f = File::open(path)?;
    let size = f.metadata()?.len();
    let mut head = Vec::with_capacity(24);
    (&mut f).take(24).read_to_end(&mut head)?;
    let magic = (head.len() >= 4).then(|| u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    let mut f = BufReader::with_capacity(1 << 16, f);
    let pcap = match magic {
        Some(0xA1B2C3D4 | 0xA1B23C4D) => Some((false, 16)),
        Some(0xD4C3B2A1 | 0x4D3CB2A1) => Some((true, 16)),
        Some(0xA1B2CD34) => Some((false, 24)),
        Some(0x34CDB2A1) => Some((true, 24)),
        _ => None,
    };
    if let (Some((big, hlen)), 24) = (pcap, head.len()) {
        return split_pcap(&mut f, size, head, big, hlen, target).map(Some);
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

/// dissector.ranges.split_ranges: ranges of about `target_bytes` each, at record (pcap) or
/// packet-block (pcapng) boundaries, as (start, end, frames, preamble) tuples; a file read
/// whole (compressed, unreadable, bad headers, no packet blocks) is [(None, None, None, b"")].
#[pyfunction]
fn split_ranges<'py>(
    py: Python<'py>,
    path: &str,
    target_bytes: u64,
) -> PyResult<Bound<'py, PyList>> {
    let cuts = py
        .detach(|| split(path, target_bytes))
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![(None, None, None, Vec::new())]);
    let out = PyList::empty(py);
    for (start, end, frames, pre) in cuts {
        out.append((start, end, frames, PyBytes::new(py, &pre)))?;
    }
    Ok(out)
}

// the range's own fields as the Python side holds them, then the opener and its errors: a struct
// here would only repeat the two callers' argument lists
#[allow(clippy::too_many_arguments)]
fn reader(
    path: String,
    start: Option<u64>,
    end: Option<u64>,
    preamble: &[u8],
    order: usize,
    index: u64,
    opener: Py<PyAny>,
    file_errors: Py<PyTuple>,
) -> PacketReader {
    let spec = match (start, end) {
        // ranges._range_records: the first range of a pcapng reads the file from 0, as it is
        (Some(start), Some(end)) => Some(RangeSpec {
            start,
            end,
            prefix: if start == 0 {
                Vec::new()
            } else {
                preamble.to_vec()
            },
        }),
        _ => None,
    };
    PacketReader::range(path, spec, order, index, opener, file_errors)
}

/// The frames (records that are not faults) of one range, or of the whole file without a start.
#[pyfunction]
#[pyo3(signature = (path, start, end, preamble, order, opener, file_errors))]
#[allow(clippy::too_many_arguments)] // positional like the reader it feeds; the typed stub names them
fn count_frames(
    py: Python<'_>,
    path: String,
    start: Option<u64>,
    end: Option<u64>,
    preamble: &[u8],
    order: usize,
    opener: Py<PyAny>,
    file_errors: Py<PyTuple>,
) -> PyResult<u64> {
    let mut r = reader(path, start, end, preamble, order, 0, opener, file_errors);
    while r.next(py)?.is_some() {}
    Ok(r.frames())
}

/// The text landing.spark's _bucket hashes: repr(conn_key(pkt)), the 4-tuple's two ends in
/// order, ((host, port), (host, port)).
fn key_repr(a: (&str, u16), b: (&str, u16)) -> String {
    let (a, b) = if a <= b { (a, b) } else { (b, a) };
    format!("(('{}', {}), ('{}', {}))", a.0, a.1, b.0, b.1)
}

/// landing.spark._bucket(conn_key(pkt), n): zlib.crc32(repr(key).encode()) % n.
fn bucket(a: (&str, u16), b: (&str, u16), n: u32) -> u32 {
    crc32fast::hash(key_repr(a, b).as_bytes()) % n
}

/// The bucket of a connection (either direction), as the range scans compute it.
#[pyfunction]
fn bucket_of(src: &str, sport: u16, dst: &str, dport: u16, n: u32) -> u32 {
    bucket((src, sport), (dst, dport), n)
}

/// The columns of a packet batch, in dissector.ranges.PACKET_SCHEMA's order: a Packet's fields,
/// or for a capture anomaly its ts and index with `anomaly` (its kind) and `detail` set.
struct PacketCols {
    cols: Vec<Col>,
    payload: usize,
    /// payloads read from a range's window leave as (at, size), their bytes staying in the file
    refs: bool,
}

impl PacketCols {
    fn new(refs: bool) -> Self {
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

    fn len(&self) -> usize {
        self.cols[0].len()
    }

    fn packet(&mut self, p: &crate::capture::Packet) {
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

    fn anomaly(&mut self, a: &crate::capture::CaptureAnomaly) {
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

    /// (rows, [columns]) for pyarrow (arrow.rs's ArrowColumn), the columns emptied.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.len();
        let specs = PyList::empty(py);
        for c in &mut self.cols {
            specs.append(ArrowColumn::new(c.take()))?;
        }
        self.payload = 0;
        (n, specs).into_pyobject(py)
    }
}

/// landing.spark's stage 1: the packets of a range as columns (dissector.ranges.PACKET_SCHEMA),
/// each connection's in the bucket of its 4-tuple (anomalies in bucket 0), yielded as
/// (bucket, chunk number, (rows, column specs)) whenever a bucket holds `chunk_rows` rows or
/// `chunk_bytes` payload bytes, then what the buckets hold at the end in bucket order. No Python
/// object is made per packet. `keep`: only that bucket's rows. `ends`: (the last packet's
/// time, the latest packet time) of every packet read, None before the first. `refs`: a
/// payload read from the file's bytes leaves as its place there (`at`, `size`), not its bytes.
#[pyclass(unsendable, module = "dissector._native")]
pub struct RangeScan {
    reader: PacketReader,
    n: u32,
    keep: Option<u32>,
    chunk_rows: usize,
    chunk_bytes: usize,
    cols: Vec<PacketCols>,
    chunk: Vec<u64>,
    ready: VecDeque<(u32, u64)>,
    conns: HashMap<ConnKey, u32, KeyHash>,
    last: Option<f64>,
    top: Option<f64>,
    done: bool,
}

impl RangeScan {
    /// After a row went into bucket b: is its chunk full?
    fn filled(&mut self, b: u32) {
        let c = &self.cols[b as usize];
        if c.len() >= self.chunk_rows || c.payload >= self.chunk_bytes {
            self.ready.push_back((b, self.chunk[b as usize]));
            self.chunk[b as usize] += 1;
        }
    }

    /// Reads one record into the buckets; false at the end of the range.
    fn step(&mut self, py: Python<'_>) -> PyResult<bool> {
        let Some(rec) = self.reader.next(py)? else {
            return Ok(false);
        };
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
                let key = if (&*p.src, p.sport) <= (&*p.dst, p.dport) {
                    (p.src.clone(), p.sport, p.dst.clone(), p.dport)
                } else {
                    (p.dst.clone(), p.dport, p.src.clone(), p.sport)
                };
                let b = match self.conns.get(&key) {
                    Some(&b) => b,
                    None => {
                        let b = bucket((&key.0, key.1), (&key.2, key.3), self.n);
                        if self.conns.len() > CACHE_MAX {
                            self.conns.clear();
                        }
                        self.conns.insert(key, b);
                        b
                    }
                };
                if self.keep.is_none_or(|k| k == b) {
                    self.cols[b as usize].packet(&p);
                    self.filled(b);
                }
            }
        }
        Ok(true)
    }
}

#[pymethods]
impl RangeScan {
    #[new]
    #[pyo3(signature = (*, path, start, end, preamble, order, index, buckets, opener, file_errors, keep=None, chunk_rows=4096, chunk_bytes=1<<20, refs=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        path: String,
        start: Option<u64>,
        end: Option<u64>,
        preamble: &[u8],
        order: usize,
        index: u64,
        buckets: u32,
        opener: Py<PyAny>,
        file_errors: Py<PyTuple>,
        keep: Option<u32>,
        chunk_rows: usize,
        chunk_bytes: usize,
        refs: bool,
    ) -> PyResult<Self> {
        if buckets == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "buckets must be at least 1",
            ));
        }
        let n = buckets as usize;
        Ok(RangeScan {
            reader: reader(
                path,
                start,
                end,
                preamble,
                order,
                index,
                opener,
                file_errors,
            ),
            n: buckets,
            keep,
            chunk_rows: chunk_rows.max(1),
            chunk_bytes,
            cols: (0..n).map(|_| PacketCols::new(refs)).collect(),
            chunk: vec![0; n],
            ready: VecDeque::new(),
            conns: HashMap::default(),
            last: None,
            top: None,
            done: false,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        loop {
            if let Some((b, c)) = self.ready.pop_front() {
                let cols = self.cols[b as usize].take(py)?;
                return Ok(Some((b, c, cols).into_pyobject(py)?));
            }
            if self.done {
                return Ok(None);
            }
            if !self.step(py)? {
                self.done = true;
                for i in 0..self.cols.len() {
                    if self.cols[i].len() > 0 {
                        self.ready.push_back((i as u32, self.chunk[i]));
                        self.chunk[i] += 1;
                    }
                }
            }
        }
    }

    /// (the last packet's time, the latest packet time) of the packets read so far.
    #[getter]
    fn ends(&self) -> (Option<f64>, Option<f64>) {
        (self.last, self.top)
    }

    /// The frames read so far, counted from the range's first index.
    #[getter]
    fn frames(&self) -> u64 {
        self.reader.frames()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(split_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(count_frames, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_of, m)?)?;
    m.add_class::<RangeScan>()?;
    Ok(())
}
