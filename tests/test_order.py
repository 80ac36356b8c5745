"""Output order: request-time order within a bounded reordering window (dissector/order.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import protocol
from dissector import dissect
from dissector.items import Anomaly, Exchange
from tests.oracle.order import Reorder, sort_key
from tests.pcapgen import Flow, write_pcap

ROOT = Path(__file__).resolve().parents[1]
PCAPS = ROOT.parent / "shared" / "pcaps"
CAPTURES = sorted((ROOT / "samples").glob("*.pcap")) + (sorted(PCAPS.glob("*.pcap")) if PCAPS.is_dir() else [])
T0 = 1_700_000_000.0


def rq(api_key, version, corr, body=None):
    return protocol.with_size(
        protocol.encode_request(api_key, version, {"CorrelationId": corr, "ClientId": "ord"}, body or {})
    )


def rs(api_key, version, corr, body=None):
    return protocol.with_size(protocol.encode_response(api_key, version, {"CorrelationId": corr}, body or {}))


def at(pkt, ts):
    pkt.time = T0 + ts
    return pkt


# kraft3-ak.pcap starts while two KRaft followers' long-poll Fetches are in flight: their answers
# are orphans, kept in case the request comes late and reported when the connection closes, past
# the 5 s window (docs/commands.md "Order"), as an unanswered request is
IN_ORDER = [c for c in CAPTURES if c.name != "kraft3-ak.pcap"]


@pytest.mark.parametrize("cap", IN_ORDER, ids=lambda p: p.name)
def test_real_captures_come_out_in_time_order(cap):
    items = list(dissect(cap))
    keys = [sort_key(x) for x in items]
    assert len(items) > 3
    # the bundled captures have no answer slower than the window: strictly sorted, ties by connection
    assert keys == sorted(keys)
    assert [x.type for x in items].count("exchange") == sum(x.type == "exchange" for x in items)


def _slow_and_fast(tmp_path, slow_answer_at: float, fast: int, step: float):
    """Connection A asks at t=0 and is answered at `slow_answer_at`; connection B does `fast`
    quick exchanges from t=0.1 every `step` seconds meanwhile."""
    a = Flow(client=("10.0.0.1", 40001))
    b = Flow(client=("10.0.0.1", 40002))
    pkts = [at(p, 0.0) for p in a.handshake()] + [at(p, 0.0) for p in b.handshake()]
    pkts.append(at(a.send("c", rq(3, 12, 1)), 0.001))
    for i in range(fast):
        t = 0.1 + i * step
        pkts += [at(b.send("c", rq(18, 3, 100 + i)), t), at(b.send("s", rs(18, 3, 100 + i)), t + 0.002)]
    pkts.append(at(a.send("s", rs(3, 12, 1)), slow_answer_at))
    end = max(slow_answer_at, 0.1 + fast * step) + 0.01
    pkts += [at(p, end) for p in a.close()] + [at(p, end) for p in b.close()]
    pkts.sort(key=lambda p: p.time)
    return write_pcap(tmp_path / "slow.pcap", pkts)


def test_slow_answer_is_written_at_its_request_time(tmp_path):
    cap = _slow_and_fast(tmp_path, slow_answer_at=1.0, fast=5, step=0.1)
    items = list(dissect(cap))
    assert [(x.api_name, x.correlation_id) for x in items] == [("Metadata", 1)] + [
        ("ApiVersions", 100 + i) for i in range(5)
    ]
    assert items[0].latency_ms == pytest.approx(999.0) and items[0].status == "ok"
    assert [x.ts for x in items] == sorted(x.ts for x in items)


def test_answer_slower_than_the_window_comes_out_late(tmp_path):
    # 40 fast exchanges over 4 s; the slow one answers at 3 s, past a 1 s window
    cap = _slow_and_fast(tmp_path, slow_answer_at=3.0, fast=40, step=0.1)
    items = list(dissect(cap, window=1.0))
    names = [(x.api_name, x.correlation_id) for x in items]
    slow = names.index(("Metadata", 1))
    assert len(items) == 41 and items[slow].status == "ok"
    # late: fast exchanges asked after it but more than the window before its answer went first ...
    assert slow > 0 and all(x.ts < T0 + 3.0 - 1.0 for x in items[:slow])
    # ... and everything else is in order
    rest = [x.ts for x in items if x is not items[slow]]
    assert rest == sorted(rest)
    # with the default 5 s window the same capture is fully ordered
    assert [(x.api_name, x.correlation_id) for x in dissect(cap)][0] == ("Metadata", 1)


def _ex(ts, conn=0, size=10):
    return Exchange(
        ts=ts,
        response_ts=ts + 0.001,
        latency_ms=1.0,
        connection=conn,
        client="c",
        broker="b",
        api_key=18,
        api_name="ApiVersions",
        api_version=3,
        correlation_id=1,
        client_id=None,
        status="ok",
        error_codes=[],
        request={},
        response={},
        request_size=size,
        response_size=size,
    )


def test_reorder_watermark_and_bounds():
    r = Reorder(window=10.0, max_items=3, max_bytes=1 << 30)
    r.add([_ex(5.0), _ex(2.0, conn=1), Anomaly(connection=None, ts=3.0, kind="x", detail="y")])
    # an open request at t=1 holds everything after it
    assert r.release(now=6.0, oldest_open=1.0) == []
    # with it answered, items strictly before now come out, sorted
    got = r.release(now=6.0, oldest_open=None)
    assert [sort_key(x) for x in got] == [(2.0, 1), (3.0, -1), (5.0, 0)]
    # the window: an open request older than now - window stops holding
    r.add([_ex(7.0)])
    assert [x.ts for x in r.release(now=20.0, oldest_open=1.0)] == [7.0]
    # the item bound: past max_items the oldest go early, watermark or not
    r.add([_ex(30.0 + i) for i in range(5)])
    assert r.over()
    assert [x.ts for x in r.release(now=40.0, oldest_open=29.0)] == [30.0, 31.0]
    assert len(r) == 3 and [x.ts for x in r.flush()] == [32.0, 33.0, 34.0]
    # the byte bound
    r = Reorder(window=10.0, max_items=100, max_bytes=3000)
    r.add([_ex(float(i), size=1000) for i in range(3)])
    assert [x.ts for x in r.release(now=3.0, oldest_open=0.0)] == [0.0, 1.0]
