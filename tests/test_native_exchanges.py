"""The native exchanges layer (native/py/src/exchanges.rs) against dissector.exchanges, event for event.

Every conversation tests/test_exchanges.py builds (roles, pairing, SASL, gaps, resyncs,
trailing bytes, version mismatches, garbage) runs through both layers: the items each
event gives, and the oldest open time after it, must be the same, but for the resync rows the
core alone names (bytes a hunt from the midstream start skipped, which the frozen oracle leaves
unnamed) and the count of a frame's bytes before a gap that the core's gap_in_frame row names
(tests/native_compare.py without_core_only).
"""

from __future__ import annotations

import inspect

import pytest

_native = pytest.importorskip("dissector._native")

from dissector import native  # noqa: E402
from tests.oracle import exchanges as py_exchanges  # noqa: E402
from tests.redact_reference import redact  # noqa: E402
from tests.oracle.tcp import Close, Data, Gap, Open, StreamAnomaly  # noqa: E402
from tests import test_exchanges  # noqa: E402
from tests.native_compare import assert_same_items, without_core_only  # noqa: E402


def native_layer(ports=()):
    cfg = native.config(ports=ports, max_frame_size=py_exchanges.DEFAULT_MAX_FRAME_SIZE, connections=False, window=0.0)
    return _native.ExchangesTest(cfg)


def as_tuple(e):
    if type(e) is Open:
        return ("open", e.conn, e.client, e.server, e.ts, e.syn_seen)
    if type(e) is Data:
        return ("data", e.conn, e.sender, e.receiver, e.ts, bytes(e.data))
    if type(e) is Gap:
        return ("gap", e.conn, e.sender, e.receiver, e.ts, e.size)
    if type(e) is Close:
        return ("close", e.conn, e.ts, e.reason, e.retransmissions, e.out_of_order)
    if type(e) is StreamAnomaly:
        return ("anomaly", e.conn, e.ts, e.kind, e.detail)
    raise AssertionError(e)


def both(events, ports=(), finish_ts=None):
    """Feed both layers; compare after every event. Returns Python's items."""
    py = py_exchanges.Exchanges(ports=ports)
    rs = native_layer(ports)
    out = []
    for i, e in enumerate(events):
        want = py.feed(e)
        got = rs.feed(as_tuple(e))
        assert_same_items(without_core_only(got, want), want, f"event {i} {type(e).__name__}")
        assert rs.oldest_open() == py.oldest_open(), f"oldest_open after event {i}"
        out += want
    want, got = py.finish(finish_ts), rs.finish(finish_ts)
    assert_same_items(without_core_only(got, want), want, "finish")
    return out + want


def _differential_run(self, *, ports=(), close=True, secrets=False):
    events = self.events + ([Close(self.conn, self.t + 1, "fin")] if close else [])
    out = both(events, ports, self.t + 2)
    return out if secrets else [redact(x) for x in out]


CASES = [
    name
    for name, fn in inspect.getmembers(test_exchanges, inspect.isfunction)
    if name.startswith("test_") and fn.__module__ == test_exchanges.__name__
]


@pytest.mark.parametrize("name", CASES)
def test_conversations_of_test_exchanges(name, monkeypatch):
    monkeypatch.setattr(test_exchanges.Conv, "run", _differential_run)
    fn = getattr(test_exchanges, name)
    if hasattr(fn, "hypothesis"):
        fn()  # the garbage property: each example runs through both layers
    else:
        fn()
