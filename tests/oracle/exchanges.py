"""The Python pipeline's exchanges layer, frozen as a test oracle (see tests/oracle/__init__.py).

Per connection: who is the client, which frames pair up, what they decode to.

Feed it the events of dissector.tcp (Open/Data/Gap/Close/StreamAnomaly); it
returns `Exchange` and `Anomaly` objects as they complete: an exchange when its
response arrives (or at once for Produce with acks=0); unanswered requests and
orphan responses when their connection closes (a response whose request has not
been seen is held until then, bounded, in case TCP delivers the request late).

Choices worth knowing (they show in the output):
- client side: the SYN sender; else the end not on a Kafka port (9092 + `ports`);
  else the side whose first bytes are a plausible Kafka request. Connections that
  fail that test are ignored silently (they are not Kafka).
- `ts` of a frame is the capture time of the packet holding its first byte, so
  `latency_ms` is first request byte -> first response byte.
- request_size/response_size are frame sizes without the 4-byte prefix.
- a decode failure is kept in the body as {"_decode_error": message}; an orphan
  response body is {"_raw_body": bytes} (its header is decoded).
- capture loss: a request whose answer was (partly) lost is "undecodable" with
  {"_decode_error": "response lost in a capture gap"}: known when the gap cuts the
  answer, or when a later answer arrives (brokers answer a connection in order).
  A request cut by a gap keeps its place (api/version from its header), so its
  answer still pairs and decodes. Resync after a gap only accepts a boundary whose
  frame decodes (as a request, or as the answer to a waiting request).
- after a SaslHandshake v0 exchange the client's raw SASL tokens (and the
  broker's answers) are exchanges with api_name "SaslToken", api_key/version/
  correlation_id None, bodies {"token": bytes}.
- topic ids are resolved from the (TopicId, Name) pairs of every response seen
  so far (Metadata, CreateTopics, ...): a dict that has "TopicId" but no "Name"
  gets "TopicName" (None if unknown) inserted right after "TopicId".
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from uuid import UUID

import protocol
from dissector.anomalies import AnomalyKind
from dissector.native import metadata_topic_names
from dissector import items as _items
from tests.lenient_reference import VERSIONS, decode_request, decode_response
from tests.oracle.nested import expand
from tests.oracle.frames import DEFAULT_MAX_FRAME_SIZE, HUNT_WINDOW, VERIFIED, FrameAnomaly, FrameSplitter

__all__ = [
    "Exchange",
    "Anomaly",
    "Connection",
    "Exchanges",
    "KAFKA_PORT",
    "plausible_request",
    "decode_request",
    "decode_response",
]

KAFKA_PORT = 9092
PRODUCE, SASL_HANDSHAKE = 0, 17
_REQ_HEAD = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length
_PEEK = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")
_ZERO_UUID = UUID(int=0)
_TRAILING = ("trailing_bytes",)
_LOST = {
    AnomalyKind.GAP_IN_FRAME: "response lost in a capture gap",
    AnomalyKind.TRUNCATED_FRAME: "response cut off where the capture ends",
    AnomalyKind.FRAME_OVER_BUDGET: "response dropped: partial frames above the memory budget",
}
_KEEP_PLACE = {
    AnomalyKind.GAP_IN_FRAME: "request lost in a capture gap",
    AnomalyKind.FRAME_OVER_BUDGET: "request dropped: partial frames above the memory budget",
}
MAX_PARTIAL_BYTES = 256 << 20  # frames in progress over all connections (see Exchanges)
_BUDGET_EVERY = 256  # Data events between two checks of that budget
_PROBE_LIMIT = 64 << 10
_MAX_EARLY = 4096  # responses held per connection waiting for a late request ...
_MAX_EARLY_BYTES = (
    16 << 20
)  # ... as many as TCP reassembly may hold back of the other direction   # bytes kept per direction while deciding whether a connection is Kafka


# -- plausibility -------------------------------------------------------------


def _positional(cls):
    """The oracle builds items positionally, as it always did; the shipped classes are keyword-only."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(cls)]
    return lambda *args, **kw: cls(**dict(zip(names, args, strict=False)), **kw)


Exchange, Anomaly, Connection = (_positional(c) for c in (_items.Exchange, _items.Anomaly, _items.Connection))
_VERSIONS = VERSIONS


def plausible_request(buf, pos: int, end: int, strict: bool = True, window: int = HUNT_WINDOW):
    """Does buf[pos:] start with a sane size-prefixed request header? None = need more bytes.

    strict=False is for the first bytes after a SYN, where the boundary is certain
    and the only question is "is this Kafka": any version of a known api key passes
    (clients send ApiVersions versions newer than any registry) and the body is not decoded.
    Strict: the frame must decode; one of up to `window` bytes is waited for, a bigger
    one is judged by what its first bytes decode to.
    """
    if end - pos < 14:
        return None
    size, api_key, version, corr, n = _REQ_HEAD.unpack_from(buf, pos)
    rng = _VERSIONS.get(api_key)
    if rng is None or corr < 0 or n < -1 or n > 1024 or size < 10 + max(n, 0):
        return False
    if strict and not rng[0] <= version <= rng[1] or version < 0:
        return False
    if n > 0:
        if end - pos < 14 + n:
            return None
        start = pos + 14
        for c in buf[start : start + n]:
            if c < 0x20 or c > 0x7E:
                return False
    if not strict:
        return True
    return _frame_decodes(buf, pos, end, size, None, window)


def _frame_decodes(buf, pos: int, end: int, size: int, pending, window: int):
    """The last word on a candidate boundary: does the frame decode (as a request, or
    as the answer to `pending`)? True/False, or None to wait for the rest of it."""
    import protocol

    whole = end - pos >= 4 + size
    if not whole and size + 4 <= window:
        return None
    frame = bytes(buf[pos + 4 : pos + 4 + size])  # a copy: buf may be a bytearray that must stay resizable
    try:
        if pending is None:
            protocol.decode_request(frame)
        else:
            protocol.decode_response(frame, pending.api_key, pending.api_version)
    except protocol.DecodeError as e:
        # a frame too big to wait for: its first bytes must decode up to where they stop
        return not whole and ("past the end" in e.reason or "ends in the middle" in e.reason)
    return VERIFIED if whole else True


def _endpoint(addr: tuple) -> str:
    ip, port = addr[0], addr[1]
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


# -- decoding a frame ---------------------------------------------------------


# -- per connection ------------------------------------------------------------


_FETCH = 1
_METADATA_TOPIC = "__cluster_metadata"
_METADATA_TOPIC_ID = UUID(int=1)  # KRaft's fixed id for it


def _learn_metadata_log(frame, answers, names: dict) -> None:
    """Before a Fetch is walked (native/src/internal.rs' learn): a Fetch of KRaft's metadata log
    names its fixed topic id, and its answer's TopicRecords name the topics they create."""
    if len(frame) < 8 or (answers is None and struct.unpack_from(">h", frame)[0] != _FETCH):
        return
    if answers is not None and answers[0] != _FETCH:
        return
    try:
        if answers is None:
            body = protocol.decode_request(frame, lenient=True).body
        else:
            body = protocol.decode_response(frame, *answers, lenient=True).body
    except protocol.DecodeError:
        return
    topics = body.get("Topics" if answers is None else "Responses") or []
    for t in topics:
        if t.get("TopicId") != _METADATA_TOPIC_ID and t.get("Topic") != _METADATA_TOPIC:
            continue
        names.setdefault(_METADATA_TOPIC_ID, _METADATA_TOPIC)
        for part in t.get("Partitions") or () if answers is not None else ():
            if part.get("Records"):
                for raw, name in metadata_topic_names(bytes(part["Records"])):
                    names[UUID(bytes=raw)] = name


@dataclass(slots=True)
class _Pending:
    ts: float
    api_key: int | None
    api_version: int | None
    corr: int | None
    client_id: str | None
    request: dict | None
    size: int
    raw: bytes
    failed: bool
    flags: tuple = ()
    done: bool = False


@dataclass(slots=True)
class _Conn:
    id: int
    syn: bool
    client: tuple | None = None
    server: tuple | None = None
    ends: tuple = ("", "")  # client, server as text (set when the roles are known)
    state: str = "probe"  # probe -> kafka | ignored
    req: FrameSplitter | None = None
    resp: FrameSplitter | None = None
    pending: dict = field(default_factory=dict)  # corr id -> deque[_Pending], oldest first
    order: deque = field(default_factory=deque)  # pending requests in arrival order (answered ones leave lazily)
    tokens: deque = field(default_factory=deque)  # raw SASL tokens awaiting the broker's token
    early: deque = field(default_factory=deque)  # (corr, ts, frame): responses whose request is not here (yet)
    early_bytes: int = 0
    resp_gap: bool = False  # the broker's direction lost bytes since the last answer
    sasl_raw: bool = False
    probe: dict = field(default_factory=dict)  # sender -> [chunks] while deciding
    probe_gap: set = field(default_factory=set)  # senders that lost bytes while probing
    not_client: set = field(default_factory=set)  # senders whose first bytes are not a request
    # accounting for the Connection item
    first_ts: float | None = None
    last_ts: float | None = None
    bytes_in: list = field(default_factory=lambda: [0, 0])  # to broker, to client
    frames: list = field(default_factory=lambda: [0, 0])
    frame_bytes: list = field(default_factory=lambda: [0, 0])
    lost: dict = field(default_factory=dict)  # sender -> [gap bytes, bytes dropped before the roles were known]
    gaps: int = 0
    gap_bytes: int = 0
    resyncs: int = 0
    client_ids: dict = field(default_factory=dict)
    detected_by: str = ""
    exchanges: int = 0
    tcp: tuple = (0, 0)  # retransmissions, out-of-order segments
    unjudged: int = 0  # bytes seen before the connection was recognised as Kafka


class Exchanges:
    def __init__(
        self,
        *,
        ports=(),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending: int = 10000,
        connections: bool = False,
        max_partial_bytes: int = MAX_PARTIAL_BYTES,
    ):
        import protocol

        self._protocol = protocol
        self._name = protocol.registry.api_name
        self._has_response = lru_cache(maxsize=None)(lambda k, v: protocol.registry.has(k, v, "response"))
        self.ports = frozenset((KAFKA_PORT, *ports))
        self.max_frame_size = max_frame_size
        self.max_pending = max_pending  # per connection
        self.connections = connections  # give a Connection item as each Kafka connection closes
        # Memory: one frame may be up to max_frame_size, but frames in progress over all connections
        # together are held to max_partial_bytes (checked every _BUDGET_EVERY Data events, so it may
        # run over by that many segments): past it the largest are dropped, each an anomaly
        # "frame_over_budget" and its exchange undecodable, until a quarter of the budget is free.
        self.max_partial_bytes = max_partial_bytes
        self._fed = 0
        self._conns: dict[int, _Conn] = {}
        self.topic_names: dict[UUID, str] = {}

    # -- events ----------------------------------------------------------------

    def feed(self, ev) -> list:
        kind = type(ev).__name__
        out: list = []
        if kind == "Data":
            c = self._conns.get(ev.conn) or self._open(ev.conn, False, None, None, ev.ts)
            c.last_ts = ev.ts
            if c.state == "kafka":
                self._data(c, ev.sender, ev.data, ev.ts, out)
            else:
                c.unjudged += len(ev.data)
                if c.state == "probe":
                    self._probe(c, ev.sender, ev.receiver, ev.data, ev.ts, out)
        elif kind == "Gap":
            c = self._conns.get(ev.conn) or self._open(ev.conn, False, None, None, ev.ts)
            c.gaps += 1
            c.gap_bytes += ev.size
            c.lost.setdefault(ev.sender, [0, 0])[0] += ev.size
            if c.state == "kafka":
                to_client = ev.sender == c.server
                c.resp_gap |= to_client
                splitter = c.resp if to_client else c.req
                for a in splitter.gap(ev.size, ev.ts):
                    self._frame_anomaly(c, a, to_client, out)
            elif c.state == "probe":
                dropped = c.probe.pop(ev.sender, ())
                if dropped:
                    c.lost.setdefault(ev.sender, [0, 0])[1] += sum(len(d) for _, d in dropped)
                c.probe_gap.add(ev.sender)
        elif kind == "Open":
            self._open(ev.conn, ev.syn_seen, ev.client, ev.server, ev.ts)
        elif kind == "Close":
            c = self._conns.pop(ev.conn, None)
            if c is not None:
                c.tcp = (ev.retransmissions, ev.out_of_order)
                if ev.reason != "end_of_capture":
                    c.last_ts = ev.ts
                self._close(c, ev.ts, out)
        elif kind == "StreamAnomaly":
            c = self._conns.get(ev.conn)
            if c is None or c.state != "ignored":
                out.append(Anomaly(ev.conn, ev.ts, ev.kind, ev.detail))
        elif kind == "CaptureAnomaly":
            out.append(Anomaly(None, ev.ts, ev.kind, ev.detail))
        return out

    def finish(self, ts: float | None = None) -> list:
        out: list = []
        for c in list(self._conns.values()):
            self._close(c, ts, out)
        self._conns.clear()
        return out

    def oldest_open(self) -> float | None:
        """The earliest time an item not yet returned may carry: a request awaiting its
        answer, a frame half received, a response waiting for its request, bytes kept
        while deciding whether a connection is Kafka. None when nothing is open."""
        oldest = None
        for c in self._conns.values():
            if c.state == "kafka":
                order = c.order
                while order and order[0].done:
                    order.popleft()
                times = [order[0].ts] if order else []
                if c.tokens:
                    times.append(c.tokens[0].ts)
                if c.early:
                    times.append(c.early[0][1])
                for splitter in (c.req, c.resp):
                    t = splitter.partial_ts
                    if t is not None:
                        times.append(t)
            elif c.state == "probe" and c.probe:
                times = [t for chunks in c.probe.values() for t, _ in chunks]
            else:
                continue
            if times:
                t = min(times)
                if oldest is None or t < oldest:
                    oldest = t
        return oldest

    # -- connection roles ------------------------------------------------------

    def _open(self, conn: int, syn: bool, client, server, ts: float | None = None) -> _Conn:
        c = _Conn(conn, syn, client, server, first_ts=ts, last_ts=ts)
        self._conns[conn] = c
        if syn and server is not None and server[1] in self.ports:
            self._start(c, c.client, c.server, how="syn_port")
        return c

    def _start(
        self,
        c: _Conn,
        client: tuple,
        server: tuple,
        hunt_req: bool = False,
        hunt_resp: bool = False,
        how: str = "heuristic",
    ) -> None:
        c.client, c.server, c.state, c.detected_by = client, server, "kafka", how
        c.ends = (_endpoint(client), _endpoint(server))
        mid = not c.syn
        c.req = FrameSplitter(
            plausible_request, max_frame_size=self.max_frame_size, min_frame_size=8, hunting=mid or hunt_req
        )
        c.resp = FrameSplitter(
            lambda buf, pos, end: self._plausible_response(c, buf, pos, end, False),
            max_frame_size=self.max_frame_size,
            min_frame_size=4,
            hunting=mid or hunt_resp,
            plausible_first=lambda buf, pos, end: self._plausible_response(c, buf, pos, end, True),
        )

    def _probe(self, c: _Conn, sender, receiver, data: bytes, ts: float, out: list) -> None:
        if not c.syn:
            if receiver[1] in self.ports and sender[1] not in self.ports:
                self._start(c, sender, receiver, how="port")
                self._data(c, sender, data, ts, out)
                return
            if sender[1] in self.ports and receiver[1] not in self.ports:
                self._start(c, receiver, sender, how="port")
                self._data(c, sender, data, ts, out)
                return
        chunks = c.probe.setdefault(sender, [])
        chunks.append((ts, data))
        if c.syn and sender != c.client:
            if sum(len(d) for _, d in chunks) > _PROBE_LIMIT:
                c.state = "ignored"  # a server that talks first is not a Kafka broker
            return
        if sender in c.not_client:
            if sum(len(d) for _, d in chunks) > _PROBE_LIMIT:
                c.lost.setdefault(sender, [0, 0])[1] += len(chunks.pop(0)[1])
            return
        head = chunks[0][1] if len(chunks) == 1 else b"".join(d for _, d in chunks)
        # without a SYN, wait for the whole first frame (up to _PROBE_LIMIT) so that it must decode:
        # a broker's answer read as a request often has a sane-looking header
        verdict = sender not in c.probe_gap and plausible_request(
            head, 0, len(head), strict=not c.syn, window=_PROBE_LIMIT
        )
        if verdict is None and len(head) > _PROBE_LIMIT:
            verdict = False
        if verdict is None:
            return
        if not verdict:
            if c.syn:
                c.state = "ignored"
                return
            c.not_client.add(sender)
            if len(c.not_client) == 2:
                c.state = "ignored"
            return
        # sender is the client: replay what both sides said so far
        self._start(c, sender, receiver, hunt_resp=receiver in c.probe_gap)
        probe, c.probe = c.probe, {}
        for who in (receiver, sender):
            for t, d in probe.get(who, ()):
                self._data(c, who, d, t, out)

    # -- frames ------------------------------------------------------------------

    def _data(self, c: _Conn, sender, data: bytes, ts: float, out: list) -> None:
        self._fed += 1
        if not self._fed % _BUDGET_EVERY:
            self._hold_budget(ts, out)
        if sender == c.client:
            c.bytes_in[0] += len(data)
            for f in c.req.feed(data, ts):
                if type(f) is FrameAnomaly:
                    self._frame_anomaly(c, f, False, out)
                else:
                    c.frame_bytes[0] += 4 + len(f.data)
                    self._request(c, f.data, f.ts, out)
        else:
            c.bytes_in[1] += len(data)
            for f in c.resp.feed(data, ts):
                if type(f) is FrameAnomaly:
                    self._frame_anomaly(c, f, True, out)
                else:
                    c.frame_bytes[1] += 4 + len(f.data)
                    self._response(c, f.data, f.ts, out)

    def _hold_budget(self, ts: float, out: list) -> None:
        held = [
            (s.buffered, c, s is c.resp, s) for c in self._conns.values() if c.state == "kafka" for s in (c.req, c.resp)
        ]
        total = sum(h[0] for h in held)
        if total <= self.max_partial_bytes:
            return
        why = f"frames in progress held {total} bytes, above the {self.max_partial_bytes}-byte budget"
        held.sort(key=lambda h: h[0], reverse=True)
        for size, c, to_client, splitter in held:
            if total <= self.max_partial_bytes * 3 // 4:
                break
            for a in splitter.drop(ts, why):
                self._frame_anomaly(c, a, to_client, out)
            total -= size

    def _plausible_response(self, c: _Conn, buf, pos: int, end: int, first: bool):
        if end - pos < 8:
            return None
        size, corr = _SIZE_CORR.unpack_from(buf, pos)
        q = c.pending.get(corr)
        if q:
            # a correlation id is a weak sign inside record data: when the frame is at hand, decode it
            p = q[0]
            if p.api_key is not None and self._has_response(p.api_key, p.api_version):
                return _frame_decodes(buf, pos, end, size, p, HUNT_WINDOW)
            return True
        if not first or corr < 0:
            return False
        # the capture began mid-connection: the answer to a request we never saw is fine
        return not c.pending or corr < min(c.pending)

    def _request(self, c: _Conn, frame: bytes, ts: float, out: list) -> None:
        c.frames[0] += 1
        if c.sasl_raw:
            if plausible_request(len(frame).to_bytes(4, "big") + frame, 0, len(frame) + 4):
                c.sasl_raw = False
            else:
                c.tokens.append(_Pending(ts, None, None, None, None, {"token": frame}, len(frame), frame, False))
                return
        if len(frame) < 8:
            out.append(
                Anomaly(
                    c.id,
                    ts,
                    AnomalyKind.SHORT_REQUEST,
                    f"{len(frame)}-byte request frame is shorter than a request header",
                )
            )
            return
        _learn_metadata_log(frame, None, self.topic_names)
        api_key, version, corr, client_id, body, failed, trailing = decode_request(frame, self.topic_names)
        if not failed and trailing is None:  # the core decodes nested payloads of what it decoded itself
            expand(api_key, "request", body)
        flags = ()
        if trailing is not None:
            flags = _TRAILING
            out.append(Anomaly(c.id, ts, AnomalyKind.TRAILING_BYTES, trailing))
        p = _Pending(ts, api_key, version, corr, client_id, body, len(frame), frame, failed, flags)
        if api_key == PRODUCE and not failed and body.get("Acks") == 0:
            out.append(self._exchange(c, p, None, None, None, "ok", []))  # acks=0: the broker never answers
            return
        if c.early:
            early = self._early_answer(c, p)
            if early is not None:
                self._answer(c, p, early[1], early[0], out)
                return
        self._add(c, p, out)

    def _add(self, c: _Conn, p: _Pending, out: list) -> None:
        q = c.pending.get(p.corr)
        if q is None:
            c.pending[p.corr] = q = deque()
        q.append(p)
        order = c.order
        order.append(p)
        while order and order[0].done:
            order.popleft()
        if len(order) > self.max_pending:
            # a client that is never answered must not grow memory without end: give up on the oldest
            old = order.popleft()
            q = c.pending[old.corr]
            q.remove(old)
            if not q:
                del c.pending[old.corr]
            out.append(self._exchange(c, old, None, None, None, "unanswered", []))
            out.append(
                Anomaly(
                    c.id,
                    p.ts,
                    AnomalyKind.TOO_MANY_OUTSTANDING,
                    f"more than {self.max_pending} requests awaiting an answer; oldest reported unanswered",
                )
            )

    def _take(self, c: _Conn, corr: int) -> _Pending | None:
        q = c.pending.get(corr)
        if not q:
            return None
        p = q.popleft()
        p.done = True
        if not q:
            del c.pending[corr]
        return p

    def _response(self, c: _Conn, frame: bytes, ts: float, out: list) -> None:
        c.frames[1] += 1
        if c.tokens:
            p = c.tokens.popleft()
            out.append(self._exchange(c, p, ts, {"token": frame}, frame, "ok", []))
            return
        if len(frame) < 4:
            out.append(
                Anomaly(c.id, ts, AnomalyKind.SHORT_RESPONSE, f"{len(frame)}-byte response frame has no correlation id")
            )
            return
        corr = _I32.unpack_from(frame, 0)[0]
        p = self._take(c, corr)
        if p is None:
            # Its request may still come: when the client's direction stalls on a lost segment,
            # TCP delivers the answers first. Keep a few; the rest are orphans.
            c.early.append((corr, ts, frame))
            c.early_bytes += len(frame)
            while len(c.early) > _MAX_EARLY or c.early_bytes > _MAX_EARLY_BYTES:
                e = c.early.popleft()
                c.early_bytes -= len(e[2])
                out.append(self._orphan(c, *e))
            return
        if c.resp_gap:
            self._lost_before(c, p, ts, out)
        self._answer(c, p, frame, ts, out)

    def _lost_before(self, c: _Conn, p: _Pending, ts: float, out: list) -> None:
        """A broker answers a connection's requests in order, so after a gap in its
        direction the requests sent before this one that are still waiting had their
        answers in the lost bytes: say so instead of calling them unanswered."""
        c.resp_gap = False
        order = c.order
        while order and order[0] is not p:
            q = order.popleft()
            if q.done:
                continue
            pq = c.pending.get(q.corr)
            if pq is not None and q in pq:
                pq.remove(q)
                if not pq:
                    del c.pending[q.corr]
            q.done = True
            out.append(
                self._exchange(c, q, ts, {"_decode_error": _LOST[AnomalyKind.GAP_IN_FRAME]}, None, "undecodable", [])
            )

    def _answer(self, c: _Conn, p: _Pending, frame: bytes, ts: float, out: list) -> None:
        status = "undecodable" if p.failed else "ok"
        flags = p.flags
        _learn_metadata_log(frame, (p.api_key, p.api_version), self.topic_names)
        body, version, errors, findings, failed = decode_response(
            frame, p.api_key, p.api_version, p.corr, p.client_id, self.topic_names
        )
        if failed:
            status = "undecodable"
        elif not findings:  # with its request's context when the core decoded that too
            expand(p.api_key, "response", body, p.request if not p.failed and p.flags == () else None)
        if findings:  # quirks of an answer that still decodes: an anomaly each, and flags on the exchange
            flags = list(flags)
            for kind, detail in findings:
                if kind not in flags:
                    flags.append(kind)
                out.append(Anomaly(c.id, ts, kind, detail))
            flags = tuple(flags)
        if p.api_key == SASL_HANDSHAKE and p.api_version == 0 and status == "ok" and body.get("ErrorCode") == 0:
            c.sasl_raw = True  # v0: the tokens that follow are bare size-prefixed blobs, not Kafka requests
        ex = self._exchange(c, p, ts, body, frame, status, errors)
        ex.response_version = version
        ex.flags = flags
        out.append(ex)

    def _orphan(self, c: _Conn, corr: int, ts: float, frame: bytes) -> Exchange:
        c.exchanges += 1
        return Exchange(
            None,
            ts,
            None,
            c.id,
            c.ends[0],
            c.ends[1],
            None,
            "",
            None,
            corr,
            None,
            "orphan_response",
            [],
            None,
            {"_raw_body": frame[4:]},
            None,
            len(frame),
            None,
            frame,
        )

    def _early_answer(self, c: _Conn, p: _Pending) -> tuple | None:
        """A response that came before its request. (No time check: data TCP held back
        behind a hole may carry the time it was released, not the time it was sent.)"""
        for i, (corr, ts, frame) in enumerate(c.early):
            if corr == p.corr:
                del c.early[i]
                c.early_bytes -= len(frame)
                return ts, frame
        return None

    def _exchange(self, c: _Conn, p: _Pending, rts, body, frame, status: str, errors: list) -> Exchange:
        c.exchanges += 1
        if p.client_id is not None and len(c.client_ids) < 64:
            c.client_ids[p.client_id] = None
        if p.api_key is None:
            name = "SaslToken"
        else:
            name = self._name(p.api_key)
        latency = None if rts is None else round((rts - p.ts) * 1000.0, 3)
        return Exchange(
            p.ts,
            rts,
            latency,
            c.id,
            c.ends[0],
            c.ends[1],
            p.api_key,
            name,
            p.api_version,
            p.corr,
            p.client_id,
            status,
            errors,
            p.request,
            body,
            p.size,
            None if frame is None else len(frame),
            p.raw,
            frame,
        )

    def _frame_anomaly(self, c: _Conn, a: FrameAnomaly, to_client: bool, out: list) -> None:
        if a.kind == AnomalyKind.RESYNC:
            c.resyncs += 1
        detail = a.detail
        head = a.head
        if to_client and len(head) >= 4:
            corr = _I32.unpack_from(head, 0)[0]
            detail = f"response correlation id {corr}: {detail}"
            p = self._take(c, corr) if a.kind in _LOST else None
            if p is not None:
                out.append(self._exchange(c, p, a.ts, {"_decode_error": _LOST[a.kind]}, None, "undecodable", []))
        elif not to_client and len(head) >= 8:
            api_key, version, corr = _PEEK.unpack_from(head + b"\0\0", 0)[:3]
            detail = f"{self._name(api_key)} v{version} request correlation id {corr}: {detail}"
            if a.kind in _KEEP_PLACE:
                # keep its place so the answer still pairs and decodes
                self._add(
                    c,
                    _Pending(a.ts, api_key, version, corr, None, {"_decode_error": _KEEP_PLACE[a.kind]}, 0, b"", True),
                    out,
                )
        out.append(Anomaly(c.id, a.ts, a.kind, f"{'broker' if to_client else 'client'}: {detail}"))

    def _close(self, c: _Conn, ts, out: list) -> None:
        if c.state != "kafka":
            if c.probe_gap:
                # a hole took the first bytes that would have told whether this is Kafka: say so, as a
                # Kafka connection that lost its first request would otherwise vanish without a trace
                out.append(
                    Anomaly(
                        c.id,
                        ts if ts is not None else c.last_ts,
                        AnomalyKind.UNRECOGNISED_CONNECTION,
                        f"{c.gap_bytes} bytes lost before the connection could be recognised as Kafka "
                        f"or not; {c.unjudged} captured bytes not dissected",
                    )
                )
            return
        for splitter, to_client in ((c.req, False), (c.resp, True)):
            for a in splitter.finish(ts):
                self._frame_anomaly(c, a, to_client, out)
        for e in c.early:
            out.append(self._orphan(c, *e))
        left = [p for q in c.pending.values() for p in q] + list(c.tokens)
        left.sort(key=lambda p: p.ts)
        for p in left:
            out.append(self._exchange(c, p, None, None, None, "unanswered", []))
        c.early.clear()
        c.early_bytes = 0
        c.pending.clear()
        c.order.clear()
        c.tokens.clear()
        if self.connections:
            (gap_b, early_b), (gap_c, early_c) = c.lost.get(c.client, (0, 0)), c.lost.get(c.server, (0, 0))
            out.append(
                Connection(
                    c.id,
                    c.ends[0],
                    c.ends[1],
                    c.first_ts,
                    c.last_ts,
                    c.bytes_in[0] + early_b,
                    c.bytes_in[1] + early_c,
                    c.frames[0],
                    c.frames[1],
                    c.gaps,
                    c.gap_bytes,
                    c.tcp[0],
                    c.tcp[1],
                    c.resyncs,
                    list(c.client_ids),
                    c.detected_by,
                    c.exchanges,
                    c.frame_bytes[0],
                    c.frame_bytes[1],
                    c.req.dropped + early_b,
                    c.resp.dropped + early_c,
                    gap_b,
                    gap_c,
                )
            )
