//! Items -> the landing tables' rows: the exchanges, errors, connections, anomalies, (with
//! --records) records and batches tables (a row per record batch or legacy message, without
//! --records too: throughput and batching per topic and partition need no payloads), as the Python row maker made them (now the test oracle,
//! tests/oracle/rows.py). The one implementation of the rows: every landing's and replay's
//! tables are made here, from the core's items. Rows are built as Arrow columns (columns.rs) in
//! the column order of the tables' schemas, which the engine's configuration hands over and
//! `check_columns` holds this module to.
//!
//! Topic ids: the rows learn TopicId -> Name from every response's top-level `Topics` (a map of
//! their own, not the dissector's) and write `topic-id:<uuid>` for the rest, noting them in
//! `unresolved` so the writer can put names in afterwards.
use std::rc::Rc;

use crate::api::{FETCH, INIT_PRODUCER_ID, PRODUCE, SHARE_FETCH};
use crate::columns::Col;
use crate::decode::{SharedNames, Value};
use crate::exchanges::{AnomalyItem, Body, ConnectionItem, ExchangeItem};
use crate::records::{each_record, Rec, RecordColumns, RecordSet};
use crate::render::{Render, Summary};
use crate::schema::{key_id, Dir, K_NAME, K_TOPIC_ID};
use crate::topics::{self, get, text_of, UNRESOLVED};

pub const TABLES: [&str; 6] = [
    "exchanges",
    "errors",
    "connections",
    "anomalies",
    "records",
    "batches",
];
const RECORDS: usize = 4;
const BATCHES: usize = 5;

/// The tables' column names as the Python side has them (the config's `columns`: table -> names)
/// must be this module's, in this order.
pub fn check_columns(given: &std::collections::HashMap<String, Vec<String>>) -> Result<(), String> {
    for t in TABLES {
        let mine: Vec<&str> = columns(t).iter().map(|(n, _)| *n).collect();
        let names = given
            .get(t)
            .ok_or_else(|| format!("columns: no table {t}"))?;
        if !names.iter().map(String::as_str).eq(mine.iter().copied()) {
            return Err(format!(
                "native rows for {t} are out of step with the table's columns: {mine:?} vs {names:?}"
            ));
        }
    }
    Ok(())
}

/// the exchanges table's request_json column (response_json follows it)
const REQUEST_JSON: usize = 33;
const TLS_VERSION: usize = 35;
/// the records table's key column (value follows it)
const REC_KEY: usize = 10;

/// (column, maker) per table, in landing/schemas.py's order.
/// A column's name and the maker of its empty buffer
type ColumnSpec = (&'static str, fn() -> Col);

/// Where an exchange's records are: what each records row says of its exchange.
#[derive(Clone, Copy)]
struct RecordsAt<'a> {
    produce: bool,
    frame_time: Option<i64>,
    client_id: Option<&'a str>,
    eid: i64,
    conn: u64,
    date: Option<&'a str>,
}

impl RecordsAt<'_> {
    /// the rows' `direction`: whose records they are
    fn direction(&self) -> &'static str {
        if self.produce {
            "produce"
        } else {
            "fetch"
        }
    }
}

/// One records field of an exchange, as both tables' rows take it: its topic (named if the rows
/// know it), partition, the base offset the broker gave it (Produce) and its bytes.
struct FieldAt<'a> {
    topic: Option<Rc<str>>,
    part: Option<i64>,
    base: Option<i64>,
    field: &'a [u8],
}

/// A records field of an exchange: (topic as found, partition, its range of the frame)
type RecordField = (Option<Rc<str>>, Option<i64>, usize, usize);

/// What a Produce response says of a partition: (topic, partition, BaseOffset)
type ProduceBase = (Option<Rc<str>>, Option<i64>, Option<i64>);

fn columns(table: &str) -> Vec<ColumnSpec> {
    let list_str: fn() -> Col = || Col::list_of(Col::str());
    let list_i16: fn() -> Col = || Col::list_of(Col::i16());
    match table {
        "exchanges" => vec![
            ("exchange_id", Col::i64),
            ("connection_id", Col::i64),
            ("ts", Col::i64),
            ("response_ts", Col::i64),
            ("latency_ms", Col::f64),
            ("client", Col::str),
            ("broker", Col::str),
            ("client_id", Col::str),
            ("api_key", Col::i16),
            ("api_name", Col::str),
            ("api_version", Col::i16),
            ("response_version", Col::i16),
            ("correlation_id", Col::i32),
            ("status", Col::str),
            ("error_codes", list_i16),
            ("flags", list_str),
            ("request_size", Col::i32),
            ("response_size", Col::i32),
            ("topics", list_str),
            ("partition_count", Col::i32),
            ("group_id", Col::str),
            ("transactional_id", Col::str),
            ("acks", Col::i16),
            ("timeout_ms", Col::i32),
            ("producer_id", Col::i64),
            ("record_count", Col::i64),
            ("record_bytes", Col::i64),
            ("record_bytes_uncompressed", Col::i64),
            ("codecs", list_str),
            ("max_wait_ms", Col::i32),
            ("min_bytes", Col::i32),
            ("isolation_level", Col::i8),
            ("throttle_time_ms", Col::i32),
            ("request_json", Col::str),
            ("response_json", Col::str),
            ("tls_version", Col::str),
            ("tls_cipher_suite", Col::str),
        ],
        "errors" => vec![
            ("exchange_id", Col::i64),
            ("connection_id", Col::i64),
            ("ts", Col::i64),
            ("client", Col::str),
            ("broker", Col::str),
            ("client_id", Col::str),
            ("api_key", Col::i16),
            ("api_name", Col::str),
            ("api_version", Col::i16),
            ("path", Col::str),
            ("topic", Col::str),
            ("partition", Col::i32),
            ("code", Col::i16),
            ("name", Col::str),
            ("retriable", Col::bool),
        ],
        "connections" => vec![
            ("connection_id", Col::i64),
            ("client", Col::str),
            ("broker", Col::str),
            ("first_ts", Col::i64),
            ("last_ts", Col::i64),
            ("bytes_to_broker", Col::i64),
            ("bytes_to_client", Col::i64),
            ("frames_to_broker", Col::i64),
            ("frames_to_client", Col::i64),
            ("gaps", Col::i32),
            ("gap_bytes", Col::i64),
            ("frame_bytes_to_broker", Col::i64),
            ("frame_bytes_to_client", Col::i64),
            ("skipped_bytes_to_broker", Col::i64),
            ("skipped_bytes_to_client", Col::i64),
            ("gap_bytes_to_broker", Col::i64),
            ("gap_bytes_to_client", Col::i64),
            ("retransmissions", Col::i64),
            ("out_of_order", Col::i64),
            ("resyncs", Col::i32),
            ("client_ids", list_str),
            ("detected_by", Col::str),
            ("exchanges", Col::i64),
            ("tls_version", Col::str),
            ("tls_cipher_suite", Col::str),
            ("tls_sni", Col::str),
            ("tls_decrypted", Col::bool),
        ],
        "anomalies" => vec![
            ("connection_id", Col::i64),
            ("ts", Col::i64),
            ("kind", Col::str),
            ("detail", Col::str),
        ],
        "records" => vec![
            ("exchange_id", Col::i64),
            ("connection_id", Col::i64),
            ("ts", Col::i64),
            ("direction", Col::str),
            ("client_id", Col::str),
            ("topic", Col::str),
            ("partition", Col::i32),
            ("offset", Col::i64),
            ("timestamp", Col::i64),
            ("timestamp_type", Col::str),
            ("key", Col::binary),
            ("value", Col::binary),
            ("key_size", Col::i32),
            ("value_size", Col::i32),
            ("headers", || {
                Col::list_of(Col::struct_of(vec![Col::str(), Col::binary()]))
            }),
            ("key_schema_id", Col::i32),
            ("value_schema_id", Col::i32),
            ("codec", Col::str),
            ("magic", Col::i8),
            ("batch_base_offset", Col::i64),
            ("producer_id", Col::i64),
            ("producer_epoch", Col::i16),
            ("base_sequence", Col::i32),
            ("transactional", Col::bool),
            ("control", Col::bool),
            ("crc_ok", Col::bool),
            ("key_decoded", Col::str),
            ("value_decoded", Col::str),
        ],
        "batches" => vec![
            ("exchange_id", Col::i64),
            ("connection_id", Col::i64),
            ("ts", Col::i64),
            ("direction", Col::str),
            ("client", Col::str),
            ("broker", Col::str),
            ("client_id", Col::str),
            ("topic", Col::str),
            ("partition", Col::i32),
            ("base_offset", Col::i64),
            ("records", Col::i64),
            ("bytes", Col::i64),
            ("uncompressed_bytes", Col::i64),
            ("codec", Col::str),
            ("magic", Col::i8),
            ("producer_id", Col::i64),
            ("producer_epoch", Col::i16),
            ("base_sequence", Col::i32),
            ("transactional", Col::bool),
            ("control", Col::bool),
        ],
        _ => vec![],
    }
}

struct Table {
    cols: Vec<Col>,
    date: Col,
    rows: usize,
    /// the distinct dates of the rows held, in order (the writer splits a batch by date only when
    /// there are several)
    dates: Vec<Option<String>>,
    /// a row held names a topic only by its id (`topic-id:` or a JSON "TopicName":null): the writer
    /// notes the file for the late-name pass
    marked: bool,
}

impl Table {
    fn new(name: &str) -> Self {
        let cols = columns(name);
        Table {
            cols: cols.into_iter().map(|(_, make)| make()).collect(),
            date: Col::str(),
            rows: 0,
            dates: Vec::new(),
            marked: false,
        }
    }

    fn end_row(&mut self, date: Option<&str>) {
        self.date.text(date);
        if !self.dates.iter().any(|d| d.as_deref() == date) {
            self.dates.push(date.map(str::to_string));
        }
        self.rows += 1;
    }
}

/// rows._us / _time: microseconds, rounded as Python's round() rounds (half to even)
fn us(ts: Option<f64>) -> Option<i64> {
    ts.map(|t| (t * 1_000_000.0).round_ties_even() as i64)
}

/// rows.date_of: the UTC date, None when the time is unknown (or 0, which `not ts` takes as
/// unknown). `last` keeps the last day's text (rows come many to a day).
fn date_of(ts: Option<f64>, last: &mut (i64, Option<Rc<str>>)) -> Option<Rc<str>> {
    let t = ts?;
    if t == 0.0 {
        return None;
    }
    let day = (t / 86400.0).floor() as i64;
    if day != last.0 || last.1.is_none() {
        let (y, m, d) = crate::render::civil(day);
        *last = (day, Some(Rc::from(format!("{y:04}-{m:02}-{d:02}"))));
    }
    last.1.clone()
}

/// hashlib.blake2b(text, digest_size=8) as a big-endian int64 (rows.exchange_id) or its top
/// 63 bits (stitch.stable_id)
fn blake2b8(text: &str) -> [u8; 8] {
    use blake2::digest::{Update, VariableOutput};
    let mut h = blake2::Blake2bVar::new(8).unwrap();
    h.update(text.as_bytes());
    let mut out = [0u8; 8];
    h.finalize_variable(&mut out).unwrap();
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string())
        .unwrap_or_else(|| "None".to_string())
}

/// rows.exchange_id
pub fn exchange_id(
    connection: Option<u64>,
    corr: Option<i32>,
    ts: Option<f64>,
    rts: Option<f64>,
    api_key: Option<i16>,
) -> i64 {
    let key = format!(
        "{}|{}|{}|{}|{}",
        opt(connection),
        opt(corr),
        opt(us(ts)),
        opt(us(rts)),
        opt(api_key)
    );
    i64::from_be_bytes(blake2b8(&key))
}

/// stitch.stable_id over stitch.conn_key: the same id for a connection however the capture is split
pub fn stable_id(a: (&str, u16), b: (&str, u16), ts: f64) -> u64 {
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    let key = format!(
        "(('{}', {}), ('{}', {}))|{}",
        x.0,
        x.1,
        y.0,
        y.1,
        (ts * 1_000_000.0).round_ties_even() as i64
    );
    u64::from_be_bytes(blake2b8(&key)) >> 1
}

/// A table's buffered rows, taken: each column, the rows' partition date column, the distinct
/// dates among the rows, and whether a row names a topic only by its id (a placeholder the
/// writer may resolve later).
pub struct Taken {
    pub columns: Vec<Col>,
    pub date: Col,
    pub dates: Vec<Option<String>>,
    pub marked: bool,
}

/// What a row maker holds: rows pending per table, in TABLES' order, and the bytes of JSON and
/// payloads held in them.
pub struct Pending {
    pub rows: Vec<usize>,
    pub held: usize,
}

impl Taken {
    pub fn len(&self) -> usize {
        self.date.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows::held's share of these rows (`table` their table's place in TABLES).
    pub fn held(&self, table: usize) -> usize {
        let at = match table {
            0 => REQUEST_JSON,
            RECORDS => REC_KEY,
            _ => return 0,
        };
        self.columns[at].text_bytes() + self.columns[at + 1].text_bytes()
    }
}

const NULL_NAME: &[u8] = b"\"TopicName\":null";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The native landing rows.
pub struct Rows {
    tables: Vec<Table>,
    /// the topic-id -> name map, shared with the run's decoders, and the `topic-id:`
    /// placeholders the rows written hold
    pub names: SharedNames,
    pub unresolved: std::cell::RefCell<std::collections::BTreeSet<String>>,
    pub counts: [usize; 6],
    records: crate::records::Records,
    /// a record's fields as records_of reads them (its buffers kept)
    rec: Rec,
    max_decompressed: usize,
    /// --records: the records table's rows are made (rows.Rows.records), with their keys, values
    /// and header values unless --no-payloads (rows.Rows.payloads)
    with_records: bool,
    payloads: bool,
    /// date_of's last day
    day: (i64, Option<Rc<str>>),
}

impl Rows {
    pub fn new(max_decompressed: usize) -> Self {
        Rows {
            tables: TABLES.iter().map(|t| Table::new(t)).collect(),
            names: SharedNames::default(),
            unresolved: Default::default(),
            counts: [0; 6],
            records: crate::records::Records::new(),
            rec: Rec::default(),
            max_decompressed,
            with_records: false,
            payloads: true,
            day: (0, None),
        }
    }

    /// rows.Rows(records=..., payloads=...): whether the records table is made, and whether its
    /// rows keep keys, values and header values.
    pub fn set_options(&mut self, records: bool, payloads: bool) {
        self.with_records = records;
        self.payloads = payloads;
    }

    /// (the cap on decompressed record sets, --records, payloads kept): what set_options and
    /// new were given.
    pub fn options(&self) -> (usize, bool, bool) {
        (self.max_decompressed, self.with_records, self.payloads)
    }

    /// rows.Rows.held's share of these tables: the bytes of the JSON bodies the exchanges table
    /// holds and of the keys and values the records table holds (their buffers, emptied when
    /// taken).
    pub fn held(&self) -> usize {
        let c = &self.tables[0].cols;
        let r = &self.tables[RECORDS].cols;
        c[REQUEST_JSON].text_bytes()
            + c[REQUEST_JSON + 1].text_bytes()
            + r[REC_KEY].text_bytes()
            + r[REC_KEY + 1].text_bytes()
    }

    pub fn pending(&self, table: usize) -> usize {
        self.tables[table].rows
    }

    /// The buffered rows of a table as (column specs, date spec, distinct dates, marked), and
    /// empty buffers.
    /// Rows pending per table and the bytes held in them.
    pub fn pending_all(&self) -> Pending {
        Pending {
            rows: (0..TABLES.len()).map(|t| self.pending(t)).collect(),
            held: self.held(),
        }
    }

    /// A table's buffered rows; its buffers start afresh.
    pub fn take(&mut self, table: usize) -> Taken {
        let t = &mut self.tables[table];
        t.rows = 0;
        Taken {
            columns: t.cols.iter_mut().map(Col::take).collect(),
            date: t.date.take(),
            dates: std::mem::take(&mut t.dates),
            marked: std::mem::replace(&mut t.marked, false),
        }
    }

    /// The `topics` column: the topics found, named (topic()), each once, in the order found.
    fn topic_names<'a>(&self, found: impl Iterator<Item = &'a Option<Rc<str>>>) -> Vec<String> {
        let mut names: Vec<Rc<str>> = Vec::new();
        for t in found.flatten() {
            let t = self.topic(t);
            if !names.contains(&t) {
                names.push(t);
            }
        }
        names.iter().map(|s| s.to_string()).collect()
    }

    fn topic(&self, t: &Rc<str>) -> Rc<str> {
        // rows._topic: a placeholder the map names now becomes the name, else it is noted
        if let Some(hex) = t.strip_prefix(UNRESOLVED) {
            if let Some(id) = parse_uuid(hex) {
                if let Some(name) = self.names.borrow().get(&id) {
                    return name.clone();
                }
            }
            self.unresolved.borrow_mut().insert(t.to_string());
        }
        t.clone()
    }

    /// rows._learn: TopicId -> Name pairs of a response's top-level Topics
    fn learn(&self, body: &[(u32, Value)], frame: &[u8]) {
        let Some(Value::List(topics)) = get(body, key_id("Topics")) else {
            return;
        };
        let mut names = self.names.borrow_mut();
        for t in topics {
            if let Value::Struct(s) = t {
                if let (Some(Value::Uuid(id)), Some(name)) = (
                    get(s, K_TOPIC_ID),
                    get(s, K_NAME).and_then(|v| text_of(v, frame)),
                ) {
                    if id.iter().any(|b| *b != 0) {
                        names.insert(*id, name);
                    }
                }
            }
        }
    }

    pub fn anomaly(&mut self, a: &AnomalyItem, conn: Option<u64>) {
        let date = date_of(Some(a.ts), &mut self.day);
        let t = &mut self.tables[3];
        let ts = if a.ts != 0.0 { us(Some(a.ts)) } else { None };
        t.cols[0].int(conn.map(|c| c as i64));
        t.cols[1].int(ts);
        t.cols[2].text(Some(&a.kind));
        t.cols[3].text(Some(&a.detail));
        t.end_row(date.as_deref());
        self.counts[3] += 1;
    }

    pub fn connection(&mut self, k: &ConnectionItem, conn: u64) {
        let date = date_of(k.first_ts, &mut self.day);
        let t = &mut self.tables[2];
        let c = &mut t.cols;
        c[0].int(Some(conn as i64));
        c[1].text(Some(&k.client));
        c[2].text(Some(&k.broker));
        c[3].int(us(k.first_ts));
        c[4].int(us(k.last_ts));
        c[5].int(Some(k.bytes_to_broker as i64));
        c[6].int(Some(k.bytes_to_client as i64));
        c[7].int(Some(k.frames_to_broker as i64));
        c[8].int(Some(k.frames_to_client as i64));
        c[9].int(Some(k.gaps as i64));
        c[10].int(Some(k.gap_bytes));
        c[11].int(Some(k.frame_bytes_to_broker as i64));
        c[12].int(Some(k.frame_bytes_to_client as i64));
        c[13].int(Some(k.skipped_bytes_to_broker));
        c[14].int(Some(k.skipped_bytes_to_client));
        c[15].int(Some(k.gap_bytes_to_broker));
        c[16].int(Some(k.gap_bytes_to_client));
        c[17].int(Some(k.retransmissions as i64));
        c[18].int(Some(k.out_of_order as i64));
        c[19].int(Some(k.resyncs as i64));
        c[20].list(true, |l| {
            for s in &k.client_ids {
                l.text(Some(s));
            }
        });
        c[21].text(Some(k.detected_by));
        c[22].int(Some(k.exchanges as i64));
        let tls = k.tls.as_deref();
        c[23].text(tls.map(|f| f.version.as_str()));
        c[24].text(tls.map(|f| f.cipher_suite.as_str()));
        c[25].text(tls.and_then(|f| f.sni.as_deref()));
        c[26].boolean(tls.map(|f| f.decrypted));
        t.end_row(date.as_deref());
        self.counts[2] += 1;
    }

    /// Rows._exchange: an exchange's row, its errors' rows and (with --records) its records' rows.
    pub fn exchange(&mut self, x: &ExchangeItem, conn: u64, r: &mut Render) {
        let ts = x.ts.or(x.response_ts);
        let eid = exchange_id(Some(conn), x.correlation_id, x.ts, x.response_ts, x.api_key);
        let date = date_of(ts, &mut self.day);
        let req_frame = x.request_raw.as_deref().unwrap_or(&[]);
        let resp_frame = x.response_raw.as_deref().unwrap_or(&[]);
        if let Some(Body::Native(Value::Struct(s))) = &x.response {
            self.learn(s, resp_frame);
        }
        let p = self.promote(x, r);
        let placeholders = p.topics.iter().flatten().any(|t| t.starts_with(UNRESOLVED));
        let record_api = x
            .api_key
            .is_some_and(|k| crate::api::RECORD_APIS.contains(&k));
        let mut rj = Vec::new();
        let mut sj = Vec::new();
        let has_req = x.request.is_some();
        let has_resp = x.response.is_some();
        // the record fields' summaries promote made, for the side they came from
        let known = p.summaries.as_slice();
        let (req_known, resp_known) = if x.api_key == Some(PRODUCE) {
            (known, &[][..])
        } else {
            (&[][..], known)
        };
        if has_req {
            r.json_body(&mut rj, &x.request, Some(req_frame), record_api, req_known);
        }
        match &x.response {
            // output.without_raw_body: an orphan's body by its size alone with --no-payloads
            Some(Body::Raw(b)) if !self.payloads => {
                sj.extend_from_slice(b"{\"_raw_body\":");
                crate::render::dropped_raw_body(&mut sj, b.len());
                sj.push(b'}');
            }
            Some(_) => r.json_body(
                &mut sj,
                &x.response,
                Some(resp_frame),
                record_api,
                resp_known,
            ),
            None => {}
        }
        let errors: &[i64] = &x.error_codes;
        {
            let t = &mut self.tables[0];
            let c = &mut t.cols;
            c[0].int(Some(eid));
            c[1].int(Some(conn as i64));
            c[2].int(us(ts));
            c[3].int(us(x.response_ts));
            c[4].float(x.latency_ms);
            c[5].text(Some(&x.client));
            c[6].text(Some(&x.broker));
            c[7].text(x.client_id.as_deref());
            c[8].int(x.api_key.map(|k| k as i64));
            c[9].text(Some(&x.api_name));
            c[10].int(x.api_version.map(|k| k as i64));
            c[11].int(x.response_version.map(|k| k as i64));
            c[12].int(x.correlation_id.map(|k| k as i64));
            c[13].text(Some(x.status));
            c[14].list(true, |l| {
                for e in errors {
                    l.int(Some(*e));
                }
            });
            c[15].list(true, |l| {
                for f in &x.flags {
                    l.text(Some(f));
                }
            });
            c[16].int(x.request_size.map(|k| k as i64));
            c[17].int(x.response_size.map(|k| k as i64));
            p.write(c);
            c[REQUEST_JSON].text(if has_req {
                Some(std::str::from_utf8(&rj).unwrap_or(""))
            } else {
                None
            });
            c[REQUEST_JSON + 1].text(if has_resp {
                Some(std::str::from_utf8(&sj).unwrap_or(""))
            } else {
                None
            });
            let tls = x.tls.as_deref();
            c[TLS_VERSION].text(tls.map(|f| f.version.as_str()));
            c[TLS_VERSION + 1].text(tls.map(|f| f.cipher_suite.as_str()));
            t.end_row(date.as_deref());
            t.marked |= placeholders || contains(&rj, NULL_NAME) || contains(&sj, NULL_NAME);
        }
        self.counts[0] += 1;
        if !p.fields.is_empty() {
            let facts = p.records.as_ref().map_or(&[][..], |r| r.batches.as_slice());
            self.field_rows(x, conn, eid, date.as_deref(), &p.fields, facts);
        }
        if !errors.is_empty() {
            if let Some(Body::Native(Value::Struct(s))) = &x.response {
                self.errors_of(x, s, resp_frame, eid, conn, ts, date.as_deref(), r);
            }
        }
    }

    /// Rows._promote
    fn promote(&mut self, x: &ExchangeItem, r: &Render) -> Promoted {
        let mut out = Promoted::default();
        let (Some(api), Some(version)) = (x.api_key, x.api_version) else {
            return out;
        };
        let req = match &x.request {
            Some(Body::Native(Value::Struct(s))) => Some(s.as_slice()),
            _ => None,
        };
        let resp = match &x.response {
            Some(Body::Native(Value::Struct(s))) => Some(s.as_slice()),
            _ => None,
        };
        let req_frame = x.request_raw.as_deref().unwrap_or(&[]);
        let resp_frame = x.response_raw.as_deref().unwrap_or(&[]);
        let mut found_req: Vec<topics::Found> = Vec::new();
        let mut found_resp: Vec<topics::Found> = Vec::new();
        if let Some(req) = req {
            if let Some(plan) = r.plans.get(api, version, Dir::Request) {
                topics::visit(req, &plan, None, &mut found_req, api == PRODUCE, req_frame);
                out.group_id = plan
                    .group
                    .and_then(|k| get(req, k))
                    .and_then(|v| text_of(v, req_frame))
                    .map(|s| s.to_string());
                out.transactional_id = plan
                    .txn
                    .and_then(|k| get(req, k))
                    .and_then(|v| text_of(v, req_frame))
                    .map(|s| s.to_string());
            }
            if api == PRODUCE {
                out.acks = int_of(get(req, key_id("Acks")));
                out.timeout_ms = int_of(get(req, key_id("TimeoutMs")));
            } else if api == FETCH {
                out.max_wait_ms = int_of(get(req, key_id("MaxWaitMs")));
                out.min_bytes = int_of(get(req, key_id("MinBytes")));
                // before v4 every fetch read uncommitted: req.get("IsolationLevel", 0)
                out.isolation_level = match get(req, key_id("IsolationLevel")) {
                    None => Some(0),
                    v => int_of(v),
                };
            }
        }
        if let Some(resp) = resp {
            out.throttle_time_ms = int_of(get(resp, key_id("ThrottleTimeMs")));
            let rv = x.response_version.unwrap_or(version);
            if let Some(plan) = r.plans.get(api, rv, Dir::Response) {
                if found_req.is_empty() || api == FETCH || api == SHARE_FETCH || api == PRODUCE {
                    topics::visit(
                        resp,
                        &plan,
                        None,
                        &mut found_resp,
                        api == FETCH || api == SHARE_FETCH,
                        resp_frame,
                    );
                }
            }
            if api == INIT_PRODUCER_ID {
                out.producer_id = int_of(get(resp, key_id("ProducerId")));
            }
        }
        let place = if !found_req.is_empty() {
            &found_req
        } else {
            &found_resp
        };
        if !place.is_empty() {
            out.topics = Some(self.topic_names(place.iter().map(|f| &f.0)));
            let parts = found_req
                .iter()
                .filter(|(_, p, _)| matches!(p, Some(v) if !matches!(v, Value::None)))
                .count();
            out.partition_count = if parts > 0 { Some(parts as i64) } else { None };
        }
        let fields: Vec<RecordField> = (if api == PRODUCE {
            &found_req
        } else {
            &found_resp
        })
        .iter()
        .filter_map(|(t, p, rec)| match rec {
            Some(Value::View { start, end }) => Some((t.clone(), int_of(*p), *start, *end)),
            _ => None,
        })
        .collect();
        let blobs: Vec<(usize, usize)> = fields.iter().map(|f| (f.2, f.3)).collect();
        if !blobs.is_empty() {
            let frame = if api == PRODUCE {
                x.request_raw.as_deref()
            } else {
                x.response_raw.as_deref()
            };
            let frame = frame.unwrap_or(&[]);
            let (totals, summaries) = self.record_totals(frame, &blobs);
            if api == PRODUCE {
                out.producer_id = totals.producer_id;
            }
            out.records = Some(totals);
            out.summaries = summaries;
            out.fields = fields;
        }
        out
    }

    /// Rows._record_columns' sums, and each field's summary JSON
    /// by its place, sorted, for the exchange's JSON (rows.record_totals' `summaries`).
    fn record_totals(
        &mut self,
        frame: &[u8],
        blobs: &[(usize, usize)],
    ) -> (RecordColumns, Vec<Summary>) {
        let fields: Vec<&[u8]> = blobs.iter().map(|(a, b)| &frame[*a..*b]).collect();
        let mut sums = Vec::with_capacity(blobs.len());
        let cols = self
            .records
            .record_columns(&fields, self.max_decompressed, Some(&mut sums));
        let mut summaries: Vec<Summary> = blobs.iter().copied().zip(sums).collect();
        summaries.sort_unstable_by_key(|s| s.0);
        (cols, summaries)
    }

    /// Rows._record_columns' offsets of a Produce: (topic, partition) -> the BaseOffset the
    /// broker gave it, from the response's partitions without an error (the last one named wins).
    fn produce_bases(x: &ExchangeItem) -> Vec<ProduceBase> {
        let mut out = Vec::new();
        let Some(Body::Native(Value::Struct(resp))) = &x.response else {
            return out;
        };
        let frame = x.response_raw.as_deref().unwrap_or(&[]);
        let Some(Value::List(topics)) = get(resp, key_id("Responses")) else {
            return out;
        };
        for t in topics {
            let Value::Struct(t) = t else { continue };
            // topic.get("Name") or topic.get("TopicName")
            let name = get(t, K_NAME)
                .and_then(|v| text_of(v, frame))
                .filter(|n| !n.is_empty())
                .or_else(|| get(t, key_id("TopicName")).and_then(|v| text_of(v, frame)))
                // a topic named by id alone is matched to the request's as its placeholder (a
                // bucket that has not seen the name names neither side)
                .or_else(|| topics::id_placeholder(t));
            let Some(Value::List(parts)) = get(t, key_id("PartitionResponses")) else {
                continue;
            };
            for pr in parts {
                let Value::Struct(pr) = pr else { continue };
                if int_of(get(pr, key_id("ErrorCode"))).unwrap_or(0) != 0 {
                    continue;
                }
                out.push((
                    name.clone(),
                    int_of(get(pr, key_id("Index"))),
                    int_of(get(pr, key_id("BaseOffset"))),
                ));
            }
        }
        out
    }

    /// The rows of an exchange's record fields, each field scanned once for both: the batches
    /// table's, and with --records the records table's (Rows._record_rows: a row per record).
    /// `facts`: each batch's (records, decompressed size) as the record columns found them.
    fn field_rows(
        &mut self,
        x: &ExchangeItem,
        conn: u64,
        eid: i64,
        date: Option<&str>,
        fields: &[RecordField],
        facts: &[(i64, Option<usize>)],
    ) {
        let produce = x.api_key == Some(PRODUCE);
        let frame = if produce {
            x.request_raw.as_deref()
        } else {
            x.response_raw.as_deref()
        }
        .unwrap_or(&[]);
        let bases = if produce {
            Self::produce_bases(x)
        } else {
            Vec::new()
        };
        let at = RecordsAt {
            produce,
            frame_time: us(if produce { x.ts } else { x.response_ts }),
            client_id: x.client_id.as_deref(),
            eid,
            conn,
            date,
        };
        let mut known = facts.iter();
        let mut rec = std::mem::take(&mut self.rec);
        for (found, part, a, b) in fields {
            let field = &frame[*a..*b];
            let mut set = std::mem::take(&mut self.records.set);
            set.scan(field, true);
            let f = FieldAt {
                topic: found.as_ref().map(|t| self.topic(t)),
                part: *part,
                base: if produce {
                    assigned_base(&bases, found, *part)
                } else {
                    None
                },
                field,
            };
            self.batches_in(&at, x, &f, &set, &mut known);
            if self.with_records && !set.batches.is_empty() {
                self.records_in(&at, &f, &set, &mut rec);
            }
            self.records.set = set;
        }
        self.rec = rec;
    }

    /// The batches table's rows of one record field: a row per record batch (a legacy message,
    /// or compressed wrapper, counts as one), its records and decompressed size from `known`
    /// (the same scan as the record columns', batch for batch). A produced batch's base offset
    /// is the one the broker's answer gave its partition.
    fn batches_in(
        &mut self,
        at: &RecordsAt<'_>,
        x: &ExchangeItem,
        f: &FieldAt<'_>,
        set: &RecordSet,
        known: &mut std::slice::Iter<'_, (i64, Option<usize>)>,
    ) {
        let direction = at.direction();
        let cap = self.max_decompressed;
        let (topic, part, assigned, field) = (&f.topic, &f.part, f.base, f.field);
        let first = set.batches.first().map_or(0, |b| b.base_offset);
        let crate::records::Records { dec, inner, .. } = &mut self.records;
        let t = &mut self.tables[BATCHES];
        for bt in &set.batches {
            let (n, u) = match (known.next(), bt.record_count()) {
                (Some(&f), _) => f,
                (None, Some(n)) => (n, bt.uncompressed_size(field, cap, dec)),
                (None, None) => {
                    let (n, u) = bt.wrapper_facts(field, cap, dec, inner);
                    (n as i64, u)
                }
            };
            let v2 = bt.v2;
            let c = &mut t.cols;
            c[0].int(Some(at.eid));
            c[1].int(Some(at.conn as i64));
            c[2].int(at.frame_time);
            c[3].text(Some(direction));
            c[4].text(Some(&x.client));
            c[5].text(Some(&x.broker));
            c[6].text(at.client_id);
            c[7].text(topic.as_deref());
            c[8].int(*part);
            c[9].int(match assigned {
                Some(o) => Some(o.wrapping_add(bt.base_offset.wrapping_sub(first))),
                None if at.produce => None, // the client's own numbering says nothing
                None => Some(bt.base_offset),
            });
            c[10].int(Some(n));
            c[11].int(Some(bt.size() as i64));
            c[12].int(u.map(|u| u as i64));
            c[13].text(Some(bt.codec_name()));
            c[14].int(Some(bt.magic as i64));
            c[15].int(v2.map(|h| h.producer_id));
            c[16].int(v2.map(|h| h.producer_epoch as i64));
            c[17].int(v2.map(|h| h.base_sequence as i64));
            c[18].boolean(Some(bt.transactional()));
            c[19].boolean(Some(bt.control()));
            t.end_row(at.date);
            self.counts[BATCHES] += 1;
        }
        t.marked |= topic.as_deref().is_some_and(|s| s.starts_with(UNRESOLVED));
    }

    /// The records table's rows of one record field's batches.
    fn records_in(&mut self, at: &RecordsAt<'_>, f: &FieldAt<'_>, set: &RecordSet, rec: &mut Rec) {
        let direction = at.direction();
        let payloads = self.payloads;
        let cap = self.max_decompressed;
        let (topic, part, base, field) = (&f.topic, &f.part, f.base, f.field);
        // the internal topics' records, and control records anywhere, are decoded too
        let internal = if topic.as_deref().is_some_and(crate::internal::is_internal)
            || set.batches.iter().any(|b| b.control())
        {
            Some(crate::internal::decoder())
        } else {
            None
        };
        let crate::records::Records { dec, inner, .. } = &mut self.records;
        let t = &mut self.tables[RECORDS];
        let mut n = 0;
        for bt in &set.batches {
            let crc_ok = bt.crc_ok(field);
            let v2 = bt.v2;
            let codec = bt.codec_name();
            let ts_type = bt.timestamp_type();
            let (transactional, control) = (bt.transactional(), bt.control());
            let _ = each_record(field, bt, cap, dec, inner, rec, |buf, r| {
                let key = r.key.map(|(a, b)| &buf[a..b]);
                let value = r.value.map(|(a, b)| &buf[a..b]);
                let decoded = internal
                    .as_ref()
                    .map(|d| d.decode(topic.as_deref(), control, key, value))
                    .unwrap_or_default();
                // a SCRAM credential's or delegation token's bytes stay out, as every secret does
                let raw_value = if decoded.secret() { None } else { value };
                let c = &mut t.cols;
                c[0].int(Some(at.eid));
                c[1].int(Some(at.conn as i64));
                c[2].int(at.frame_time);
                c[3].text(Some(direction));
                c[4].text(at.client_id);
                c[5].text(topic.as_deref());
                c[6].int(*part);
                c[7].int(if at.produce {
                    base.map(|o| o.wrapping_add(r.offset).wrapping_sub(bt.base_offset))
                } else {
                    Some(r.offset)
                });
                c[8].int(r.timestamp);
                c[9].text(Some(ts_type));
                c[10].bytes(if payloads { key } else { None });
                c[11].bytes(if payloads { raw_value } else { None });
                c[12].int(Some(key.map_or(-1, |k| k.len() as i64)));
                c[13].int(Some(value.map_or(-1, |v| v.len() as i64)));
                c[14].list(true, |l| {
                    for (hk, hv) in &r.headers {
                        l.row(|f| {
                            match hk {
                                Some((a, b)) => {
                                    f[0].text(Some(&String::from_utf8_lossy(&buf[*a..*b])))
                                }
                                None => f[0].text(None),
                            }
                            f[1].bytes(if payloads {
                                hv.map(|(a, b)| &buf[a..b])
                            } else {
                                None
                            });
                        });
                    }
                });
                c[15].int(schema_id(key));
                c[16].int(schema_id(value));
                c[17].text(Some(codec));
                c[18].int(Some(bt.magic as i64));
                c[19].int(Some(bt.base_offset));
                c[20].int(v2.map(|h| h.producer_id));
                c[21].int(v2.map(|h| h.producer_epoch as i64));
                c[22].int(v2.map(|h| h.base_sequence as i64));
                c[23].boolean(Some(transactional));
                c[24].boolean(Some(control));
                c[25].boolean(Some(crc_ok));
                // the decoder writes UTF-8 JSON
                let json = |j: &Option<Vec<u8>>| {
                    j.as_deref()
                        .filter(|_| payloads)
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .map(str::to_owned)
                };
                c[26].text(json(&decoded.key).as_deref());
                c[27].text(json(&decoded.value).as_deref());
                t.end_row(at.date);
                n += 1;
            });
        }
        t.marked |= topic.as_deref().is_some_and(|s| s.starts_with(UNRESOLVED));
        self.counts[RECORDS] += n;
        t.marked |= topic.as_deref().is_some_and(|s| s.starts_with(UNRESOLVED));
    }

    /// Rows._errors_of
    // the arguments of Rows._errors_of, one for one, so the port reads as its twin
    #[allow(clippy::too_many_arguments)]
    fn errors_of(
        &mut self,
        x: &ExchangeItem,
        resp: &[(u32, Value)],
        frame: &[u8],
        eid: i64,
        conn: u64,
        ts: Option<f64>,
        date: Option<&str>,
        r: &Render,
    ) {
        let rv = x.response_version.or(x.api_version);
        let plan = match (x.api_key, rv) {
            (Some(k), Some(v)) => r.plans.get(k, v, Dir::Response),
            _ => None,
        };
        let mut found: Vec<topics::ErrorAt> = Vec::new();
        topics::error_rows(resp, "", None, None, &mut found, plan.as_deref(), frame);
        let t_us = us(ts);
        for (path, topic, partition, code) in found {
            let topic = topic.map(|t| self.topic(&t));
            let name = r.error_name(code);
            let t = &mut self.tables[1];
            let c = &mut t.cols;
            c[0].int(Some(eid));
            c[1].int(Some(conn as i64));
            c[2].int(t_us);
            c[3].text(Some(&x.client));
            c[4].text(Some(&x.broker));
            c[5].text(x.client_id.as_deref());
            c[6].int(x.api_key.map(|k| k as i64));
            c[7].text(Some(&x.api_name));
            c[8].int(x.api_version.map(|k| k as i64));
            c[9].text(Some(&path));
            c[10].text(topic.as_deref());
            c[11].int(partition);
            c[12].int(Some(code));
            c[13].text(Some(&name));
            c[14].boolean(r.retriable(code));
            t.end_row(date);
            t.marked |= topic.as_deref().is_some_and(|t| t.starts_with(UNRESOLVED));
            self.counts[1] += 1;
        }
    }
}

#[derive(Default)]
struct Promoted {
    topics: Option<Vec<String>>,
    partition_count: Option<i64>,
    group_id: Option<String>,
    transactional_id: Option<String>,
    acks: Option<i64>,
    timeout_ms: Option<i64>,
    producer_id: Option<i64>,
    records: Option<RecordColumns>,
    /// the record fields' summaries (record_totals)
    summaries: Vec<Summary>,
    /// with --records: the record fields, for the records table
    fields: Vec<RecordField>,
    max_wait_ms: Option<i64>,
    min_bytes: Option<i64>,
    isolation_level: Option<i64>,
    throttle_time_ms: Option<i64>,
}

impl Promoted {
    /// The exchanges row's columns promoted from the bodies (topics .. throttle_time_ms).
    fn write(&self, c: &mut [Col]) {
        c[18].list(self.topics.is_some(), |l| {
            for t in self.topics.as_deref().unwrap_or(&[]) {
                l.text(Some(t));
            }
        });
        c[19].int(self.partition_count);
        c[20].text(self.group_id.as_deref());
        c[21].text(self.transactional_id.as_deref());
        c[22].int(self.acks);
        c[23].int(self.timeout_ms);
        c[24].int(self.producer_id);
        let records = self.records.as_ref();
        c[25].int(records.map(|r| r.record_count));
        c[26].int(records.map(|r| r.record_bytes));
        c[27].int(records.map(|r| r.record_bytes_uncompressed));
        c[28].list(records.is_some(), |l| {
            for s in records.map(|r| r.codecs.as_slice()).unwrap_or(&[]) {
                l.text(Some(s));
            }
        });
        c[29].int(self.max_wait_ms);
        c[30].int(self.min_bytes);
        c[31].int(self.isolation_level);
        c[32].int(self.throttle_time_ms);
    }
}

/// The offset the broker's Produce answer gave a partition's first batch (the last answer for
/// it, when several), if it took them.
fn assigned_base(
    bases: &[ProduceBase],
    topic: &Option<Rc<str>>,
    partition: Option<i64>,
) -> Option<i64> {
    bases
        .iter()
        .rev()
        .find(|(t, p, _)| t == topic && *p == partition)
        .and_then(|(_, _, o)| *o)
        .filter(|o| *o >= 0)
}

/// rows._schema_id: Confluent's wire format, magic byte 0 and a 4-byte schema id before the payload
fn schema_id(b: Option<&[u8]>) -> Option<i64> {
    match b {
        Some(b) if b.len() >= 5 && b[0] == 0 => {
            Some(i32::from_be_bytes(b[1..5].try_into().unwrap()) as i64)
        }
        _ => None,
    }
}

fn int_of(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Int(i)) => Some(*i),
        Some(Value::Bool(b)) => Some(*b as i64),
        _ => None,
    }
}

fn parse_uuid(hex: &str) -> Option<[u8; 16]> {
    let digits: Vec<u8> = hex.bytes().filter(|c| *c != b'-').collect();
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for i in 0..16 {
        let s = std::str::from_utf8(&digits[2 * i..2 * i + 2]).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}
