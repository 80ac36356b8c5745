//! dissect() in Rust: the loop over the native layers, and what it releases, handed over in one
//! of three forms (dissector/native.py drives each):
//! - items: the Python objects dissect() yields (dissector.items' Exchange, Anomaly, Connection);
//! - lines: with `render`, the text or jsonl lines of the items (consecutive lines as one bytes
//!   object), a file fault also as an item, so that the caller notes it;
//! - the land run: with `stitch`, kafkawire_core::land's run (no reordering, connections
//!   numbered by stable ids), and with `rows` every item's table rows, only file faults coming out.
use std::collections::HashMap;
use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::capture::PacketReader;
use crate::config::{EngineConfig, Items, ANOMALY_FIELDS, CONNECTION_FIELDS, EXCHANGE_FIELDS};
use crate::decode::{self, ToPy};
use crate::errors::PyCarry;
use crate::render::Render;
use crate::rows::{self, Rows};
use crate::tcp::Event;
use crate::tls::{Facts, KeyLog};
use kafkawire_core::anomalies::kind;
use kafkawire_core::engine::{Hooks, Live, PacketSource, Pipeline, Setup};
use kafkawire_core::exchanges::{AnomalyItem, Body, Exchanges, Item};
use kafkawire_core::land::{land_bucket, Back, BucketSetup, Composite, Gathered, LandRun};
use kafkawire_core::parallel::{Pool, Pumped};

#[pyclass(unsendable, module = "dissector._native")]
pub struct Engine {
    /// the core's pipeline, over files or a Spark task's rows
    p: Pipeline<PacketReader>,
    progress: Option<Py<PyAny>>,
    conv: Convert,
    /// (text, not jsonl; the writer): items it can write come out as lines (consecutive lines in
    /// one bytes object), the rest as Python items
    render: Option<(bool, Render)>,
    /// capture.FILE_FAULTS: anomalies that are always Python items too, so the caller sees them (a
    /// command's one-line error and exit status)
    file_faults: FileFaults,
    /// a land run instead of dissect()'s: no reordering, connections numbered by stable ids,
    /// and (with rows) every item's rows (kafkawire_core::land)
    land: Option<LandRun>,
    /// (the last packet's time, the latest packet time) of the whole capture set, or a callable
    /// giving them after the last packet, when the packets are only part of it: what its
    /// connections still open are closed at (stitch.items' `end`)
    end: Option<Py<PyAny>>,
    /// what the pipeline is made of: a land run over buckets makes one per bucket from it
    setup: Setup,
    /// buckets for a land run over files (1: the run above, on this thread)
    threads: usize,
    from_files: bool,
    /// a land run over buckets, once started; the state of one it continues
    par: Option<ParLand>,
    composite: Option<Composite>,
    /// the writer hands out the item of every line it writes too (set_watched: a metrics
    /// exporter counts what the lines show)
    watched: bool,
}

/// A land run over buckets (kafkawire_core::parallel): this thread reads and sends the packets,
/// and gathers the rows the buckets make.
struct ParLand {
    pool: Pool<Back>,
    gathered: Gathered,
    all_sent: bool,
    /// the composite state, once every bucket's is taken; then the rows parked behind it are
    /// released at the next batch
    carried: Option<Vec<u8>>,
    unpark: bool,
    finished: bool,
}

/// The caller's progress callable and the set's end (a value or a callable), as the pipeline's hooks.
struct PyHooks<'a, 'py> {
    progress: Option<&'a Py<PyAny>>,
    end: Option<&'a Py<PyAny>>,
    py: Python<'py>,
}

impl Hooks<PyErr> for PyHooks<'_, '_> {
    fn progress(&mut self, packets: u64) -> PyResult<()> {
        if let Some(p) = self.progress {
            p.call1(self.py, (packets,))?;
        }
        Ok(())
    }

    fn end(&mut self) -> PyResult<Option<(f64, Option<f64>)>> {
        let Some(end) = self.end else {
            return Ok(None);
        };
        let end = end.bind(self.py);
        let v = if end.is_callable() {
            end.call0()?
        } else {
            end.clone()
        };
        Ok(Some(v.extract()?))
    }
}

/// capture.FILE_FAULTS
struct FileFaults(Vec<String>);

impl FileFaults {
    fn holds(&self, a: &AnomalyItem) -> bool {
        a.is_file_fault(&self.0)
    }
}

/// What a config makes a pipeline of (redacting off until set_redact).
fn setup_of(cfg: &EngineConfig) -> Setup {
    let limits = cfg.limits.get();
    let mut keys = KeyLog::default();
    // parsed already: one key log is shared with this engine, not copied
    for k in &cfg.tls_keylogs {
        keys.extend(&k.get().log);
    }
    Setup {
        ports: cfg.ports.clone(),
        max_frame_size: limits.max_frame_size,
        connections: cfg.connections,
        max_buffer_per_direction: limits.max_buffer_per_direction,
        lost_after: limits.lost_after,
        max_buffer_total: limits.max_buffer_total,
        window: limits.window,
        max_items: limits.max_items,
        max_bytes: limits.max_bytes,
        keys,
        redact: false,
    }
}

/// An item's `tls`: None, or {"version", "cipher_suite", "sni", "decrypted"}.
fn tls_dict<'py>(py: Python<'py>, facts: Option<&Facts>) -> PyResult<Bound<'py, PyAny>> {
    let Some(f) = facts else {
        return Ok(py.None().into_bound(py));
    };
    let d = PyDict::new(py);
    d.set_item("version", &f.version)?;
    d.set_item("cipher_suite", &f.cipher_suite)?;
    d.set_item("sni", &f.sni)?;
    d.set_item("decrypted", f.decrypted)?;
    Ok(d.into_any())
}

/// The Python classes items become, and caches for building them.
struct Convert {
    exchange: Py<PyAny>,
    anomaly: Py<PyAny>,
    connection: Py<PyAny>,
    /// the field names, interned: items are built by keyword, so a class whose fields moved
    /// cannot take a value meant for another
    keys: [Vec<Py<PyString>>; 3],
    topy: ToPy,
    /// Rc address -> (the Rc, kept so the address stays its own while cached; its str)
    strings: HashMap<usize, (Rc<str>, Py<PyString>)>,
    /// set_topics: each exchange carries what it did per topic (topics::by_topic)
    by_topic: Option<kafkawire_core::topics::Plans>,
}

impl Convert {
    fn new(py: Python<'_>, items: &Items) -> Self {
        Convert {
            exchange: items.exchange.clone_ref(py),
            anomaly: items.anomaly.clone_ref(py),
            connection: items.connection.clone_ref(py),
            keys: [
                &EXCHANGE_FIELDS[..],
                &ANOMALY_FIELDS[..],
                &CONNECTION_FIELDS[..],
            ]
            .map(|names| {
                names
                    .iter()
                    .map(|n| PyString::intern(py, n).unbind())
                    .collect()
            }),
            topy: ToPy::new(),
            strings: HashMap::new(),
            by_topic: None,
        }
    }

    /// cls(**dict(zip(the kind's field names, values))): an item built by keyword.
    fn build<'py>(
        &self,
        py: Python<'py>,
        kind: usize,
        values: impl IntoIterator<Item = Bound<'py, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = PyDict::new(py);
        for (k, v) in self.keys[kind].iter().zip(values) {
            kwargs.set_item(k.bind(py), v)?;
        }
        let cls = [&self.exchange, &self.anomaly, &self.connection][kind];
        Ok(cls.bind(py).call((), Some(&kwargs))?.unbind())
    }

    /// One Python str per distinct Rc<str> (endpoints, api names, client ids repeat on every item).
    fn text(&mut self, py: Python<'_>, s: &Rc<str>) -> Py<PyString> {
        let key = Rc::as_ptr(s) as *const u8 as usize;
        if let Some((_, p)) = self.strings.get(&key) {
            return p.clone_ref(py);
        }
        let p = PyString::new(py, s).unbind();
        if self.strings.len() > 65536 {
            self.strings.clear();
        }
        self.strings.insert(key, (s.clone(), p.clone_ref(py)));
        p
    }

    fn body(
        &mut self,
        py: Python<'_>,
        body: &Body,
        frame: Option<&Bound<'_, PyBytes>>,
    ) -> PyResult<Py<PyAny>> {
        Ok(match body {
            Body::Native(v) => match frame {
                Some(f) => decode::to_py(py, v, f, &mut self.topy)?,
                None => py.None(),
            },
            Body::Error(text) => {
                let d = PyDict::new(py);
                d.set_item("_decode_error", text.as_ref())?;
                d.into_any().unbind()
            }
            Body::Raw(b) => {
                let d = PyDict::new(py);
                d.set_item("_raw_body", PyBytes::new(py, b))?;
                d.into_any().unbind()
            }
            Body::Token => {
                let d = PyDict::new(py);
                d.set_item(
                    "token",
                    frame
                        .map(|f| f.clone().into_any())
                        .unwrap_or_else(|| py.None().into_bound(py)),
                )?;
                d.into_any().unbind()
            }
        })
    }

    fn item(&mut self, py: Python<'_>, item: Item) -> PyResult<Py<PyAny>> {
        match item {
            Item::Exchange(x) => {
                let req_raw = x.request_raw.as_ref().map(|b| PyBytes::new(py, b));
                let resp_raw = x.response_raw.as_ref().map(|b| PyBytes::new(py, b));
                let request = match &x.request {
                    Some(b) => self.body(py, b, req_raw.as_ref())?,
                    None => py.None(),
                };
                let response = match &x.response {
                    Some(b) => self.body(py, b, resp_raw.as_ref())?,
                    None => py.None(),
                };
                let errors: Py<PyAny> = PyList::new(py, &x.error_codes)?.into_any().unbind();
                let client_id = x.client_id.as_ref().map(|s| self.text(py, s));
                let topics = match &self.by_topic {
                    Some(plans) => {
                        let found = kafkawire_core::topics::by_topic(&x, plans);
                        let mut rows = Vec::with_capacity(found.len());
                        for (t, sent, answered, codes) in found {
                            let row = (self.text(py, &t), sent, answered, PyTuple::new(py, codes)?);
                            rows.push(row.into_pyobject(py)?);
                        }
                        PyTuple::new(py, rows)?.into_any()
                    }
                    None => py.None().into_bound(py),
                };
                // in EXCHANGE_FIELDS' order
                let values = [
                    x.ts.into_pyobject(py)?.into_any(),
                    x.response_ts.into_pyobject(py)?.into_any(),
                    x.latency_ms.into_pyobject(py)?.into_any(),
                    x.connection.into_pyobject(py)?.into_any(),
                    self.text(py, &x.client).into_bound(py).into_any(),
                    self.text(py, &x.broker).into_bound(py).into_any(),
                    x.api_key.into_pyobject(py)?.into_any(),
                    self.text(py, &x.api_name).into_bound(py).into_any(),
                    x.api_version.into_pyobject(py)?.into_any(),
                    x.correlation_id.into_pyobject(py)?.into_any(),
                    client_id.into_pyobject(py)?.into_any(),
                    PyString::intern(py, x.status).into_any(),
                    errors.into_bound(py),
                    request.into_bound(py),
                    response.into_bound(py),
                    x.request_size.into_pyobject(py)?.into_any(),
                    x.response_size.into_pyobject(py)?.into_any(),
                    req_raw.into_pyobject(py)?.into_any(),
                    resp_raw.into_pyobject(py)?.into_any(),
                    x.response_version.into_pyobject(py)?.into_any(),
                    PyTuple::new(py, x.flags.iter().map(|f| PyString::intern(py, f)))?.into_any(),
                    tls_dict(py, x.tls.as_deref())?,
                    topics,
                ];
                self.build(py, 0, values)
            }
            // in ANOMALY_FIELDS' order
            Item::Anomaly(a) => self.build(
                py,
                1,
                [
                    a.connection.into_pyobject(py)?.into_any(),
                    a.ts.into_pyobject(py)?.into_any(),
                    PyString::new(py, a.kind.as_ref()).into_any(),
                    a.detail.into_pyobject(py)?.into_any(),
                ],
            ),
            Item::Connection(k) => {
                let ids = PyList::new(
                    py,
                    k.client_ids
                        .iter()
                        .map(|s| self.text(py, s))
                        .collect::<Vec<_>>(),
                )?;
                // in CONNECTION_FIELDS' order
                let values = [
                    k.connection.into_pyobject(py)?.into_any(),
                    self.text(py, &k.client).into_bound(py).into_any(),
                    self.text(py, &k.broker).into_bound(py).into_any(),
                    k.first_ts.into_pyobject(py)?.into_any(),
                    k.last_ts.into_pyobject(py)?.into_any(),
                    k.bytes_to_broker.into_pyobject(py)?.into_any(),
                    k.bytes_to_client.into_pyobject(py)?.into_any(),
                    k.frames_to_broker.into_pyobject(py)?.into_any(),
                    k.frames_to_client.into_pyobject(py)?.into_any(),
                    k.gaps.into_pyobject(py)?.into_any(),
                    k.gap_bytes.into_pyobject(py)?.into_any(),
                    k.retransmissions.into_pyobject(py)?.into_any(),
                    k.out_of_order.into_pyobject(py)?.into_any(),
                    k.resyncs.into_pyobject(py)?.into_any(),
                    ids.into_any(),
                    PyString::intern(py, k.detected_by).into_any(),
                    k.exchanges.into_pyobject(py)?.into_any(),
                    k.frame_bytes_to_broker.into_pyobject(py)?.into_any(),
                    k.frame_bytes_to_client.into_pyobject(py)?.into_any(),
                    k.skipped_bytes_to_broker.into_pyobject(py)?.into_any(),
                    k.skipped_bytes_to_client.into_pyobject(py)?.into_any(),
                    k.gap_bytes_to_broker.into_pyobject(py)?.into_any(),
                    k.gap_bytes_to_client.into_pyobject(py)?.into_any(),
                    tls_dict(py, k.tls.as_deref())?,
                ];
                self.build(py, 2, values)
            }
        }
    }
}

#[pymethods]
impl Engine {
    /// config: everything the engine is made with (config.rs); files: the capture files to read
    /// (capture's expanded list, as bytes: os.fsencode), or packets: rows of packets already read (a
    /// Spark task's), part of a capture set whose (last packet time, latest packet time) is `end`
    /// (or what `end()` gives after the last packet); progress(n) is told the packets read every
    /// 4096; render: "text" or "jsonl" for lines; stitch: a land run; rows (with stitch): the
    /// tables' rows too; threads: a land run over files with rows goes over that many buckets, each
    /// on a thread of its own (0: one per core).
    #[new]
    #[pyo3(signature = (*, config, files=Vec::new(), packets=None, end=None, progress=None, render=None,
                        stitch=false, rows=false, threads=1))]
    // keyword-only but the config: each argument is named at the call, so their number is no hazard
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, EngineConfig>,
        files: Vec<Vec<u8>>,
        packets: Option<Bound<'_, PyAny>>,
        end: Option<Py<PyAny>>,
        progress: Option<Py<PyAny>>,
        render: Option<String>,
        stitch: bool,
        rows: bool,
        threads: usize,
    ) -> PyResult<Self> {
        let render = match render {
            Some(fmt) if fmt == "text" || fmt == "jsonl" => Some((fmt == "text", Render::new())),
            Some(fmt) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "no native rendering for {fmt}"
                )))
            }
            None => None,
        };
        let cfg = config.get();
        let limits = cfg.limits.get();
        let items = cfg.items.get();
        let rows = if rows {
            let Some(columns) = cfg.columns.as_ref() else {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "rows need the tables' columns in the config",
                ));
            };
            rows::check_columns(columns)?;
            Some(Rows::new(limits.max_decompressed))
        } else {
            None
        };
        let from_files = packets.is_none();
        let reader = match packets {
            Some(rows) => PacketReader::from_rows(&rows)?,
            None => PacketReader::new(
                files,
                cfg.opener.clone_ref(py),
                cfg.file_errors.clone_ref(py),
            ),
        };
        let setup = setup_of(cfg);
        let p = setup.pipeline(reader); // redacting off until set_redact
        Ok(Engine {
            p,
            progress,
            render,
            file_faults: FileFaults(items.file_faults.clone()),
            land: stitch.then(|| LandRun::new(rows)),
            conv: Convert::new(py, items),
            end,
            setup,
            threads: if threads == 0 {
                kafkawire_core::parallel::cores()
            } else {
                threads
            },
            from_files,
            par: None,
            composite: None,
            watched: false,
        })
    }

    /// With render: the output options (--records, --raw, --no-payloads, a dissector.filters.Filter
    /// or None); the items the filter drops give no line.
    #[pyo3(signature = (records, raw, no_payloads, filter=None))]
    fn set_render_options(
        &mut self,
        records: bool,
        raw: bool,
        no_payloads: bool,
        filter: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (_, r) = self
            .render
            .as_mut()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("not a writer"))?;
        let filter = match filter {
            Some(f) if !f.is_none() => Some(crate::filter::from_py(&f)?),
            _ => None,
        };
        r.set_options(kafkawire_core::render::Options {
            records,
            raw,
            no_payloads,
            filter,
        });
        Ok(())
    }

    /// A land run: only the items a dissector.filters.Filter keeps make rows (its connection ids
    /// being the stable ones the tables show); file faults still come out as items.
    fn set_land_filter(&mut self, filter: Bound<'_, PyAny>) -> PyResult<()> {
        let land = self
            .land
            .as_mut()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("not a land run"))?;
        land.filter = Some(crate::filter::from_py(&filter)?);
        Ok(())
    }

    /// A live stream (a pipe, a capture tool's output): what is held comes out as soon as the
    /// order allows, at every packet and, when the stream is idle, as the wall clock moves capture
    /// time on; with `arrival`, each item as it completes, without reordering.
    #[pyo3(signature = (arrival=false))]
    fn set_live(&mut self, arrival: bool) {
        self.p.live = Some(Live {
            arrival,
            last: std::time::Instant::now(),
        });
    }

    /// With a renderer: every item a line is written for comes out as a Python item too, after
    /// its line (which the filter kept; the others give none), for a watcher of what is shown.
    fn set_watched(&mut self, on: bool) {
        self.watched = on;
    }

    /// Every exchange carries `topics`: what it did per topic it names (its record bytes each
    /// way and error codes; kafkawire_core::topics::by_topic), for a view by topic.
    fn set_topics(&mut self, on: bool) {
        self.conv.by_topic = on.then(kafkawire_core::topics::Plans::default);
    }

    /// The requests read and not yet answered, now: [(api name, client id, broker, request time)],
    /// at most `limit` (a live view's requests in flight; they become exchanges when answered).
    #[pyo3(signature = (limit=100_000))]
    fn in_flight<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        let rows = self.p.ex.in_flight(limit);
        PyList::new(
            py,
            rows.into_iter().map(|(api, cid, broker, ts)| {
                (
                    api.to_string(),
                    cid.map(|c| c.to_string()),
                    broker.to_string(),
                    ts,
                )
            }),
        )
    }

    /// The run's TLS counts so far: {"connections", "decrypted", "undecrypted", "undecrypted_bytes"}
    /// (a connection counts as undecrypted when it closes).
    fn tls_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.p.tls.stats;
        let d = PyDict::new(py);
        d.set_item("connections", s.connections)?;
        d.set_item("decrypted", s.decrypted)?;
        d.set_item("undecrypted", s.undecrypted)?;
        d.set_item("undecrypted_bytes", s.undecrypted_bytes)?;
        Ok(d)
    }

    /// With rows: rows pending per table and the JSON and payload bytes held, for the writer's
    /// flushes.
    fn rows_pending(&self) -> Option<rows::Pending> {
        if let Some(par) = &self.par {
            return Some(rows::Pending::from(par.gathered.pending()));
        }
        let (rows, _) = self.land.as_ref()?.rows.as_ref()?;
        Some(rows::Pending::of(rows))
    }

    /// With rows: whether the records table is made (--records) and its rows keep payloads
    /// (keys, values, header values; off with --no-payloads).
    fn set_row_options(&mut self, records: bool, payloads: bool) -> PyResult<()> {
        let (rows, _) = self
            .land
            .as_mut()
            .and_then(|l| l.rows.as_mut())
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("no native rows"))?;
        rows.set_options(records, payloads);
        Ok(())
    }

    /// Secrets out of every exchange (kafkawire_core::redact) before its item, line or rows are
    /// made; off (the default) for --show-secrets.
    fn set_redact(&mut self, on: bool) {
        self.p.redact = on;
    }

    /// With rows: a table's buffered rows as Arrow buffers (rows.rs Taken); the buffers start
    /// afresh. Tables by name:
    /// exchanges, errors, connections, anomalies.
    fn rows_take(&mut self, py: Python<'_>, table: &str) -> PyResult<rows::Taken> {
        let (rows, _) = self
            .land
            .as_mut()
            .and_then(|l| l.rows.as_mut())
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("no native rows"))?;
        let i = rows::TABLES
            .iter()
            .position(|t| *t == table)
            .ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("no native rows for {table}"))
            })?;
        if let Some(par) = self.par.as_mut() {
            return rows::Taken::of(py, par.gathered.take(i));
        }
        rows::Taken::of(py, rows.take(i))
    }

    /// With rows: rows written per table, and the rows' topic-name map and unresolved placeholders.
    fn rows_state(&self, py: Python<'_>) -> PyResult<Option<rows::RowsState>> {
        if let Some(par) = &self.par {
            let g = &par.gathered;
            return rows::RowsState::gathered(py, g.counts, &g.names, &g.unresolved).map(Some);
        }
        match self.land.as_ref().and_then(|l| l.rows.as_ref()) {
            Some((rows, _)) => rows::RowsState::of(py, rows).map(Some),
            None => Ok(None),
        }
    }

    /// An appended land run: after its last packet, next_batch() returns what it has, and
    /// `carried` is then the state a next run restores; the batches after it are the end of
    /// capture's (the connections still open closed, requests never answered), whose rows are
    /// provisional: a next run that restores the state makes them again, or their sequels.
    fn set_carry(&mut self) -> PyResult<()> {
        if self.land.is_none() {
            return Err(pyo3::exceptions::PyValueError::new_err("not a lander"));
        }
        self.land.as_mut().unwrap().set_carry();
        Ok(())
    }

    /// With set_carry: the state taken after the last packet (bytes), or None before it.
    fn carried<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        if let Some(par) = &self.par {
            if let Some(e) = &par.gathered.damaged {
                return Err(pyo3::exceptions::PyValueError::new_err(e.clone()));
            }
            return Ok(par.carried.as_ref().map(|b| PyBytes::new(py, b)));
        }
        match self.land.as_ref().and_then(|l| l.carried()) {
            None => Ok(None),
            Some(Ok(b)) => Ok(Some(PyBytes::new(py, b))),
            Some(Err(e)) => Err(pyo3::exceptions::PyValueError::new_err(e.0.clone())),
        }
    }

    /// A lander continuing an earlier appended run: `state` is that run's `carried`. Before the
    /// first next_batch(): the open connections, their unframed bytes and unanswered requests,
    /// the names learned and the frame count go on as if the files were read in one run.
    fn restore(&mut self, state: &[u8]) -> PyResult<()> {
        let land = self
            .land
            .as_mut()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("restore() is for a lander"))?;
        if Composite::is_one(state) {
            // a run over buckets: this one goes on over as many
            if self.p.n != 0 || self.composite.is_some() || land.was_restored() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "restore() is for a lander that has read nothing yet",
                ));
            }
            let c = Composite::unpack(state).py()?;
            self.p.reader.resume(c.index, c.warned.clone());
            self.p.now = c.now;
            self.composite = Some(c);
            return Ok(());
        }
        land.restore(&mut self.p, state).py()
    }

    /// The latest packet time read so far (a restored run's includes the runs before it).
    #[getter]
    fn latest(&self) -> Option<f64> {
        if let Some(par) = &self.par {
            return par.pool.fanout.top;
        }
        self.p.now
    }

    /// The next items released in request-time order (a list, maybe empty at the very end; lines
    /// among them with `render`; in completion order on a land run), or None when the capture is done.
    fn next_batch(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyList>>> {
        if self.p.done {
            return Ok(None);
        }
        if self.land.is_some() {
            if self.par.is_some() || self.over_buckets() {
                return self.next_over_buckets(py);
            }
            return self.next_stitched(py);
        }
        let mut out: Vec<Item> = Vec::new();
        let mut hooks = PyHooks {
            progress: self.progress.as_ref(),
            end: self.end.as_ref(),
            py,
        };
        self.p.next_ordered(&mut out, &mut hooks)?;
        let list = PyList::empty(py);
        // consecutive lines leave as one bytes object: one write for the batch, not one per line
        let mut lines: Vec<u8> = Vec::new();
        for item in out {
            if let Some(line) = self.line(&item) {
                // a watcher also takes the item of every line shown
                let watched = self.watched && !line.is_empty();
                lines.extend_from_slice(&line);
                let fault = matches!(&item, Item::Anomaly(a) if self.file_faults.holds(a));
                if !(fault || watched) {
                    continue;
                }
            }
            if !lines.is_empty() {
                list.append(PyBytes::new(py, &std::mem::take(&mut lines)))?;
            }
            list.append(self.conv.item(py, item)?)?;
        }
        if !lines.is_empty() {
            list.append(PyBytes::new(py, &lines))?;
        }
        Ok(Some(list.unbind()))
    }
}

impl Engine {
    /// Whether this land run goes over buckets: files read here, rows made, more than one
    /// thread asked (or a state made over buckets continued), nothing read yet.
    fn over_buckets(&self) -> bool {
        let Some(land) = &self.land else {
            return false;
        };
        self.from_files
            && self.end.is_none()
            && self.p.live.is_none()
            && land.rows.is_some()
            && self.p.n == 0
            && !land.was_restored()
            && (self.threads > 1 || self.composite.is_some())
    }

    /// Starts the buckets' threads.
    fn start_buckets(&mut self) -> PyResult<()> {
        let land = self.land.as_ref().unwrap();
        let comp = self.composite.take();
        let buckets = comp.as_ref().map_or(self.threads, |c| c.states.len());
        let mut setup = self.setup.clone();
        setup.redact = self.p.redact;
        let cfg = BucketSetup {
            setup,
            rows: land.rows.as_ref().unwrap().0.options(),
            filter: land.filter.clone(),
            carry: land.carrying(),
            faults: self.file_faults.0.clone(),
            states: comp.as_ref().map(|c| c.states.clone()).unwrap_or_default(),
        };
        let pool = Pool::start(
            buckets,
            std::sync::Arc::new(move |b, inlet, tx| land_bucket(&cfg, b, inlet, tx)),
        )
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("threads: {e}")))?;
        // the writer holds the rows' names map: the buckets' names are gathered into it
        let names = land.rows.as_ref().unwrap().0.names.clone();
        let mut gathered = Gathered::new(buckets, names);
        let mut pool = pool;
        if let Some(c) = comp {
            gathered.restored(c.names, c.unresolved);
            pool.fanout.last = c.last;
            pool.fanout.top = c.now;
        }
        self.par = Some(ParLand {
            pool,
            gathered,
            all_sent: false,
            carried: None,
            unpark: false,
            finished: false,
        });
        Ok(())
    }

    /// A land run over buckets: packets read and sent until rows or faults come back; the file
    /// faults come out as items (the rows wait in the gathered tables for rows_take).
    fn next_over_buckets(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyList>>> {
        if self.par.is_none() {
            self.start_buckets()?;
        }
        let par = self.par.as_mut().unwrap();
        if par.finished {
            return Ok(None);
        }
        if par.unpark {
            par.unpark = false;
            par.gathered.unpark();
        }
        let mut backs = Vec::new();
        if !par.all_sent {
            let mut hooks = PyHooks {
                progress: self.progress.as_ref(),
                end: None,
                py,
            };
            if par.pool.pump(&mut self.p.reader, &mut backs, &mut hooks)? == Pumped::AllSent {
                par.all_sent = true;
            }
        }
        if par.all_sent && backs.is_empty() {
            let rx = par.pool.receiver();
            match py.detach(move || rx.recv().ok()) {
                Some(b) => backs.push(b),
                // every bucket's channel is gone, not every bucket done: one died (a panic)
                None if par.gathered.done < par.gathered.buckets() => {
                    par.finished = true;
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "a bucket's thread ended before its run did (an internal error); \
                         --threads 1 lands on one thread",
                    ));
                }
                None => {}
            }
        }
        let list = PyList::empty(py);
        for b in backs {
            if let Some(fault) = par.gathered.take_back(b) {
                list.append(self.conv.item(py, Item::Anomaly(fault))?)?;
            }
        }
        let g = &mut par.gathered;
        if par.carried.is_none() {
            if let Some(states) = g.states() {
                let (index, warned) = PacketSource::position(&self.p.reader);
                let c = Composite {
                    now: par.pool.fanout.top,
                    last: par.pool.fanout.last,
                    index,
                    warned,
                    names: g.names_list(),
                    unresolved: g.unresolved.iter().cloned().collect(),
                    states,
                };
                par.carried = Some(c.pack().py()?);
                par.unpark = true;
            }
        }
        if g.done == g.buckets() {
            par.finished = true;
            if let Some(e) = g.failed.take() {
                return Err(pyo3::exceptions::PyValueError::new_err(e));
            }
        }
        Ok(Some(list.unbind()))
    }

    /// A land run's next items: into the rows, those the caller sees (file faults; every item
    /// without rows) coming out with their stable connection ids.
    fn next_stitched(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyList>>> {
        let mut out = Vec::new();
        let mut hooks = PyHooks {
            progress: self.progress.as_ref(),
            end: self.end.as_ref(),
            py,
        };
        let land = self.land.as_mut().unwrap();
        land.next_pass(&mut self.p, &mut out, &mut hooks)?;
        let list = PyList::empty(py);
        let faults = &self.file_faults;
        for (item, stable) in out {
            let Some(item) = land.take(item, stable, |a| faults.holds(a)) else {
                continue;
            };
            let obj = self.conv.item(py, item)?;
            if let Some(c) = stable {
                obj.bind(py).setattr("connection", c)?;
            }
            list.append(obj)?;
        }
        Ok(Some(list.unbind()))
    }

    /// The item's output line (newline included); empty when the filter drops it; None without
    /// a renderer.
    fn line(&mut self, item: &Item) -> Option<Vec<u8>> {
        let (text, r) = self.render.as_mut()?;
        r.line(*text, item)
    }
}

/// Test-only: the native exchanges layer fed tcp events as tuples (tests/test_native_exchanges.py
/// runs tests/test_exchanges.py's conversations through both layers):
/// ("open", conn, client, server, ts, syn_seen), ("data", conn, sender, receiver, ts, bytes),
/// ("gap", conn, sender, receiver, ts, size), ("close", conn, ts, reason, retransmissions, out_of_order),
/// ("anomaly", conn, ts, kind, detail).
#[pyclass(unsendable, module = "dissector._native")]
pub struct ExchangesTest {
    ex: Exchanges,
    conv: Convert,
}

fn addr(a: Option<(String, u16)>) -> Option<crate::tcp::Addr> {
    a.map(|(ip, port)| (Rc::from(ip.as_str()), port))
}

#[pymethods]
impl ExchangesTest {
    /// config: as an Engine's (its ports, connections, limits.max_frame_size, protocol, items and
    /// helpers are used)
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, EngineConfig>) -> PyResult<Self> {
        let cfg = config.get();
        Ok(ExchangesTest {
            ex: setup_of(cfg).exchanges(),
            conv: Convert::new(py, cfg.items.get()),
        })
    }

    fn feed(&mut self, py: Python<'_>, ev: &Bound<'_, PyTuple>) -> PyResult<Py<PyList>> {
        let kind: String = ev.get_item(0)?.extract()?;
        let ev = match kind.as_str() {
            "open" => Event::Open {
                conn: ev.get_item(1)?.extract()?,
                client: addr(ev.get_item(2)?.extract()?),
                server: addr(ev.get_item(3)?.extract()?),
                ts: ev.get_item(4)?.extract()?,
                syn_seen: ev.get_item(5)?.extract()?,
            },
            "data" => Event::Data {
                conn: ev.get_item(1)?.extract()?,
                sender: addr(ev.get_item(2)?.extract()?).unwrap(),
                receiver: addr(ev.get_item(3)?.extract()?).unwrap(),
                ts: ev.get_item(4)?.extract()?,
                data: bytes::Bytes::from(ev.get_item(5)?.extract::<Vec<u8>>()?),
            },
            "gap" => Event::Gap {
                conn: ev.get_item(1)?.extract()?,
                sender: addr(ev.get_item(2)?.extract()?).unwrap(),
                receiver: addr(ev.get_item(3)?.extract()?).unwrap(),
                ts: ev.get_item(4)?.extract()?,
                size: ev.get_item(5)?.extract()?,
            },
            "close" => {
                let reason: String = ev.get_item(3)?.extract()?;
                Event::Close {
                    conn: ev.get_item(1)?.extract()?,
                    ts: ev.get_item(2)?.extract()?,
                    reason: match reason.as_str() {
                        "fin" => "fin",
                        "rst" => "rst",
                        "superseded" => "superseded",
                        _ => "end_of_capture",
                    },
                    retransmissions: ev.get_item(4)?.extract()?,
                    out_of_order: ev.get_item(5)?.extract()?,
                }
            }
            _ => {
                let detail: String = ev.get_item(4)?.extract()?;
                let kind: String = ev.get_item(3)?.extract()?;
                Event::StreamAnomaly {
                    conn: ev.get_item(1)?.extract()?,
                    ts: ev.get_item(2)?.extract()?,
                    kind: if kind == kind::OVERLAP_CONFLICT {
                        kind::OVERLAP_CONFLICT
                    } else {
                        "stream_anomaly"
                    },
                    detail,
                }
            }
        };
        let mut items = Vec::new();
        self.ex.feed(ev, &mut items);
        self.convert(py, items)
    }

    fn finish(&mut self, py: Python<'_>, ts: Option<f64>) -> PyResult<Py<PyList>> {
        let mut items = Vec::new();
        self.ex.finish(ts, &mut items);
        self.convert(py, items)
    }

    fn oldest_open(&mut self) -> Option<f64> {
        self.ex.oldest_open()
    }
}

impl ExchangesTest {
    fn convert(&mut self, py: Python<'_>, items: Vec<Item>) -> PyResult<Py<PyList>> {
        let list = PyList::empty(py);
        for item in items {
            list.append(self.conv.item(py, item)?)?;
        }
        Ok(list.unbind())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    Ok(())
}

/// The test and bench entry points (the `test-hooks` feature: editable installs).
pub fn hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ExchangesTest>()?;
    Ok(())
}
