//! The record-set reader's test entry points: scans, summaries and records as Python tuples.
pub use kafkawire_core::records::*;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use kafkawire_core::compression::DEFAULT_MAX_DECOMPRESSED;

// -- test entry points ------------------------------------------------------------------

/// _native.record_facts(data, allow_partial, max_decompressed) -> (summary JSON, batches,
/// truncated, partial, anomalies). A batch is (position, magic, attributes, codec,
/// codec_name, crc, crc_ok, record_count, producer_id, base_offset, size,
/// uncompressed_size, transactional, control, records) where records is len(b.records())
/// for a legacy wrapper (after uncompressed_size, as rows.py asks) and None otherwise.
#[pyfunction]
#[pyo3(signature = (data, allow_partial=true, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn record_facts<'py>(
    py: Python<'py>,
    data: &[u8],
    allow_partial: bool,
    max_decompressed: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut r = Records::new();
    r.set.scan(data, allow_partial);
    let mut summary = Vec::new();
    r.set.summary_json(data, &mut summary);
    let batches = PyList::empty(py);
    let set = std::mem::take(&mut r.set);
    for b in &set.batches {
        let (records, usize_): (Bound<'py, PyAny>, Option<usize>) = match b.record_count() {
            Some(_) => (
                py.None().into_bound(py),
                b.uncompressed_size(data, max_decompressed, &mut r.dec),
            ),
            None => {
                let (n, u) = b.wrapper_facts(data, max_decompressed, &mut r.dec, &mut r.inner);
                (n.into_pyobject(py)?.into_any(), u)
            }
        };
        let head = (
            b.position,
            b.magic,
            b.attributes,
            b.codec(),
            b.codec_name(),
            b.crc,
            b.crc_ok(data),
            b.record_count(),
        )
            .into_pyobject(py)?;
        let tail = (
            b.producer_id(),
            b.base_offset,
            b.size(),
            usize_,
            b.transactional(),
            b.control(),
            records,
        )
            .into_pyobject(py)?;
        let mut items: Vec<Bound<'py, PyAny>> = head.iter().collect();
        items.extend(tail.iter());
        let t = PyTuple::new(py, items)?;
        batches.append(t)?;
    }
    let partial = set
        .partial
        .as_ref()
        .map(|p| (p.offset, p.base_offset, p.length, p.magic, p.available));
    let anomalies: Vec<(&str, usize, &str)> = set
        .anomalies
        .iter()
        .map(|a| (a.kind, a.offset, a.detail.as_str()))
        .collect();
    (
        PyBytes::new(py, &summary),
        batches,
        set.truncated,
        partial,
        anomalies,
    )
        .into_pyobject(py)
}

/// _native.record_columns(fields, max_decompressed) -> ((record_count, record_bytes,
/// record_bytes_uncompressed, codecs, producer_id), [summary JSON of each field]).
#[pyfunction]
#[pyo3(signature = (fields, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn record_columns<'py>(
    py: Python<'py>,
    fields: Vec<Vec<u8>>,
    max_decompressed: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    columns_of(py, &mut Records::new(), &fields, max_decompressed)
}

/// _native.record_columns_many([fields, ...], max_decompressed): record_columns of each
/// exchange's fields through one Records (its buffers reused from one to the next).
#[pyfunction]
#[pyo3(signature = (exchanges, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn record_columns_many<'py>(
    py: Python<'py>,
    exchanges: Vec<Vec<Vec<u8>>>,
    max_decompressed: usize,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut r = Records::new();
    exchanges
        .iter()
        .map(|fields| columns_of(py, &mut r, fields, max_decompressed))
        .collect()
}

fn columns_of<'py>(
    py: Python<'py>,
    r: &mut Records,
    fields: &[Vec<u8>],
    max_decompressed: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let views: Vec<&[u8]> = fields.iter().map(|f| f.as_slice()).collect();
    let mut summaries = Vec::new();
    let c = r.record_columns(&views, max_decompressed, Some(&mut summaries));
    let cols = (
        c.record_count,
        c.record_bytes,
        c.record_bytes_uncompressed,
        c.codecs,
        c.producer_id,
    );
    let summaries: Vec<Bound<'py, PyBytes>> =
        summaries.iter().map(|s| PyBytes::new(py, s)).collect();
    (cols, summaries).into_pyobject(py)
}

/// _native._records_bench(fields, repeat, max_decompressed) -> seconds per pass over the
/// fields (summary and columns of each, one Records reused), for the speed report.
#[pyfunction]
#[pyo3(signature = (fields, repeat, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn _records_bench(fields: Vec<Vec<u8>>, repeat: usize, max_decompressed: usize) -> f64 {
    let mut r = Records::new();
    let mut out = Vec::new();
    let t = std::time::Instant::now();
    for _ in 0..repeat {
        for f in &fields {
            out.clear();
            let mut cols = RecordColumns::default();
            r.add_field(f, max_decompressed, &mut cols, Some(&mut out));
        }
    }
    t.elapsed().as_secs_f64() / repeat.max(1) as f64
}

/// _native.records_of(data, allow_partial, max_decompressed) -> for each batch of the record set,
/// its records as the records table reads them: (offset, timestamp or None when unknown or
/// negative, key, value, [(header key as text, header value)]).
#[pyfunction]
#[pyo3(signature = (data, allow_partial=true, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn records_of<'py>(
    py: Python<'py>,
    data: &[u8],
    allow_partial: bool,
    max_decompressed: usize,
) -> PyResult<Bound<'py, PyList>> {
    type Row<'py> = (
        i64,
        Option<i64>,
        Option<Bound<'py, PyBytes>>,
        Option<Bound<'py, PyBytes>>,
        Vec<(Option<String>, Option<Bound<'py, PyBytes>>)>,
    );
    let mut r = Records::new();
    r.set.scan(data, allow_partial);
    let out = PyList::empty(py);
    let mut rec = Rec::default();
    let set = std::mem::take(&mut r.set);
    for b in &set.batches {
        let mut rows: Vec<Row<'py>> = Vec::new();
        let _ = each_record(
            data,
            b,
            max_decompressed,
            &mut r.dec,
            &mut r.inner,
            &mut rec,
            |buf, x| {
                let bytes = |s: Option<Span>| s.map(|(a, b)| PyBytes::new(py, &buf[a..b]));
                let headers = x
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.map(|(a, b)| String::from_utf8_lossy(&buf[a..b]).into_owned()),
                            bytes(*v),
                        )
                    })
                    .collect();
                rows.push((x.offset, x.timestamp, bytes(x.key), bytes(x.value), headers));
            },
        );
        out.append(rows)?;
    }
    Ok(out)
}

#[pyfunction]
fn _summary_v2(data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    json_summary_v2(&mut out, data).then_some(out)
}

/// _native.records_json(data, no_payloads=False, topic=None) -> bytes: the field as `dissect
/// --records` writes it (kafkawire_core::record_sets).
#[pyfunction]
#[pyo3(signature = (data, no_payloads=false, topic=None, max_decompressed=DEFAULT_MAX_DECOMPRESSED))]
fn records_json<'py>(
    py: Python<'py>,
    data: &[u8],
    no_payloads: bool,
    topic: Option<&str>,
    max_decompressed: usize,
) -> Bound<'py, PyBytes> {
    let mut out = Vec::new();
    Records::new().decoded_json(&mut out, data, max_decompressed, topic, no_payloads);
    PyBytes::new(py, &out)
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let layout: Vec<(&str, String, usize)> = V2_LAYOUT
        .iter()
        .enumerate()
        .map(|(i, (name, code))| (*name, (*code as char).to_string(), v2_offset(i)))
        .collect();
    m.add("V2_HEADER", PyTuple::new(m.py(), layout)?)?;
    m.add_function(wrap_pyfunction!(records_json, m)?)?;
    m.add_function(wrap_pyfunction!(_summary_v2, m)?)?;
    m.add_function(wrap_pyfunction!(record_facts, m)?)?;
    m.add_function(wrap_pyfunction!(records_of, m)?)?;
    m.add_function(wrap_pyfunction!(record_columns, m)?)?;
    m.add_function(wrap_pyfunction!(record_columns_many, m)?)?;
    m.add_function(wrap_pyfunction!(_records_bench, m)?)?;
    Ok(())
}
