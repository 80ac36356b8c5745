"""What `kafkawire top` counts: a pure model, fed items and told the time (no I/O, no clock of its own).

    model = TopModel(window=1.0)
    model.add(exchange)        # an item from dissector.dissect(), when its request is due
    model.advance(now)         # the clock (capture time): answers due by then complete
    snap = model.snapshot("api")

Times are the capture's (an exchange's `ts` and `response_ts`), so the same model serves a file played
at any pace and a live capture. An exchange is fed at its request time: it counts as a request then,
and stays in flight until the clock reaches its `response_ts`, when its latency, response bytes and
error codes count. Fed later than that (a live source sees an exchange only once it is answered),
it completes at once.

Per group key, in four groupings at once (api: the API name; client: the client id; broker: the
broker's address; topic: each topic an exchange names, from its `topics`, dissect(by_topic=True)),
two sets of figures:

- the last `window` seconds of clock (the interval): requests/s, p50/p99/max latency (exact, over
  the answers in the window), errors/s, bytes/s (request bytes at the request, response bytes at the
  answer);
- since start: requests, p50/p99/max (a log-bucketed histogram, histogram.LogHistogram: within 1%,
  bounded memory; max exact), errors per code, bytes; and now: requests in flight, unanswered ones
  (status `unanswered`, known when the dissector reports them: their connection closed).

By topic, an exchange counts once under each topic it names (a Fetch of three topics is a request,
its latency and its bytes for each), "-" when it names none; its bytes there are the record bytes
of that topic, split into in (produced: a Produce's records) and out (fetched: a Fetch's), and its
errors the error codes under that topic, plus those above every topic. A live source's requests
held unanswered are not known by topic (the dissector tells their API, client and broker only).

Consumer-group rebalances in progress (`Rebalances`), kept simple:

- classic groups: a member (a group id and the client's address) is rebalancing from its JoinGroup
  request (or a Heartbeat answered REBALANCE_IN_PROGRESS) until its SyncGroup is answered without an
  error, or it sends LeaveGroup; a new member's JoinGroup or a LeaveGroup makes every other member
  (those whose SyncGroup was answered) rebalancing too, from then: they must rejoin;
- KIP-848 groups (ConsumerGroupHeartbeat): a member is reconciling from a heartbeat whose answer
  changes its epoch or hands it an assignment, until a heartbeat that keeps its epoch and brings no
  assignment (it has acknowledged), or it leaves (epoch -1/-2); a member joining (epoch 0) or leaving
  makes every other member reconciling too. Members heartbeat every few seconds, so this can show a
  rebalance for up to one heartbeat interval longer than the broker saw it;
- a member pending for more than `stale` seconds (300 s, Kafka's default rebalance timeout) is
  dropped: its client is gone.

Memory is bounded by the groups (per group key: counters, a histogram of at most ~1,100 buckets and
the error codes seen), the exchanges in flight, and the window's events (the exchanges of one
interval).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, field

from kafkawire.top.histogram import LogHistogram
from kafkawire.top.options import GROUPINGS

__all__ = ["TopModel", "Snapshot", "Row", "ErrorRow", "Rebalance", "GROUPINGS"]

_DIM = {g: i for i, g in enumerate(GROUPINGS)}
_TOPIC = _DIM["topic"]  # the grouping an exchange can count in several times, once per topic
_REBALANCE_IN_PROGRESS = 27
# the APIs Rebalances follows: the others need not be shown to it
_GROUP_APIS = frozenset(("JoinGroup", "SyncGroup", "LeaveGroup", "Heartbeat", "ConsumerGroupHeartbeat"))


def _error_name(code: int) -> str:
    from protocol.errors import error_name

    return error_name(code)


class _Totals:
    """One group key's figures since start."""

    __slots__ = ("requests", "hist", "errors", "bytes", "in_flight", "unanswered", "bytes_in", "bytes_out")

    def __init__(self):
        self.requests = 0
        self.hist = LogHistogram()
        self.errors: Counter = Counter()
        self.bytes = 0
        self.in_flight = 0
        self.unanswered = 0
        self.bytes_in = 0  # by topic: record bytes produced, fetched
        self.bytes_out = 0


def _merge(into: _Totals, g: _Totals) -> None:
    into.requests += g.requests
    into.bytes += g.bytes
    into.in_flight += g.in_flight
    into.unanswered += g.unanswered
    into.errors.update(g.errors)
    into.hist.merge(g.hist)


def _merged(groups) -> _Totals:
    out = _Totals()
    for g in groups:
        _merge(out, g)
    return out


@dataclass(slots=True)
class Row:
    """One group key in a snapshot: the interval's figures, then since start's."""

    key: str
    rate: float = 0.0  # requests/s over the window
    p50: float | None = None  # ms, the answers in the window
    p99: float | None = None
    max: float | None = None
    errors_rate: float = 0.0
    bytes_rate: float = 0.0
    requests: int = 0  # since start
    answered: int = 0
    p50_all: float | None = None
    p99_all: float | None = None
    max_all: float | None = None
    errors: int = 0
    bytes: int = 0
    in_flight: int = 0
    unanswered: int = 0
    in_rate: float = 0.0  # by topic: record bytes/s produced, fetched over the window; since start
    out_rate: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(slots=True)
class ErrorRow:
    key: str  # the group key
    code: int
    name: str
    rate: float  # per second over the window
    count: int  # since start


@dataclass(slots=True)
class Rebalance:
    group_id: str
    kind: str  # classic or consumer (KIP-848)
    members: int  # members still joining / reconciling
    since: float  # clock time the first of them started
    generation: int | None  # the last generation (classic) or member epoch (KIP-848) answered


@dataclass(slots=True)
class Snapshot:
    clock: float | None
    window: float
    grouping: str
    rows: list[Row]
    errors: list[ErrorRow]
    rebalances: list[Rebalance]
    total: Row
    anomalies: int = 0
    orphans: int = 0
    extra: dict = field(default_factory=dict)


class Rebalances:
    """Members of consumer groups that are joining (classic) or reconciling (KIP-848), per group id."""

    def __init__(self, stale: float = 300.0):
        self.stale = stale
        self.pending: dict[tuple[str, str], tuple[float, str]] = {}  # (group, member) -> (since, kind)
        self.members: dict[str, set[str]] = {}  # group -> its members (classic: client address; KIP-848: id)
        self.generation: dict[str, int] = {}

    def _all_pending(self, group: str, t: float, kind: str) -> None:
        """A member came or went: every other member must rejoin (classic) or take a new assignment."""
        for m in self.members.get(group, ()):
            self.pending.setdefault((group, m), (t, kind))

    def request(self, x, t: float) -> None:
        api, body = x.api_name, x.request or {}
        group = body.get("GroupId")
        if not isinstance(group, str):
            return
        members = self.members.setdefault(group, set())
        if api == "JoinGroup":
            if x.client not in members:
                self._all_pending(group, t, "classic")
            self.pending.setdefault((group, x.client), (t, "classic"))
        elif api == "LeaveGroup":
            members.discard(x.client)
            self.pending.pop((group, x.client), None)
            self._all_pending(group, t, "classic")
        elif api == "ConsumerGroupHeartbeat" and body.get("MemberEpoch") == 0:  # a member joining
            self._all_pending(group, t, "consumer")
            self.pending.setdefault((group, str(body.get("MemberId") or x.client)), (t, "consumer"))

    def response(self, x, t: float) -> None:
        api, req, resp = x.api_name, x.request or {}, x.response or {}
        group = req.get("GroupId")
        if not isinstance(group, str):
            return
        member = (group, x.client)
        if api == "SyncGroup" and not x.error_codes and x.status == "ok":
            self.pending.pop(member, None)
            self.members.setdefault(group, set()).add(x.client)
        elif api == "JoinGroup" and isinstance(resp.get("GenerationId"), int) and resp["GenerationId"] >= 0:
            self.generation[group] = resp["GenerationId"]
        elif api == "Heartbeat" and _REBALANCE_IN_PROGRESS in x.error_codes:
            self.pending.setdefault(member, (t, "classic"))
        elif api == "ConsumerGroupHeartbeat" and x.status == "ok" and not x.error_codes:
            before, after = req.get("MemberEpoch"), resp.get("MemberEpoch")
            if not isinstance(before, int) or not isinstance(after, int):
                return
            mid = str(req.get("MemberId") or resp.get("MemberId") or x.client)
            since = t
            if before == 0:  # the join's request was keyed by the id it sent, or its address
                joined = self.pending.pop((group, str(req.get("MemberId") or x.client)), None)
                since = joined[0] if joined else t
            members = self.members.setdefault(group, set())
            if before < 0 or after < 0:  # it left
                members.discard(mid)
                self.pending.pop((group, mid), None)
                self._all_pending(group, t, "consumer")
                return
            members.add(mid)
            self.generation[group] = after
            if after != before or resp.get("Assignment"):
                self.pending.setdefault((group, mid), (since, "consumer"))
            else:
                self.pending.pop((group, mid), None)

    def expire(self, now: float) -> None:
        for key in [k for k, (since, _) in self.pending.items() if now - since > self.stale]:
            del self.pending[key]
            self.members.get(key[0], set()).discard(key[1])

    def in_progress(self) -> list[Rebalance]:
        groups: dict[str, Rebalance] = {}
        for (group, _), (since, kind) in self.pending.items():
            r = groups.get(group)
            if r is None:
                groups[group] = Rebalance(group, kind, 1, since, self.generation.get(group))
            else:
                r.members += 1
                r.since = min(r.since, since)
        return sorted(groups.values(), key=lambda r: (r.since, r.group_id))


class TopModel:
    """The figures of `top`, from items fed at their time and a clock advanced by the caller."""

    def __init__(self, window: float = 1.0, stale: float = 300.0):
        if window <= 0:
            raise ValueError("window must be > 0")
        self.window = window
        self.clock: float | None = None
        # since start, one set of figures per (api, client id, broker, names no topic) and one per topic: an
        # exchange adds to two or so, not to one per grouping and the total; a grouping's (and
        # the total) are merged when read
        self.combos: dict[tuple, _Totals] = {}
        self.topics: dict[str, _Totals] = {}
        # the window's events: (time, keys, latency or None, bytes, error codes, is_request, the
        # exchange's topics: Exchange.topics)
        self.events: deque = deque()
        # heap of (response_ts, seq, exchange, keys, its combo's and topic groups' figures)
        self.flight: list = []
        # a live source's requests awaiting their answer: (how many, per grouping {key: how many})
        self.live_flight: tuple[int, tuple[dict[str, int], ...]] = (0, tuple({} for _ in GROUPINGS))
        self.seq = 0
        self.rebalances = Rebalances(stale)
        self.anomalies = 0
        self.orphans = 0
        self.connections = 0

    # -- feeding -------------------------------------------------------------------------------------

    def add(self, item) -> None:
        """Count an item (Exchange, Anomaly or Connection) now; an exchange's answer waits for its time."""
        kind = item.type
        if kind == "anomaly":
            self.anomalies += 1
            return
        if kind == "connection":
            self.connections += 1
            return
        x = item
        tops = x.topics
        # the 4th key: it names no topic (its topic row "-" is the combos' so marked, merged when read)
        keys = (x.api_name, x.client_id or "-", x.broker, tops == ())
        if x.status == "orphan_response" or x.ts is None:
            self.orphans += 1
            self._answer(x, keys, x.response_ts if x.response_ts is not None else self.clock)
            return
        size = x.request_size or 0
        c = self.combos.get(keys) or self._combo(keys)
        c.requests += 1
        c.bytes += size
        groups = self._topics_of(tops)
        for g, (_, sent, _, _) in zip(groups, tops or (), strict=True):
            g.requests += 1
            g.bytes += sent
            g.bytes_in += sent
        self.events.append((x.ts, keys, None, size, (), True, tops))
        if keys[0] in _GROUP_APIS:
            self.rebalances.request(x, x.ts)
        if x.status == "unanswered":
            c.unanswered += 1
            for g in groups:
                g.unanswered += 1
            return
        if x.response_ts is None:
            return  # no answer is due (a Produce with acks=0)
        if self.clock is not None and x.response_ts <= self.clock:
            self._answer(x, keys, x.response_ts, c, groups)
            return
        c.in_flight += 1
        for g in groups:
            g.in_flight += 1
        self.seq += 1
        heapq.heappush(self.flight, (x.response_ts, self.seq, x, keys, c, groups))

    def pending(self, rows: list) -> None:
        """A live source's requests awaiting their answer now, [(api, client id, broker, request
        time)] as the dissector holds them: counted in flight until the next call (a file's in flight
        comes from the exchanges ahead of the clock instead)."""
        live: tuple[dict[str, int], ...] = tuple({} for _ in GROUPINGS)
        for api, client_id, broker, _ in rows:
            for d, key in enumerate((api, client_id or "-", broker)):
                live[d][key] = live[d].get(key, 0) + 1
        self.live_flight = (len(rows), live)

    def advance(self, now: float) -> None:
        """Move the clock to `now` (capture time): answers due by then complete; old events leave the window."""
        if self.clock is not None and now < self.clock:
            return  # the clock does not go back
        self.clock = now
        while self.flight and self.flight[0][0] <= now:
            rts, _, x, keys, c, groups = heapq.heappop(self.flight)
            c.in_flight -= 1
            for g in groups:
                g.in_flight -= 1
            self._answer(x, keys, rts, c, groups)
        cutoff = now - self.window
        while self.events and self.events[0][0] <= cutoff:
            self.events.popleft()
        self.rebalances.expire(now)

    def in_flight(self, grouping: str = "api") -> dict[str, int]:
        """Requests awaiting their answer now, per group key (a live source's as it last told)."""
        d = _DIM[grouping]
        out: dict[str, int] = {}
        if d == _TOPIC:
            out = {k: g.in_flight for k, g in self.topics.items() if g.in_flight}
            for keys, g in self.combos.items():
                if g.in_flight and keys[3]:
                    out["-"] = out.get("-", 0) + g.in_flight
        else:
            for keys, g in self.combos.items():
                if g.in_flight:
                    out[keys[d]] = out.get(keys[d], 0) + g.in_flight
        for k, n in self.live_flight[1][d].items():
            out[k] = out.get(k, 0) + n
        return out

    def finish(self) -> None:
        """The source has ended: every answer still ahead of the clock completes (the clock moves to the last)."""
        if self.flight:
            self.advance(max(rts for rts, *_ in self.flight))

    def _combo(self, keys: tuple) -> _Totals:
        g = self.combos[keys] = _Totals()
        return g

    def _topics_of(self, tops: tuple | None) -> list[_Totals]:
        """The topic groups of an exchange's topics (Exchange.topics); none when it names none."""
        if not tops:
            return []
        topics = self.topics
        return [topics.get(name) or topics.setdefault(name, _Totals()) for name, *_ in tops]

    @property
    def all(self) -> _Totals:
        """Every exchange's figures since start (the combos' merged)."""
        return _merged(self.combos.values())

    def totals(self, grouping: str) -> dict[str, _Totals]:
        """Since start, per group key of `grouping`: the topics' own, the others' merged from their combos."""
        d = _DIM[grouping]
        out: dict[str, _Totals] = {}
        if d == _TOPIC:
            out.update(self.topics)
            unnamed = [c for keys, c in self.combos.items() if keys[3]]
            if unnamed:
                out["-"] = g = _merged(unnamed)
                g.bytes = 0  # a topic's bytes are its record bytes: none here
            return out
        for keys, c in self.combos.items():
            g = out.get(keys[d])
            if g is None:
                g = out[keys[d]] = _Totals()
            _merge(g, c)
        return out

    def _answer(self, x, keys, t: float | None, c: _Totals | None = None, groups: list | None = None) -> None:
        """An answer counts (`c`, `groups`: the exchange's combo and topic groups, when known)."""
        size = x.response_size or 0
        latency = x.latency_ms
        codes = tuple(x.error_codes) if x.error_codes else ()
        if c is None:
            c = self.combos.get(keys) or self._combo(keys)
        c.bytes += size
        i = None
        if latency is not None:
            i = c.hist.index(latency)
            c.hist.add(latency, i)
        for code in codes:
            c.errors[code] += 1
        tops = x.topics
        if tops:
            if groups is None:
                groups = self._topics_of(tops)
            for g, (_, _, answered, topic_codes) in zip(groups, tops, strict=True):
                g.bytes += answered
                g.bytes_out += answered
                if latency is not None:
                    g.hist.add(latency, i)
                for code in topic_codes:
                    g.errors[code] += 1
        if t is not None:
            self.events.append((t, keys, latency, size, codes, False, tops))
            if keys[0] in _GROUP_APIS:
                self.rebalances.response(x, t)

    # -- reading -------------------------------------------------------------------------------------

    def snapshot(self, grouping: str = "api") -> Snapshot:
        """Every group key's figures in `grouping` (api, client, broker or topic) at the clock."""
        d = _DIM[grouping]
        now = self.clock
        total = Row("total")
        total_lat: list[float] = []
        err: Counter = Counter()
        # key -> [requests, bytes, errors, bytes in, bytes out, latencies] over the window
        acc: dict[str, list] = {}
        if now is not None:
            cutoff = now - self.window
            requests = size_sum = errors = 0
            topic = d == _TOPIC
            for t, keys, latency, size, codes, is_request, tops in self.events:
                if t <= cutoff:
                    continue
                size_sum += size
                if is_request:
                    requests += 1
                elif latency is not None:
                    total_lat.append(latency)
                if codes:
                    errors += len(codes)
                if not topic:
                    places = ((keys[d], size, codes),)
                elif tops is None:
                    continue
                elif not tops:
                    places = (("-", 0, codes),)
                elif is_request:
                    places = tuple((k, sent, ()) for k, sent, _, _ in tops)
                else:
                    places = tuple((k, answered, c) for k, _, answered, c in tops)
                for key, n, key_codes in places:
                    a = acc.get(key)
                    if a is None:
                        a = acc[key] = [0, 0, 0, 0, 0, []]
                    a[1] += n
                    if is_request:
                        a[0] += 1
                        a[3] += n
                    else:
                        a[4] += n
                        if latency is not None:
                            a[5].append(latency)
                    if key_codes:
                        a[2] += len(key_codes)
                        for c in key_codes:
                            err[(key, c)] += 1
            total.rate, total.bytes_rate, total.errors_rate = requests, size_sum, errors
        rows: dict[str, Row] = {}
        for key, (n, size, errors, n_in, n_out, _) in acc.items():
            rows[key] = Row(key, rate=n, bytes_rate=size, errors_rate=errors, in_rate=n_in, out_rate=n_out)
        totals = self.totals(grouping)
        for key, g in totals.items():
            r = rows.get(key)
            if r is None:
                r = rows[key] = Row(key)
            self._fill(r, g, acc[key][5] if key in acc else None)
        # the total: a grouping's keys part the combos (merged once), but topics may share an exchange
        self._fill(total, self.all if d == _TOPIC else _merged(totals.values()), total_lat)
        waiting, per = self.live_flight
        total.in_flight += waiting
        for key, n in per[d].items():
            r = rows.get(key)
            if r is None:
                r = rows[key] = Row(key)
            r.in_flight += n
        errors = []
        for key, g in totals.items():
            for code, n in g.errors.items():
                errors.append(ErrorRow(key, code, _error_name(code), err[(key, code)] / self.window, n))
        errors.sort(key=lambda e: (-e.rate, -e.count, e.key, e.code))
        return Snapshot(
            clock=now,
            window=self.window,
            grouping=grouping,
            rows=list(rows.values()),
            errors=errors,
            rebalances=self.rebalances.in_progress(),
            total=total,
            anomalies=self.anomalies,
            orphans=self.orphans,
        )

    def _fill(self, r: Row, g: _Totals, latencies: list[float] | None) -> None:
        w = self.window
        r.rate /= w
        r.bytes_rate /= w
        r.errors_rate /= w
        r.in_rate /= w
        r.out_rate /= w
        if latencies:
            latencies.sort()
            r.p50, r.p99 = exact_quantile(latencies, 0.5), exact_quantile(latencies, 0.99)
            r.max = latencies[-1]
        r.requests, r.bytes, r.in_flight, r.unanswered = g.requests, g.bytes, g.in_flight, g.unanswered
        r.bytes_in, r.bytes_out = g.bytes_in, g.bytes_out
        r.errors = sum(g.errors.values())
        self._fill_hist(r, g.hist)

    @staticmethod
    def _fill_hist(r: Row, hist: LogHistogram) -> None:
        r.answered = hist.count
        if hist.count:
            r.p50_all, r.p99_all = hist.quantiles([0.5, 0.99])
            r.max_all = hist.max


def exact_quantile(ordered: list[float], q: float) -> float:
    """numpy's "linear" quantile (pandas', the report's) of sorted values."""
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (h - lo)
