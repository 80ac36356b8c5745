//! Byte ranges of one capture file (kafkawire_core::ranges) for dissector/ranges.py and
//! landing.spark's stage 1: the cuts as tuples, a range's frames counted, and its packets
//! scanned into buckets whose chunks leave as Arrow columns. The files are read through Python's
//! opener (capture.rs), so a compressed file is one range read whole.
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::arrow::ArrowColumn;
use crate::capture::{PacketReader, RangeSpec};
use kafkawire_core::ranges::{bucket, split, Buckets};

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

/// The bucket of a connection (either direction), as the range scans compute it.
#[pyfunction]
fn bucket_of(src: &str, sport: u16, dst: &str, dport: u16, n: u32) -> u32 {
    bucket((src, sport), (dst, dport), n)
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
    buckets: Buckets,
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
        let buckets = Buckets::new(buckets, keep, chunk_rows, chunk_bytes, refs)
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("buckets must be at least 1"))?;
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
            buckets,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        loop {
            if let Some((b, c, n, cols)) = self.buckets.next_chunk() {
                let specs = PyList::empty(py);
                for col in cols {
                    specs.append(ArrowColumn::new(col))?;
                }
                return Ok(Some((b, c, (n, specs)).into_pyobject(py)?));
            }
            if self.buckets.done() {
                return Ok(None);
            }
            match self.reader.next(py)? {
                Some(rec) => self.buckets.push(rec),
                None => self.buckets.finish(),
            }
        }
    }

    /// (the last packet's time, the latest packet time) of the packets read so far.
    #[getter]
    fn ends(&self) -> (Option<f64>, Option<f64>) {
        (self.buckets.last, self.buckets.top)
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
