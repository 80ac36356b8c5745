//! The TCP layer's test entry points: packets read from files or rows through the core's
//! Reassembler, its events as tuples.
pub use kafkawire_core::tcp::*;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::capture::{raised, rec_tuple, PacketReader, Rec};

// ---------------------------------------------------------------- test entry points

fn addr<'py>(py: Python<'py>, a: &Addr) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            a.0.as_ref().into_pyobject(py)?.into_any(),
            a.1.into_pyobject(py)?.into_any(),
        ],
    )
}

fn opt_addr<'py>(py: Python<'py>, a: &Option<Addr>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match a {
        Some(a) => addr(py, a)?.into_any(),
        None => py.None().into_bound(py),
    })
}

/// An event as a tuple: ("data", conn, sender, receiver, ts, bytes), ("gap", conn, sender,
/// receiver, ts, size), ("open", conn, client, server, ts, syn_seen), ("close", conn, ts,
/// reason, retransmissions, out_of_order), ("stream_anomaly", conn, ts, kind, detail).
pub(crate) fn event_tuple<'py>(py: Python<'py>, e: &Event) -> PyResult<Bound<'py, PyTuple>> {
    match e {
        Event::Data {
            conn,
            sender,
            receiver,
            ts,
            data,
        } => PyTuple::new(
            py,
            [
                "data".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                addr(py, sender)?.into_any(),
                addr(py, receiver)?.into_any(),
                ts.into_pyobject(py)?.into_any(),
                PyBytes::new(py, data).into_any(),
            ],
        ),
        Event::Gap {
            conn,
            sender,
            receiver,
            ts,
            size,
        } => PyTuple::new(
            py,
            [
                "gap".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                addr(py, sender)?.into_any(),
                addr(py, receiver)?.into_any(),
                ts.into_pyobject(py)?.into_any(),
                size.into_pyobject(py)?.into_any(),
            ],
        ),
        Event::Open {
            conn,
            client,
            server,
            ts,
            syn_seen,
        } => PyTuple::new(
            py,
            [
                "open".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                opt_addr(py, client)?,
                opt_addr(py, server)?,
                ts.into_pyobject(py)?.into_any(),
                syn_seen.into_pyobject(py)?.to_owned().into_any(),
            ],
        ),
        Event::Close {
            conn,
            ts,
            reason,
            retransmissions,
            out_of_order,
        } => PyTuple::new(
            py,
            [
                "close".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                ts.into_pyobject(py)?.into_any(),
                reason.into_pyobject(py)?.into_any(),
                retransmissions.into_pyobject(py)?.into_any(),
                out_of_order.into_pyobject(py)?.into_any(),
            ],
        ),
        Event::StreamAnomaly {
            conn,
            ts,
            kind,
            detail,
        } => PyTuple::new(
            py,
            [
                "stream_anomaly".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                ts.into_pyobject(py)?.into_any(),
                kind.into_pyobject(py)?.into_any(),
                detail.as_str().into_pyobject(py)?.into_any(),
            ],
        ),
        // the TCP layer gives none (it is the TLS layer's)
        Event::Tls { conn, facts } => PyTuple::new(
            py,
            [
                "tls".into_pyobject(py)?.into_any(),
                conn.into_pyobject(py)?.into_any(),
                facts.version.as_str().into_pyobject(py)?.into_any(),
            ],
        ),
    }
}

fn held<'py>(py: Python<'py>, r: &Reassembler) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            "held".into_pyobject(py)?.into_any(),
            r.oldest_held().into_pyobject(py)?.into_any(),
        ],
    )
}

fn emit(py: Python<'_>, out: &Bound<'_, PyList>, evs: &mut Vec<Event>) -> PyResult<()> {
    for e in evs.drain(..) {
        out.append(event_tuple(py, &e)?)?;
    }
    Ok(())
}

/// read_packets(files) through a Reassembler, then finish(): the event tuples, with the
/// capture's anomalies in their place (rec tuples), and ("held", oldest_held()) after every
/// packet when `held_every`; an exception from the reader ends it as capture's raised().
#[pyfunction]
#[pyo3(signature = (files, opener, file_errors, max_buffer_per_direction, lost_after, max_buffer_total,
                    held_every=false))]
#[allow(clippy::too_many_arguments)] // a test entry point: the reader's and the reassembler's arguments
fn tcp_events<'py>(
    py: Python<'py>,
    files: Vec<String>,
    opener: Py<PyAny>,
    file_errors: Py<pyo3::types::PyTuple>,
    max_buffer_per_direction: u64,
    lost_after: u64,
    max_buffer_total: u64,
    held_every: bool,
) -> PyResult<Bound<'py, PyList>> {
    let r = Reassembler::new(max_buffer_per_direction, lost_after, max_buffer_total);
    reassemble(
        py,
        PacketReader::through_opener(
            files.into_iter().map(String::into_bytes).collect(),
            opener,
            file_errors,
        ),
        r,
        held_every,
    )
}

/// The same over packet rows (ts, src, sport, dst, dport, seq, ack, flags, payload, missing,
/// index), read as the Spark tasks' rows are (PacketReader::from_rows).
#[pyfunction]
#[pyo3(signature = (packets, max_buffer_per_direction, lost_after, max_buffer_total, held_every=false))]
fn tcp_events_packets<'py>(
    py: Python<'py>,
    packets: &Bound<'py, PyAny>,
    max_buffer_per_direction: u64,
    lost_after: u64,
    max_buffer_total: u64,
    held_every: bool,
) -> PyResult<Bound<'py, PyList>> {
    let r = Reassembler::new(max_buffer_per_direction, lost_after, max_buffer_total);
    reassemble(py, PacketReader::from_rows(packets)?, r, held_every)
}

fn reassemble<'py>(
    py: Python<'py>,
    mut reader: PacketReader,
    mut r: Reassembler,
    held_every: bool,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut evs = Vec::new();
    loop {
        let rec = match reader.next(py) {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => {
                out.append(raised(py, e)?)?;
                return Ok(out);
            }
        };
        match &rec {
            Rec::Idle => {}
            Rec::Anomaly(_) => out.append(rec_tuple(py, &rec)?)?,
            Rec::Packet(p) => {
                r.feed(p, &mut evs);
                emit(py, &out, &mut evs)?;
                if held_every {
                    out.append(held(py, &r)?)?;
                }
            }
        }
    }
    r.finish(&mut evs);
    emit(py, &out, &mut evs)?;
    Ok(out)
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tcp_events, m)?)?;
    m.add_function(wrap_pyfunction!(tcp_events_packets, m)?)?;
    Ok(())
}
