"""The only part of the replay that opens sockets: send planned steps to the target, collect answers.

Each captured connection gets its own TCP connection (one thread each), requests go in captured order
with at most the captured number in flight, paced by the captured send offsets / speed.
"""
from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

from protocol.codec import decode_response, encode_request, with_size

TIMEOUT = 10.0          # every connect/send/recv
MAX_FRAME = 100 << 20


class ReplayError(Exception):
    pass


@dataclass
class Answer:
    step: object            # plan.Step
    sent_at: float | None = None
    latency_ms: float | None = None
    response: dict | None = None
    error: str = ""         # why there is no decoded response


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


def _connect(address: str, timeout: float):
    host, _, port = address.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=timeout)
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


def replay_connection(conn, address: str, *, speed: float | None = 1.0, timeout: float = TIMEOUT) -> list[Answer]:
    """Send one planned connection's steps; `speed` None = as fast as the target answers."""
    steps = [s for s in conn.steps if s.action == "send"]
    answers = [Answer(s) for s in steps]
    if not steps:
        return answers
    t0 = next((s.exchange.ts for s in steps if s.exchange.ts is not None), None)
    pending: dict[int, Answer] = {}
    try:
        sock = _connect(address, timeout)
    except OSError as e:
        for a in answers:
            a.error = f"connect: {e}"
        return answers
    start = time.monotonic()

    def read_one():
        frame = _recv_frame(sock)
        corr = struct.unpack(">i", frame[:4])[0]
        a = pending.pop(corr, None)
        if a is None:
            raise ReplayError(f"answer with unknown correlation id {corr}")
        a.latency_ms = (time.monotonic() - a.sent_at) * 1000
        st = a.step
        try:
            a.response = decode_response(frame, st.exchange.api_key, st.version, lenient=True).body
        except Exception as e:  # noqa: BLE001 - garbage from the target is a report entry
            a.error = f"undecodable answer: {e}"

    try:
        for a in answers:
            st = a.step
            if speed and t0 is not None and st.exchange.ts is not None:
                delay = (st.exchange.ts - t0) / speed - (time.monotonic() - start)
                if delay > 0:
                    time.sleep(min(delay, timeout))
            while len(pending) >= conn.inflight:
                read_one()
            a.sent_at = time.monotonic()
            sock.sendall(with_size(st.frame))
            if st.expect_response:
                pending[struct.unpack(">i", st.frame[4:8])[0]] = a
            else:
                a.error = "no answer expected (acks=0)"
        while pending:
            read_one()
    except (OSError, ReplayError) as e:
        for a in pending.values():
            a.error = f"{type(e).__name__}: {e}"
        for a in answers:
            if a.sent_at is None:
                a.error = f"not sent: {e}"
    finally:
        sock.close()
    return answers


def replay(conns: list, address: str, *, speed: float | None = 1.0, timeout: float = TIMEOUT) -> list[Answer]:
    """All connections at once (one thread each, bounded by the timeouts); answers in plan order."""
    results: dict[int, list] = {}

    def run(c):
        results[c.connection] = replay_connection(c, address, speed=speed, timeout=timeout)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [a for c in conns for a in results.get(c.connection, [])]
