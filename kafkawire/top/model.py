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

Per group key, in three groupings at once (api: the API name; client: the client id; broker: the
broker's address), two sets of figures:

- the last `window` seconds of clock (the interval): requests/s, p50/p99/max latency (exact, over
  the answers in the window), errors/s, bytes/s (request bytes at the request, response bytes at the
  answer);
- since start: requests, p50/p99/max (a log-bucketed histogram, histogram.LogHistogram: within 1%,
  bounded memory; max exact), errors per code, bytes; and now: requests in flight, unanswered ones
  (status `unanswered`, known when the dissector reports them: their connection closed).

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
_REBALANCE_IN_PROGRESS = 27


def _error_name(code: int) -> str:
    from protocol.errors import error_name

    return error_name(code)


class _Totals:
    """One group key's figures since start."""

    __slots__ = ("requests", "hist", "errors", "bytes", "in_flight", "unanswered")

    def __init__(self):
        self.requests = 0
        self.hist = LogHistogram()
        self.errors: Counter = Counter()
        self.bytes = 0
        self.in_flight = 0
        self.unanswered = 0


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
        self.totals: tuple[dict[str, _Totals], ...] = tuple({} for _ in GROUPINGS)
        self.all = _Totals()
        # the window's events: (time, keys, latency or None, bytes, error codes, is_request)
        self.events: deque = deque()
        self.flight: list = []  # heap of (response_ts, seq, exchange, keys)
        # a live source's requests awaiting their answer: (how many, per grouping {key: how many})
        self.live_flight: tuple[int, tuple[dict[str, int], ...]] = (0, tuple({} for _ in GROUPINGS))
        self.seq = 0
        # (api, client id, broker) -> its three groups' totals: found once per key, not per item
        self._groups: dict[tuple, tuple[_Totals, ...]] = {}
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
        keys = (x.api_name, x.client_id or "-", x.broker)
        if x.status == "orphan_response" or x.ts is None:
            self.orphans += 1
            self._answer(x, keys, x.response_ts if x.response_ts is not None else self.clock)
            return
        size = x.request_size or 0
        self.all.requests += 1
        self.all.bytes += size
        groups = self._groups_of(keys)
        for t in groups:
            t.requests += 1
            t.bytes += size
        self.events.append((x.ts, keys, None, size, (), True))
        self.rebalances.request(x, x.ts)
        if x.status == "unanswered":
            self.all.unanswered += 1
            for t in groups:
                t.unanswered += 1
            return
        if x.response_ts is None:
            return  # no answer is due (a Produce with acks=0)
        if self.clock is not None and x.response_ts <= self.clock:
            self._answer(x, keys, x.response_ts)
            return
        self.all.in_flight += 1
        for t in groups:
            t.in_flight += 1
        self.seq += 1
        heapq.heappush(self.flight, (x.response_ts, self.seq, x, keys))

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
            rts, _, x, keys = heapq.heappop(self.flight)
            self.all.in_flight -= 1
            for t in self._groups_of(keys):
                t.in_flight -= 1
            self._answer(x, keys, rts)
        cutoff = now - self.window
        while self.events and self.events[0][0] <= cutoff:
            self.events.popleft()
        self.rebalances.expire(now)

    def in_flight(self, grouping: str = "api") -> dict[str, int]:
        """Requests awaiting their answer now, per group key (a live source's as it last told)."""
        d = _DIM[grouping]
        out = {k: t.in_flight for k, t in self.totals[d].items() if t.in_flight}
        for k, n in self.live_flight[1][d].items():
            out[k] = out.get(k, 0) + n
        return out

    def finish(self) -> None:
        """The source has ended: every answer still ahead of the clock completes (the clock moves to the last)."""
        if self.flight:
            self.advance(max(rts for rts, *_ in self.flight))

    def _groups_of(self, keys: tuple) -> tuple[_Totals, ...]:
        g = self._groups.get(keys)
        if g is None:
            g = self._groups[keys] = tuple(self._group(d, key) for d, key in enumerate(keys))
        return g

    def _group(self, d: int, key: str) -> _Totals:
        t = self.totals[d].get(key)
        if t is None:
            t = self.totals[d][key] = _Totals()
        return t

    def _answer(self, x, keys, t: float | None) -> None:
        size = x.response_size or 0
        latency = x.latency_ms
        codes = tuple(x.error_codes or ())
        groups = self._groups_of(keys)
        i = None if latency is None else self.all.hist.index(latency)
        for g in (self.all, *groups):
            g.bytes += size
            if latency is not None:
                g.hist.add(latency, i)
            for c in codes:
                g.errors[c] += 1
        if t is not None:
            self.events.append((t, keys, latency, size, codes, False))
            self.rebalances.response(x, t)

    # -- reading -------------------------------------------------------------------------------------

    def snapshot(self, grouping: str = "api") -> Snapshot:
        """Every group key's figures in `grouping` (api, client or broker) at the clock."""
        d = _DIM[grouping]
        now = self.clock
        rows: dict[str, Row] = {}
        lat: dict[str, list[float]] = {}
        err: Counter = Counter()
        total = Row("total")
        total_lat: list[float] = []
        if now is not None:
            cutoff = now - self.window
            for t, keys, latency, size, codes, is_request in self.events:
                if t <= cutoff:
                    continue
                key = keys[d]
                r = rows.get(key)
                if r is None:
                    r = rows[key] = Row(key)
                for row in (r, total):
                    row.bytes_rate += size
                    if is_request:
                        row.rate += 1
                    row.errors_rate += len(codes)
                if latency is not None:
                    lat.setdefault(key, []).append(latency)
                    total_lat.append(latency)
                for c in codes:
                    err[(key, c)] += 1
        for key, g in self.totals[d].items():
            r = rows.get(key)
            if r is None:
                r = rows[key] = Row(key)
            self._fill(r, g, lat.get(key))
        self._fill(total, self.all, total_lat)
        waiting, per = self.live_flight
        total.in_flight += waiting
        for key, n in per[d].items():
            r = rows.get(key)
            if r is None:
                r = rows[key] = Row(key)
            r.in_flight += n
        errors = []
        for key, g in self.totals[d].items():
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
        if latencies:
            latencies.sort()
            r.p50, r.p99 = exact_quantile(latencies, 0.5), exact_quantile(latencies, 0.99)
            r.max = latencies[-1]
        r.requests, r.bytes, r.in_flight, r.unanswered = g.requests, g.bytes, g.in_flight, g.unanswered
        r.answered = g.hist.count
        r.errors = sum(g.errors.values())
        if g.hist.count:
            r.p50_all, r.p99_all = g.hist.quantiles([0.5, 0.99])
            r.max_all = g.hist.max


def exact_quantile(ordered: list[float], q: float) -> float:
    """numpy's "linear" quantile (pandas', the report's) of sorted values."""
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (h - lo)
