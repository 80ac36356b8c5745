"""The only part of the replay that opens sockets: send planned steps to the target, collect answers.

Each captured connection gets its own TCP connection (one thread each), requests go in captured order
with at most the captured number in flight, paced by the captured send offsets / speed. Requests that
carry ids the target hands out are rewritten just before they are sent (replay.session), after the
answers they depend on; a few requests of the replay's own (a fresh InitProducerId, a Metadata for
topic ids, a JoinGroup retried after MEMBER_ID_REQUIRED, a SASL login) are listed with the answer
they were sent for.
"""

from __future__ import annotations

import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

from protocol.codec import decode_request, decode_response, encode_request, with_size

TIMEOUT = 10.0  # every connect/send/recv
MAX_FRAME = 100 << 20
MEMBER_ID_REQUIRED = 79
# A coordinator still loading or moving: clients ask again, so the replay does too (bounded by --timeout).
COORDINATOR_ERRORS = frozenset({14, 15, 16})
# A partition whose leader is still being elected (a topic the replay has just created): asked again too.
LEADER_ERRORS = frozenset({5, 6})
RETRIED = COORDINATOR_ERRORS | LEADER_ERRORS
# After the target closes a connection (or stalls), the rest of the captured connection goes on a new one,
# this many times at most.
MAX_RECONNECTS = 3
# An idempotent batch pipelined behind one the target refused (no leader yet) is out of order until that one
# is sent again: once a Produce has been retried, the ones behind it are retried too.
OUT_OF_ORDER_SEQUENCE = 45
# A topic the replay has just created may be unknown for a moment: asked again too.
UNKNOWN_TOPIC_OR_PARTITION = 3
# The GIL's switch interval while replaying (seconds; Python's default is 5 ms): see replay().
SWITCH_INTERVAL = 0.0002


class ReplayError(Exception):
    pass


class _Stopped(Exception):
    """Ctrl-C in the main thread: send nothing more."""


@dataclass
class Answer:
    step: object  # plan.Step
    sent_at: float | None = None
    latency_ms: float | None = None
    response: dict | None = None
    error: str = ""  # why there is no decoded response
    changes: list = field(default_factory=list)  # values rewritten at send time (session)
    added: list = field(default_factory=list)  # requests of the replay's own sent for this one
    not_sent: str = ""  # replaced without a request of its own (a SASL round the fresh login did not need)
    request: dict | None = field(default=None, repr=False)  # the body sent, where later answers need it
    frame: bytes | None = field(default=None, repr=False)  # the frame sent
    sent_wall: float | None = None  # time.time() when sent (for --out)
    response_size: int | None = None
    client: str = ""  # the replay's own ip:port towards the target
    server: str = ""  # the target's ip:port this connection reached
    response_frame: bytes | None = field(default=None, repr=False)  # the answer as read (for --out)
    first_batch: bool = False  # a Produce carrying a partition's first idempotent batch of the replay
    held: bool = False  # when its time came, the send waited for answers (in flight, depended on)
    due: float | None = None  # time.monotonic() the pacing meant it to go (None at --max-speed)
    answered_at: float | None = None  # time.monotonic() its answer was read
    after: Answer | None = field(default=None, repr=False)  # held: the answer on its connection it went after


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ReplayError("connection closed by the target")
        buf += chunk
    return bytes(buf)


def _recv_frame(sock) -> bytes:
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    if not 4 <= size <= MAX_FRAME:
        raise ReplayError(f"bad response size {size}")
    return _recv_exact(sock, size)


def address_of(text: str) -> tuple[str, int]:
    """HOST:PORT (as --to takes it, and as the replay writes its own ends) -> (host, port)."""
    host, _, port = text.rpartition(":")
    return host, int(port)


def _connect(address: str, timeout: float):
    s = socket.create_connection(address_of(address), timeout=timeout)
    s.settimeout(timeout)
    return s


def api_versions(address: str, timeout: float = TIMEOUT) -> dict[int, tuple[int, int]]:
    """The target's {api_key: (min, max)} from ApiVersions v0 (every broker answers v0)."""
    with _connect(address, timeout) as s:
        s.sendall(with_size(encode_request(18, 0, {"CorrelationId": 0, "ClientId": "kafkawire-replay"}, {})))
        body = decode_response(_recv_frame(s), 18, 0, lenient=True).body
    if body.get("ErrorCode"):
        raise ReplayError(f"ApiVersions error {body['ErrorCode']}")
    return {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"]}


class _Replay:
    """One captured connection replayed on one new connection."""

    def __init__(self, conn, address, *, speed, timeout, session, ranges, sasl, allow_writes, stop=None, t0=None):
        self.conn, self.address, self.speed, self.timeout = conn, address, speed, timeout
        self.session, self.ranges, self.sasl, self.allow_writes = session, ranges or {}, sasl, allow_writes
        self.stop = stop
        self.t0 = t0  # the capture's first send: connections start at their captured offsets
        self.steps = [s for s in conn.steps if s.action == "send"]
        self.answers = [Answer(s) for s in self.steps]
        self.pending: dict[int, Answer] = {}
        self.own: dict[int, list] = {}  # correlation id -> [frame] of the replay's own requests
        self.last_own = b""  # the frame of the last answer to one of them
        self.retries: list[Answer] = []
        self.unexpected: dict[int, Answer] = {}  # acks=0 produces: a broker that answers them anyway
        self.produce_retried = False
        self.auth_answers: list[dict] = []  # the fresh login's SaslAuthenticate answers, in order
        self.next_corr = -1  # the replay's own requests: negative ids, never captured
        self.last_answer: Answer | None = None  # the last of its captured requests' answers read
        self.reads = 0  # answers read so far (a send after its time that read one was held)
        self.client_id = next((s.exchange.client_id for s in self.steps if s.exchange.client_id), "kafkawire-replay")

    # -- wire --------------------------------------------------------------------------------
    def _version(self, api_key: int, wanted: int) -> int:
        from replay.plan import choose_version

        v = choose_version(api_key, wanted, self.ranges) if self.ranges else wanted
        if v is None:
            raise ReplayError(f"the target does not support API {api_key}")
        return v

    def call(self, api_key: int, wanted_version: int, body: dict) -> tuple[int, dict]:
        """Send a request of the replay's own and wait for its answer (others are taken in passing)."""
        version = self._version(api_key, wanted_version)
        frame = encode_request(api_key, version, {"CorrelationId": 0, "ClientId": self.client_id}, body)
        return version, self._own(frame, api_key, version, "the replay's own")

    def call_frame(self, frame: bytes, api_key: int, version: int) -> tuple[int, dict]:
        """Send a frame again under a correlation id of the replay's own; its answer."""
        return version, self._own(frame, api_key, version, "a repeated")

    def _own(self, frame: bytes, api_key: int, version: int, what: str) -> dict:
        corr, self.next_corr = self.next_corr, self.next_corr - 1
        self.own[corr] = []
        self.sock.sendall(with_size(frame[:4] + struct.pack(">i", corr) + frame[8:]))
        while not self.own[corr]:
            self.read_one()
        self.last_own = self.own.pop(corr)[0]
        try:
            return decode_response(self.last_own, api_key, version, lenient=True).body
        except Exception as e:  # noqa: BLE001 - garbage from the target ends this connection's replay
            raise ReplayError(f"undecodable answer to {what} {api_key} v{version}: {e}") from None

    def read_one(self) -> None:
        self.reads += 1
        frame = _recv_frame(self.sock)
        corr = struct.unpack(">i", frame[:4])[0]
        if corr in self.own:
            self.own[corr].append(frame)
            return
        a = self.pending.pop(corr, None) or self.unexpected.pop(corr, None)
        if a is None:
            raise ReplayError(f"answer with unknown correlation id {corr}")
        a.error = ""
        a.answered_at = time.monotonic()
        a.latency_ms = (a.answered_at - a.sent_at) * 1000
        self.last_answer = a
        a.response_frame = frame
        st = a.step
        try:
            a.response = decode_response(frame, st.exchange.api_key, st.version, lenient=True).body
        except Exception as e:  # noqa: BLE001 - garbage from the target is a report entry
            a.error = f"undecodable answer: {e}"
            self.session.finish(st)
            return
        a.response_size = len(frame)
        self._learn(a)
        self.session.annotate(a.response)

    def _learn(self, a: Answer) -> None:
        from replay.session import LEARNS

        st = a.step
        name = st.exchange.api_name
        if name in LEARNS or name == "Fetch":
            self.session.learn(st.exchange, getattr(a, "request", None), a.response)
        if self._needs_retry(a):
            self.retries.append(a)  # sent again after the ones in flight are read, before anything else
            return
        self.session.finish(st)

    def _needs_retry(self, a: Answer) -> str:
        st, answer = a.step, a.response
        captured = set(error_codes_in(st.exchange.response or {}))
        if (
            st.exchange.api_name == "JoinGroup"
            and answer.get("ErrorCode") == MEMBER_ID_REQUIRED
            and MEMBER_ID_REQUIRED not in captured
        ):
            return "member id"
        retried = RETRIED | ({OUT_OF_ORDER_SEQUENCE} if self.produce_retried else set())
        if UNKNOWN_TOPIC_OR_PARTITION in set(error_codes_in(answer)) - captured and a.frame is not None:
            from replay.session import topic_names

            with self.session.cond:
                created = self.session.created & topic_names(decode_request(a.frame).body, self.session.topic_names)
            if created:  # just created by the replay: the target has not spread the news yet
                retried |= {UNKNOWN_TOPIC_OR_PARTITION}
        if (set(error_codes_in(answer)) & retried) - captured and a.frame is not None:
            if st.exchange.api_name == "Produce":
                self.produce_retried = True
            return "transient"
        return ""

    def _retry(self, a: Answer) -> None:
        """Ask again where a client would: a JoinGroup answered MEMBER_ID_REQUIRED (KIP-394) joins again
        with the member id given; an answer naming a coordinator that is loading, moving or not there yet
        (the target's __consumer_offsets may be brand new) or a partition without a leader yet is asked
        again after a pause."""
        deadline = time.monotonic() + self.timeout
        try:
            for attempt in range(20):
                why = self._needs_retry(a)
                if not why or (why == "transient" and time.monotonic() > deadline):
                    break
                st = a.step
                if why == "member id":
                    member = a.response.get("MemberId")
                    a.request = dict(a.request, MemberId=member)
                    _, answer = self.call(st.exchange.api_key, st.version, a.request)
                    a.added.append(
                        f"JoinGroup v{st.version} again with MemberId {member!r} "
                        f"(answered MEMBER_ID_REQUIRED): error {answer.get('ErrorCode')}"
                    )
                else:
                    time.sleep(min(1.0, 0.05 * 2**attempt))
                    codes = sorted(
                        set(error_codes_in(a.response))
                        & (RETRIED | {OUT_OF_ORDER_SEQUENCE, UNKNOWN_TOPIC_OR_PARTITION})
                    )
                    _, answer = self.call_frame(a.frame, st.exchange.api_key, st.version)
                    a.added.append(
                        f"{st.exchange.api_name} v{st.version} again (answered {codes}): "
                        f"errors {sorted(set(error_codes_in(answer))) or [0]}"
                    )
                a.response = answer
                # the table pairs the captured request with its final answer (under its correlation id)
                a.response_frame = a.frame[4:8] + self.last_own[4:] if a.frame is not None else None
                if st.exchange.api_name in ("JoinGroup", "ConsumerGroupHeartbeat", "InitProducerId"):
                    self.session.learn(st.exchange, a.request, answer)
        finally:
            self.session.finish(a.step)

    # -- SASL ---------------------------------------------------------------------------------
    def login(self) -> tuple[dict, list[dict]]:
        """A fresh login with the command line's credentials: (handshake answer, authenticate answers)."""
        from replay.sasl import LoginError, authenticator

        _, hs = self.call(17, 1, {"Mechanism": self.sasl.mechanism})
        if hs.get("ErrorCode"):
            return hs, []
        auth = authenticator(self.sasl)
        answers, token = [], None
        try:
            while True:
                out = auth.send(token)
                _, ans = self.call(36, 2, {"AuthBytes": out})
                answers.append(ans)
                if ans.get("ErrorCode"):
                    break
                token = ans.get("AuthBytes")
        except StopIteration:
            pass
        except LoginError as e:
            raise ReplayError(f"SASL {self.sasl}: {e}") from None
        return hs, answers

    def _login_step(self, a: Answer) -> bool:
        """A captured SaslHandshake/SaslAuthenticate: answered from the fresh login. True if handled."""
        st = a.step
        if st.login == "handshake":
            a.sent_at = time.monotonic()
            hs, self.auth_answers = self.login()
            a.latency_ms = (time.monotonic() - a.sent_at) * 1000
            a.response = hs
            a.added.append(
                f"SASL login {self.sasl}: handshake error {hs.get('ErrorCode')}, "
                f"{len(self.auth_answers)} authenticate round(s)"
                + (f", error {self.auth_answers[-1].get('ErrorCode')}" if self.auth_answers else "")
            )
        elif self.auth_answers:
            a.sent_at = time.monotonic()
            a.latency_ms = 0.0
            a.response = self.auth_answers.pop(0)
        else:
            a.not_sent = "no round of the fresh login left for it (it took fewer rounds, or failed)"
        self.session.finish(st)
        return True

    # -- rewriting -----------------------------------------------------------------------------
    def _prepare(self, a: Answer) -> bytes:
        """The frame to send now: waits for the answers this step depends on, then rewrites."""
        st = a.step
        if st.deps:
            mine = {id(x.step) for x in self.pending.values()}
            while any(id(d) in mine for d in st.deps):
                self.read_one()
                mine = {id(x.step) for x in self.pending.values()}
            self._wait(a, st.deps)
        from replay.session import REWRITTEN

        if st.exchange.api_name not in REWRITTEN:
            return st.frame
        msg = decode_request(st.frame)
        self._fill(a, msg.body)
        try:
            frame, changes = self.session.rewrite(msg, st.exchange.api_name, st.exchange.connection)
        except Exception as e:  # noqa: BLE001 - sent as planned: the target's answer shows what is stale
            a.changes.append(f"not rewritten ({type(e).__name__}: {e})")
            return st.frame
        a.changes += changes
        a.request = msg.body  # rewritten in place
        return frame or st.frame

    def _wait(self, a: Answer, deps: list) -> None:
        """Until the answers of `deps` (other connections) are in, reading this connection's own answers
        meanwhile: another connection may be waiting for one of them."""
        deadline = time.monotonic() + self.timeout
        while True:
            while self.retries:
                self._retry(self.retries.pop(0))
            if self.session.wait(deps, 0 if self.pending else 0.05):
                return
            a.held = True
            if time.monotonic() > deadline:
                a.changes.append(f"waited {self.timeout}s for earlier answers on other connections in vain")
                return
            if self.pending and select.select([self.sock], [], [], 0.02)[0]:
                self.read_one()

    def _fill(self, a: Answer, body: dict) -> None:
        """Ask the target for what the capture does not say: a producer id for batches whose
        InitProducerId is not in the replay, the target's ids of topics the capture names by id."""
        for cpid in sorted(self.session.unknown_producers(body, a.step.exchange.api_name)):
            if not self.allow_writes:
                continue
            tid = body.get("TransactionalId")
            deadline = time.monotonic() + self.timeout
            for attempt in range(20):  # a coordinator still loading answers 14/15: ask again, bounded
                v, ans = self.call(
                    22,
                    4,
                    {"TransactionalId": tid, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
                )
                if ans.get("ErrorCode") not in RETRIED or time.monotonic() > deadline:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))
            a.added.append(
                f"InitProducerId v{v} for captured producer {cpid}: error {ans.get('ErrorCode')}, "
                f"producer {ans.get('ProducerId')}/{ans.get('ProducerEpoch')}"
                + (f" ({attempt + 1} attempts)" if attempt else "")
            )
            if not ans.get("ErrorCode"):
                with self.session.cond:
                    self.session.learn_producer(cpid, None, ans["ProducerId"], ans["ProducerEpoch"])
        names = self.session.unknown_topic_names(body)
        if names and 3 in self.ranges and self.ranges[3][1] >= 10:
            v, ans = self.call(
                3,
                12,
                {
                    "Topics": [{"TopicId": None, "Name": n} for n in sorted(names)],
                    "AllowAutoTopicCreation": False,
                    "IncludeClusterAuthorizedOperations": False,
                    "IncludeTopicAuthorizedOperations": False,
                },
            )
            self.session.learn_topic_ids(ans)
            a.added.append(f"Metadata v{v} for the target's ids of {', '.join(sorted(names))}")

    # -- the loop ------------------------------------------------------------------------------
    def _open(self, i: int, why: str) -> None:
        """Connect (again), and log in where the replay has credentials and the captured connection did,
        or will not itself, before the step at `i`."""
        self.sock = _connect(self.address, self.timeout)
        host, port = self.sock.getsockname()[:2]
        local = f"{host}:{port}"
        host, port = self.sock.getpeername()[:2]
        peer = f"{host}:{port}"
        for a in self.answers[i:]:
            a.client, a.server = local, peer
        if why:
            self.answers[i].added.append(why)
        logged_in = any(a.step.login == "handshake" for a in self.answers[:i])
        if self.sasl is not None and (self.conn.login_first or logged_in):
            hs, auth = self.login()
            self.answers[i].added.append(
                f"SASL login {self.sasl} on connect: handshake error "
                f"{hs.get('ErrorCode')}, authenticate errors "
                f"{[x.get('ErrorCode') for x in auth]}"
            )

    def run(self) -> list[Answer]:
        if not self.steps:
            return self.answers
        t0 = (
            self.t0
            if self.t0 is not None
            else next((s.exchange.ts for s in self.steps if s.exchange.ts is not None), None)
        )
        start = self.start if getattr(self, "start", None) is not None else time.monotonic()
        i, reconnects, why = 0, 0, ""
        try:
            self._pace(self.steps[0], t0, start)  # connect when the captured client sent its first request
            while i < len(self.answers):
                try:
                    self._open(i, why)
                except (OSError, ReplayError) as e:
                    for a in self.answers[i:]:
                        a.error = f"connect: {e}"
                    break
                try:
                    while i < len(self.answers):
                        a = self.answers[i]
                        self._step(a, t0, start)
                        i += 1
                    while self.pending:
                        self.read_one()
                    while self.retries:
                        self._retry(self.retries.pop(0))
                    break
                except (OSError, ReplayError) as e:
                    for a in self.pending.values():
                        a.error = f"{type(e).__name__}: {e}"
                        self.session.finish(a.step)
                    self.pending.clear()
                    self.own.clear()
                    self.retries.clear()
                    self.sock.close()
                    if i < len(self.answers) and self.answers[i].sent_at is not None:
                        i += 1  # sent when the connection failed: reported above, not sent twice
                    if i >= len(self.answers):
                        break
                    if reconnects >= MAX_RECONNECTS:
                        for a in self.answers[i:]:
                            a.error = f"not sent: {e} (after {MAX_RECONNECTS} reconnects)"
                        break
                    reconnects += 1
                    why = f"reconnected ({reconnects} of at most {MAX_RECONNECTS}) after: {e}"
        except _Stopped:
            pass
        finally:
            if getattr(self, "sock", None) is not None:
                self.sock.close()
            for a in self.answers:
                self.session.finish(a.step)
        return self.answers

    def _pace(self, st, t0, start) -> None:
        """Until the step's captured offset from the capture's first send (scaled by the speed); answers
        are read meanwhile, so their latency is the target's, not the pacing's."""
        if not self.speed or t0 is None or st.exchange.ts is None:
            return
        due = start + (st.exchange.ts - t0) / self.speed
        self.due = due
        while (left := due - time.monotonic()) > 0:
            if self.stop is not None and self.stop.is_set():
                raise _Stopped
            if self.pending and select.select([self.sock], [], [], min(left, 0.5))[0]:
                self.read_one()
            elif not self.pending:
                time.sleep(min(left, 0.5))

    def _step(self, a: Answer, t0, start) -> None:
        if self.stop is not None and self.stop.is_set():
            raise _Stopped
        st = a.step
        self.due = None
        self._pace(st, t0, start)
        a.due = self.due
        reads = self.reads
        while self.retries:
            self._retry(self.retries.pop(0))
        if st.login:
            while self.pending:
                self.read_one()
            self._login_step(a)
            return
        frame = self._prepare(a)
        if st.exchange.api_name == "Produce":
            # a partition's first idempotent batch is answered before the next goes: a broker with no state for
            # the producer takes any sequence first, so a later batch overtaking a refused first one (no leader
            # yet on a topic just created) would leave it out of order for good
            while any(x.first_batch for x in self.pending.values()) or any(x.first_batch for x in self.retries):
                if self.retries:
                    self._retry(self.retries.pop(0))
                else:
                    self.read_one()
            a.first_batch = any(c.endswith(" seq 0") and ".Records producer" in c for c in a.changes)
        while len(self.pending) >= self.conn.inflight:
            self.read_one()
        a.held = a.held or self.reads != reads
        last = self.last_answer
        if a.held and last is not None and a.due is not None and last.answered_at >= a.due:
            a.after = last
        a.sent_at, a.frame = time.monotonic(), frame
        a.sent_wall = time.time()
        self.sock.sendall(with_size(frame))
        if st.expect_response:
            self.pending[struct.unpack(">i", frame[4:8])[0]] = a
        else:
            a.error = "no answer expected (acks=0)"
            self.unexpected[struct.unpack(">i", frame[4:8])[0]] = a
            self.session.finish(st)


def error_codes_in(obj):
    """Every ErrorCode value in a decoded body."""
    from replay.session import values

    return values(obj, "ErrorCode")


def replay(
    conns: list,
    address: str,
    *,
    speed: float | None = 1.0,
    timeout: float = TIMEOUT,
    session=None,
    ranges=None,
    sasl=None,
    allow_writes: bool = False,
    interrupted: threading.Event | None = None,
) -> list[Answer]:
    """All connections at once (one thread each, bounded by the timeouts); answers in plan order.
    One session for all: a producer id learned on one connection is used on another."""
    from replay.session import Session

    session = session or Session()
    interrupted = interrupted if interrupted is not None else threading.Event()
    t0 = min(
        (s.exchange.ts for c in conns for s in c.steps if s.action == "send" and s.exchange.ts is not None),
        default=None,
    )
    replays = [
        _Replay(
            c,
            address,
            speed=speed,
            timeout=timeout,
            session=session,
            ranges=ranges,
            sasl=sasl,
            allow_writes=allow_writes,
            stop=interrupted,
            t0=t0,
        )
        for c in conns
    ]
    start = time.monotonic()
    for r in replays:
        r.start = start
    threads = [threading.Thread(target=r.run, daemon=True) for r in replays]
    # A thread whose send time has come waits for the GIL up to the switch interval (5 ms by default)
    # while another decodes an answer: that wait is most of the pacing error.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        # Ctrl-C: what has been answered so far still makes a report; the threads are daemons (and bounded
        # by the timeouts), the rest is listed as not sent
        interrupted.set()
        for r in replays:
            for a in r.answers:
                if a.sent_at is None and not a.error:
                    a.not_sent = "interrupted (Ctrl-C)"
                elif a.response is None and not a.error:
                    a.error = "interrupted (Ctrl-C) before the answer"
    finally:
        sys.setswitchinterval(switch)
    return [a for r in replays for a in r.answers]
