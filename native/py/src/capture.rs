//! The capture reader (kafkawire_core::capture) over Python's file objects: each file is opened
//! with `opener(path)` (capture._open: gzip/bz2/xz/zstd by their magic) as a `with` block, read
//! with `read` and `read1`, and what it raises is a file fault when it is one of
//! capture.FILE_ERRORS (OSError, EOFError, ValueError and the decompressors' errors), with
//! Python's own message, else raised to the caller. Spark's stage 2 hands packets over as rows
//! or Arrow packet batches instead (`PacketReader::from_rows`).

use bytes::Bytes;
use kafkawire_core::anomalies::kind;
pub use kafkawire_core::capture::RangeSpec;
use kafkawire_core::capture::{self as core, BatchRows, CaptureFile, Files, PacketBatch};
pub use kafkawire_core::packet::*;
use pyo3::exceptions::{PyEOFError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// capture._open and capture.FILE_ERRORS; `direct`: plain local captures are read here, not
/// through the opener (off for the test hooks that hold the reader's calls to the oracle's).
pub struct PyFiles {
    opener: Py<PyAny>,
    errors: Py<PyTuple>,
    direct: bool,
}

/// An open file: what the opener returned (its __exit__ ends the `with`) and what __enter__ gave;
/// or an uncompressed capture on local disk, read here without Python's file object (the opener
/// would hand it over unchanged: reading it in Rust saves a copy and a call into Python per chunk).
pub enum PyFile {
    Py {
        mgr: Py<PyAny>,
        f: Py<PyAny>,
    },
    /// `first`: its first read is small (a file opened for its first packet's time alone, a
    /// set's order, reads what that takes, not a whole chunk)
    Plain {
        f: core::FsFile,
        first: bool,
    },
}

/// A regular file whose first bytes are a pcap's or pcapng's magic, opened at its start; None for
/// anything the opener must see (a stream, a URI, a compressed or unknown file, an error to report).
fn plain_capture(name: &[u8]) -> Option<std::fs::File> {
    use std::io::{Read, Seek};
    use std::os::unix::ffi::OsStrExt;
    if name == b"-" {
        return None;
    }
    let path = std::ffi::OsStr::from_bytes(name);
    // stat before opening: opening a FIFO would wait for its writer (and take its bytes)
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut f = std::fs::File::open(path).ok()?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).ok()?;
    let known = core::is_capture_magic(u32::from_le_bytes(magic));
    f.rewind().ok()?;
    known.then_some(f)
}

/// Bytes from a file method's result (bytes, or whatever bytes-like a file object gives).
fn py_bytes<'a>(v: &'a Bound<'_, PyAny>, tmp: &'a mut Vec<u8>) -> PyResult<&'a [u8]> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    *tmp = v.extract::<Vec<u8>>()?;
    Ok(&tmp[..])
}

impl Files for PyFiles {
    type Error = PyErr;
    type File = PyFile;

    fn open(&mut self, name: &[u8]) -> PyResult<PyFile> {
        if let Some(f) = self.direct.then(|| plain_capture(name)).flatten() {
            return Ok(PyFile::Plain {
                f: core::FsFile(f),
                first: true,
            });
        }
        Python::attach(|py| {
            let opener = self.opener.bind(py);
            // a UTF-8 name as str (the opener's type), any other as its bytes
            let mgr = match std::str::from_utf8(name) {
                Ok(name) => opener.call1((name,))?,
                Err(_) => opener.call1((PyBytes::new(py, name),))?,
            };
            let f = mgr.call_method0("__enter__")?;
            Ok(PyFile::Py {
                mgr: mgr.unbind(),
                f: f.unbind(),
            })
        })
    }

    fn classify(&self, path: &str, e: PyErr) -> PyResult<(&'static str, String)> {
        Python::attach(|py| {
            let v = e.value(py);
            let caught = e.is_instance_of::<PyOSError>(py)
                || e.is_instance_of::<PyEOFError>(py)
                || e.is_instance_of::<PyValueError>(py)
                || v.is_instance(self.errors.bind(py))?;
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
        })
    }
}

impl CaptureFile for PyFile {
    type Error = PyErr;

    fn read(&mut self, n: usize) -> PyResult<Vec<u8>> {
        match self {
            PyFile::Plain { f, .. } => Ok(f.read(n)?),
            PyFile::Py { f, .. } => Python::attach(|py| {
                let obj = f.bind(py).call_method1("read", (n,))?;
                let mut tmp = Vec::new();
                Ok(py_bytes(&obj, &mut tmp)?.to_vec())
            }),
        }
    }

    fn read_into(&mut self, n: usize, dst: &mut bytes::BytesMut) -> PyResult<bool> {
        match self {
            PyFile::Plain { f, first } => {
                let n = if std::mem::take(first) {
                    n.min(64 << 10)
                } else {
                    n
                };
                Ok(f.read_into(n, dst)?)
            }
            PyFile::Py { f, .. } => Python::attach(|py| {
                let obj = f.bind(py).call_method1("read1", (n,))?;
                if obj.is_none() {
                    return Ok(false); // a live stream with nothing yet
                }
                let mut tmp = Vec::new();
                dst.extend_from_slice(py_bytes(&obj, &mut tmp)?);
                Ok(true)
            }),
        }
    }

    fn close(self, raised: Option<&PyErr>, failing: bool) -> PyResult<bool> {
        let PyFile::Py { mgr, .. } = self else {
            return Ok(false); // closed as it drops; nothing swallows an error
        };
        Python::attach(|py| {
            let mgr = mgr.bind(py);
            let res = match raised {
                Some(e) => {
                    mgr.call_method1("__exit__", (e.get_type(py), e.value(py), e.traceback(py)))?
                }
                None => mgr.call_method1("__exit__", (py.None(), py.None(), py.None()))?,
            };
            // the `with` asks __exit__'s result only when an exception is in flight (a fault
            // of the capture is one in Python's reader too)
            Ok(failing && res.is_truthy()?)
        })
    }
}

fn py_files(opener: Py<PyAny>, errors: Py<PyTuple>) -> PyFiles {
    PyFiles {
        opener,
        errors,
        direct: true,
    }
}

/// Packets from files, or from the rows a Spark task was given.
pub enum PacketReader {
    Files(core::PacketReader<PyFiles>),
    Rows {
        rows: Py<pyo3::types::PyIterator>,
        batches: BatchRows,
        done: bool,
        /// never set: rows carry no Decryption Secrets Blocks
        secrets: Vec<u8>,
    },
}

impl kafkawire_core::engine::PacketSource for PacketReader {
    type Error = PyErr;

    fn next_rec(&mut self) -> PyResult<Option<Rec>> {
        Python::attach(|py| self.next(py))
    }

    fn take_secrets(&mut self) -> Vec<u8> {
        std::mem::take(self.secrets())
    }

    fn position(&self) -> (u64, Vec<u32>) {
        match self {
            PacketReader::Files(r) => r.position(),
            PacketReader::Rows { .. } => (0, Vec::new()),
        }
    }

    fn resume(&mut self, index: u64, warned: Vec<u32>) {
        if let PacketReader::Files(r) = self {
            r.resume(index, warned);
        }
    }
}

fn value_error(e: String) -> PyErr {
    PyValueError::new_err(e)
}

impl PacketReader {
    /// files: the names' bytes (os.fsencode: any name the system has, UTF-8 or not).
    pub fn new(files: Vec<Vec<u8>>, opener: Py<PyAny>, errors: Py<PyTuple>) -> Self {
        PacketReader::Files(core::PacketReader::new(files, py_files(opener, errors)))
    }

    /// Every file through the opener, plain ones too: the test hooks that log its calls.
    pub(crate) fn through_opener(
        files: Vec<Vec<u8>>,
        opener: Py<PyAny>,
        errors: Py<PyTuple>,
    ) -> Self {
        let mut files_of = py_files(opener, errors);
        files_of.direct = false;
        PacketReader::Files(core::PacketReader::new(files, files_of))
    }

    pub(crate) fn range(
        path: String,
        spec: Option<RangeSpec>,
        order: usize,
        index: u64,
        opener: Py<PyAny>,
        errors: Py<PyTuple>,
    ) -> Self {
        PacketReader::Files(core::PacketReader::range(
            path,
            spec,
            order,
            index,
            py_files(opener, errors),
        ))
    }

    /// Packets from a Python iterator of rows rather than files: a Packet's fields as a tuple
    /// (ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index) or a CaptureAnomaly's
    /// (ts, kind, detail, index), or packet batches (rows, column buffers[, (path, start, end)]),
    /// as landing.spark's stage 1 ships them.
    pub fn from_rows(rows: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PacketReader::Rows {
            rows: rows.try_iter()?.unbind(),
            batches: BatchRows::default(),
            done: false,
            secrets: Vec::new(),
        })
    }

    pub(crate) fn frames(&self) -> u64 {
        match self {
            PacketReader::Files(r) => r.frames(),
            PacketReader::Rows { .. } => 0,
        }
    }

    /// The TLS key log text the files' Decryption Secrets Blocks held, until taken.
    pub(crate) fn secrets(&mut self) -> &mut Vec<u8> {
        match self {
            PacketReader::Files(r) => &mut r.secrets,
            PacketReader::Rows { secrets, .. } => secrets,
        }
    }

    pub fn next(&mut self, py: Python<'_>) -> PyResult<Option<Rec>> {
        let (rows, batches, done) = match self {
            PacketReader::Files(r) => return r.next_rec(),
            PacketReader::Rows {
                rows,
                batches,
                done,
                ..
            } => (rows, batches, done),
        };
        if *done {
            return Ok(None);
        }
        loop {
            if let Some(rec) = batches.next_row().map_err(value_error)? {
                return Ok(Some(rec));
            }
            let Some(row) = rows.bind(py).clone().next() else {
                *done = true;
                return Ok(None);
            };
            let row = row?;
            let t = row.cast::<PyTuple>()?;
            if t.len() == 2 || t.len() == 3 {
                let file = if t.len() == 3 {
                    let (path, start, end): (String, u64, u64) = t.get_item(2)?.extract()?;
                    Some(
                        batches
                            .mapped(path, start, end)
                            .map_err(PyOSError::new_err)?,
                    )
                } else {
                    None
                };
                batches.push(packet_batch(t, file)?);
                continue;
            }
            return row_rec(batches, t);
        }
    }
}

fn buffer_bytes(b: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if b.is_none() {
        return Ok(Vec::new());
    }
    let buf = pyo3::buffer::PyBuffer::<u8>::get(b)?;
    buf.to_vec(b.py())
}

/// (rows, [[validity, data] or [validity, offsets, data] per column]): pyarrow's Array.buffers()
/// of each column, at offset 0.
fn packet_batch(item: &Bound<'_, PyTuple>, file: Option<(u64, Bytes)>) -> PyResult<PacketBatch> {
    let n: usize = item.get_item(0)?.extract()?;
    let cols = item
        .get_item(1)?
        .try_iter()?
        .map(|c| c?.try_iter()?.map(|b| buffer_bytes(&b?)).collect())
        .collect::<PyResult<Vec<Vec<Vec<u8>>>>>()?;
    PacketBatch::from_buffers(n, cols, file).map_err(value_error)
}

/// A row: a Packet's fields, or a CaptureAnomaly's.
fn row_rec(batches: &mut BatchRows, t: &Bound<'_, PyTuple>) -> PyResult<Option<Rec>> {
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
        src: batches.host(&src),
        sport: t.get_item(2)?.extract()?,
        dst: batches.host(&dst),
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
    let mut r = PacketReader::through_opener(files, opener, file_errors);
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
    path: Vec<u8>,
    opener: Py<PyAny>,
    file_errors: Bound<'_, PyTuple>,
) -> PyResult<Option<f64>> {
    let mut files = py_files(opener, file_errors.unbind());
    core::PacketReader::first_ts(&mut files, path)
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
    let mut files = py_files(opener, file_errors.unbind());
    let text = core::PacketReader::leading_secrets(&mut files, path);
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
    m.add_function(wrap_pyfunction!(first_ts, m)?)?;
    m.add_function(wrap_pyfunction!(leading_secrets, m)?)?;
    Ok(())
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_packets_tuples, m)?)?;
    m.add_function(wrap_pyfunction!(ip6_text_of, m)?)?;
    Ok(())
}
