//! Capture files -> TCP packets (pcap, pcapng), faults as anomalies with offsets.
//!
//! Files are opened through `Files` (the caller's: the bindings open them with Python's
//! capture._open, so gzip/bz2/xz/zstd and every OS error read as the Python tools read them;
//! `FsFiles` reads plain files from disk) and read with `read(4)`, `read(20)`, then
//! `read_into(n)` in bounded chunks. A byte range of an uncompressed file (a Spark task's share)
//! is read from disk through a `Window`: its preamble, then the file's bytes [start, end).
//! What a reading raises is either a fault of the capture (an anomaly row, the packets before
//! it kept) or the caller's error, passed on (`Files::classify`).
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

use crate::anomalies::kind;
pub use crate::packet::*;
use bytes::{Buf, Bytes, BytesMut};

const CHUNK: usize = 1 << 20;
const CHUNK_MAX: usize = 4 << 20;
const MAX_RECORD: u64 = 1 << 28; // a record bigger than this is corruption, not a packet
/// a pcapng section header block's type, the file's first four bytes
pub const PCAPNG_SHB: u32 = 0x0A0D0D0A;
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

/// Why a file's reading stopped: a fault of the capture, or the caller's error (classified by
/// `Files::classify` once the file is closed).
enum Stop<E> {
    Fault(&'static str, String),
    Raised(E),
    /// a live stream has nothing to read now (its read1 gave nothing yet): the file stays open,
    /// mid-record state kept, and the caller hears of it (Rec::Idle)
    Idle,
}

/// Where a reader's files come from: opening one by its name's bytes, and what an error of
/// their reading means.
pub trait Files {
    /// An error the opening or reading raises (the caller's: an OS error, a decompressor's)
    type Error;
    type File: CaptureFile<Error = Self::Error>;
    fn open(&mut self, name: &[u8]) -> Result<Self::File, Self::Error>;
    /// What an error the reading of `path` raised means: a fault of the capture (its anomaly
    /// kind and detail: the records before it are kept), or an error to pass on to the caller.
    fn classify(&self, path: &str, e: Self::Error) -> Result<(&'static str, String), Self::Error>;
}

/// An open capture file.
pub trait CaptureFile {
    type Error;
    /// Up to n bytes, fewer only at the end of the file.
    fn read(&mut self, n: usize) -> Result<Vec<u8>, Self::Error>;
    /// Whatever is there, up to n bytes, appended to `dst` (nothing: the end); Ok(false) when a
    /// live stream has nothing yet. A file on disk reads straight into `dst`, which saves
    /// copying every byte of the capture once more.
    fn read_into(&mut self, n: usize, dst: &mut BytesMut) -> Result<bool, Self::Error>;
    /// Closes the file. `failing`: its reading ended on an error, the caller's (`raised`) or a
    /// fault of the capture; Ok(true) says the file swallowed it; an Err replaces it.
    fn close(self, raised: Option<&Self::Error>, failing: bool) -> Result<bool, Self::Error>;
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

/// `units // div + (units % div) / div + tsoff` with unbounded integers and a correctly rounded
/// integer division (what capture tools that read pcapng with big integers give): exact in
/// f64 when both operands of the division are (every power of two; 10**n up to n = 22 with a
/// remainder below 2**53); otherwise the quotient is the correctly rounded parse of its
/// decimal form.
fn pcapng_ts(units: u64, res: Res, tsoff: f64) -> f64 {
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
            q as f64 + frac + tsoff
        }
        Res::Pow10(n) => {
            let (q, r) = if (n as usize) < POW10.len() {
                let d = POW10[n as usize];
                (units / d, units % d)
            } else {
                (0, units) // 10**n > 2**64 > units
            };
            let frac = if n <= 22 && r < EXACT {
                r as f64 / POW10F[n as usize] // 10**n is exact in f64 up to n = 22
            } else {
                // r / 10**n, correctly rounded: the parse of "re-n" is
                format!("{r}e-{n}").parse::<f64>().unwrap_or(0.0)
            };
            q as f64 + frac + tsoff
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

/// One file's records as a resumable reader.
struct FileRecords<F: Files> {
    /// the name in messages (the file name's bytes as UTF-8, lossily)
    path: Rc<str>,
    /// the file name's bytes (os.fsencode): the opener is given them as str when they are
    /// UTF-8, else as bytes
    raw: Rc<[u8]>,
    order: usize,
    state: FState,
    /// the open file
    file: Option<F::File>,
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

impl<F: Files> FileRecords<F> {
    fn new((path, raw): (Rc<str>, Rc<[u8]>), order: usize) -> Self {
        FileRecords {
            path,
            raw,
            order,
            state: FState::Start,
            file: None,
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

    fn next_rec(&mut self, files: &mut F) -> Result<Option<RawRec>, F::Error> {
        if self.state == FState::Done {
            return Ok(None);
        }
        match self.step(files) {
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
                self.end(stop, Some(files))
            }
            Err(Stop::Idle) => Ok(Some(RawRec {
                ts: self.ts,
                order: self.order,
                body: Body::Idle,
                at: -1,
            })),
            Err(stop) => self.end(Some(stop), Some(files)),
        }
    }

    /// Closes the file, then makes of `stop` a fault record, nothing, or the caller's error
    /// (`files` None: whatever the closing says is dropped, as when a reader is let go early).
    fn end(
        &mut self,
        mut stop: Option<Stop<F::Error>>,
        files: Option<&F>,
    ) -> Result<Option<RawRec>, F::Error> {
        self.state = FState::Done;
        self.win = None;
        self.units.buf = Bytes::new();
        if let Some(file) = self.file.take() {
            let raised = match &stop {
                Some(Stop::Raised(e)) => Some(e),
                _ => None,
            };
            match file.close(raised, stop.is_some()) {
                // the file swallowed the error in flight
                Ok(true) if stop.is_some() => stop = None,
                Ok(_) => {}
                Err(e) => stop = Some(Stop::Raised(e)),
            }
        }
        let Some(files) = files else {
            return Ok(None);
        };
        let (kind, detail) = match stop {
            None | Some(Stop::Idle) => return Ok(None), // next_rec keeps the file open on Idle
            Some(Stop::Fault(kind, detail)) => (kind, detail),
            Some(Stop::Raised(e)) => files.classify(&self.path, e)?,
        };
        Ok(Some(RawRec {
            ts: self.ts,
            order: self.order,
            body: Body::Fault(kind, detail),
            at: -1,
        }))
    }

    /// Lets the file go after its first record (a set's files are ordered by it).
    fn close_early(&mut self) {
        let _ = self.end(None, None);
    }

    fn step(&mut self, files: &mut F) -> Result<Option<RawRec>, Stop<F::Error>> {
        if self.state == FState::Start {
            self.state = FState::Body;
            self.start(files)?;
        }
        let mut src = match (self.file.as_mut(), self.win.as_mut()) {
            (Some(f), _) => Src::File(f),
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
                        *ts = pcapng_ts(units, i.res, i.tsoff);
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

    /// Opens the file, reads the magic and the format's own header.
    fn start(&mut self, files: &mut F) -> Result<(), Stop<F::Error>> {
        let path = self.path.clone();
        if let Some(spec) = self.range.take() {
            // ranges._range_records: `with open(path, "rb")`, the range as a file of its own
            self.base = Some((spec.start, spec.prefix.len() as u64));
            self.win = Some(Window::open(&path, spec).map_err(|e| os_fault(&path, &e))?);
        } else {
            self.file = Some(files.open(&self.raw).map_err(Stop::Raised)?);
        }
        let mut src = match (self.file.as_mut(), self.win.as_mut()) {
            (Some(f), _) => Src::File(f),
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
pub fn pcap_magic(magic: Option<u32>) -> Option<(bool, u32, usize)> {
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

/// Whether a file's first four bytes (read little-endian) are a pcap's or a pcapng's magic: an
/// uncompressed capture.
pub fn is_capture_magic(magic: u32) -> bool {
    magic == PCAPNG_SHB || pcap_magic(Some(magic)).is_some()
}

/// A byte range of an uncompressed capture (dissector.ranges.Range): the bytes [start, end)
/// of the file, after `prefix` (pcap: the file header; pcapng: the section and interface
/// blocks in force at `start`), read as if they were a whole file.
pub struct RangeSpec {
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

/// Where a file's bytes come from: the open file, or a range's window.
enum Src<'a, C: CaptureFile> {
    File(&'a mut C),
    Win(&'a mut Window),
}

impl<C: CaptureFile> Src<'_, C> {
    /// n bytes unless the file ends first.
    fn read(&mut self, n: usize, path: &str) -> Result<Vec<u8>, Stop<C::Error>> {
        match self {
            Src::File(f) => f.read(n).map_err(Stop::Raised),
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

    /// Up to n bytes, appended to `dst`.
    fn read_into(
        &mut self,
        n: usize,
        path: &str,
        dst: &mut BytesMut,
    ) -> Result<(), Stop<C::Error>> {
        match self {
            Src::File(f) => {
                if !f.read_into(n, dst).map_err(Stop::Raised)? {
                    return Err(Stop::Idle);
                }
            }
            Src::Win(w) => dst.extend_from_slice(&w.read1(n).map_err(|e| os_fault(path, &e))?),
        }
        Ok(())
    }
}

/// An OSError of a range's reading as ranges._range_records reports it (corrupt_file,
/// "{path}: {type}: [Errno n] {text}"; Python adds the file name to open()'s errors).
fn os_fault<E>(path: &str, e: &std::io::Error) -> Stop<E> {
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
fn unit_length<E>(
    buf: &[u8],
    pos: usize,
    offset: u64,
    fmt: &mut Fmt,
    path: &str,
) -> Result<usize, Stop<E>> {
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

/// A unit's (start, end) in the buffer and the buffer's offset in the file.
type Unit = (usize, usize, u64);

/// The next (pos, end, file offset of buf) of capture._units. read_into(n) is called with the
/// same n as Python's (at most _CHUNK_MAX: a header claiming a 200 MiB record in a 40-byte
/// file costs what the file holds, not 200 MiB), and nothing is allocated from a length
/// before the bytes are there.
fn units_next<C: CaptureFile>(
    u: &mut Units,
    src: &mut Src<'_, C>,
    fmt: &mut Fmt,
    path: &str,
) -> Result<Option<Unit>, Stop<C::Error>> {
    loop {
        let avail = u.buf.len() - u.pos;
        let need = if avail < u.hlen {
            u.hlen
        } else {
            unit_length(&u.buf, u.pos, u.offset, fmt, path)?
        };
        if avail < need {
            let n = (need - avail).clamp(CHUNK, CHUNK_MAX);
            // buf = buf[pos:] + what is read: in place when no packet holds a slice of buf any
            // more (so a big record grows by amortized appends, not a copy per step)
            let mut m = match std::mem::take(&mut u.buf).try_into_mut() {
                Ok(mut m) => {
                    m.advance(u.pos);
                    m
                }
                Err(b) => {
                    let mut m = BytesMut::with_capacity(avail + n);
                    m.extend_from_slice(&b[u.pos..]);
                    m
                }
            };
            u.offset += u.pos as u64;
            u.pos = 0;
            let read = src.read_into(n, path, &mut m);
            let got = m.len() > avail;
            u.buf = m.freeze();
            read?;
            if !got {
                if u.buf.len() > u.pos {
                    return Err(Stop::Fault(
                        kind::TRUNCATED_FILE,
                        format!(
                            "{path}: {} at offset {} cut ({} of {} bytes)",
                            u.what, u.offset, avail, need
                        ),
                    ));
                }
                return Ok(None);
            }
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
struct Head<F: Files> {
    rec: RawRec,
    it: FileRecords<F>,
}

impl<F: Files> PartialEq for Head<F> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<F: Files> Eq for Head<F> {}
impl<F: Files> PartialOrd for Head<F> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<F: Files> Ord for Head<F> {
    // reversed: BinaryHeap is a max-heap, heapq a min-heap
    fn cmp(&self, other: &Self) -> Ordering {
        let a = (self.rec.ts, self.rec.order);
        let b = (other.rec.ts, other.rec.order);
        b.0.partial_cmp(&a.0)
            .unwrap_or(Ordering::Equal)
            .then(b.1.cmp(&a.1))
    }
}

enum Source<F: Files> {
    /// one file: read directly
    Single(FileRecords<F>),
    /// capture._merged over several
    Merge {
        started: bool,
        pending: Vec<(f64, usize)>,
        heap: BinaryHeap<Head<F>>,
        /// the file whose record was yielded last: advanced at the next call
        current: Option<FileRecords<F>>,
    },
    Empty,
}

/// A capture's packets: one file, a set of files merged by time, or a byte range of one.
pub struct PacketReader<F: Files> {
    /// (name in messages, the name's bytes)
    files: Vec<(Rc<str>, Rc<[u8]>)>,
    opener: F,
    source: Source<F>,
    done: bool,
    index: u64,
    warned: Vec<u32>,
    ips: IpCache,
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
pub struct PacketBatch {
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
fn le_nums<T, const N: usize>(b: &[u8], n: usize, f: fn([u8; N]) -> T) -> Result<Vec<T>, String> {
    if b.len() < n * N {
        return Err("a packet batch's column is shorter than its rows".into());
    }
    Ok(b.chunks_exact(N)
        .take(n)
        .map(|c| f(c.try_into().unwrap()))
        .collect())
}

impl PacketBatch {
    /// `n` rows from each column's Arrow buffers ([validity, data] or [validity, offsets, data],
    /// at offset 0, in PACKET_SCHEMA's order); `file`: the capture range the rows point into.
    pub fn from_buffers(
        n: usize,
        mut cols: Vec<Vec<Vec<u8>>>,
        file: Option<(u64, Bytes)>,
    ) -> Result<Self, String> {
        if cols.len() < 15 {
            return Err("a packet batch has too few columns".into());
        }
        let mut take = |i: usize| std::mem::take(&mut cols[i]);
        let fixed = |mut c: Vec<Vec<u8>>| -> Vec<u8> {
            if c.len() > 1 {
                c.swap_remove(1)
            } else {
                Vec::new()
            }
        };
        let var = |mut c: Vec<Vec<u8>>| -> Result<(Vec<i32>, Vec<u8>), String> {
            let data = c.pop().unwrap_or_default();
            let off = le_nums(&c.pop().unwrap_or_default(), n + 1, i32::from_le_bytes)?;
            Ok((off, data))
        };
        let (poff, pdata) = var(take(8))?;
        let mut anomaly = take(11);
        let valid = if anomaly.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut anomaly[0])
        };
        let ok_off = |o: &[i32], len: usize| {
            o.windows(2).all(|w| w[0] <= w[1]) && o.last().is_none_or(|&e| e as usize <= len)
        };
        let b = PacketBatch {
            n,
            at: 0,
            ts: le_nums(&fixed(take(0)), n, f64::from_le_bytes)?,
            src: var(take(1))?,
            sport: le_nums(&fixed(take(2)), n, i32::from_le_bytes)?,
            dst: var(take(3))?,
            dport: le_nums(&fixed(take(4)), n, i32::from_le_bytes)?,
            seq: le_nums(&fixed(take(5)), n, i64::from_le_bytes)?,
            ack: le_nums(&fixed(take(6)), n, i64::from_le_bytes)?,
            flags: le_nums(&fixed(take(7)), n, i16::from_le_bytes)?,
            payload: (poff, Bytes::from(pdata)),
            missing: le_nums(&fixed(take(9)), n, i64::from_le_bytes)?,
            index: le_nums(&fixed(take(10)), n, i64::from_le_bytes)?,
            valid: (!valid.is_empty()).then_some(valid),
            anomaly: var(anomaly)?,
            detail: var(take(12))?,
            at_col: le_nums(&fixed(take(13)), n, i64::from_le_bytes)?,
            size: le_nums(&fixed(take(14)), n, i32::from_le_bytes)?,
            file,
        };
        let good = ok_off(&b.src.0, b.src.1.len())
            && ok_off(&b.dst.0, b.dst.1.len())
            && ok_off(&b.payload.0, b.payload.1.len())
            && ok_off(&b.anomaly.0, b.anomaly.1.len())
            && ok_off(&b.detail.0, b.detail.1.len());
        if !good {
            return Err("a packet batch's offsets run past its data".into());
        }
        Ok(b)
    }

    fn text(v: &(Vec<i32>, Vec<u8>), i: usize) -> Result<&str, String> {
        std::str::from_utf8(PacketBatch::raw(v, i))
            .map_err(|_| "a packet batch's text is not UTF-8".to_string())
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
) -> Result<Rc<str>, String> {
    let text = PacketBatch::raw(v, i);
    if let Some(h) = recent.iter().flatten().find(|h| h.as_bytes() == text) {
        return Ok(h.clone());
    }
    let h = host_of(hosts, PacketBatch::text(v, i)?);
    recent.swap(0, 1);
    recent[0] = Some(h.clone());
    Ok(h)
}

/// Packets already read, as Arrow packet batches (a Spark task's shuffled packets): each row a
/// packet or a capture anomaly; payloads in the batch, or in the capture range it points into.
#[derive(Default)]
pub struct BatchRows {
    batch: Option<PacketBatch>,
    hosts: std::collections::HashSet<Rc<str>>,
    recent: [Option<Rc<str>>; 2],
    /// the capture range the last packet batch pointed into (path, start, end), mapped
    mapped: Option<((String, u64, u64), Bytes)>,
}

impl BatchRows {
    pub fn push(&mut self, batch: PacketBatch) {
        self.batch = Some(batch);
    }

    /// One shared str per address text (a set bounded as the capture's address cache is).
    pub fn host(&mut self, s: &str) -> Rc<str> {
        host_of(&mut self.hosts, s)
    }

    /// The capture range a packet batch points into, mapped once for the batches that follow it.
    pub fn mapped(&mut self, path: String, start: u64, end: u64) -> Result<(u64, Bytes), String> {
        if let Some((key, bytes)) = &self.mapped {
            if key.0 == path && key.1 == start && key.2 == end {
                return Ok((start, bytes.clone()));
            }
        }
        let bytes = map_range(&path, start, end).map_err(|e| format!("{path}: {e}"))?;
        self.mapped = Some(((path, start, end), bytes.clone()));
        Ok((start, bytes))
    }

    /// The next row of the current batch, None when it has none left.
    pub fn next_row(&mut self) -> Result<Option<Rec>, String> {
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
            let (start, file) = b
                .file
                .as_ref()
                .ok_or("a packet batch points into a capture it was not given")?;
            let from = (b.at_col[i] as u64).wrapping_sub(*start) as usize;
            let to = from.wrapping_add(b.size[i].max(0) as usize);
            if from > to || to > file.len() {
                return Err("a packet batch points past the capture range it was given".into());
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
}

impl<F: Files> PacketReader<F> {
    /// files: the names' bytes (any name the system has, UTF-8 or not).
    pub fn new(files: Vec<Vec<u8>>, opener: F) -> Self {
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
            source,
            done: false,
            index: 0,
            warned: Vec::new(),
            ips: IpCache::default(),
            secrets: Vec::new(),
        }
    }

    /// The packets of one byte range of a file (`spec`) or, without one, of the whole file
    /// through the opener (a compressed file, or one whose headers go wrong); `index` frames
    /// come before it in the run.
    pub fn range(
        path: String,
        spec: Option<RangeSpec>,
        order: usize,
        index: u64,
        opener: F,
    ) -> Self {
        let mut r = PacketReader::new(vec![path.into_bytes()], opener);
        if let Source::Single(fr) = &mut r.source {
            fr.order = order;
            fr.is_range = spec.is_some();
            fr.range = spec;
        }
        r.index = index;
        r
    }

    /// The frames read so far, with the `index` it started from.
    pub fn frames(&self) -> u64 {
        self.index
    }

    /// What an appended land run carries into the next: the frames read (frame numbers in
    /// anomalies continue across the runs' files, as across a set's) and the link types
    /// already warned of (once per set).
    pub fn position(&self) -> (u64, Vec<u32>) {
        (self.index, self.warned.clone())
    }

    pub fn resume(&mut self, index: u64, warned: Vec<u32>) {
        self.index = index;
        self.warned = warned;
    }

    /// A file's first timestamp (its first record's, even a fault's), or None for a file that
    /// ends before any: what a set of files is ordered by before it is merged.
    pub fn first_ts(opener: &mut F, path: Vec<u8>) -> Result<Option<f64>, F::Error> {
        let name: Rc<str> = Rc::from(String::from_utf8_lossy(&path).as_ref());
        let mut f = FileRecords::new((name, Rc::from(path)), 0);
        let first = f.next_rec(opener)?;
        f.close_early();
        Ok(first.map(|r| r.ts))
    }

    /// The TLS key log text of the Decryption Secrets Blocks a file holds before its first
    /// packet (where `editcap --inject-secrets` puts them), empty when none.
    pub fn leading_secrets(opener: &mut F, path: Vec<u8>) -> Vec<u8> {
        let name: Rc<str> = Rc::from(String::from_utf8_lossy(&path).as_ref());
        let mut f = FileRecords::new((name, Rc::from(path)), 0);
        let mut text = Vec::new();
        // a bounded look: the blocks before the first packet (a damaged file ends it too)
        for _ in 0..4096 {
            match f.next_rec(opener) {
                Ok(Some(RawRec {
                    body: Body::Secrets(s),
                    ..
                })) => text.extend_from_slice(&s),
                _ => break,
            }
        }
        f.close_early();
        text
    }

    /// The next record of the files, merged by time.
    fn next_raw(&mut self) -> Result<Option<RawRec>, F::Error> {
        let opener = &mut self.opener;
        match &mut self.source {
            Source::Empty => Ok(None),
            Source::Single(it) => it.next_rec(opener),
            Source::Merge {
                started,
                pending,
                heap,
                current,
            } => {
                if !*started {
                    *started = true;
                    // each file's first record (even a fault) orders the set; the file is let go
                    let mut starts = Vec::with_capacity(self.files.len());
                    for (order, path) in self.files.iter().enumerate() {
                        let mut it = FileRecords::new(path.clone(), 0);
                        let first = it.next_rec(opener)?;
                        it.close_early();
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
                    if let Some(rec) = it.next_rec(opener)? {
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
                            // a file opens once no open file's record comes before its start
                            if ts > top.rec.ts {
                                break;
                            }
                        }
                        pending.pop();
                        let mut it = FileRecords::new(self.files[order].clone(), order);
                        if let Some(rec) = it.next_rec(opener)? {
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

    /// The next packet, capture anomaly or idle mark; None at the end. An error of the caller's
    /// ends the reading.
    pub fn next_rec(&mut self) -> Result<Option<Rec>, F::Error> {
        if self.done {
            return Ok(None);
        }
        // every pass consumes a record of the files
        loop {
            let raw = match self.next_raw() {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => {
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

/// Plain capture files read from disk (compressed ones are the caller's to open: `Files`).
#[derive(Default)]
pub struct FsFiles;

pub struct FsFile(pub std::fs::File);

impl Files for FsFiles {
    type Error = std::io::Error;
    type File = FsFile;

    fn open(&mut self, name: &[u8]) -> std::io::Result<FsFile> {
        #[cfg(unix)]
        let path = {
            use std::os::unix::ffi::OsStrExt;
            std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name))
        };
        #[cfg(not(unix))]
        let path = std::path::PathBuf::from(String::from_utf8_lossy(name).as_ref());
        std::fs::File::open(path).map(FsFile)
    }

    /// Every OS error is a fault of the capture: its packets before the error are kept.
    fn classify(&self, path: &str, e: std::io::Error) -> std::io::Result<(&'static str, String)> {
        match os_fault::<()>(path, &e) {
            Stop::Fault(kind, detail) => Ok((kind, detail)),
            _ => Err(e),
        }
    }
}

impl CaptureFile for FsFile {
    type Error = std::io::Error;

    fn read(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut out = Vec::with_capacity(n);
        (&mut self.0).take(n as u64).read_to_end(&mut out)?;
        Ok(out)
    }

    fn read_into(&mut self, n: usize, dst: &mut BytesMut) -> std::io::Result<bool> {
        use std::io::Read;
        let start = dst.len();
        dst.resize(start + n, 0);
        let k = loop {
            match self.0.read(&mut dst[start..]) {
                Ok(k) => break k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    dst.truncate(start);
                    return Err(e);
                }
            }
        };
        dst.truncate(start + k);
        Ok(true)
    }

    fn close(self, _raised: Option<&std::io::Error>, _failing: bool) -> std::io::Result<bool> {
        Ok(false)
    }
}
