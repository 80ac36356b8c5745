//! Per connection: who is the client, which frames pair up, what they decode to. Every frame is
//! decoded by the core: the fast decoder, or the general path (crate::lenient) for the rest.
//!
//! Choices that show in the output:
//! - the client is the SYN sender; else the end not on a Kafka port (9092 and `ports`); else the
//!   side whose first bytes are a plausible request. A connection that fails that test is not
//!   Kafka and is ignored silently.
//! - an exchange's `ts` is the time of the packet holding its request's first byte, so
//!   `latency_ms` runs from the first request byte to the first response byte.
//! - items come out as they complete: an exchange when its answer arrives (at once for a Produce
//!   with acks=0); unanswered requests and orphan answers when their connection closes. An answer
//!   whose request has not been seen is held, bounded, in case TCP delivers the request late.
//! - capture loss: a request whose answer was (partly) lost is "undecodable", known when a gap
//!   cuts the answer or when a later answer arrives (a broker answers a connection in order). A
//!   request cut by a gap keeps its place, so that its answer still pairs and decodes. Resync
//!   after a gap only takes a boundary whose frame decodes.
//! - after a SaslHandshake v0 exchange, the client's raw SASL tokens and the broker's answers
//!   are "SaslToken" exchanges.
//!
//! tests/test_native_exchanges.py holds its items, event for event, to the frozen oracle's
//! (tests/oracle/exchanges.py). Where several orders would do (unanswered requests at close, the
//! splitters the hold budget drops first), the one below is the one that comparison expects.
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use bytes::Bytes;

use crate::anomalies::kind;
use crate::api::{FETCH, PRODUCE, SASL_HANDSHAKE};
use crate::decode::{self, SharedNames, Value};
use crate::frames::{FrameOut, FrameSplitter, Verdict, HUNT_WINDOW};
use crate::internal;
use crate::lenient;
use crate::nested;
use crate::schema::{Dir, Registry};
use crate::tcp::{Addr, Event};
use crate::tls::Facts;

pub const KAFKA_PORT: u16 = 9092;
pub const MAX_PARTIAL_BYTES: u64 = 256 << 20;
const BUDGET_EVERY: u64 = 256;
const PROBE_LIMIT: usize = 64 << 10;
const MAX_EARLY: usize = 4096;
const MAX_EARLY_BYTES: usize = 16 << 20;

/// A request awaiting its answer: (api name, client id, broker, request time).
pub type Waiting = (Rc<str>, Option<Rc<str>>, Rc<str>, f64);

/// A decoded (or not) body, kept natively until its item is released.
pub enum Body {
    /// Decoded by the core.
    Native(Value),
    /// {"_decode_error": text}
    Error(Cow<'static, str>),
    /// {"_raw_body": bytes}: an orphan response's body after its correlation id.
    Raw(Bytes),
    /// {"token": frame}: a raw SASL token (the frame is the item's raw bytes of that side).
    Token,
}

pub struct ExchangeItem {
    pub ts: Option<f64>,
    pub response_ts: Option<f64>,
    pub latency_ms: Option<f64>,
    pub connection: u64,
    pub client: Rc<str>,
    pub broker: Rc<str>,
    pub api_key: Option<i16>,
    pub api_name: Rc<str>,
    pub api_version: Option<i16>,
    pub correlation_id: Option<i32>,
    pub client_id: Option<Rc<str>>,
    pub status: &'static str,
    pub error_codes: Vec<i64>,
    pub request: Option<Body>,
    pub response: Option<Body>,
    pub request_size: Option<usize>,
    pub response_size: Option<usize>,
    pub request_raw: Option<Bytes>,
    pub response_raw: Option<Bytes>,
    pub response_version: Option<i16>,
    pub flags: Vec<&'static str>,
    /// its connection's TLS facts (tls.rs), when it is TLS
    pub tls: Option<Rc<Facts>>,
}

pub struct AnomalyItem {
    pub connection: Option<u64>,
    pub ts: f64,
    pub kind: Cow<'static, str>,
    pub detail: String,
}

impl AnomalyItem {
    /// A fault of the capture files themselves (no connection, one of `kinds`: the bindings'
    /// capture.FILE_FAULTS), which the caller always sees too: a command's one-line error.
    pub fn is_file_fault(&self, kinds: &[String]) -> bool {
        self.connection.is_none() && kinds.iter().any(|k| *k == self.kind)
    }
}

pub struct ConnectionItem {
    pub connection: u64,
    pub client: Rc<str>,
    pub broker: Rc<str>,
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    pub bytes_to_broker: u64,
    pub bytes_to_client: u64,
    pub frames_to_broker: u64,
    pub frames_to_client: u64,
    pub gaps: u64,
    pub gap_bytes: i64,
    pub retransmissions: u64,
    pub out_of_order: u64,
    pub resyncs: u64,
    pub client_ids: Vec<Rc<str>>,
    pub detected_by: &'static str,
    pub exchanges: u64,
    pub frame_bytes_to_broker: u64,
    pub frame_bytes_to_client: u64,
    pub skipped_bytes_to_broker: i64,
    pub skipped_bytes_to_client: i64,
    pub gap_bytes_to_broker: i64,
    pub gap_bytes_to_client: i64,
    pub tls: Option<Rc<Facts>>,
}

pub enum Item {
    Exchange(Box<ExchangeItem>),
    Anomaly(AnomalyItem),
    Connection(Box<ConnectionItem>),
}

impl ExchangeItem {
    /// Secrets out of its bodies and raw frames (crate::redact), unless the user asks to
    /// see them. A body that did not decode, of an API that may carry a secret, keeps only its
    /// header in the raw frame. An orphan answer (its API unknown) that decodes whole as an answer
    /// carrying a secret is blanked as that answer would be.
    pub fn redact(&mut self, reg: &Registry) {
        use crate::redact::{request_header_end, star_after, SECRET_APIS};
        let key = self.api_key;
        if key.is_none() && &*self.api_name != "SaslToken" {
            self.redact_orphan(reg);
            return;
        }
        if key.is_some_and(|k| !SECRET_APIS.contains(&k)) {
            return;
        }
        let failed = |b: &Option<Body>| matches!(b, Some(Body::Error(_)) | Some(Body::Raw(_)));
        if failed(&self.request) {
            if let Some(raw) = &self.request_raw {
                self.request_raw = Some(star_after(raw, request_header_end(raw)).into());
            }
        } else {
            redact_side(key, Dir::Request, &mut self.request, &mut self.request_raw);
        }
        if failed(&self.response) {
            if let Some(raw) = &self.response_raw {
                self.response_raw = Some(star_after(raw, 4).into()); // the correlation id stays
            }
        } else {
            redact_side(
                key,
                Dir::Response,
                &mut self.response,
                &mut self.response_raw,
            );
        }
    }

    fn redact_orphan(&mut self, reg: &Registry) {
        use crate::redact::{redact_body, star_spans, ORPHAN_GUESSES};
        let (Some(raw), Some(Body::Raw(body))) = (&self.response_raw, &self.response) else {
            return;
        };
        if raw.is_empty() {
            return;
        }
        for (key, versions) in ORPHAN_GUESSES {
            for &v in versions {
                let Ok(msg) = lenient::response(reg, raw, key, v, false) else {
                    continue;
                };
                let mut b = msg.body;
                let found = redact_body(Some(key), Dir::Response, &mut b, raw);
                if !found.is_empty() {
                    let starred = star_spans(body, &found);
                    self.response_raw = Some(star_spans(raw, &found).into());
                    self.response = Some(Body::Raw(starred.into()));
                    return;
                }
            }
        }
    }
}

/// One side's body redacted, its raw frame starred where the secrets sat. A raw SASL token's body
/// becomes {"token": the token redacted}.
fn redact_side(key: Option<i16>, dir: Dir, body: &mut Option<Body>, raw: &mut Option<Bytes>) {
    use crate::redact::{redact_body, star_spans};
    let frame = raw.clone().unwrap_or_default();
    let found = match body {
        Some(Body::Native(v)) => redact_body(key, dir, v, &frame),
        Some(Body::Token) => {
            let token = crate::schema::key_id("token");
            let mut v = Value::Struct(vec![(
                token,
                Value::View {
                    start: 0,
                    end: frame.len(),
                },
            )]);
            let found = redact_body(None, dir, &mut v, &frame);
            *body = Some(Body::Native(v));
            found
        }
        _ => return,
    };
    if let Some(r) = raw.as_ref() {
        *raw = Some(star_spans(r, &found).into());
    }
}

fn anomaly(connection: Option<u64>, ts: f64, kind: &'static str, detail: String) -> Item {
    Item::Anomaly(AnomalyItem {
        connection,
        ts,
        kind: Cow::Borrowed(kind),
        detail,
    })
}

// -- plausibility ----------------------------------------------------------------

/// What the plausibility checks and the decoders need besides the connection.
pub struct Ctx {
    pub reg: Rc<Registry>,
    /// the topic names learned (TopicId -> Name), shared with the rows
    pub names: SharedNames,
    /// the registry's API names, one shared str each (every exchange carries its API's)
    api_names: RefCell<HashMap<i16, Rc<str>>>,
}

impl Ctx {
    pub fn new(reg: Rc<Registry>, names: SharedNames) -> Self {
        Ctx {
            reg,
            names,
            api_names: RefCell::new(HashMap::new()),
        }
    }

    /// The API's name (the registry's, or Unknown(N)).
    pub fn name(&self, api_key: i16) -> Rc<str> {
        self.api_names
            .borrow_mut()
            .entry(api_key)
            .or_insert_with(|| Rc::from(self.reg.api_name(api_key)))
            .clone()
    }

    fn has_response(&self, api_key: i16, version: i16) -> bool {
        self.reg.has(api_key, version, Dir::Response)
    }
}

fn i32_at(buf: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]])
}

fn i16_at(buf: &[u8], pos: usize) -> i16 {
    i16::from_be_bytes([buf[pos], buf[pos + 1]])
}

/// How a candidate frame decodes: a verdict, or whole but with bytes after its last field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Judged {
    Verdict(Verdict),
    Trailing,
}

impl Judged {
    /// A frame with bytes after its last field is no boundary on its own word: a size and a
    /// correlation id inside record data or a long name decode as a short message with bytes
    /// left over.
    fn verdict(self) -> Verdict {
        match self {
            Judged::Verdict(v) => v,
            Judged::Trailing => Verdict::No,
        }
    }
}

/// Does buf[pos..end] start with a sane size-prefixed request header? None: more bytes needed.
/// Without `strict` (for the first bytes after a SYN, where the boundary is certain and the only
/// question is "is this Kafka") any version of a known API key passes (clients send ApiVersions
/// versions newer than any registry) and the body is not decoded. `strict`: the frame must
/// decode; one of up to `window` bytes is waited for, a bigger one is judged by what its first
/// bytes decode to.
pub fn plausible_request(
    ctx: &Ctx,
    buf: &[u8],
    pos: usize,
    end: usize,
    strict: bool,
    window: usize,
) -> Option<Verdict> {
    request_judged(ctx, buf, pos, end, strict, window).map(Judged::verdict)
}

/// plausible_request, telling a whole frame that decodes only with bytes left over apart.
fn request_judged(
    ctx: &Ctx,
    buf: &[u8],
    pos: usize,
    end: usize,
    strict: bool,
    window: usize,
) -> Option<Judged> {
    let no = Some(Judged::Verdict(Verdict::No));
    if end - pos < 14 {
        return None;
    }
    let size = i32_at(buf, pos) as i64;
    let api_key = i16_at(buf, pos + 4);
    let version = i16_at(buf, pos + 6);
    let corr = i32_at(buf, pos + 8);
    let n = i16_at(buf, pos + 12) as i64;
    let rng = match ctx.reg.request_version_range(api_key) {
        Some(r) => r,
        None => return no,
    };
    if corr < 0 || !(-1..=1024).contains(&n) || size < 10 + n.max(0) {
        return no;
    }
    if strict && !(rng.0 <= version && version <= rng.1) || version < 0 {
        return no;
    }
    if n > 0 {
        let n = n as usize;
        if end - pos < 14 + n {
            return None;
        }
        if buf[pos + 14..pos + 14 + n]
            .iter()
            .any(|&c| !(0x20..=0x7E).contains(&c))
        {
            return no;
        }
    }
    if !strict {
        return Some(Judged::Verdict(Verdict::Yes));
    }
    frame_judged(ctx, buf, pos, end, size, None, window)
}

/// The request side's plausible() while it hunts: plausible_request, except that a whole frame
/// with bytes after its last field (which real clients send: older librdkafka pads ApiVersions
/// v0) is taken when something outside it agrees, as its bytes alone cannot tell it from a
/// header inside record data (a legacy message set's offset, crc and key length read as a
/// Produce v0 request with no topics and bytes left over). Either its answer came already
/// (`early`: answers whose request was not seen) and decodes exactly as the answer to it, or the
/// bytes right after it are a request that decodes exactly and has the next correlation id (the
/// clients seen padding number a connection's requests one by one). Until one of them can say,
/// it waits (None); the hunt asks again as bytes or answers come (FrameSplitter::reconsider),
/// and a frame so Confirmed keeps the time its bytes came.
fn hunt_request(
    ctx: &Ctx,
    early: &VecDeque<(i32, f64, Bytes)>,
    buf: &[u8],
    pos: usize,
    end: usize,
) -> Option<Verdict> {
    match request_judged(ctx, buf, pos, end, true, HUNT_WINDOW)? {
        Judged::Verdict(v) => Some(v),
        Judged::Trailing => {
            let (api_key, version) = (i16_at(buf, pos + 4), i16_at(buf, pos + 6));
            let corr = i32_at(buf, pos + 8);
            if early
                .iter()
                .any(|(c, _, f)| *c == corr && answers_exactly(ctx, f, api_key, version))
            {
                return Some(Verdict::Confirmed);
            }
            // request_judged says Trailing only of a whole frame: `next` is at most `end`
            let next = pos + 4 + i32_at(buf, pos) as usize;
            match request_judged(ctx, buf, next, end, true, HUNT_WINDOW) {
                Some(Judged::Verdict(Verdict::Verified))
                    if corr.checked_add(1) == Some(i32_at(buf, next + 8)) =>
                {
                    Some(Verdict::Confirmed)
                }
                Some(Judged::Verdict(Verdict::No)) => Some(Verdict::No),
                _ => None,
            }
        }
    }
}

/// Does `frame` decode, every byte of it, as the answer to a version `api_version` request?
fn answers_exactly(ctx: &Ctx, frame: &[u8], api_key: i16, api_version: i16) -> bool {
    match decode::decode_response(&ctx.reg, frame, api_key, api_version) {
        Ok(_) => true,
        Err(decode::Fail::NoPlan) => {
            lenient::response(&ctx.reg, frame, api_key, api_version, false).is_ok()
        }
        Err(_) => false,
    }
}

/// The last word on a candidate boundary: does the frame decode (as a request, or as the answer
/// to `pending` = (api key, version))? None: wait for the rest of it. A frame of up to `window`
/// bytes is waited for; the first bytes of a bigger one must decode as far as they go.
// each argument is a fact the verdict needs; a struct of them would be built for this call alone
#[allow(clippy::too_many_arguments)]
fn frame_decodes(
    ctx: &Ctx,
    buf: &[u8],
    pos: usize,
    end: usize,
    size: i64,
    pending: Option<(i16, i16)>,
    window: usize,
) -> Option<Verdict> {
    frame_judged(ctx, buf, pos, end, size, pending, window).map(Judged::verdict)
}

/// frame_decodes, telling a whole frame that decodes only with bytes left over apart (for a
/// request: an answer is judged by frame_decodes alone).
fn frame_judged(
    ctx: &Ctx,
    buf: &[u8],
    pos: usize,
    end: usize,
    size: i64,
    pending: Option<(i16, i16)>,
    window: usize,
) -> Option<Judged> {
    let whole = (end - pos) as i64 >= 4 + size;
    if !whole && size + 4 <= window as i64 {
        return None;
    }
    let stop = (pos as i64 + 4 + size).min(end as i64) as usize;
    let frame = &buf[pos + 4..stop];
    let result = match pending {
        None => decode::decode_request(&ctx.reg, frame).map(|_| ()),
        Some((k, v)) => decode::decode_response(&ctx.reg, frame, k, v).map(|_| ()),
    };
    let verdict = |v| Some(Judged::Verdict(v));
    match result {
        Ok(()) => verdict(if whole {
            Verdict::Verified
        } else {
            Verdict::Yes
        }),
        Err(decode::Fail::Short) => verdict(if whole { Verdict::No } else { Verdict::Yes }),
        Err(decode::Fail::Other) => verdict(Verdict::No),
        Err(decode::Fail::Trailing) if whole && pending.is_none() => Some(Judged::Trailing),
        Err(decode::Fail::Trailing) => verdict(Verdict::No),
        Err(decode::Fail::NoPlan) => {
            // ApiVersions and versions the registry lacks: the general path decides
            let r = match pending {
                None => lenient::request(&ctx.reg, frame, false).map(|_| ()),
                Some((k, v)) => lenient::response(&ctx.reg, frame, k, v, false).map(|_| ()),
            };
            match r {
                Ok(()) if whole => verdict(Verdict::Verified),
                Ok(()) => verdict(Verdict::Yes),
                Err(e) if !whole && e.is_short() => verdict(Verdict::Yes),
                Err(_)
                    if whole
                        && pending.is_none()
                        && lenient::request(&ctx.reg, frame, true)
                            .is_ok_and(|d| d.trailing > 0) =>
                {
                    Some(Judged::Trailing)
                }
                Err(_) => verdict(Verdict::No),
            }
        }
    }
}

/// Bytes of its own: frames and segments are slices of the capture's read chunks (1-4 MiB), and
/// what is held past the packet at hand (a request awaiting its answer, an item in the reordering
/// window, a probe) must not keep a whole chunk alive, as a `Bytes` slice keeps its whole buffer.
fn own(b: Bytes) -> Bytes {
    Bytes::copy_from_slice(&b)
}

/// An endpoint's text: ip:port, or [ip]:port for IPv6.
fn endpoint(addr: &Addr) -> Rc<str> {
    let (ip, port) = addr;
    Rc::from(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

// -- per connection ---------------------------------------------------------------

/// A request awaiting its answer (or a raw SASL token awaiting the broker's).
struct Pending {
    /// its key in the connection's arena (u64::MAX when it never had one: tokens)
    id: u64,
    ts: f64,
    api_key: Option<i16>,
    api_version: Option<i16>,
    corr: Option<i32>,
    client_id: Option<Rc<str>>,
    request: Body,
    size: usize,
    raw: Bytes,
    failed: bool,
    flags: Vec<&'static str>,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum State {
    Probe,
    Kafka,
    Ignored,
}

/// One connection. A waiting request lives in `arena` under an id, which both `pending` (by
/// correlation id) and `order` (arrival order) list; an answered request leaves the arena at once
/// and `order` lazily, so an id missing from the arena is done.
struct Conn {
    id: u64,
    syn: bool,
    client: Option<Addr>,
    server: Option<Addr>,
    /// client, server as text (set when the roles are known)
    ends: (Rc<str>, Rc<str>),
    state: State,
    req: Option<FrameSplitter>,
    resp: Option<FrameSplitter>,
    /// corr id -> (the key's insertion number, its requests' ids oldest first). The number
    /// keeps the keys' insertion order, which orders unanswered requests with equal times
    pending: HashMap<i32, (u64, VecDeque<u64>)>,
    key_seq: u64,
    arena: HashMap<u64, Pending>,
    next_id: u64,
    order: VecDeque<u64>,
    /// raw SASL tokens awaiting the broker's token
    tokens: VecDeque<Pending>,
    /// (corr, ts, frame): answers whose request is not here (yet)
    early: VecDeque<(i32, f64, Bytes)>,
    early_bytes: usize,
    /// the broker's direction lost bytes since the last answer
    resp_gap: bool,
    sasl_raw: bool,
    /// sender -> chunks while deciding (insertion-ordered, at most two senders)
    probe: Vec<(Addr, Vec<(f64, Bytes)>)>,
    probe_gap: Vec<Addr>,
    not_client: Vec<Addr>,
    first_ts: Option<f64>,
    last_ts: Option<f64>,
    bytes_in: [u64; 2],
    frames: [u64; 2],
    frame_bytes: [u64; 2],
    /// sender -> [gap bytes, bytes dropped before the roles were known]
    lost: Vec<(Addr, [i64; 2])>,
    gaps: u64,
    gap_bytes: i64,
    resyncs: u64,
    client_ids: Vec<Rc<str>>,
    detected_by: &'static str,
    exchanges: u64,
    tcp: (u64, u64),
    unjudged: u64,
    tls: Option<Rc<Facts>>,
}

impl Conn {
    fn new(
        id: u64,
        syn: bool,
        client: Option<Addr>,
        server: Option<Addr>,
        ts: Option<f64>,
    ) -> Self {
        Conn {
            id,
            syn,
            client,
            server,
            ends: (Rc::from(""), Rc::from("")),
            state: State::Probe,
            req: None,
            resp: None,
            pending: HashMap::new(),
            key_seq: 0,
            arena: HashMap::new(),
            next_id: 0,
            order: VecDeque::new(),
            tokens: VecDeque::new(),
            early: VecDeque::new(),
            early_bytes: 0,
            resp_gap: false,
            sasl_raw: false,
            probe: Vec::new(),
            probe_gap: Vec::new(),
            not_client: Vec::new(),
            first_ts: ts,
            last_ts: ts,
            bytes_in: [0, 0],
            frames: [0, 0],
            frame_bytes: [0, 0],
            lost: Vec::new(),
            gaps: 0,
            gap_bytes: 0,
            resyncs: 0,
            client_ids: Vec::new(),
            detected_by: "",
            exchanges: 0,
            tcp: (0, 0),
            unjudged: 0,
            tls: None,
        }
    }

    fn lost_of(&mut self, sender: &Addr) -> &mut [i64; 2] {
        let i = match self.lost.iter().position(|(a, _)| a == sender) {
            Some(i) => i,
            None => {
                self.lost.push((sender.clone(), [0, 0]));
                self.lost.len() - 1
            }
        };
        &mut self.lost[i].1
    }

    fn lost_get(&self, sender: &Option<Addr>) -> [i64; 2] {
        match sender {
            Some(s) => self
                .lost
                .iter()
                .find(|(a, _)| a == s)
                .map(|(_, v)| *v)
                .unwrap_or([0, 0]),
            None => [0, 0],
        }
    }

    fn is_client(&self, sender: &Addr) -> bool {
        self.client.as_ref() == Some(sender)
    }

    fn is_server(&self, sender: &Addr) -> bool {
        self.server.as_ref() == Some(sender)
    }

    fn pending_ts(&self, id: u64) -> Option<f64> {
        self.arena.get(&id).map(|p| p.ts)
    }

    /// The oldest request waiting on correlation id `corr`, taken out.
    fn take(&mut self, corr: i32) -> Option<Pending> {
        let (_, q) = self.pending.get_mut(&corr)?;
        let id = q.pop_front()?;
        if q.is_empty() {
            self.pending.remove(&corr);
        }
        self.arena.remove(&id)
    }
}

/// The layer over every connection: TCP events in, items out.
pub struct Exchanges {
    pub ctx: Ctx,
    ports: Vec<u16>,
    max_frame_size: i64,
    max_pending: usize,
    connections: bool,
    max_partial_bytes: u64,
    fed: u64,
    /// by id: ids grow as connections open, so this iterates in the order they opened
    // boxed: a connection is taken out and put back around every data event, and a B-tree
    // moves its values (and their neighbours) each time
    conns: BTreeMap<u64, Box<Conn>>,
}

impl Exchanges {
    pub fn new(ctx: Ctx, ports: &[u16], max_frame_size: i64, connections: bool) -> Self {
        let mut p = vec![KAFKA_PORT];
        p.extend_from_slice(ports);
        Exchanges {
            ctx,
            ports: p,
            max_frame_size,
            max_pending: 10000,
            connections,
            max_partial_bytes: MAX_PARTIAL_BYTES,
            fed: 0,
            conns: BTreeMap::new(),
        }
    }

    fn is_port(&self, port: u16) -> bool {
        self.ports.contains(&port)
    }

    // -- events ----------------------------------------------------------------

    /// One TCP event, its items to `out` (a capture anomaly comes through `capture_anomaly`).
    pub fn feed(&mut self, ev: Event, out: &mut Vec<Item>) {
        match ev {
            Event::Data {
                conn,
                sender,
                receiver,
                ts,
                data,
            } => {
                if !self.conns.contains_key(&conn) {
                    self.open(conn, false, None, None, Some(ts));
                }
                let state = {
                    let c = self.conns.get_mut(&conn).unwrap();
                    c.last_ts = Some(ts);
                    c.state
                };
                if state == State::Kafka {
                    self.data(conn, &sender, data, ts, out);
                } else {
                    self.conns.get_mut(&conn).unwrap().unjudged += data.len() as u64;
                    if state == State::Probe {
                        self.probe(conn, sender, receiver, data, ts, out);
                    }
                }
            }
            Event::Gap {
                conn,
                sender,
                ts,
                size,
                ..
            } => {
                if !self.conns.contains_key(&conn) {
                    self.open(conn, false, None, None, Some(ts));
                }
                let c = self.conns.get_mut(&conn).unwrap();
                c.gaps += 1;
                c.gap_bytes += size;
                c.lost_of(&sender)[0] += size;
                if c.state == State::Kafka {
                    let to_client = c.is_server(&sender);
                    c.resp_gap |= to_client;
                    let mut fo = Vec::new();
                    let splitter = if to_client {
                        c.resp.as_mut()
                    } else {
                        c.req.as_mut()
                    };
                    splitter.unwrap().gap(size, ts, &mut fo);
                    for a in fo {
                        frame_anomaly(&self.ctx, c, a, to_client, self.max_pending, out);
                    }
                } else if c.state == State::Probe {
                    if let Some(i) = c.probe.iter().position(|(a, _)| *a == sender) {
                        let (_, dropped) = c.probe.remove(i);
                        if !dropped.is_empty() {
                            let n: usize = dropped.iter().map(|(_, d)| d.len()).sum();
                            c.lost_of(&sender)[1] += n as i64;
                        }
                    }
                    if !c.probe_gap.contains(&sender) {
                        c.probe_gap.push(sender);
                    }
                }
            }
            Event::Open {
                conn,
                client,
                server,
                ts,
                syn_seen,
            } => {
                self.open(conn, syn_seen, client, server, Some(ts));
            }
            Event::Close {
                conn,
                ts,
                reason,
                retransmissions,
                out_of_order,
            } => {
                if let Some(mut c) = self.conns.remove(&conn) {
                    c.tcp = (retransmissions, out_of_order);
                    if reason != "end_of_capture" {
                        c.last_ts = Some(ts);
                    }
                    self.close(*c, Some(ts), out);
                }
            }
            Event::Tls { conn, facts } => {
                if !self.conns.contains_key(&conn) {
                    self.open(conn, false, None, None, None);
                }
                self.conns.get_mut(&conn).unwrap().tls = Some(facts);
            }
            Event::StreamAnomaly {
                conn,
                ts,
                kind,
                detail,
            } => {
                let ignored = self
                    .conns
                    .get(&conn)
                    .is_some_and(|c| c.state == State::Ignored);
                if !ignored {
                    out.push(anomaly(Some(conn), ts, kind, detail));
                }
            }
        }
    }

    pub fn capture_anomaly(&mut self, ts: f64, kind: String, detail: String, out: &mut Vec<Item>) {
        out.push(Item::Anomaly(AnomalyItem {
            connection: None,
            ts,
            kind: Cow::Owned(kind),
            detail,
        }));
    }

    /// The capture ended: every connection still open closes, its leftovers to `out`.
    pub fn finish(&mut self, ts: Option<f64>, out: &mut Vec<Item>) {
        let conns = std::mem::take(&mut self.conns);
        for (_, c) in conns {
            self.close(*c, ts, out);
        }
    }

    /// The earliest time an item not yet given may carry: a request awaiting its answer, a frame
    /// half received, an answer waiting for its request, bytes kept while deciding whether a
    /// connection is Kafka. None when nothing is open.
    pub fn oldest_open(&mut self) -> Option<f64> {
        let mut oldest: Option<f64> = None;
        for c in self.conns.values_mut() {
            let mut times: Vec<f64> = Vec::new();
            match c.state {
                State::Kafka => {
                    while let Some(&id) = c.order.front() {
                        if c.arena.contains_key(&id) {
                            break;
                        }
                        c.order.pop_front();
                    }
                    if let Some(&id) = c.order.front() {
                        times.push(c.pending_ts(id).unwrap());
                    }
                    if let Some(p) = c.tokens.front() {
                        times.push(p.ts);
                    }
                    if let Some(e) = c.early.front() {
                        times.push(e.1);
                    }
                    for s in [c.req.as_ref(), c.resp.as_ref()].into_iter().flatten() {
                        if let Some(t) = s.partial_ts() {
                            times.push(t);
                        }
                    }
                }
                State::Probe if !c.probe.is_empty() => {
                    for (_, chunks) in &c.probe {
                        for (t, _) in chunks {
                            times.push(*t);
                        }
                    }
                }
                _ => continue,
            }
            if let Some(t) = times.into_iter().reduce(f64::min) {
                if oldest.is_none_or(|o| t < o) {
                    oldest = Some(t);
                }
            }
        }
        oldest
    }

    // -- connection roles ------------------------------------------------------

    /// A new connection; one seen from its SYN to a Kafka port is Kafka at once.
    fn open(
        &mut self,
        conn: u64,
        syn: bool,
        client: Option<Addr>,
        server: Option<Addr>,
        ts: Option<f64>,
    ) {
        let mut c = Conn::new(conn, syn, client, server, ts);
        if syn {
            if let Some(server) = c.server.clone() {
                if self.is_port(server.1) {
                    let client = c.client.clone().unwrap();
                    self.start(&mut c, client, server, false, false, "syn_port");
                }
            }
        }
        self.conns.insert(conn, Box::new(c));
    }

    /// The roles are known: the connection is Kafka, with a frame splitter per direction, each
    /// hunting for a boundary when the connection began before the capture (or, `hunt_req` /
    /// `hunt_resp`, when that side lost bytes while it was probed).
    fn start(
        &self,
        c: &mut Conn,
        client: Addr,
        server: Addr,
        hunt_req: bool,
        hunt_resp: bool,
        how: &'static str,
    ) {
        c.ends = (endpoint(&client), endpoint(&server));
        c.client = Some(client);
        c.server = Some(server);
        c.state = State::Kafka;
        c.detected_by = how;
        let mid = !c.syn;
        c.req = Some(FrameSplitter::new(
            self.max_frame_size,
            8,
            mid || hunt_req,
            false,
        ));
        c.resp = Some(FrameSplitter::new(
            self.max_frame_size,
            4,
            mid || hunt_resp,
            true,
        ));
    }

    /// Bytes of a connection whose roles are not known yet. One end (only) on a Kafka port decides
    /// at once; else each sender's bytes are kept until the first bytes of one are a plausible
    /// request (that sender is the client, and what both said so far is replayed) or both fail.
    // the Data event's fields as they come, with the connection and the output
    #[allow(clippy::too_many_arguments)]
    fn probe(
        &mut self,
        cid: u64,
        sender: Addr,
        receiver: Addr,
        data: Bytes,
        ts: f64,
        out: &mut Vec<Item>,
    ) {
        let mut c = self.conns.remove(&cid).unwrap();
        self.probe_conn(&mut c, sender, receiver, data, ts, out);
        self.conns.insert(cid, c);
    }

    // probe()'s arguments with its connection taken out of the table
    #[allow(clippy::too_many_arguments)]
    fn probe_conn(
        &mut self,
        c: &mut Conn,
        sender: Addr,
        receiver: Addr,
        data: Bytes,
        ts: f64,
        out: &mut Vec<Item>,
    ) {
        if !c.syn {
            if self.is_port(receiver.1) && !self.is_port(sender.1) {
                self.start(c, sender.clone(), receiver, false, false, "port");
                return self.data_conn(c, &sender, data, ts, out);
            }
            if self.is_port(sender.1) && !self.is_port(receiver.1) {
                self.start(c, receiver, sender.clone(), false, false, "port");
                return self.data_conn(c, &sender, data, ts, out);
            }
        }
        let i = match c.probe.iter().position(|(a, _)| *a == sender) {
            Some(i) => i,
            None => {
                c.probe.push((sender.clone(), Vec::new()));
                c.probe.len() - 1
            }
        };
        c.probe[i].1.push((ts, own(data)));
        let total: usize = c.probe[i].1.iter().map(|(_, d)| d.len()).sum();
        if c.syn && !c.is_client(&sender) {
            if total > PROBE_LIMIT {
                c.state = State::Ignored; // a server that talks first is not a Kafka broker
            }
            return;
        }
        if c.not_client.contains(&sender) {
            if total > PROBE_LIMIT {
                let (_, first) = c.probe[i].1.remove(0);
                c.lost_of(&sender)[1] += first.len() as i64;
            }
            return;
        }
        let head: Bytes = if c.probe[i].1.len() == 1 {
            c.probe[i].1[0].1.clone()
        } else {
            let mut v = Vec::with_capacity(total);
            for (_, d) in &c.probe[i].1 {
                v.extend_from_slice(d);
            }
            Bytes::from(v)
        };
        // without a SYN, wait for the whole first frame (up to PROBE_LIMIT) so that it must decode:
        // a broker's answer read as a request often has a sane-looking header
        let mut verdict = if c.probe_gap.contains(&sender) {
            Some(Verdict::No)
        } else {
            plausible_request(&self.ctx, &head, 0, head.len(), !c.syn, PROBE_LIMIT)
        };
        if verdict.is_none() && head.len() > PROBE_LIMIT {
            verdict = Some(Verdict::No);
        }
        let Some(verdict) = verdict else {
            return;
        };
        if verdict == Verdict::No {
            if c.syn {
                c.state = State::Ignored;
                return;
            }
            c.not_client.push(sender);
            if c.not_client.len() == 2 {
                c.state = State::Ignored;
            }
            return;
        }
        // sender is the client: replay what both sides said so far
        let hunt_resp = c.probe_gap.contains(&receiver);
        self.start(
            c,
            sender.clone(),
            receiver.clone(),
            false,
            hunt_resp,
            "heuristic",
        );
        // what the probe dropped of a side (a hole in it, or more than PROBE_LIMIT bytes before
        // the roles were known) was skipped by that side's hunt: its splitter names it
        for (who, to_client) in [(&receiver, true), (&sender, false)] {
            let n = c.lost_get(&Some(who.clone()))[1];
            if n > 0 {
                let s = if to_client {
                    c.resp.as_mut()
                } else {
                    c.req.as_mut()
                };
                s.unwrap().skipped_before_start(n as u64);
            }
        }
        let probe = std::mem::take(&mut c.probe);
        for who in [&receiver, &sender] {
            if let Some((_, chunks)) = probe.iter().find(|(a, _)| a == who) {
                for (t, d) in chunks {
                    self.data_conn(c, who, d.clone(), *t, out);
                }
            }
        }
    }

    // -- frames ------------------------------------------------------------------

    /// A Kafka connection's bytes from `sender`, through that direction's splitter; every
    /// BUDGET_EVERY of them, the frames in progress are weighed against the budget first.
    fn data(&mut self, cid: u64, sender: &Addr, data: Bytes, ts: f64, out: &mut Vec<Item>) {
        self.fed += 1;
        if self.fed.is_multiple_of(BUDGET_EVERY) {
            self.hold_budget(ts, out);
        }
        let mut c = self.conns.remove(&cid).unwrap();
        self.frames_of(&mut c, sender, data, ts, out);
        self.conns.insert(cid, c);
    }

    /// `data` for a connection taken out of the map (the probe's replay, or `data` itself)
    fn data_conn(
        &mut self,
        c: &mut Conn,
        sender: &Addr,
        data: Bytes,
        ts: f64,
        out: &mut Vec<Item>,
    ) {
        self.fed += 1;
        if self.fed.is_multiple_of(BUDGET_EVERY) {
            // the connection at hand is out of the map: its splitters are weighed by hand
            self.hold_budget_with(Some(&mut *c), ts, out);
        }
        self.frames_of(c, sender, data, ts, out)
    }

    fn frames_of(
        &mut self,
        c: &mut Conn,
        sender: &Addr,
        data: Bytes,
        ts: f64,
        out: &mut Vec<Item>,
    ) {
        let mut fo: Vec<FrameOut> = Vec::new();
        let ctx = &self.ctx;
        if c.is_client(sender) {
            c.bytes_in[0] += data.len() as u64;
            let Conn { req, early, .. } = &mut *c;
            req.as_mut().unwrap().feed(
                &data,
                ts,
                &mut |buf: &[u8], pos: usize, end: usize, _first: bool| {
                    hunt_request(ctx, early, buf, pos, end)
                },
                &mut fo,
            );
            self.requests(c, fo, out);
        } else {
            c.bytes_in[1] += data.len() as u64;
            {
                let Conn {
                    resp,
                    pending,
                    arena,
                    ..
                } = &mut *c;
                resp.as_mut().unwrap().feed(
                    &data,
                    ts,
                    &mut |buf: &[u8], pos: usize, end: usize, first: bool| {
                        plausible_response(ctx, pending, arena, buf, pos, end, first)
                    },
                    &mut fo,
                );
            }
            let answered = fo.iter().any(|f| matches!(f, FrameOut::Frame { .. }));
            for f in fo {
                match f {
                    FrameOut::Frame { ts, data, .. } => {
                        c.frame_bytes[1] += 4 + data.len() as u64;
                        self.response(c, own(data), ts, out);
                    }
                    a => frame_anomaly(&self.ctx, c, a, true, self.max_pending, out),
                }
            }
            // an answer kept for a request not seen yet may be what a hunting request side waits
            // on (hunt_request): it is asked again now rather than when the client next sends
            if answered && !c.early.is_empty() && c.req.as_ref().unwrap().hunting() {
                let mut fo = Vec::new();
                let ctx = &self.ctx;
                let Conn { req, early, .. } = &mut *c;
                req.as_mut().unwrap().reconsider(
                    &mut |buf: &[u8], pos: usize, end: usize, _first: bool| {
                        hunt_request(ctx, early, buf, pos, end)
                    },
                    &mut fo,
                );
                self.requests(c, fo, out);
            }
        }
    }

    /// The request side's frames and anomalies, in order.
    fn requests(&mut self, c: &mut Conn, fo: Vec<FrameOut>, out: &mut Vec<Item>) {
        for f in fo {
            match f {
                FrameOut::Frame { ts, data, .. } => {
                    c.frame_bytes[0] += 4 + data.len() as u64;
                    self.request(c, own(data), ts, out);
                }
                a => frame_anomaly(&self.ctx, c, a, false, self.max_pending, out),
            }
        }
    }

    /// Frames in progress over all connections are held to `max_partial_bytes` (checked every
    /// BUDGET_EVERY data events, so it may run over by that many segments): past it the largest
    /// are dropped, each a frame_over_budget anomaly and its exchange undecodable, until a quarter
    /// of the budget is free.
    fn hold_budget(&mut self, ts: f64, out: &mut Vec<Item>) {
        self.hold_budget_with(None, ts, out);
    }

    fn hold_budget_with(&mut self, extra: Option<&mut Conn>, ts: f64, out: &mut Vec<Item>) {
        // (buffered, conn id, to_client): connections by id, each its request then its response
        // splitter; the stable sort below keeps that order among equal sizes
        let mut held: Vec<(u64, u64, bool)> = Vec::new();
        let extra_id = extra.as_ref().map(|c| c.id);
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        if let Some(id) = extra_id {
            ids.push(id);
            ids.sort_unstable();
        }
        let mut extra = extra;
        for id in &ids {
            let c: &Conn = if Some(*id) == extra_id {
                extra.as_deref().unwrap()
            } else {
                &self.conns[id]
            };
            if c.state != State::Kafka {
                continue;
            }
            held.push((c.req.as_ref().unwrap().buffered(), *id, false));
            held.push((c.resp.as_ref().unwrap().buffered(), *id, true));
        }
        let mut total: u64 = held.iter().map(|h| h.0).sum();
        if total <= self.max_partial_bytes {
            return;
        }
        let why = format!(
            "frames in progress held {total} bytes, above the {}-byte budget",
            self.max_partial_bytes
        );
        held.sort_by_key(|h| std::cmp::Reverse(h.0)); // largest first
        for (size, id, to_client) in held {
            if total <= self.max_partial_bytes * 3 / 4 {
                break;
            }
            let c: &mut Conn = if Some(id) == extra_id {
                extra.as_deref_mut().unwrap()
            } else {
                self.conns.get_mut(&id).unwrap()
            };
            let mut fo = Vec::new();
            let splitter = if to_client {
                c.resp.as_mut()
            } else {
                c.req.as_mut()
            };
            splitter.unwrap().drop_partial(ts, &why, &mut fo);
            for a in fo {
                frame_anomaly(&self.ctx, c, a, to_client, self.max_pending, out);
            }
            total -= size;
        }
    }

    /// A whole request frame: a raw SASL token, or decoded (topic names learned, error codes
    /// walked, nested payloads expanded); then answered at once (acks=0, or an answer that came
    /// first) or left waiting.
    fn request(&mut self, c: &mut Conn, frame: Bytes, ts: f64, out: &mut Vec<Item>) {
        c.frames[0] += 1;
        if c.sasl_raw {
            let mut framed = Vec::with_capacity(frame.len() + 4);
            framed.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            framed.extend_from_slice(&frame);
            let ok = plausible_request(&self.ctx, &framed, 0, framed.len(), true, HUNT_WINDOW);
            if matches!(ok, Some(Verdict::Yes) | Some(Verdict::Verified)) {
                c.sasl_raw = false;
            } else {
                let size = frame.len();
                c.tokens.push_back(Pending {
                    id: u64::MAX,
                    ts,
                    api_key: None,
                    api_version: None,
                    corr: None,
                    client_id: None,
                    request: Body::Token,
                    size,
                    raw: frame,
                    failed: false,
                    flags: Vec::new(),
                });
                return;
            }
        }
        if frame.len() < 8 {
            out.push(anomaly(
                Some(c.id),
                ts,
                kind::SHORT_REQUEST,
                format!(
                    "{}-byte request frame is shorter than a request header",
                    frame.len()
                ),
            ));
            return;
        }
        let mut flags: Vec<&'static str> = Vec::new();
        let (api_key, version, corr, client_id, body, failed) = match lenient::request(
            &self.ctx.reg,
            &frame,
            true,
        ) {
            Ok(msg) => {
                let mut body = msg.body;
                {
                    let mut names = self.ctx.names.borrow_mut();
                    if msg.api_key == FETCH {
                        internal::learn(false, &body, &frame, &mut names);
                    }
                    decode::walk(
                        &self.ctx.reg,
                        msg.api_key,
                        msg.api_version,
                        Dir::Request,
                        &mut body,
                        None,
                        &mut names,
                    );
                }
                if nested::has_nested(msg.api_key) {
                    nested::expand_request(&self.ctx.reg, &frame, msg.api_key, &mut body);
                }
                if msg.trailing > 0 {
                    let detail = format!(
                            "client: {} v{} request correlation id {} (client id {}): {} bytes left over after the last field",
                            self.ctx.name(msg.api_key),
                            msg.api_version,
                            msg.correlation_id,
                            lenient::py_repr(msg.client_id.as_deref()),
                            msg.trailing
                        );
                    out.push(anomaly(Some(c.id), ts, kind::TRAILING_BYTES, detail));
                    flags.push(kind::TRAILING_BYTES);
                }
                (
                    Some(msg.api_key),
                    Some(msg.api_version),
                    Some(msg.correlation_id),
                    msg.client_id.map(|s| Rc::from(s.as_str())),
                    Body::Native(body),
                    false,
                )
            }
            Err(e) => {
                // the header fields its bytes give, whatever the api (frame is 8 bytes or more)
                let (k, v, corr, client_id) =
                    lenient::peek_request(&frame).unwrap_or((0, 0, 0, None));
                (
                    Some(k),
                    Some(v),
                    Some(corr),
                    client_id.map(|s| Rc::from(s.as_str())),
                    Body::Error(Cow::Owned(e.text)),
                    true,
                )
            }
        };
        let size = frame.len();
        let p = Pending {
            id: u64::MAX,
            ts,
            api_key,
            api_version: version,
            corr,
            client_id,
            request: body,
            size,
            raw: frame,
            failed,
            flags,
        };
        if api_key == Some(PRODUCE) && !failed && body_int(&p.request, "Acks") == Some(0) {
            let it = exchange(&self.ctx, c, p, None, None, None, "ok", Vec::new());
            out.push(it); // acks=0: the broker never answers
            return;
        }
        if !c.early.is_empty() {
            if let Some((ets, eframe)) = early_answer(c, p.corr) {
                return self.answer(c, p, eframe, ets, out);
            }
        }
        add(&self.ctx, c, p, self.max_pending, out);
    }

    /// A whole response frame: the broker's SASL token, or the answer to the oldest request
    /// waiting on its correlation id; else held in case its request comes late.
    fn response(&mut self, c: &mut Conn, frame: Bytes, ts: f64, out: &mut Vec<Item>) {
        c.frames[1] += 1;
        if let Some(p) = c.tokens.pop_front() {
            let it = exchange(
                &self.ctx,
                c,
                p,
                Some(ts),
                Some(Body::Token),
                Some(frame),
                "ok",
                Vec::new(),
            );
            out.push(it);
            return;
        }
        if frame.len() < 4 {
            out.push(anomaly(
                Some(c.id),
                ts,
                kind::SHORT_RESPONSE,
                format!("{}-byte response frame has no correlation id", frame.len()),
            ));
            return;
        }
        let corr = i32_at(&frame, 0);
        let Some(p) = c.take(corr) else {
            // Its request may still come: when the client's direction stalls on a lost segment,
            // TCP delivers the answers first. Keep a few; the rest are orphans.
            c.early_bytes += frame.len();
            c.early.push_back((corr, ts, frame));
            while c.early.len() > MAX_EARLY || c.early_bytes > MAX_EARLY_BYTES {
                let (ecorr, ets, eframe) = c.early.pop_front().unwrap();
                c.early_bytes -= eframe.len();
                out.push(orphan(c, ecorr, ets, eframe));
            }
            return;
        };
        if c.resp_gap {
            lost_before(&self.ctx, c, Some(p.id), ts, out);
        }
        self.answer(c, p, frame, ts, out)
    }

    /// Request `p` answered by `frame`: the answer decoded as the request's version (or the
    /// version it does decode as), an anomaly and a flag for each quirk, the exchange to `out`.
    fn answer(&mut self, c: &mut Conn, p: Pending, frame: Bytes, ts: f64, out: &mut Vec<Item>) {
        let mut status = if p.failed { "undecodable" } else { "ok" };
        let mut flags = p.flags.clone();
        let version: Option<i16>;
        let errors: Vec<i64>;
        let body: Body;
        // a request always has its api key and version here (a failed one's from its bytes)
        let (k, v) = (
            p.api_key.unwrap_or_default(),
            p.api_version.unwrap_or_default(),
        );
        match lenient::response(&self.ctx.reg, &frame, k, v, true) {
            Ok(msg) => {
                let mut b = msg.body;
                let mut errs = Vec::new();
                {
                    let mut names = self.ctx.names.borrow_mut();
                    if k == FETCH {
                        internal::learn(true, &b, &frame, &mut names);
                    }
                    decode::walk(
                        &self.ctx.reg,
                        k,
                        msg.body_version,
                        Dir::Response,
                        &mut b,
                        Some(&mut errs),
                        &mut names,
                    );
                }
                if nested::has_nested(k) {
                    let req = match &p.request {
                        Body::Native(v) => Some((v, &p.raw[..])),
                        _ => None,
                    };
                    nested::expand_response(&self.ctx.reg, &frame, k, req, &mut b);
                }
                if msg.version_mismatch || msg.trailing > 0 {
                    let what = format!(
                        "broker: {} v{v} response correlation id {} (client id {})",
                        self.ctx.name(k),
                        p.corr.unwrap_or_default(),
                        lenient::py_repr(p.client_id.as_deref()),
                    );
                    let mut found = Vec::new();
                    if msg.version_mismatch {
                        let detail = format!(
                            "{what}: the body decodes only as v{}, decoded as that",
                            msg.body_version
                        );
                        found.push((kind::VERSION_MISMATCH, detail));
                    }
                    if msg.trailing > 0 {
                        let detail = format!(
                            "{what}: {} bytes left over after the last field",
                            msg.trailing
                        );
                        found.push((kind::TRAILING_BYTES, detail));
                    }
                    for (f, detail) in found {
                        if !flags.contains(&f) {
                            flags.push(f);
                        }
                        out.push(anomaly(Some(c.id), ts, f, detail));
                    }
                }
                version = Some(msg.body_version);
                errors = errs;
                body = Body::Native(b);
            }
            Err(e) => {
                version = None;
                errors = Vec::new();
                body = Body::Error(Cow::Owned(e.text));
                status = "undecodable";
            }
        }
        if p.api_key == Some(SASL_HANDSHAKE)
            && p.api_version == Some(0)
            && status == "ok"
            && body_int(&body, "ErrorCode") == Some(0)
        {
            c.sasl_raw = true; // v0: the tokens that follow are bare size-prefixed blobs, not Kafka requests
        }
        let it = exchange(
            &self.ctx,
            c,
            p,
            Some(ts),
            Some(body),
            Some(frame),
            status,
            errors,
        );
        if let Item::Exchange(mut ex) = it {
            ex.response_version = version;
            ex.flags = flags;
            out.push(Item::Exchange(ex));
        }
    }

    /// A connection ends: its splitters' last anomalies, held answers as orphans, the requests
    /// still waiting as unanswered, and its connections row when asked for. Of a connection never
    /// recognised as Kafka, only that a hole may have hidden what it was.
    fn close(&self, mut c: Conn, ts: Option<f64>, out: &mut Vec<Item>) {
        if c.state != State::Kafka {
            if !c.probe_gap.is_empty() {
                // a hole took the first bytes that would have told whether this is Kafka: say so, as a
                // Kafka connection that lost its first request would otherwise vanish without a trace
                let t = ts.or(c.last_ts).unwrap_or(0.0);
                out.push(anomaly(
                    Some(c.id),
                    t,
                    kind::UNRECOGNISED_CONNECTION,
                    format!(
                        "{} bytes lost before the connection could be recognised as Kafka or not; \
                                          {} captured bytes not dissected",
                        c.gap_bytes, c.unjudged
                    ),
                ));
            }
            return;
        }
        // None only when no packet was read, and then there is no connection to close
        let fts = ts.unwrap_or(0.0);
        for to_client in [false, true] {
            let mut fo = Vec::new();
            let s = if to_client {
                c.resp.as_mut()
            } else {
                c.req.as_mut()
            };
            s.unwrap().finish(fts, &mut fo);
            for a in fo {
                frame_anomaly(&self.ctx, &mut c, a, to_client, self.max_pending, out);
            }
        }
        for (corr, ets, frame) in std::mem::take(&mut c.early) {
            out.push(orphan(&mut c, corr, ets, frame));
        }
        // unanswered, by time; equal times keep the listing order: waiting requests by their
        // correlation id's insertion, then queue order, then the tokens
        let mut left: Vec<(f64, u8, u64, usize, Pending)> = Vec::new();
        let mut keys: Vec<(u64, i32)> = c.pending.iter().map(|(k, (seq, _))| (*seq, *k)).collect();
        keys.sort_unstable();
        for (seq, k) in keys {
            let (_, q) = c.pending.remove(&k).unwrap();
            for (i, id) in q.into_iter().enumerate() {
                if let Some(p) = c.arena.remove(&id) {
                    left.push((p.ts, 0, seq, i, p));
                }
            }
        }
        for (i, p) in std::mem::take(&mut c.tokens).into_iter().enumerate() {
            left.push((p.ts, 1, 0, i, p));
        }
        left.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        for (_, _, _, _, p) in left {
            let it = exchange(
                &self.ctx,
                &mut c,
                p,
                None,
                None,
                None,
                "unanswered",
                Vec::new(),
            );
            out.push(it);
        }
        c.early_bytes = 0;
        c.order.clear();
        c.arena.clear();
        if self.connections {
            let lb = c.lost_get(&c.client);
            let ls = c.lost_get(&c.server);
            let (gap_b, early_b) = (lb[0], lb[1]);
            let (gap_c, early_c) = (ls[0], ls[1]);
            let req_dropped = c.req.as_ref().unwrap().dropped as i64;
            let resp_dropped = c.resp.as_ref().unwrap().dropped as i64;
            out.push(Item::Connection(Box::new(ConnectionItem {
                connection: c.id,
                client: c.ends.0.clone(),
                broker: c.ends.1.clone(),
                first_ts: c.first_ts,
                last_ts: c.last_ts,
                bytes_to_broker: (c.bytes_in[0] as i64 + early_b) as u64,
                bytes_to_client: (c.bytes_in[1] as i64 + early_c) as u64,
                frames_to_broker: c.frames[0],
                frames_to_client: c.frames[1],
                gaps: c.gaps,
                gap_bytes: c.gap_bytes,
                retransmissions: c.tcp.0,
                out_of_order: c.tcp.1,
                resyncs: c.resyncs,
                client_ids: c.client_ids.clone(),
                detected_by: c.detected_by,
                exchanges: c.exchanges,
                frame_bytes_to_broker: c.frame_bytes[0],
                frame_bytes_to_client: c.frame_bytes[1],
                // the bytes the probe dropped are in the splitters' (skipped_before_start)
                skipped_bytes_to_broker: req_dropped,
                skipped_bytes_to_client: resp_dropped,
                gap_bytes_to_broker: gap_b,
                gap_bytes_to_client: gap_c,
                tls: c.tls.clone(),
            })));
        }
    }
}

/// A broker answers a connection's requests in order, so after a gap in
/// its direction the requests sent before this one that are still waiting had their answers in
/// the lost bytes: say so instead of calling them unanswered.
fn lost_before(ctx: &Ctx, c: &mut Conn, answered: Option<u64>, ts: f64, out: &mut Vec<Item>) {
    c.resp_gap = false;
    while let Some(&id) = c.order.front() {
        if Some(id) == answered {
            break;
        }
        c.order.pop_front();
        let Some(q) = c.arena.remove(&id) else {
            continue;
        }; // done already
        if let Some(corr) = q.corr {
            if let Some((_, dq)) = c.pending.get_mut(&corr) {
                if let Some(i) = dq.iter().position(|x| *x == id) {
                    dq.remove(i);
                }
                if dq.is_empty() {
                    c.pending.remove(&corr);
                }
            }
        }
        let it = exchange(
            ctx,
            c,
            q,
            Some(ts),
            Some(Body::Error(Cow::Borrowed("response lost in a capture gap"))),
            None,
            "undecodable",
            Vec::new(),
        );
        out.push(it);
    }
}

/// The response side's plausible(): a frame whose correlation id a request waits on is taken
/// (decoded first when the registry has that answer, as a correlation id is a weak sign inside
/// record data). Of the others, only a frame at the stream's very first offset (the capture
/// began mid-connection) may answer a request never seen, and only with a correlation id below
/// every waiting one.
// the connection's tables rather than the connection: its splitter is borrowed while this runs
#[allow(clippy::too_many_arguments)]
fn plausible_response(
    ctx: &Ctx,
    pending: &HashMap<i32, (u64, VecDeque<u64>)>,
    arena: &HashMap<u64, Pending>,
    buf: &[u8],
    pos: usize,
    end: usize,
    first: bool,
) -> Option<Verdict> {
    if end - pos < 8 {
        return None;
    }
    let size = i32_at(buf, pos) as i64;
    let corr = i32_at(buf, pos + 4);
    if let Some((_, q)) = pending.get(&corr) {
        if let Some(p) = q.front().and_then(|id| arena.get(id)) {
            // a correlation id is a weak sign inside record data: when the frame is at hand, decode it
            if let (Some(k), Some(v)) = (p.api_key, p.api_version) {
                if ctx.has_response(k, v) {
                    return frame_decodes(ctx, buf, pos, end, size, Some((k, v)), HUNT_WINDOW);
                }
            }
            return Some(Verdict::Yes);
        }
    }
    if !first || corr < 0 {
        return Some(Verdict::No);
    }
    // the capture began mid-connection: the answer to a request we never saw is fine
    let ok = match pending.keys().copied().min() {
        None => true,
        Some(m) => corr < m,
    };
    Some(if ok { Verdict::Yes } else { Verdict::No })
}

/// Request `p` waits for its answer; past `max_pending` waiting, the oldest is given up as
/// unanswered.
fn add(ctx: &Ctx, c: &mut Conn, mut p: Pending, max_pending: usize, out: &mut Vec<Item>) {
    let corr = p.corr.unwrap_or(0);
    let ts = p.ts;
    let id = c.next_id;
    c.next_id += 1;
    p.id = id;
    c.arena.insert(id, p);
    match c.pending.get_mut(&corr) {
        Some((_, q)) => q.push_back(id),
        None => {
            c.key_seq += 1;
            c.pending.insert(corr, (c.key_seq, VecDeque::from([id])));
        }
    }
    c.order.push_back(id);
    while let Some(&front) = c.order.front() {
        if c.arena.contains_key(&front) {
            break;
        }
        c.order.pop_front();
    }
    if c.order.len() > max_pending {
        // a client that is never answered must not grow memory without end: give up on the oldest
        let old_id = c.order.pop_front().unwrap();
        let old = c.arena.remove(&old_id).unwrap();
        let ocorr = old.corr.unwrap_or(0);
        if let Some((_, q)) = c.pending.get_mut(&ocorr) {
            if let Some(i) = q.iter().position(|x| *x == old_id) {
                q.remove(i);
            }
            if q.is_empty() {
                c.pending.remove(&ocorr);
            }
        }
        let it = exchange(ctx, c, old, None, None, None, "unanswered", Vec::new());
        out.push(it);
        out.push(anomaly(
            Some(c.id),
            ts,
            kind::TOO_MANY_OUTSTANDING,
            format!(
                "more than {max_pending} requests awaiting an answer; oldest reported unanswered"
            ),
        ));
    }
}

/// The answer held for `corr`, if it came before its request. (No time check: data TCP held back
/// behind a hole may carry the time it was released, not the time it was sent.)
fn early_answer(c: &mut Conn, corr: Option<i32>) -> Option<(f64, Bytes)> {
    let corr = corr?;
    let i = c.early.iter().position(|(k, _, _)| *k == corr)?;
    let (_, ts, frame) = c.early.remove(i).unwrap();
    c.early_bytes -= frame.len();
    Some((ts, frame))
}

/// An answer whose request was never seen: its body raw after the correlation id.
fn orphan(c: &mut Conn, corr: i32, ts: f64, frame: Bytes) -> Item {
    c.exchanges += 1;
    let size = frame.len();
    Item::Exchange(Box::new(ExchangeItem {
        ts: None,
        response_ts: Some(ts),
        latency_ms: None,
        connection: c.id,
        client: c.ends.0.clone(),
        broker: c.ends.1.clone(),
        api_key: None,
        api_name: Rc::from(""),
        api_version: None,
        correlation_id: Some(corr),
        client_id: None,
        status: "orphan_response",
        error_codes: Vec::new(),
        request: None,
        response: Some(Body::Raw(frame.slice(4..))),
        request_size: None,
        response_size: Some(size),
        request_raw: None,
        response_raw: Some(frame),
        response_version: None,
        flags: Vec::new(),
        tls: c.tls.clone(),
    }))
}

/// x to 3 decimal places: the decimal with 3 places nearest to x's exact binary value (ties to
/// even), read back. Fixed-precision formatting rounds exactly so, where (x * 1000.0).round()
/// would round an inexact product.
pub fn round3(x: f64) -> f64 {
    format!("{x:.3}").parse().unwrap_or(x)
}

/// The exchange of request `p` and its answer (`rts`, `body`, `frame`: None when it has none),
/// counted for its connection, whose row keeps the first 64 client ids.
// what differs between the exchanges built: the answer's parts, the status and error codes
#[allow(clippy::too_many_arguments)]
fn exchange(
    ctx: &Ctx,
    c: &mut Conn,
    p: Pending,
    rts: Option<f64>,
    body: Option<Body>,
    frame: Option<Bytes>,
    status: &'static str,
    errors: Vec<i64>,
) -> Item {
    c.exchanges += 1;
    if let Some(id) = &p.client_id {
        if c.client_ids.len() < 64 && !c.client_ids.contains(id) {
            c.client_ids.push(id.clone());
        }
    }
    let name = match p.api_key {
        None => Rc::from("SaslToken"),
        Some(k) => ctx.name(k),
    };
    let latency = rts.map(|r| round3((r - p.ts) * 1000.0));
    Item::Exchange(Box::new(ExchangeItem {
        ts: Some(p.ts),
        response_ts: rts,
        latency_ms: latency,
        connection: c.id,
        client: c.ends.0.clone(),
        broker: c.ends.1.clone(),
        api_key: p.api_key,
        api_name: name,
        api_version: p.api_version,
        correlation_id: p.corr,
        client_id: p.client_id,
        status,
        error_codes: errors,
        request: Some(p.request),
        response: body,
        request_size: Some(p.size),
        response_size: frame.as_ref().map(|f| f.len()),
        request_raw: Some(p.raw),
        response_raw: frame,
        response_version: None,
        flags: Vec::new(), // only an answered exchange carries its findings (answer() sets them)
        tls: c.tls.clone(),
    }))
}

/// The body's top-level field `key` when it is an integer (None for a body not decoded)
fn body_int(body: &Body, key: &str) -> Option<i64> {
    match body {
        Body::Native(v) => decode::field_int(v, key),
        _ => None,
    }
}

/// A splitter's anomaly as an item, its detail naming the frame's header. A response lost or cut
/// off answers its request as undecodable; a request lost in a gap or dropped over the budget
/// keeps its place, so that its answer still pairs.
fn frame_anomaly(
    ctx: &Ctx,
    c: &mut Conn,
    a: FrameOut,
    to_client: bool,
    max_pending: usize,
    out: &mut Vec<Item>,
) {
    let FrameOut::Anomaly {
        ts,
        kind,
        detail,
        head,
    } = a
    else {
        return;
    };
    if kind == kind::RESYNC {
        c.resyncs += 1;
    }
    let mut detail = detail;
    if to_client && head.len() >= 4 {
        let corr = i32_at(&head, 0);
        detail = format!("response correlation id {corr}: {detail}");
        let lost = match kind {
            kind::GAP_IN_FRAME => Some("response lost in a capture gap"),
            kind::TRUNCATED_FRAME => Some("response cut off where the capture ends"),
            kind::FRAME_OVER_BUDGET => {
                Some("response dropped: partial frames above the memory budget")
            }
            _ => None,
        };
        if let Some(why) = lost {
            if let Some(p) = c.take(corr) {
                let it = exchange(
                    ctx,
                    c,
                    p,
                    Some(ts),
                    Some(Body::Error(Cow::Borrowed(why))),
                    None,
                    "undecodable",
                    Vec::new(),
                );
                out.push(it);
            }
        }
    } else if !to_client && head.len() >= 8 {
        let mut h = head.to_vec();
        h.extend_from_slice(b"\0\0");
        let (api_key, version, corr) = (i16_at(&h, 0), i16_at(&h, 2), i32_at(&h, 4));
        detail = format!(
            "{} v{} request correlation id {}: {}",
            ctx.name(api_key),
            version,
            corr,
            detail
        );
        let keep = match kind {
            kind::GAP_IN_FRAME => Some("request lost in a capture gap"),
            kind::FRAME_OVER_BUDGET => {
                Some("request dropped: partial frames above the memory budget")
            }
            _ => None,
        };
        if let Some(why) = keep {
            // keep its place so the answer still pairs and decodes
            let p = Pending {
                id: u64::MAX,
                ts,
                api_key: Some(api_key),
                api_version: Some(version),
                corr: Some(corr),
                client_id: None,
                request: Body::Error(Cow::Borrowed(why)),
                size: 0,
                raw: Bytes::new(),
                failed: true,
                flags: Vec::new(),
            };
            add(ctx, c, p, max_pending, out);
        }
    }
    let who = if to_client { "broker" } else { "client" };
    out.push(anomaly(Some(c.id), ts, kind, format!("{who}: {detail}")));
}

// -- carried between land runs (carry.rs) ----------------------------------------------
// Every open connection whole: roles, framing state with its unframed bytes, unanswered
// requests (decoded bodies, times, flags), early answers, the probe's chunks, and the counters
// its connections row is made of.

use crate::carry::{Dec, Enc, R};

fn put_body(e: &mut Enc, b: &Body) {
    match b {
        Body::Native(v) => {
            e.u8(0);
            decode::put_value(e, v);
        }
        Body::Error(t) => {
            e.u8(2);
            e.str(t);
        }
        Body::Raw(b) => {
            e.u8(3);
            e.bytes(b);
        }
        Body::Token => e.u8(4),
    }
}

/// `raw`: the request's frame (a state of an older kafkawire may ask to decode it again).
fn get_body(ctx: &Ctx, d: &mut Dec<'_>, raw: &Bytes) -> R<Body> {
    Ok(match d.u8()? {
        0 => Body::Native(decode::get_value(d)?),
        // carried by an older kafkawire, whose state left this body out (it was decoded outside
        // the core): decoded again from the request's frame
        1 => match lenient::request(&ctx.reg, raw, true) {
            Ok(msg) => Body::Native(msg.body),
            Err(e) => Body::Error(Cow::Owned(e.text)),
        },
        2 => Body::Error(Cow::Owned(d.string()?)),
        3 => Body::Raw(d.bytes()?),
        4 => Body::Token,
        _ => {
            return Err(crate::carry::Damaged(
                "carried state is damaged (body)".into(),
            ))
        }
    })
}

fn put_pending(e: &mut Enc, p: &Pending) {
    e.u64(p.id);
    e.f64(p.ts);
    e.opt(&p.api_key, |e, v| e.i16(*v));
    e.opt(&p.api_version, |e, v| e.i16(*v));
    e.opt(&p.corr, |e, v| e.i32(*v));
    e.opt(&p.client_id, |e, v| e.str(v));
    e.bytes(&p.raw);
    put_body(e, &p.request);
    e.usize(p.size);
    e.bool(p.failed);
    e.seq(p.flags.iter(), |e, f| e.str(f));
}

fn get_pending(ctx: &Ctx, d: &mut Dec<'_>) -> R<Pending> {
    let id = d.u64()?;
    let ts = d.f64()?;
    let api_key = d.opt(|d| d.i16())?;
    let api_version = d.opt(|d| d.i16())?;
    let corr = d.opt(|d| d.i32())?;
    let client_id = d.opt(|d| d.rc())?;
    let raw = d.bytes()?;
    let request = get_body(ctx, d, &raw)?;
    Ok(Pending {
        id,
        ts,
        api_key,
        api_version,
        corr,
        client_id,
        request,
        size: d.usize()?,
        raw,
        failed: d.bool()?,
        flags: d.vec(|d| d.stat())?,
    })
}

fn put_conn(e: &mut Enc, c: &Conn) {
    e.u64(c.id);
    e.bool(c.syn);
    e.opt(&c.client, |e, a| e.addr(a));
    e.opt(&c.server, |e, a| e.addr(a));
    e.str(&c.ends.0);
    e.str(&c.ends.1);
    e.u8(match c.state {
        State::Probe => 0,
        State::Kafka => 1,
        State::Ignored => 2,
    });
    e.opt(&c.req, |e, s| s.carry(e));
    e.opt(&c.resp, |e, s| s.carry(e));
    let mut pending: Vec<_> = c.pending.iter().collect();
    pending.sort_by_key(|(corr, (seq, _))| (*seq, **corr));
    e.usize(pending.len());
    for (corr, (seq, q)) in pending {
        e.i32(*corr);
        e.u64(*seq);
        e.seq(q.iter(), |e, id| e.u64(*id));
    }
    e.u64(c.key_seq);
    let mut arena: Vec<_> = c.arena.values().collect();
    arena.sort_by_key(|p| p.id);
    e.usize(arena.len());
    for p in arena {
        put_pending(e, p);
    }
    e.u64(c.next_id);
    // answered ids leave `order` lazily: only those still in the arena matter
    let order: Vec<u64> = c
        .order
        .iter()
        .copied()
        .filter(|id| c.arena.contains_key(id))
        .collect();
    e.seq(order.iter(), |e, id| e.u64(*id));
    e.usize(c.tokens.len());
    for p in &c.tokens {
        put_pending(e, p);
    }
    e.seq(c.early.iter(), |e, (corr, ts, b)| {
        e.i32(*corr);
        e.f64(*ts);
        e.bytes(b);
    });
    e.usize(c.early_bytes);
    e.bool(c.resp_gap);
    e.bool(c.sasl_raw);
    e.seq(c.probe.iter(), |e, (a, chunks)| {
        e.addr(a);
        e.seq(chunks.iter(), |e, (ts, b)| {
            e.f64(*ts);
            e.bytes(b);
        });
    });
    e.seq(c.probe_gap.iter(), |e, a| e.addr(a));
    e.seq(c.not_client.iter(), |e, a| e.addr(a));
    e.opt_f64(c.first_ts);
    e.opt_f64(c.last_ts);
    for i in 0..2 {
        e.u64(c.bytes_in[i]);
        e.u64(c.frames[i]);
        e.u64(c.frame_bytes[i]);
    }
    e.seq(c.lost.iter(), |e, (a, v)| {
        e.addr(a);
        e.i64(v[0]);
        e.i64(v[1]);
    });
    e.u64(c.gaps);
    e.i64(c.gap_bytes);
    e.u64(c.resyncs);
    e.seq(c.client_ids.iter(), |e, s| e.str(s));
    e.str(c.detected_by);
    e.u64(c.exchanges);
    e.u64(c.tcp.0);
    e.u64(c.tcp.1);
    e.u64(c.unjudged);
    e.opt(&c.tls, |e, f| f.carry(e));
}

fn get_conn(ctx: &Ctx, d: &mut Dec<'_>) -> R<Conn> {
    let id = d.u64()?;
    let syn = d.bool()?;
    let client = d.opt(|d| d.addr())?;
    let server = d.opt(|d| d.addr())?;
    let mut c = Conn::new(id, syn, client, server, None);
    c.ends = (d.rc()?, d.rc()?);
    c.state = match d.u8()? {
        0 => State::Probe,
        1 => State::Kafka,
        _ => State::Ignored,
    };
    c.req = d.opt(FrameSplitter::restore)?;
    c.resp = d.opt(FrameSplitter::restore)?;
    let n = d.usize()?;
    for _ in 0..n {
        let corr = d.i32()?;
        let seq = d.u64()?;
        let q = d.deque(|d| d.u64())?;
        c.pending.insert(corr, (seq, q));
    }
    c.key_seq = d.u64()?;
    let n = d.usize()?;
    for _ in 0..n {
        let p = get_pending(ctx, d)?;
        c.arena.insert(p.id, p);
    }
    c.next_id = d.u64()?;
    c.order = d.deque(|d| d.u64())?;
    let n = d.usize()?;
    for _ in 0..n {
        c.tokens.push_back(get_pending(ctx, d)?);
    }
    c.early = d.deque(|d| Ok((d.i32()?, d.f64()?, d.bytes()?)))?;
    c.early_bytes = d.usize()?;
    c.resp_gap = d.bool()?;
    c.sasl_raw = d.bool()?;
    c.probe = d.vec(|d| Ok((d.addr()?, d.vec(|d| Ok((d.f64()?, d.bytes()?)))?)))?;
    c.probe_gap = d.vec(|d| d.addr())?;
    c.not_client = d.vec(|d| d.addr())?;
    c.first_ts = d.opt_f64()?;
    c.last_ts = d.opt_f64()?;
    for i in 0..2 {
        c.bytes_in[i] = d.u64()?;
        c.frames[i] = d.u64()?;
        c.frame_bytes[i] = d.u64()?;
    }
    c.lost = d.vec(|d| Ok((d.addr()?, [d.i64()?, d.i64()?])))?;
    c.gaps = d.u64()?;
    c.gap_bytes = d.i64()?;
    c.resyncs = d.u64()?;
    c.client_ids = d.vec(|d| d.rc())?;
    c.detected_by = d.stat()?;
    c.exchanges = d.u64()?;
    c.tcp = (d.u64()?, d.u64()?);
    c.unjudged = d.u64()?;
    c.tls = d.opt(|d| Facts::restore(d))?.map(Rc::new);
    Ok(c)
}

impl Exchanges {
    /// The registry its frames are decoded with.
    pub fn registry(&self) -> &Registry {
        &self.ctx.reg
    }

    /// Ids of the connections still open.
    pub fn open_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.conns.keys().copied()
    }

    /// The requests awaiting their answer now: (api name, client id, broker, request time) each, at
    /// most `limit` of them (a live view's "in flight").
    pub fn in_flight(&self, limit: usize) -> Vec<Waiting> {
        let mut out = Vec::new();
        for c in self.conns.values() {
            for p in c.arena.values() {
                if out.len() >= limit {
                    return out;
                }
                let name = match p.api_key {
                    None => Rc::from("SaslToken"),
                    Some(k) => self.ctx.name(k),
                };
                out.push((name, p.client_id.clone(), c.ends.1.clone(), p.ts));
            }
        }
        out
    }

    pub fn carry(&self, e: &mut Enc) {
        e.u64(self.fed);
        // the names first: a request body decoded again on restore is walked with them
        self.ctx.names.borrow().carry(e);
        e.usize(self.conns.len());
        for c in self.conns.values() {
            put_conn(e, c);
        }
    }

    pub fn restore(&mut self, d: &mut Dec<'_>) -> R<()> {
        self.fed = d.u64()?;
        self.ctx.names.borrow_mut().restore(d)?;
        let n = d.usize()?;
        for _ in 0..n {
            let c = get_conn(&self.ctx, d)?;
            self.conns.insert(c.id, Box::new(c));
        }
        Ok(())
    }
}
