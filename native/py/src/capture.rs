//! Capture files -> TCP packets (pcap, pcapng, compressed), faults as anomalies with offsets.
//!
//! Files are read only through the Python file object `opener(path)` returns
//! (capture._open), with the same calls in the same order as capture.py makes:
//! `read(4)`, `read(20)`, then `read1(n)` with _units' n, and the `with` block's
//! `__enter__` / `__exit__`. So gzip/bz2/xz, every OSError and every partial read
//! behave as in Python, and the fault records carry Python's own messages.
//! A byte range of an uncompressed file (ranges.rs, dissector/ranges.py) is read
//! natively instead: its preamble, then the file's bytes [start, end), through a
//! `Window` behind the same readers.
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};
use kafkawire_core::anomalies::kind;
pub use kafkawire_core::packet::*;
use pyo3::exceptions::{PyEOFError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

const CHUNK: usize = 1 << 20;
const CHUNK_MAX: usize = 4 << 20;
const MAX_RECORD: u64 = 1 << 28; // a record bigger than this is corruption, not a packet
const PCAPNG_SHB: u32 = 0x0A0D0D0A;
const IP_CACHE_MAX: usize = 65536;

// ---------------------------------------------------------------- address text

/// capture._ip_cache: address bytes -> text, bounded (a scan with many addresses must
/// not grow memory). Python shares one dict between v4 and v6; two maps of the same
/// bound behave the same for the output.
#[derive(Default)]
struct IpCache {
    v4: HashMap<u32, Rc<str>, KeyHash>,
    v6: HashMap<u128, Rc<str>, KeyHash>,
}

/// One text per address, the cache emptied when it outgrows IP_CACHE_MAX.
fn cached<K: std::hash::Hash + Eq>(
    m: &mut HashMap<K, Rc<str>, KeyHash>,
    k: K,
    text: impl FnOnce() -> String,
) -> Rc<str> {
    if let Some(s) = m.get(&k) {
        return s.clone();
    }
    if m.len() > IP_CACHE_MAX {
        m.clear();
    }
    let s: Rc<str> = Rc::from(text());
    m.insert(k, s.clone());
    s
}

impl IpCache {
    fn v4(&mut self, b: &[u8]) -> Rc<str> {
        let k = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        cached(&mut self.v4, k, || {
            format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
        })
    }

    fn v6(&mut self, b: &[u8]) -> Rc<str> {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        cached(&mut self.v6, u128::from_be_bytes(a), || ip6_text(&a))
    }
}

// ---------------------------------------------------------------- file readers

/// Why a file's reading stopped: one of capture.py's _Fault, or a Python exception
/// (classified as _file_records' `except` clause does, once the `with` block is left).
enum Stop {
    Fault(&'static str, String),
    Py(PyErr),
    /// a live stream has nothing to read now (its read1 gave None): the file stays open, mid-record
    /// state kept, and the caller hears of it (Rec::Idle)
    Idle,
}

impl From<PyErr> for Stop {
    fn from(e: PyErr) -> Self {
        Stop::Py(e)
    }
}

/// (ts, order, linktype, frame) or (ts, order, -1, (kind, detail)), as capture.py's readers yield.
struct RawRec {
    ts: f64,
    order: usize,
    body: Body,
    /// the frame's first byte's offset in the file (a range's window), else -1
    at: i64,
}

enum Body {
    Frame(u32, Bytes),
    Fault(&'static str, String),
    /// a Decryption Secrets Block's TLS key log (tls.rs reads it)
    Secrets(Bytes),
    /// Stop::Idle, passed up
    Idle,
}

/// pcapng's Decryption Secrets Block, and its secrets type for an NSS TLS key log ("TLSK")
const PCAPNG_DSB: u32 = 0x0000_000A;
const DSB_TLS_KEY_LOG: u32 = 0x544c_534b;

#[inline]
fn u16_at(b: &[u8], at: usize, big: bool) -> u16 {
    let x = [b[at], b[at + 1]];
    if big {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    }
}

#[inline]
fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{:02x}", x);
    }
    s
}

/// A capture's file fault as _file_records reports it, or the exception itself when
/// capture.py lets it propagate. errors: the other exception types a damaged file raises
/// (capture.FILE_ERRORS: the decompressors' errors), handed over with the opener.
fn classify(
    py: Python<'_>,
    path: &str,
    e: PyErr,
    errors: Option<&Bound<'_, PyTuple>>,
) -> PyResult<(&'static str, String)> {
    let v = e.value(py);
    let mut caught = e.is_instance_of::<PyOSError>(py)
        || e.is_instance_of::<PyEOFError>(py)
        || e.is_instance_of::<PyValueError>(py);
    if !caught {
        if let Some(errors) = errors {
            caught = v.is_instance(errors)?;
        }
    }
    if !caught {
        return Err(e);
    }
    let kind = if e.is_instance_of::<PyEOFError>(py) {
        kind::TRUNCATED_FILE
    } else {
        kind::CORRUPT_FILE
    };
    let name = e.get_type(py).name()?;
    let text = v.str()?;
    Ok((kind, format!("{path}: {name}: {text}")))
}

/// Bytes from a file method's result (bytes, or whatever bytes-like a file object gives).
fn py_bytes<'a>(v: &'a Bound<'_, PyAny>, tmp: &'a mut Vec<u8>) -> PyResult<&'a [u8]> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    *tmp = v.extract::<Vec<u8>>()?;
    Ok(&tmp[..])
}

/// Timestamp resolution of a pcapng interface: 2**k or 10**n (k, n <= 127).
#[derive(Clone, Copy)]
enum Res {
    Pow2(u32),
    Pow10(u32),
}

const POW10: [u64; 20] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
    10_000_000_000_000_000_000,
];

const POW10F: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

const EXACT: u64 = 1 << 53;

/// `units // div + (units % div) / div + tsoff` with Python's unbounded ints and correctly
/// rounded int/int division: exact in f64 when both operands of the division are
/// (every power of two; 10**n up to n = 22 with a remainder below 2**53); otherwise
/// Python does the arithmetic.
fn pcapng_ts(py: Python<'_>, units: u64, res: Res, tsoff: f64) -> PyResult<f64> {
    match res {
        Res::Pow2(k) => {
            let (q, r) = if k == 0 {
                (units, 0)
            } else if k < 64 {
                (units >> k, units & ((1u64 << k) - 1))
            } else {
                (0, units)
            };
            // r as f64 rounds to nearest even; dividing by 2**k is exact scaling (k <= 127)
            let frac = r as f64 / f64::from_bits((1023 + k as u64) << 52);
            Ok(q as f64 + frac + tsoff)
        }
        Res::Pow10(n) => {
            let (q, r) = if (n as usize) < POW10.len() {
                let d = POW10[n as usize];
                (units / d, units % d)
            } else {
                (0, units) // 10**n > 2**64 > units
            };
            if n <= 22 && r < EXACT {
                let frac = r as f64 / POW10F[n as usize]; // 10**n is exact in f64 up to n = 22
                Ok(q as f64 + frac + tsoff)
            } else {
                let u = units.into_pyobject(py)?;
                let d = 10u32.into_pyobject(py)?.pow(n, py.None())?;
                let t = u.floor_div(&d)?.add(u.rem(&d)?.div(&d)?)?.add(tsoff)?;
                t.extract::<f64>()
            }
        }
    }
}

struct Iface {
    linktype: u32,
    res: Res,
    tsoff: f64,
    snaplen: u32,
}

enum Fmt {
    /// _pcap: byte order, fraction divisor, record header size, link type
    Pcap {
        big: bool,
        div: u32,
        hlen: usize,
        linktype: u32,
    },
    /// _pcapng: the section's byte order, its interfaces, the last EPB time (SPBs reuse it)
    Ng {
        big: bool,
        ifaces: Vec<Iface>,
        ts: f64,
    },
}

/// _units' state: `buf` is Python's buf (the file from `offset` on, what has been read),
/// `pos` the next unit's start in it.
struct Units {
    buf: Bytes,
    pos: usize,
    offset: u64,
    hlen: usize,
    what: &'static str,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum FState {
    Start,
    Body,
    Done,
}

/// capture._file_records(path, order) as a resumable reader.
struct FileRecords {
    /// the name in messages (the file name's bytes as UTF-8, lossily)
    path: Rc<str>,
    /// the file name's bytes (os.fsencode): the opener is given them as str when they are
    /// UTF-8, else as bytes
    raw: Rc<[u8]>,
    order: usize,
    state: FState,
    /// what the opener returned (its __exit__ ends the `with`) and what __enter__ gave
    mgr: Option<Py<PyAny>>,
    f: Option<Py<PyAny>>,
    fmt: Option<Fmt>,
    units: Units,
    ts: f64,
    n: u64,
    /// a byte range of an uncompressed file (dissector.ranges), read natively: what to read
    /// before the start, and then the open window
    range: Option<RangeSpec>,
    win: Option<Window>,
    is_range: bool,
    /// a range's (start in the file, prefix length): a stream offset's place in the file
    base: Option<(u64, u64)>,
}

impl FileRecords {
    fn new((path, raw): (Rc<str>, Rc<[u8]>), order: usize) -> Self {
        FileRecords {
            path,
            raw,
            order,
            state: FState::Start,
            mgr: None,
            f: None,
            range: None,
            win: None,
            is_range: false,
            base: None,
            fmt: None,
            units: Units {
                buf: Bytes::new(),
                pos: 0,
                offset: 0,
                hlen: 0,
                what: "record",
            },
            ts: 0.0,
            n: 0,
        }
    }

    fn next_rec(
        &mut self,
        py: Python<'_>,
        opener: &Bound<'_, PyAny>,
        errors: &Bound<'_, PyTuple>,
    ) -> PyResult<Option<RawRec>> {
        if self.state == FState::Done {
            return Ok(None);
        }
        match self.step(py, opener) {
            Ok(Some(rec)) => {
                self.ts = rec.ts;
                self.n += 1;
                Ok(Some(rec))
            }
            Ok(None) => {
                let stop = if self.n == 0 && !self.is_range {
                    Some(Stop::Fault(
                        kind::EMPTY_FILE,
                        format!("{}: a capture with no packets", self.path),
                    ))
                } else {
                    None
                };
                self.end(py, stop, Some(errors))
            }
            Err(Stop::Idle) => Ok(Some(RawRec {
                ts: self.ts,
                order: self.order,
                body: Body::Idle,
                at: -1,
            })),
            Err(stop) => self.end(py, Some(stop), Some(errors)),
        }
    }

    /// Leave the `with` block (the file's __exit__), then what the except clauses make of `stop`.
    fn end(
        &mut self,
        py: Python<'_>,
        mut stop: Option<Stop>,
        errors: Option<&Bound<'_, PyTuple>>,
    ) -> PyResult<Option<RawRec>> {
        self.state = FState::Done;
        self.f = None;
        self.win = None;
        self.units.buf = Bytes::new();
        if let Some(mgr) = self.mgr.take() {
            let mgr = mgr.into_bound(py);
            let res = match &stop {
                Some(Stop::Py(e)) => {
                    mgr.call_method1("__exit__", (e.get_type(py), e.value(py), e.traceback(py)))
                }
                _ => mgr.call_method1("__exit__", (py.None(), py.None(), py.None())),
            };
            // the `with` asks __exit__'s result only when an exception is in flight
            match res.and_then(|v| {
                if stop.is_some() {
                    v.is_truthy()
                } else {
                    Ok(false)
                }
            }) {
                Ok(true) => stop = None,
                Ok(false) => {}
                Err(e) => stop = Some(Stop::Py(e)),
            }
        }
        let (kind, detail) = match stop {
            None => return Ok(None),
            Some(Stop::Fault(kind, detail)) => (kind, detail),
            Some(Stop::Py(e)) => classify(py, &self.path, e, errors)?,
            Some(Stop::Idle) => return Ok(None), // next_rec keeps the file open on Idle
        };
        Ok(Some(RawRec {
            ts: self.ts,
            order: self.order,
            body: Body::Fault(kind, detail),
            at: -1,
        }))
    }

    /// _start_ts closing the generator after its first record: the `with` exits, nothing else.
    fn close_early(&mut self, py: Python<'_>) {
        let _ = self.end(py, None, None); // what __exit__ raises there is dropped, as a closed generator drops it
    }

    fn step(&mut self, py: Python<'_>, opener: &Bound<'_, PyAny>) -> Result<Option<RawRec>, Stop> {
        if self.state == FState::Start {
            self.state = FState::Body;
            self.start(opener)?;
        }
        let f = self.f.as_ref().map(|f| f.clone_ref(py).into_bound(py));
        let mut src = match (&f, self.win.as_mut()) {
            (Some(f), _) => Src::Py(f),
            (None, Some(w)) => Src::Win(w),
            (None, None) => return Ok(None),
        };
        let path = self.path.clone();
        let order = self.order;
        let base = self.base;
        // the file offset of stream offset `o` (frames never sit in the prefix)
        let file_at =
            |o: u64| base.map_or(-1, |(start, pre)| (start + o).saturating_sub(pre) as i64);
        let Some(fmt) = self.fmt.as_mut() else {
            return Ok(None);
        };
        loop {
            let Some((pos, end, offset)) = units_next(&mut self.units, &mut src, fmt, &path)?
            else {
                return Ok(None);
            };
            let buf = &self.units.buf;
            match fmt {
                Fmt::Pcap {
                    big,
                    div,
                    hlen,
                    linktype,
                } => {
                    let sec = u32_at(buf, pos, *big);
                    let frac = u32_at(buf, pos + 4, *big);
                    let ts = sec as f64 + frac as f64 / *div as f64;
                    return Ok(Some(RawRec {
                        ts,
                        order,
                        body: Body::Frame(*linktype, buf.slice(pos + *hlen..end)),
                        at: file_at(offset + (pos + *hlen) as u64),
                    }));
                }
                Fmt::Ng { big, ifaces, ts } => {
                    let big = *big;
                    let btype = u32_at(buf, pos, big);
                    let blen = end - pos;
                    let at = offset + pos as u64;
                    if btype == PCAPNG_SHB {
                        ifaces.clear();
                    }
                    if u32_at(buf, end - 4, big) as usize != blen {
                        return Err(Stop::Fault(
                            kind::CORRUPT_FILE,
                            format!("{path}: block at offset {at}: trailing length mismatch"),
                        ));
                    }
                    // capture._MIN_BLOCK: the bytes a block needs for the fields read from it
                    let least = match btype {
                        1 => 20,
                        2 | 6 => 32,
                        3 => 16,
                        _ => 12,
                    };
                    if blen < least {
                        return Err(Stop::Fault(
                            kind::CORRUPT_FILE,
                            format!("{path}: bad block length {blen} at offset {at} (too short for block type {btype})"),
                        ));
                    }
                    if btype == 6 || btype == 2 {
                        let iface = if btype == 6 {
                            u32_at(buf, pos + 8, big)
                        } else {
                            u16_at(buf, pos + 8, big) as u32
                        };
                        let hi = u32_at(buf, pos + 12, big);
                        let lo = u32_at(buf, pos + 16, big);
                        let caplen = u32_at(buf, pos + 20, big);
                        if iface as usize >= ifaces.len() {
                            return Err(Stop::Fault(
                                kind::CORRUPT_FILE,
                                format!("{path}: packet for undeclared interface {iface} at offset {at}"),
                            ));
                        }
                        if 28 + caplen as u64 > blen as u64 {
                            return Err(Stop::Fault(
                                kind::CORRUPT_FILE,
                                format!("{path}: packet at offset {at} overruns its block"),
                            ));
                        }
                        let i = &ifaces[iface as usize];
                        let units = ((hi as u64) << 32) | lo as u64;
                        *ts = pcapng_ts(py, units, i.res, i.tsoff)?;
                        return Ok(Some(RawRec {
                            ts: *ts,
                            order,
                            body: Body::Frame(
                                i.linktype,
                                buf.slice(pos + 28..pos + 28 + caplen as usize),
                            ),
                            at: file_at(offset + (pos + 28) as u64),
                        }));
                    } else if btype == 3 {
                        let Some(i) = ifaces.first() else {
                            return Err(Stop::Fault(
                                kind::CORRUPT_FILE,
                                format!(
                                    "{path}: simple packet before any interface at offset {at}"
                                ),
                            ));
                        };
                        let orig = u32_at(buf, pos + 8, big) as i64;
                        let snap = if i.snaplen != 0 {
                            i.snaplen as i64
                        } else {
                            orig
                        };
                        let caplen = orig.min(snap).min(blen as i64 - 16);
                        let frame = if caplen > 0 {
                            buf.slice(pos + 12..pos + 12 + caplen as usize)
                        } else {
                            Bytes::new()
                        };
                        return Ok(Some(RawRec {
                            ts: *ts,
                            order,
                            body: Body::Frame(i.linktype, frame),
                            at: file_at(offset + (pos + 12) as u64),
                        }));
                    } else if btype == PCAPNG_DSB && blen >= 20 {
                        let stype = u32_at(buf, pos + 8, big);
                        let slen = u32_at(buf, pos + 12, big) as usize;
                        if stype == DSB_TLS_KEY_LOG && 16 + slen <= blen - 4 {
                            return Ok(Some(RawRec {
                                ts: *ts,
                                order,
                                body: Body::Secrets(buf.slice(pos + 16..pos + 16 + slen)),
                                at: -1,
                            }));
                        }
                    } else if btype == 1 {
                        let linktype = u16_at(buf, pos + 8, big) as u32;
                        let snaplen = u32_at(buf, pos + 12, big);
                        let (mut res, mut tsoff) = (Res::Pow10(6), 0.0f64);
                        let mut opos = pos + 16;
                        // every option moves opos on by 4 or more, and it stays inside the block
                        while opos + 4 <= end - 4 {
                            let code = u16_at(buf, opos, big);
                            let olen = u16_at(buf, opos + 2, big) as usize;
                            if code == 0 {
                                break;
                            }
                            if opos + 4 + olen > end - 4 {
                                return Err(Stop::Fault(
                                    kind::CORRUPT_FILE,
                                    format!("{path}: interface block at offset {at}: option {code} of {olen} bytes runs past the block"),
                                ));
                            }
                            let val = &buf[opos + 4..opos + 4 + olen];
                            if code == 9 && olen >= 1 {
                                if let Some(&r) = val.first() {
                                    res = if r & 0x80 != 0 {
                                        Res::Pow2((r & 0x7F) as u32)
                                    } else {
                                        Res::Pow10(r as u32)
                                    };
                                }
                            } else if code == 14 && olen == 8 {
                                let mut x = [0u8; 8];
                                x.copy_from_slice(val);
                                let v = if big {
                                    i64::from_be_bytes(x)
                                } else {
                                    i64::from_le_bytes(x)
                                };
                                tsoff = v as f64;
                            }
                            opos += 4 + olen + (4 - olen % 4) % 4;
                        }
                        ifaces.push(Iface {
                            linktype,
                            res,
                            tsoff,
                            snaplen,
                        });
                    }
                }
            }
        }
    }

    /// `with _open(path) as f`, the magic, and the reader's own header.
    fn start(&mut self, opener: &Bound<'_, PyAny>) -> Result<(), Stop> {
        let path = self.path.clone();
        if let Some(spec) = self.range.take() {
            // ranges._range_records: `with open(path, "rb")`, the range as a file of its own
            self.base = Some((spec.start, spec.prefix.len() as u64));
            self.win = Some(Window::open(&path, spec).map_err(|e| os_fault(&path, &e))?);
        } else {
            // a UTF-8 name as str (the opener's type), any other as its bytes
            let mgr = match std::str::from_utf8(&self.raw) {
                Ok(name) => opener.call1((name,))?,
                Err(_) => opener.call1((PyBytes::new(opener.py(), &self.raw),))?,
            };
            let f = mgr.call_method0("__enter__")?;
            self.mgr = Some(mgr.unbind());
            self.f = Some(f.clone().unbind());
        }
        let f = self.f.as_ref().map(|f| f.bind(opener.py()).clone());
        let mut src = match (&f, self.win.as_mut()) {
            (Some(f), _) => Src::Py(f),
            (None, Some(w)) => Src::Win(w),
            (None, None) => return Ok(()),
        };
        let head = src.read(4, &path)?;
        if self.is_range {
            // a range has no empty-file checks, and what is not pcap is read as pcapng
            let magic = match head[..] {
                [a, b, c, d] => Some(u32::from_le_bytes([a, b, c, d])),
                _ => None,
            };
            if pcap_magic(magic).is_none() && head != b"\x0a\x0d\x0d\x0a" {
                return Err(Stop::Fault(
                    kind::CORRUPT_FILE,
                    format!("{path}: not a pcapng section header"),
                ));
            }
        }
        if head.is_empty() {
            return Err(Stop::Fault(
                kind::EMPTY_FILE,
                format!("{path}: empty file (0 bytes), not a capture"),
            ));
        }
        if head.len() < 4 {
            return Err(Stop::Fault(
                kind::TRUNCATED_FILE,
                format!("{path}: {} bytes, not a capture", head.len()),
            ));
        }
        // int.from_bytes(head, "little"): a longer read only matches with zero high bytes
        let magic = if head[4..].iter().all(|&x| x == 0) {
            Some(u32::from_le_bytes([head[0], head[1], head[2], head[3]]))
        } else {
            None
        };
        if let Some((big, div, hlen)) = pcap_magic(magic) {
            let rest = src.read(20, &path)?;
            if rest.len() < 20 {
                return Err(Stop::Fault(
                    kind::TRUNCATED_FILE,
                    format!("{path}: pcap header cut after {} bytes", 4 + rest.len()),
                ));
            }
            let linktype = u32_at(&rest, 16, big) & 0xFFFF; // upper bits carry FCS info
            self.fmt = Some(Fmt::Pcap {
                big,
                div,
                hlen,
                linktype,
            });
            self.units = Units {
                buf: Bytes::new(),
                pos: 0,
                offset: 24,
                hlen,
                what: "record",
            };
        } else if magic == Some(PCAPNG_SHB) {
            if head != b"\x0a\x0d\x0d\x0a" {
                return Err(Stop::Fault(
                    kind::CORRUPT_FILE,
                    format!("{path}: not a pcapng section header"),
                ));
            }
            self.fmt = Some(Fmt::Ng {
                big: false,
                ifaces: Vec::new(),
                ts: 0.0,
            });
            self.units = Units {
                buf: Bytes::from(head),
                pos: 0,
                offset: 0,
                hlen: 12,
                what: "block",
            };
        } else {
            return Err(Stop::Fault(
                kind::CORRUPT_FILE,
                format!("{path}: unknown file magic {}", hex(&head)),
            ));
        }
        Ok(())
    }
}

/// capture._PCAP_MAGIC: the magic as read little-endian -> (big-endian, fraction divisor,
/// record header size).
fn pcap_magic(magic: Option<u32>) -> Option<(bool, u32, usize)> {
    match magic? {
        0xA1B2C3D4 => Some((false, 1_000_000, 16)),
        0xD4C3B2A1 => Some((true, 1_000_000, 16)),
        0xA1B23C4D => Some((false, 1_000_000_000, 16)),
        0x4D3CB2A1 => Some((true, 1_000_000_000, 16)),
        0xA1B2CD34 => Some((false, 1_000_000, 24)),
        0x34CDB2A1 => Some((true, 1_000_000, 24)),
        _ => None,
    }
}

/// A byte range of an uncompressed capture (dissector.ranges.Range): the bytes [start, end)
/// of the file, after `prefix` (pcap: the file header; pcapng: the section and interface
/// blocks in force at `start`), read as if they were a whole file.
pub(crate) struct RangeSpec {
    pub start: u64,
    pub end: u64,
    pub prefix: Vec<u8>,
}

/// The open range (ranges._Window): the prefix, then the file's bytes up to the range's end.
struct Window {
    file: std::fs::File,
    prefix: Vec<u8>,
    at: usize,
    left: u64,
}

impl Window {
    fn open(path: &str, spec: RangeSpec) -> std::io::Result<Self> {
        use std::io::{Seek, SeekFrom};
        let mut file = std::fs::File::open(path)?;
        file.seek(SeekFrom::Start(spec.start))?;
        Ok(Window {
            file,
            prefix: spec.prefix,
            at: 0,
            left: spec.end.saturating_sub(spec.start),
        })
    }

    /// Up to n bytes: the rest of the prefix, or else the file's (read1).
    fn read1(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        if self.at < self.prefix.len() {
            let k = n.min(self.prefix.len() - self.at);
            let out = self.prefix[self.at..self.at + k].to_vec();
            self.at += k;
            return Ok(out);
        }
        let k = (n as u64).min(self.left);
        let mut out = Vec::with_capacity(k as usize);
        (&mut self.file).take(k).read_to_end(&mut out)?;
        self.left -= out.len() as u64;
        Ok(out)
    }
}

/// Where a file's bytes come from: the Python file object of `opener(path)`, or a range's window.
enum Src<'a, 'py> {
    Py(&'a Bound<'py, PyAny>),
    Win(&'a mut Window),
}

impl Src<'_, '_> {
    /// f.read(n): n bytes unless the file ends first.
    fn read(&mut self, n: usize, path: &str) -> Result<Vec<u8>, Stop> {
        match self {
            Src::Py(f) => {
                let obj = f.call_method1("read", (n,))?;
                let mut tmp = Vec::new();
                Ok(py_bytes(&obj, &mut tmp)?.to_vec())
            }
            Src::Win(w) => {
                let mut out = Vec::with_capacity(n);
                while out.len() < n {
                    let b = w.read1(n - out.len()).map_err(|e| os_fault(path, &e))?;
                    if b.is_empty() {
                        break;
                    }
                    out.extend_from_slice(&b);
                }
                Ok(out)
            }
        }
    }

    /// f.read1(n), handed to `put` (no copy of a Python bytes object).
    fn read1(&mut self, n: usize, path: &str, put: &mut dyn FnMut(&[u8])) -> Result<(), Stop> {
        match self {
            Src::Py(f) => {
                let obj = f.call_method1("read1", (n,))?;
                if obj.is_none() {
                    return Err(Stop::Idle);
                }
                let mut tmp = Vec::new();
                put(py_bytes(&obj, &mut tmp)?);
            }
            Src::Win(w) => put(&w.read1(n).map_err(|e| os_fault(path, &e))?),
        }
        Ok(())
    }
}

/// An OSError of a range's reading as ranges._range_records reports it (corrupt_file,
/// "{path}: {type}: [Errno n] {text}"; Python adds the file name to open()'s errors).
fn os_fault(path: &str, e: &std::io::Error) -> Stop {
    let name = match e.kind() {
        std::io::ErrorKind::NotFound => "FileNotFoundError",
        std::io::ErrorKind::PermissionDenied => "PermissionError",
        std::io::ErrorKind::IsADirectory => "IsADirectoryError",
        _ => "OSError",
    };
    let text = match e.raw_os_error() {
        Some(n) => {
            let t = std::io::Error::from_raw_os_error(n).to_string();
            let t = t.split(" (os error").next().unwrap_or(&t).to_string();
            format!("[Errno {n}] {t}: '{path}'")
        }
        None => e.to_string(),
    };
    Stop::Fault("corrupt_file", format!("{path}: {name}: {text}"))
}

/// A unit's full size from its header (_pcap's / _pcapng's `length`).
fn unit_length(
    buf: &[u8],
    pos: usize,
    offset: u64,
    fmt: &mut Fmt,
    path: &str,
) -> Result<usize, Stop> {
    let at = offset + pos as u64;
    match fmt {
        Fmt::Pcap { big, div, hlen, .. } => {
            let frac = u32_at(buf, pos + 4, *big);
            let caplen = u32_at(buf, pos + 8, *big);
            if caplen as u64 > MAX_RECORD || frac >= *div {
                return Err(Stop::Fault(
                    kind::CORRUPT_FILE,
                    format!("{path}: bad record header at offset {at} (caplen {caplen}, fraction {frac})"),
                ));
            }
            Ok(*hlen + caplen as usize)
        }
        Fmt::Ng { big, .. } => {
            if buf[pos..pos + 4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                // SHB: byte order of this section
                let bom = &buf[pos + 8..pos + 12];
                if bom == [0x4d, 0x3c, 0x2b, 0x1a] {
                    *big = false;
                } else if bom == [0x1a, 0x2b, 0x3c, 0x4d] {
                    *big = true;
                } else {
                    return Err(Stop::Fault(
                        kind::CORRUPT_FILE,
                        format!("{path}: bad byte-order magic {} at offset {at}", hex(bom)),
                    ));
                }
            }
            let blen = u32_at(buf, pos + 4, *big);
            if blen < 12 || !blen.is_multiple_of(4) || blen as u64 > MAX_RECORD {
                return Err(Stop::Fault(
                    kind::CORRUPT_FILE,
                    format!("{path}: bad block length {blen} at offset {at}"),
                ));
            }
            Ok(blen as usize)
        }
    }
}

/// The next (pos, end, file offset of buf) of capture._units. read1(n) is called with the
/// same n as Python's (at most _CHUNK_MAX: a header claiming a 200 MiB record in a 40-byte
/// file costs what the file holds, not 200 MiB), and nothing is allocated from a length
/// before the bytes are there.
fn units_next(
    u: &mut Units,
    src: &mut Src<'_, '_>,
    fmt: &mut Fmt,
    path: &str,
) -> Result<Option<(usize, usize, u64)>, Stop> {
    loop {
        let avail = u.buf.len() - u.pos;
        let need = if avail < u.hlen {
            u.hlen
        } else {
            unit_length(&u.buf, u.pos, u.offset, fmt, path)?
        };
        if avail < need {
            let n = (need - avail).clamp(CHUNK, CHUNK_MAX);
            let mut got = false;
            let old = &mut u.buf;
            let pos = u.pos;
            src.read1(n, path, &mut |more: &[u8]| {
                if more.is_empty() {
                    return;
                }
                got = true;
                // buf = buf[pos:] + more: in place when no packet holds a slice of buf any more
                // (so a big record grows by amortized appends, not Python's copy per step)
                let mut m = match std::mem::take(old).try_into_mut() {
                    Ok(mut m) => {
                        m.advance(pos);
                        m
                    }
                    Err(b) => {
                        let mut m = BytesMut::with_capacity(avail + more.len());
                        m.extend_from_slice(&b[pos..]);
                        m
                    }
                };
                m.extend_from_slice(more);
                *old = m.freeze();
            })?;
            if !got {
                if u.buf.len() > u.pos {
                    return Err(Stop::Fault(
                        kind::TRUNCATED_FILE,
                        format!(
                            "{path}: {} at offset {} cut ({} of {} bytes)",
                            u.what,
                            u.offset + u.pos as u64,
                            avail,
                            need
                        ),
                    ));
                }
                return Ok(None);
            }
            u.offset += u.pos as u64;
            u.pos = 0;
            continue;
        }
        let start = u.pos;
        u.pos += need;
        return Ok(Some((start, start + need, u.offset)));
    }
}

// ---------------------------------------------------------------- file sets

/// A file in the merge: its current record (the heap's key is (ts, order), as Python's
/// tuples compare: orders are unique, so the frame is never compared).
struct Head {
    rec: RawRec,
    it: FileRecords,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    // reversed: BinaryHeap is a max-heap, heapq a min-heap
    fn cmp(&self, other: &Self) -> Ordering {
        let a = (self.rec.ts, self.rec.order);
        let b = (other.rec.ts, other.rec.order);
        b.0.partial_cmp(&a.0)
            .unwrap_or(Ordering::Equal)
            .then(b.1.cmp(&a.1))
    }
}

enum Source {
    /// one file: read directly
    Single(FileRecords),
    /// capture._merged over several
    Merge {
        started: bool,
        pending: Vec<(f64, usize)>,
        heap: BinaryHeap<Head>,
        /// the file whose record was yielded last: advanced at the next call, as Python's
        /// generator does after resuming
        current: Option<FileRecords>,
    },
    Empty,
}

/// read_packets(files): `files` is what capture._capture_files gives; each is opened with
/// `opener(path)` (capture._open), so gzip/bz2/xz and every file fault read as in Python.
pub struct PacketReader {
    /// (name in messages, the name's bytes)
    files: Vec<(Rc<str>, Rc<[u8]>)>,
    opener: Py<PyAny>,
    /// capture.FILE_ERRORS: besides OSError, EOFError and ValueError, what a damaged file raises
    errors: Py<PyTuple>,
    source: Source,
    done: bool,
    index: u64,
    warned: Vec<u32>,
    ips: IpCache,
    /// from_rows(): the packets come as rows or packet batches already read (a Spark task's
    /// shuffled packets)
    rows: Option<Py<pyo3::types::PyIterator>>,
    batch: Option<PacketBatch>,
    hosts: std::collections::HashSet<Rc<str>>,
    recent: [Option<Rc<str>>; 2],
    /// the capture range the last packet batch pointed into (path, start, end), mapped
    mapped: Option<((String, u64, u64), Bytes)>,
    /// TLS key log text from the files' Decryption Secrets Blocks, until the engine takes it
    pub secrets: Vec<u8>,
}

/// One shared Rc per address text (the rows' and batches' addresses), the set bounded.
fn host_of(hosts: &mut std::collections::HashSet<Rc<str>>, s: &str) -> Rc<str> {
    if let Some(k) = hosts.get(s) {
        return k.clone();
    }
    if hosts.len() > IP_CACHE_MAX {
        hosts.clear();
    }
    let k: Rc<str> = Rc::from(s);
    hosts.insert(k.clone());
    k
}

/// One packet batch's columns (dissector.ranges.PACKET_SCHEMA), copied out of its Arrow buffers.
struct PacketBatch {
    n: usize,
    at: usize,
    ts: Vec<f64>,
    src: (Vec<i32>, Vec<u8>),
    sport: Vec<i32>,
    dst: (Vec<i32>, Vec<u8>),
    dport: Vec<i32>,
    seq: Vec<i64>,
    ack: Vec<i64>,
    flags: Vec<i16>,
    payload: (Vec<i32>, Bytes),
    missing: Vec<i64>,
    index: Vec<i64>,
    /// the anomaly kind's validity (None: every row is an anomaly), then its offsets and text
    valid: Option<Vec<u8>>,
    anomaly: (Vec<i32>, Vec<u8>),
    detail: (Vec<i32>, Vec<u8>),
    /// where a row's payload sits in the capture (-1: in `payload`), and its length
    at_col: Vec<i64>,
    size: Vec<i32>,
    /// the capture range the rows point into: (its start in the file, its bytes mapped)
    file: Option<(u64, Bytes)>,
}

/// The bytes [start, end) of a capture, mapped: a payload sliced from them is not copied.
fn map_range(path: &str, start: u64, end: u64) -> std::io::Result<Bytes> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if start > end || end > size {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{path} holds {size} bytes, less than the range {start}-{end} it was cut into"),
        ));
    }
    if start == end {
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and the size was checked; a capture truncated by another
    // process while it is being landed would fault here, as it would any reader that maps files.
    let m = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len((end - start) as usize)
            .map(&file)?
    };
    Ok(Bytes::from_owner(m))
}

/// Little-endian numbers of an Arrow buffer.
fn le_nums<T, const N: usize>(b: &[u8], n: usize, f: fn([u8; N]) -> T) -> PyResult<Vec<T>> {
    if b.len() < n * N {
        return Err(PyValueError::new_err(
            "a packet batch's column is shorter than its rows",
        ));
    }
    Ok(b.chunks_exact(N)
        .take(n)
        .map(|c| f(c.try_into().unwrap()))
        .collect())
}

fn buffer_bytes(b: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if b.is_none() {
        return Ok(Vec::new());
    }
    let buf = pyo3::buffer::PyBuffer::<u8>::get(b)?;
    buf.to_vec(b.py())
}

impl PacketBatch {
    /// (rows, [[validity, data] or [validity, offsets, data] per column]): pyarrow's
    /// Array.buffers() of each column, at offset 0.
    fn new(item: &Bound<'_, PyTuple>, file: Option<(u64, Bytes)>) -> PyResult<Self> {
        let n: usize = item.get_item(0)?.extract()?;
        let cols = item.get_item(1)?;
        let col = |i: usize| -> PyResult<Vec<Vec<u8>>> {
            cols.get_item(i)?
                .try_iter()?
                .map(|b| buffer_bytes(&b?))
                .collect()
        };
        let fixed = |i: usize| -> PyResult<Vec<u8>> { Ok(col(i)?.swap_remove(1)) };
        let var = |i: usize| -> PyResult<(Vec<i32>, Vec<u8>)> {
            let mut c = col(i)?;
            let data = c.pop().unwrap_or_default();
            let off = le_nums(&c.pop().unwrap_or_default(), n + 1, i32::from_le_bytes)?;
            Ok((off, data))
        };
        let (poff, pdata) = var(8)?;
        let valid = col(11)?.swap_remove(0);
        let ok_off = |o: &[i32], len: usize| {
            o.windows(2).all(|w| w[0] <= w[1]) && o.last().is_none_or(|&e| e as usize <= len)
        };
        let b = PacketBatch {
            n,
            at: 0,
            ts: le_nums(&fixed(0)?, n, f64::from_le_bytes)?,
            src: var(1)?,
            sport: le_nums(&fixed(2)?, n, i32::from_le_bytes)?,
            dst: var(3)?,
            dport: le_nums(&fixed(4)?, n, i32::from_le_bytes)?,
            seq: le_nums(&fixed(5)?, n, i64::from_le_bytes)?,
            ack: le_nums(&fixed(6)?, n, i64::from_le_bytes)?,
            flags: le_nums(&fixed(7)?, n, i16::from_le_bytes)?,
            payload: (poff, Bytes::from(pdata)),
            missing: le_nums(&fixed(9)?, n, i64::from_le_bytes)?,
            index: le_nums(&fixed(10)?, n, i64::from_le_bytes)?,
            valid: (!valid.is_empty()).then_some(valid),
            anomaly: var(11)?,
            detail: var(12)?,
            at_col: le_nums(&fixed(13)?, n, i64::from_le_bytes)?,
            size: le_nums(&fixed(14)?, n, i32::from_le_bytes)?,
            file,
        };
        let good = ok_off(&b.src.0, b.src.1.len())
            && ok_off(&b.dst.0, b.dst.1.len())
            && ok_off(&b.payload.0, b.payload.1.len())
            && ok_off(&b.anomaly.0, b.anomaly.1.len())
            && ok_off(&b.detail.0, b.detail.1.len());
        if !good {
            return Err(PyValueError::new_err(
                "a packet batch's offsets run past its data",
            ));
        }
        Ok(b)
    }

    fn text(v: &(Vec<i32>, Vec<u8>), i: usize) -> PyResult<&str> {
        std::str::from_utf8(PacketBatch::raw(v, i))
            .map_err(|_| PyValueError::new_err("a packet batch's text is not UTF-8"))
    }

    fn raw(v: &(Vec<i32>, Vec<u8>), i: usize) -> &[u8] {
        &v.1[v.0[i] as usize..v.0[i + 1] as usize]
    }
}

/// host_of() for row i's address in column `v`, looked up only when it is neither of the last
/// two: a connection's packets come in runs, so most rows skip a hash of their address text.
fn recent_host(
    hosts: &mut std::collections::HashSet<Rc<str>>,
    recent: &mut [Option<Rc<str>>; 2],
    v: &(Vec<i32>, Vec<u8>),
    i: usize,
) -> PyResult<Rc<str>> {
    let text = PacketBatch::raw(v, i);
    if let Some(h) = recent.iter().flatten().find(|h| h.as_bytes() == text) {
        return Ok(h.clone());
    }
    let h = host_of(hosts, PacketBatch::text(v, i)?);
    recent.swap(0, 1);
    recent[0] = Some(h.clone());
    Ok(h)
}

impl PacketReader {
    /// files: the names' bytes (os.fsencode: any name the system has, UTF-8 or not).
    pub fn new(files: Vec<Vec<u8>>, opener: Py<PyAny>, errors: Py<PyTuple>) -> Self {
        let files: Vec<(Rc<str>, Rc<[u8]>)> = files
            .into_iter()
            .map(|f| (Rc::from(String::from_utf8_lossy(&f).as_ref()), Rc::from(f)))
            .collect();
        let source = match files.len() {
            0 => Source::Empty,
            1 => Source::Single(FileRecords::new(files[0].clone(), 0)),
            _ => Source::Merge {
                started: false,
                pending: Vec::new(),
                heap: BinaryHeap::new(),
                current: None,
            },
        };
        PacketReader {
            files,
            opener,
            errors,
            source,
            done: false,
            index: 0,
            warned: Vec::new(),
            ips: IpCache::default(),
            rows: None,
            batch: None,
            hosts: Default::default(),
            recent: [None, None],
            mapped: None,
            secrets: Vec::new(),
        }
    }

    /// packets_of(ranges._range_records(r, order), index): the packets of one byte range of a
    /// file (`spec`) or, without one, of the whole file through `opener` (a compressed file, or
    /// one whose headers go wrong); `index` frames come before it in the run.
    pub(crate) fn range(
        path: String,
        spec: Option<RangeSpec>,
        order: usize,
        index: u64,
        opener: Py<PyAny>,
        errors: Py<PyTuple>,
    ) -> Self {
        let mut r = PacketReader::new(vec![path.into_bytes()], opener, errors);
        if let Source::Single(fr) = &mut r.source {
            fr.order = order;
            fr.is_range = spec.is_some();
            fr.range = spec;
        }
        r.index = index;
        r
    }

    /// The frames read so far, with the `index` it started from.
    pub(crate) fn frames(&self) -> u64 {
        self.index
    }

    /// What an appended land run carries into the next (carry.rs): the frames read (frame
    /// numbers in anomalies continue across the runs' files, as across a set's) and the link
    /// types already warned of (once per set).
    pub(crate) fn position(&self) -> (u64, Vec<u32>) {
        (self.index, self.warned.clone())
    }

    pub(crate) fn resume(&mut self, index: u64, warned: Vec<u32>) {
        self.index = index;
        self.warned = warned;
    }

    /// Packets from a Python iterator of rows rather than files: a Packet's fields as a tuple
    /// (ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index) or a CaptureAnomaly's
    /// (ts, kind, detail, index), as landing.spark's stage 1 ships them.
    pub fn from_rows(rows: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = rows.py();
        let mut r = PacketReader::new(Vec::new(), py.None(), PyTuple::empty(py).unbind());
        r.rows = Some(rows.try_iter()?.unbind());
        Ok(r)
    }

    fn host(&mut self, s: &str) -> Rc<str> {
        host_of(&mut self.hosts, s)
    }

    /// The next packet of the current packet batch, if it has one left.
    fn batch_row(&mut self) -> PyResult<Option<Rec>> {
        let Some(b) = self.batch.as_mut() else {
            return Ok(None);
        };
        if b.at >= b.n {
            self.batch = None;
            return Ok(None);
        }
        let i = b.at;
        b.at += 1;
        let is_anomaly = b
            .valid
            .as_ref()
            .is_none_or(|v| v.get(i / 8).is_some_and(|x| x >> (i % 8) & 1 == 1));
        if is_anomaly {
            return Ok(Some(Rec::Anomaly(CaptureAnomaly {
                ts: b.ts[i],
                kind: PacketBatch::text(&b.anomaly, i)?.to_string(),
                detail: PacketBatch::text(&b.detail, i)?.to_string(),
                index: b.index[i] as u64,
            })));
        }
        let (o, data) = (&b.payload.0, &b.payload.1);
        let payload = if b.at_col[i] >= 0 {
            let (start, file) = b.file.as_ref().ok_or_else(|| {
                PyValueError::new_err("a packet batch points into a capture it was not given")
            })?;
            let from = (b.at_col[i] as u64).wrapping_sub(*start) as usize;
            let to = from.wrapping_add(b.size[i].max(0) as usize);
            if from > to || to > file.len() {
                return Err(PyValueError::new_err(
                    "a packet batch points past the capture range it was given",
                ));
            }
            file.slice(from..to)
        } else {
            data.slice(o[i] as usize..o[i + 1] as usize)
        };
        Ok(Some(Rec::Packet(Packet {
            ts: b.ts[i],
            src: recent_host(&mut self.hosts, &mut self.recent, &b.src, i)?,
            sport: b.sport[i] as u16,
            dst: recent_host(&mut self.hosts, &mut self.recent, &b.dst, i)?,
            dport: b.dport[i] as u16,
            seq: b.seq[i] as u32,
            ack: b.ack[i] as u32,
            flags: b.flags[i] as u8,
            payload,
            missing: b.missing[i],
            index: b.index[i] as u64,
            at: b.at_col[i],
        })))
    }

    fn next_row(&mut self, py: Python<'_>) -> PyResult<Option<Rec>> {
        loop {
            if let Some(rec) = self.batch_row()? {
                return Ok(Some(rec));
            }
            let Some(rows) = &self.rows else {
                return Ok(None);
            };
            let Some(row) = rows.bind(py).clone().next() else {
                self.done = true;
                return Ok(None);
            };
            let row = row?;
            let t = row.cast::<PyTuple>()?;
            if t.len() == 2 || t.len() == 3 {
                let file = if t.len() == 3 {
                    let (path, start, end): (String, u64, u64) = t.get_item(2)?.extract()?;
                    Some(self.mapped(path, start, end)?)
                } else {
                    None
                };
                self.batch = Some(PacketBatch::new(t, file)?);
                continue;
            }
            return self.row_rec(t);
        }
    }

    /// The capture range a packet batch points into, mapped once for the batches that follow it.
    fn mapped(&mut self, path: String, start: u64, end: u64) -> PyResult<(u64, Bytes)> {
        if let Some((key, bytes)) = &self.mapped {
            if key.0 == path && key.1 == start && key.2 == end {
                return Ok((start, bytes.clone()));
            }
        }
        let bytes = map_range(&path, start, end)
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{path}: {e}")))?;
        self.mapped = Some(((path, start, end), bytes.clone()));
        Ok((start, bytes))
    }

    /// A row: a Packet's fields, or a CaptureAnomaly's.
    fn row_rec(&mut self, t: &Bound<'_, PyTuple>) -> PyResult<Option<Rec>> {
        if t.len() == 4 {
            return Ok(Some(Rec::Anomaly(CaptureAnomaly {
                ts: t.get_item(0)?.extract()?,
                kind: t.get_item(1)?.extract()?,
                detail: t.get_item(2)?.extract()?,
                index: t.get_item(3)?.extract()?,
            })));
        }
        let src: pyo3::pybacked::PyBackedStr = t.get_item(1)?.extract()?;
        let dst: pyo3::pybacked::PyBackedStr = t.get_item(3)?.extract()?;
        let payload = t.get_item(8)?;
        let payload = Bytes::copy_from_slice(payload.cast::<PyBytes>()?.as_bytes());
        Ok(Some(Rec::Packet(Packet {
            ts: t.get_item(0)?.extract()?,
            src: self.host(&src),
            sport: t.get_item(2)?.extract()?,
            dst: self.host(&dst),
            dport: t.get_item(4)?.extract()?,
            seq: t.get_item(5)?.extract()?,
            ack: t.get_item(6)?.extract()?,
            flags: t.get_item(7)?.extract()?,
            payload,
            missing: t.get_item(9)?.extract()?,
            index: t.get_item(10)?.extract()?,
            at: -1,
        })))
    }

    /// The next record of capture._merged(files).
    fn next_raw(&mut self, py: Python<'_>) -> PyResult<Option<RawRec>> {
        let opener = self.opener.bind(py).clone();
        let errors = self.errors.bind(py).clone();
        match &mut self.source {
            Source::Empty => Ok(None),
            Source::Single(it) => it.next_rec(py, &opener, &errors),
            Source::Merge {
                started,
                pending,
                heap,
                current,
            } => {
                if !*started {
                    *started = true;
                    // _start_ts of each file: its first record (even a fault), the file closed after it
                    let mut starts = Vec::with_capacity(self.files.len());
                    for (order, path) in self.files.iter().enumerate() {
                        let mut it = FileRecords::new(path.clone(), 0);
                        let first = it.next_rec(py, &opener, &errors)?;
                        it.close_early(py);
                        starts.push((first.map_or(f64::INFINITY, |r| r.ts), order));
                    }
                    starts.sort_by(|a, b| {
                        a.0.partial_cmp(&b.0)
                            .unwrap_or(Ordering::Equal)
                            .then(a.1.cmp(&b.1))
                    });
                    starts.reverse(); // pop() gives the earliest
                    *pending = starts;
                }
                if let Some(mut it) = current.take() {
                    if let Some(rec) = it.next_rec(py, &opener, &errors)? {
                        heap.push(Head { rec, it });
                    }
                }
                // each pass opens a pending file or yields a record, and each file opens once
                loop {
                    if pending.is_empty() && heap.is_empty() {
                        return Ok(None);
                    }
                    while let Some(&(ts, order)) = pending.last() {
                        if let Some(top) = heap.peek() {
                            // Python's `pending[-1][0] <= heap[0][0][0]` (times are never NaN)
                            if ts > top.rec.ts {
                                break;
                            }
                        }
                        pending.pop();
                        let mut it = FileRecords::new(self.files[order].clone(), order);
                        if let Some(rec) = it.next_rec(py, &opener, &errors)? {
                            heap.push(Head { rec, it });
                        }
                    }
                    let Some(top) = heap.pop() else { continue };
                    let Head { rec, it } = top;
                    *current = Some(it);
                    return Ok(Some(rec));
                }
            }
        }
    }

    pub fn next(&mut self, py: Python<'_>) -> PyResult<Option<Rec>> {
        if self.done {
            return Ok(None);
        }
        if self.rows.is_some() {
            return self.next_row(py);
        }
        // every pass consumes a record of the files
        loop {
            let raw = match self.next_raw(py) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => {
                    // a generator that raised is finished
                    self.done = true;
                    self.source = Source::Empty;
                    return Err(e);
                }
            };
            match raw.body {
                Body::Fault(kind, detail) => {
                    return Ok(Some(Rec::Anomaly(CaptureAnomaly {
                        ts: raw.ts,
                        kind: kind.to_string(),
                        detail,
                        index: self.index,
                    })));
                }
                Body::Frame(linktype, frame) => {
                    self.index += 1;
                    if let Some(rec) = self.packet_of(raw.ts, linktype, frame, raw.at) {
                        return Ok(Some(rec));
                    }
                }
                Body::Secrets(text) => self.secrets.extend_from_slice(&text),
                Body::Idle => return Ok(Some(Rec::Idle)),
            }
        }
    }

    fn anomaly(&self, ts: f64, kind: &str, detail: String) -> Option<Rec> {
        Some(Rec::Anomaly(CaptureAnomaly {
            ts,
            kind: kind.to_string(),
            detail,
            index: self.index,
        }))
    }

    /// One frame of capture.packets_of: a Packet, an anomaly, or nothing (not TCP).
    fn packet_of(&mut self, ts: f64, linktype: u32, frame: Bytes, frame_at: i64) -> Option<Rec> {
        let index = self.index;
        let fl = frame.len();
        let b = &frame[..];
        // Link layer -> offset of the IP header.
        let off: usize = match linktype {
            1 => {
                let mut off = 14;
                if fl < 14 {
                    return None;
                }
                let mut etype = u16_at(b, 12, true);
                while etype == 0x8100 || etype == 0x88A8 || etype == 0x9100 {
                    if fl < off + 4 {
                        break;
                    }
                    etype = u16_at(b, off + 2, true);
                    off += 4;
                }
                if etype != 0x0800 && etype != 0x86DD {
                    return None;
                }
                off
            }
            0 | 108 => 4,
            12 | 14 | 101 | 228 | 229 => 0,
            113 => {
                if fl < 16 || !matches!(u16_at(b, 14, true), 0x0800 | 0x86DD) {
                    return None;
                }
                16
            }
            276 => {
                if fl < 20 || !matches!(u16_at(b, 0, true), 0x0800 | 0x86DD) {
                    return None;
                }
                20
            }
            _ => {
                if !self.warned.contains(&linktype) {
                    self.warned.push(linktype);
                    return self.anomaly(
                        ts,
                        kind::UNKNOWN_LINKTYPE,
                        format!(
                            "link type {linktype} is not supported; its frames are skipped (first at frame {index})"
                        ),
                    );
                }
                return None;
            }
        };
        if fl <= off {
            return None;
        }
        let (src, dst, toff, ip_end);
        match b[off] >> 4 {
            4 => {
                if fl < off + 20 {
                    return None;
                }
                let vihl = b[off];
                let total = u16_at(b, off + 2, true) as usize;
                let frag = u16_at(b, off + 6, true);
                if b[off + 9] != 6 {
                    return None;
                }
                if frag & 0x3FFF != 0 {
                    let more = if frag & 0x2000 != 0 { "True" } else { "False" };
                    return self.anomaly(
                        ts,
                        "ipv4_fragment",
                        format!(
                            "frame {index}: IPv4 fragment (offset {}, more={more}) not reassembled",
                            (frag & 0x1FFF) as u32 * 8
                        ),
                    );
                }
                src = self.ips.v4(&b[off + 12..off + 16]);
                dst = self.ips.v4(&b[off + 16..off + 20]);
                toff = off + (((vihl & 15) as usize) << 2);
                ip_end = if total != 0 { off + total } else { fl }; // 0: TSO send path, length unknown
            }
            6 => {
                if fl < off + 40 {
                    return None;
                }
                let plen = u16_at(b, off + 4, true) as usize;
                let mut nh = b[off + 6];
                src = self.ips.v6(&b[off + 8..off + 24]);
                dst = self.ips.v6(&b[off + 24..off + 40]);
                let mut t = off + 40;
                ip_end = if plen != 0 { t + plen } else { fl }; // 0: jumbogram, trust the capture
                                                                // each header moves t on by 8 or more, and needs 2 bytes at t: bounded by the frame
                while nh != 6 {
                    if matches!(nh, 0 | 43 | 60 | 135 | 139 | 140) && fl >= t + 2 {
                        let next = t + 8 + ((b[t + 1] as usize) << 3);
                        nh = b[t];
                        t = next;
                    } else if nh == 51 && fl >= t + 2 {
                        // AH counts 4-byte units
                        let next = t + ((b[t + 1] as usize + 2) << 2);
                        nh = b[t];
                        t = next;
                    } else if nh == 44 && fl >= t + 8 {
                        if u16_at(b, t + 2, true) & 0xFFF9 != 0 {
                            return self.anomaly(
                                ts,
                                "ipv6_fragment",
                                format!("frame {index}: IPv6 fragment not reassembled"),
                            );
                        }
                        nh = b[t];
                        t += 8;
                    } else {
                        break;
                    }
                }
                if nh != 6 {
                    return None;
                }
                toff = t;
            }
            _ => return None,
        }
        if fl < toff + 20 {
            return self.anomaly(
                ts,
                kind::TRUNCATED_PACKET,
                format!(
                    "frame {index}: TCP header cut by snaplen ({} bytes captured)",
                    fl as i64 - toff as i64
                ),
            );
        }
        let sport = u16_at(b, toff, true);
        let dport = u16_at(b, toff + 2, true);
        let seq = u32_at(b, toff + 4, true);
        let ack = u32_at(b, toff + 8, true);
        let doff = b[toff + 12];
        let flags = b[toff + 13];
        let poff = toff + (((doff >> 4) as usize) << 2);
        let cap_end = fl;
        let (payload, missing) = if ip_end <= cap_end {
            // Ethernet pads short frames; the IP length says where payload ends.
            (
                if poff < ip_end {
                    frame.slice(poff..ip_end)
                } else {
                    Bytes::new()
                },
                0i64,
            )
        } else {
            (
                if poff < cap_end {
                    frame.slice(poff..)
                } else {
                    Bytes::new()
                },
                ip_end as i64 - poff.max(cap_end) as i64,
            )
        };
        // the payload is a slice of the frame: its offset there is the pointers' distance
        let at = if frame_at >= 0 && !payload.is_empty() {
            frame_at + (payload.as_ptr() as usize - frame.as_ptr() as usize) as i64
        } else {
            -1
        };
        Some(Rec::Packet(Packet {
            ts,
            src,
            sport,
            dst,
            dport,
            seq,
            ack,
            flags,
            payload,
            missing,
            index,
            at,
        }))
    }
}

// ---------------------------------------------------------------- test entry points

pub(crate) fn rec_tuple<'py>(py: Python<'py>, rec: &Rec) -> PyResult<Bound<'py, PyTuple>> {
    match rec {
        Rec::Idle => PyTuple::new(py, ["idle".into_pyobject(py)?.into_any()]),
        Rec::Packet(p) => PyTuple::new(
            py,
            [
                p.ts.into_pyobject(py)?.into_any(),
                p.src.as_ref().into_pyobject(py)?.into_any(),
                p.sport.into_pyobject(py)?.into_any(),
                p.dst.as_ref().into_pyobject(py)?.into_any(),
                p.dport.into_pyobject(py)?.into_any(),
                p.seq.into_pyobject(py)?.into_any(),
                p.ack.into_pyobject(py)?.into_any(),
                p.flags.into_pyobject(py)?.into_any(),
                PyBytes::new(py, &p.payload).into_any(),
                p.missing.into_pyobject(py)?.into_any(),
                p.index.into_pyobject(py)?.into_any(),
            ],
        ),
        Rec::Anomaly(a) => PyTuple::new(
            py,
            [
                "anomaly".into_pyobject(py)?.into_any(),
                a.ts.into_pyobject(py)?.into_any(),
                a.kind.as_str().into_pyobject(py)?.into_any(),
                a.detail.as_str().into_pyobject(py)?.into_any(),
                a.index.into_pyobject(py)?.into_any(),
            ],
        ),
    }
}

/// ("raised", exception): how the test entry points end when the reader raises, so the
/// records before it can be compared too.
pub(crate) fn raised<'py>(py: Python<'py>, e: PyErr) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            "raised".into_pyobject(py)?.into_any(),
            e.into_value(py).into_bound(py).into_any(),
        ],
    )
}

/// read_packets over an expanded file list, as tuples in the dataclasses' field order
/// (Packet: ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index;
/// CaptureAnomaly: ("anomaly", ts, kind, detail, index)); an exception ends it as raised().
#[pyfunction]
#[pyo3(signature = (files, opener, file_errors))]
fn read_packets_tuples<'py>(
    py: Python<'py>,
    files: Vec<String>,
    opener: Py<PyAny>,
    file_errors: Py<PyTuple>,
) -> PyResult<Bound<'py, PyList>> {
    let files = files.into_iter().map(String::into_bytes).collect();
    let mut r = PacketReader::new(files, opener, file_errors);
    let out = PyList::empty(py);
    loop {
        match r.next(py) {
            Ok(Some(rec)) => out.append(rec_tuple(py, &rec)?)?,
            Ok(None) => break,
            Err(e) => {
                out.append(raised(py, e)?)?;
                break;
            }
        }
    }
    Ok(out)
}

/// A file's first timestamp (its first record's, even a fault's), or None for a file that ends
/// before any: what a set of files is ordered by before it is merged.
#[pyfunction]
fn first_ts(
    py: Python<'_>,
    path: Vec<u8>,
    opener: Py<PyAny>,
    file_errors: Bound<'_, PyTuple>,
) -> PyResult<Option<f64>> {
    let name: Rc<str> = Rc::from(String::from_utf8_lossy(&path).as_ref());
    let mut f = FileRecords::new((name, Rc::from(path)), 0);
    let opener = opener.into_bound(py);
    let first = f.next_rec(py, &opener, &file_errors)?;
    f.close_early(py);
    Ok(first.map(|r| r.ts))
}

/// The TLS key log text of the Decryption Secrets Blocks a file holds before its first packet
/// (where `editcap --inject-secrets` puts them), empty when none: what a Spark job sends its tasks,
/// which read ranges of the file and so may not see the blocks themselves.
#[pyfunction]
fn leading_secrets<'py>(
    py: Python<'py>,
    path: Vec<u8>,
    opener: Py<PyAny>,
    file_errors: Bound<'_, PyTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    let name: Rc<str> = Rc::from(String::from_utf8_lossy(&path).as_ref());
    let mut f = FileRecords::new((name, Rc::from(path)), 0);
    let opener = opener.into_bound(py);
    let mut text = Vec::new();
    // a bounded look: the blocks before the first packet (a damaged file ends it too)
    for _ in 0..4096 {
        match f.next_rec(py, &opener, &file_errors) {
            Ok(Some(RawRec {
                body: Body::Secrets(s),
                ..
            })) => text.extend_from_slice(&s),
            _ => break,
        }
    }
    f.close_early(py);
    Ok(PyBytes::new(py, &text))
}

/// socket.inet_ntop(AF_INET6, b) as this module writes it (for the tests).
#[pyfunction]
fn ip6_text_of(b: &[u8]) -> PyResult<String> {
    let a: [u8; 16] = b
        .try_into()
        .map_err(|_| PyValueError::new_err("16 bytes expected"))?;
    Ok(ip6_text(&a))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_packets_tuples, m)?)?;
    m.add_function(wrap_pyfunction!(ip6_text_of, m)?)?;
    m.add_function(wrap_pyfunction!(first_ts, m)?)?;
    m.add_function(wrap_pyfunction!(leading_secrets, m)?)?;
    Ok(())
}
