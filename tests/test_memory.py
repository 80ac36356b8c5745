"""Memory stays within the documented bound on captures built to exhaust it.

The bound (dissector/__init__.py): per open connection ~12 KiB of state and up
to 128 KiB per direction of delivered bytes kept for overlap checks, plus
out-of-order data over all connections up to Reassembler.max_buffer_total, plus
frames in progress over all connections up to Exchanges.max_partial_bytes.
Here both budgets are set to 4 MiB so the captures stay small, and tracemalloc's
peak is compared with and without them. TCP packets are built as the capture
reader hands them on (no file): these are pathologies, not traffic.
"""

from __future__ import annotations

import struct
import tracemalloc

from tests.oracle.capture import Packet
from tests.oracle.exchanges import Exchanges
from tests.oracle.tcp import Reassembler

MSS = 1448
BUDGET = 4 << 20


def _produce_head(size: int, corr: int) -> bytes:
    """A Produce v9 request's size prefix and header: the start of a frame of `size` bytes."""
    return struct.pack(">ihhih", size, 0, 9, corr, 1) + b"x" + b"\x00"


def _run(packets, *, budgets: bool) -> tuple[int, list]:
    kw = {"max_buffer_total": BUDGET} if budgets else {}
    reasm = Reassembler(**kw)
    ex = Exchanges(max_partial_bytes=BUDGET) if budgets else Exchanges()
    out: list = []
    tracemalloc.start()
    try:
        for pkt in packets():
            for ev in reasm.feed(pkt):
                out += ex.feed(ev)
        for ev in reasm.finish():
            out += ex.feed(ev)
        out += ex.finish(None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, out


def _conn(i: int):
    return f"10.1.{i // 250}.{i % 250 + 1}", 40000 + i % 20000, "10.0.0.2", 9092


def test_connections_announcing_100_mib_frames_stay_within_the_partial_frame_budget():
    n_conns, per_conn = 48, 1 << 20  # 48 x 1 MiB of 100 MiB frames: 48 MiB if all were held

    def packets():
        idx = 0
        seqs = {}
        for i in range(n_conns):
            src, sport, dst, dport = _conn(i)
            idx += 1
            yield Packet(float(idx), src, sport, dst, dport, 1000, 0, 0x02, b"", 0, idx)
            seqs[i] = 1001
        # interleave the connections, as a broker under load sees them
        first = _produce_head(100 << 20, 7)
        for k in range(per_conn // MSS):
            for i in range(n_conns):
                src, sport, dst, dport = _conn(i)
                payload = (first + bytes(MSS - len(first))) if k == 0 else bytes(MSS)
                idx += 1
                yield Packet(float(idx), src, sport, dst, dport, seqs[i], 1, 0x18, payload, 0, idx)
                seqs[i] += len(payload)

    unbounded, _ = _run(packets, budgets=False)
    peak, out = _run(packets, budgets=True)
    dropped = [a for a in out if a.type == "anomaly" and a.kind == "frame_over_budget"]
    assert unbounded > 48 << 20  # the capture really asks for it
    # the reassembler keeps up to 128 KiB of each direction's delivered bytes for overlap checks
    assert peak < BUDGET + n_conns * (128 << 10) + (3 << 20), (peak, unbounded)
    assert len(dropped) >= n_conns // 4
    assert "100-byte" not in dropped[0].detail and "104857600-byte frame" in dropped[0].detail
    # each dropped request keeps its place: reported undecodable with the reason, not silently gone
    lost = [
        e
        for e in out
        if e.type == "exchange" and e.request and "memory budget" in str(e.request.get("_decode_error", ""))
    ]
    assert len(lost) == len(dropped)


def test_thousands_of_connections_with_holes_stay_within_the_out_of_order_budget():
    n_conns, behind = 3000, 3  # each: a request's first segment, its second lost, 3 held behind

    def packets():
        idx = 0
        head = _produce_head(8 * MSS, 1)
        for i in range(n_conns):
            src, sport, dst, dport = _conn(i)
            idx += 1
            yield Packet(float(idx), src, sport, dst, dport, 1000, 0, 0x02, b"", 0, idx)
            idx += 1
            yield Packet(float(idx), src, sport, dst, dport, 1001, 1, 0x18, head + bytes(MSS - len(head)), 0, idx)
            for k in range(behind):
                idx += 1
                yield Packet(
                    float(idx), src, sport, dst, dport, 1001 + MSS * (k + 2), 1, 0x18, bytes([k]) * MSS, 0, idx
                )

    unbounded, _ = _run(packets, budgets=False)
    peak, out = _run(packets, budgets=True)
    held = n_conns * behind * MSS  # 12.4 MiB waiting behind holes without the budget
    assert unbounded > held
    per_conn = (unbounded - held) / n_conns  # the connection state and its first segment
    assert per_conn < 16 << 10, per_conn
    assert peak < BUDGET + n_conns * per_conn + (2 << 20), (peak, unbounded)
    assert peak < unbounded - (6 << 20)
    gaps = [a for a in out if a.type == "anomaly" and a.kind == "gap_in_frame"]
    assert len(gaps) == n_conns  # every connection's loss is reported, budget or not
