"""native/py/src/frames.rs against dissector/frames.py: the same calls give the same outputs.

DualSplitter drives both splitters with every call (feed, gap, drop, finish) and
compares, after each one, the outputs (frames and anomalies as tuples, detail
strings and head bytes included), dropped/buffered/hunting/partial_ts, and the
plausible() calls each side made (buffer, offset, end, which predicate). It is a
drop-in FrameSplitter, so it also runs under tests/test_frames.py, the splitter
tests of tests/test_accounting.py, dissector.exchanges (every real capture, holes
cut in them, tests/test_exchanges.py) and hypothesis-generated streams.

Two rows are the core's alone, where the frozen oracle skips bytes without naming them: a hunt
begun at the midstream start that finds no boundary names what it skipped at finish(), and one
whose first offset waited for its judge while a hole dropped the bytes held names them when
that judge syncs at the next bytes fed. feed() and finish() expect those rows exactly where the
oracle's state says they are due. And where a gap ends a frame or its size prefix, the oracle's
gap_in_frame row says only "resyncing" and the core's names the bytes of it skipped before the
gap: gap() expects those words, with the count of bytes the oracle dropped.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
import struct
import zlib
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

_native = pytest.importorskip("dissector._native")

import tests.oracle.exchanges as exchanges_mod  # noqa: E402
from tests.oracle import dissect  # noqa: E402
from dissector.items import Exchange  # noqa: E402
from tests.oracle.exchanges import plausible_request  # noqa: E402
from tests.oracle.frames import DEFAULT_MAX_FRAME_SIZE, HUNT_WINDOW, VERIFIED, Frame, FrameAnomaly, FrameSplitter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted((ROOT.parent / "shared" / "pcaps").glob("*.pcap*"))


def _always(buf, pos, end):
    return True


def as_tuple(x) -> tuple:
    if type(x) is Frame:
        assert type(x.data) is bytes
        return ("frame", x.ts, x.offset, x.data)
    assert type(x) is FrameAnomaly
    return ("anomaly", x.ts, x.kind, x.detail, bytes(x.head))


def _logged(fn, name: str, log: list):
    def plausible(buf, pos, end):
        log.append((name, len(buf), zlib.crc32(buf), pos, end))
        return fn(buf, pos, end)

    return plausible


def with_bytes_before_gap(detail: str, n: int) -> str:
    """The core's words for an oracle's gap_in_frame row that resyncs after skipping `n` bytes."""
    if detail.endswith("; resyncing"):
        return detail.removesuffix("resyncing") + f"skipped the {n} bytes of it before the gap, resyncing"
    return detail


class DualSplitter:
    """frames.FrameSplitter and _native.FrameSplitter side by side; returns the Python outputs."""

    def __init__(
        self,
        plausible=_always,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        min_frame_size: int = 0,
        hunting: bool = False,
        plausible_first=None,
    ):
        self.py_log: list = []
        self.rs_log: list = []
        kw = dict(max_frame_size=max_frame_size, min_frame_size=min_frame_size, hunting=hunting)
        self.py = FrameSplitter(
            _logged(plausible, "p", self.py_log),
            **kw,
            plausible_first=plausible_first and _logged(plausible_first, "f", self.py_log),
        )
        self.rs = _native.FrameSplitter(
            _logged(plausible, "p", self.rs_log),
            **kw,
            plausible_first=plausible_first and _logged(plausible_first, "f", self.rs_log),
        )
        self.fed = self.framed = 0
        self.calls = 0
        self._check([], [])

    def _check(self, a: list, b: list, first: tuple = (), last: tuple = ()) -> None:
        """Python's outputs `a` are the core's `b`, but for the rows the core alone names first and last."""
        assert list(first) + [as_tuple(x) for x in a] + list(last) == b, self.calls
        assert self.py_log == self.rs_log, self.calls
        self.py_log.clear()
        self.rs_log.clear()
        py, rs = self.py, self.rs
        assert (py.dropped, py.buffered, py.hunting, py.partial_ts) == (
            rs.dropped,
            rs.buffered,
            rs.hunting,
            rs.partial_ts,
        )
        for x in b:
            if x[0] == "frame":
                self.framed += 4 + len(x[3])
        # `buffered` counts the bytes held, not the size prefix of a frame in progress (finish() drops it)
        unseen = self.fed - (self.framed + rs.dropped + rs.buffered)
        assert unseen in ((0, 4) if rs.partial_ts is not None else (0,)), self.calls
        self.calls += 1

    def feed(self, data, ts):
        self.fed += len(data)
        py = self.py
        # bytes a hole dropped while the first offset waited for its judge: the oracle syncs at
        # the next bytes without naming them, the core names them as any hunt's skipped bytes
        held = py._skipped if py._hunting and py._first else 0
        at = py._offset - len(py._tail)
        a = py.feed(data, ts)
        b = self.rs.feed(bytes(data), ts)
        first_synced = (
            held
            and not py._first
            and (not py._hunting or any(type(x) is Frame for x in a))
            and not (a and type(a[0]) is FrameAnomaly and a[0].kind == "resync")
        )
        detail = f"skipped {held} bytes after midstream start; frame boundary found at stream offset {at}"
        self._check(a, b, first=(("anomaly", ts, "resync", detail, b""),) if first_synced else ())
        return a

    def gap(self, size, ts):
        # A frame or size prefix that ends inside the gap: the frozen oracle's row says "resyncing"
        # alone, the core's names the bytes of it skipped before the gap (what the oracle dropped).
        before = self.py.dropped
        a = self.py.gap(size, ts)
        said = [
            dataclasses.replace(x, detail=with_bytes_before_gap(x.detail, self.py.dropped - before))
            if type(x) is FrameAnomaly and x.kind == "gap_in_frame"
            else x
            for x in a
        ]
        self._check(said, self.rs.gap(size, ts))
        return a

    def drop(self, ts, why):
        a = self.py.drop(ts, why)
        self._check(a, self.rs.drop(ts, why))
        return a

    def finish(self, ts):
        # A hunt from the midstream start that never found a boundary is named by the core as any
        # other hunt is; the frozen oracle leaves it out. That row, and nothing else, may differ.
        py = self.py
        lost = py._skipped + len(py._tail)
        unnamed = py._want < 0 and not py._head and py._hunting and lost and py._hunt_reason == "midstream start"
        a = py.finish(ts)
        detail = f"stream ended before a frame boundary was found ({lost} bytes skipped after midstream start)"
        self._check(a, self.rs.finish(ts), last=(("anomaly", ts, "resync", detail, b""),) if unnamed else ())
        return a

    @property
    def dropped(self):
        return self.py.dropped

    @property
    def buffered(self):
        return self.py.buffered

    @property
    def hunting(self):
        return self.py.hunting

    @property
    def partial_ts(self):
        return self.py.partial_ts


@pytest.fixture
def dual(monkeypatch):
    """The oracle's exchanges layer builds DualSplitters."""
    monkeypatch.setattr(exchanges_mod, "FrameSplitter", DualSplitter)


# -- the existing tests, with both splitters ------------------------------------------------------

from tests import test_accounting, test_exchanges, test_frames  # noqa: E402


def _plain_tests(module):
    return [
        name
        for name, f in vars(module).items()
        if name.startswith("test_") and callable(f) and not inspect.signature(f).parameters
    ]


@pytest.mark.parametrize("name", _plain_tests(test_frames))
def test_frames_cases(monkeypatch, name):
    monkeypatch.setattr(test_frames, "FrameSplitter", DualSplitter)
    getattr(test_frames, name)()


@pytest.mark.parametrize("name", _plain_tests(test_accounting))
def test_accounting_splitter_cases(monkeypatch, name):
    monkeypatch.setattr(test_accounting, "FrameSplitter", DualSplitter)
    getattr(test_accounting, name)()


@pytest.mark.parametrize("name", _plain_tests(test_exchanges))
def test_exchanges_cases(dual, name):
    getattr(test_exchanges, name)()


@pytest.mark.parametrize("path", SAMPLES + SHARED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_captures(dual, path):
    items = list(dissect(path, show_secrets=True, connections=True))
    assert items


@pytest.mark.parametrize(
    "name,seed",
    [("java-codecs-ak.pcap", 1), ("kafka-python-basic.pcap", 2), ("confluent-codecs.pcap", 3), ("secrets-ak.pcap", 4)],
)
def test_real_captures_with_holes(dual, tmp_path, name, seed):
    test_accounting.test_holes_are_gaps_and_what_they_damage_is_skipped(tmp_path, name, seed)


@pytest.mark.parametrize("name", ["java-admin-ak.pcap", "aiokafka.pcap", "old-protocol.pcap", "sasl-ak.pcap"])
def test_real_captures_with_random_holes(dual, tmp_path, name):
    rng = random.Random(name)
    cut = tmp_path / name
    test_accounting._drop(ROOT / "samples" / name, cut, lambda i, n: i > 2 and rng.random() < 0.3)
    list(dissect(cut, show_secrets=True, connections=True))


def test_partial_frames_over_the_memory_budget(dual, monkeypatch):
    # a tiny budget checked at every chunk: drop() of frames in progress, then the skip of their rest
    monkeypatch.setattr(exchanges_mod, "_BUDGET_EVERY", 1)
    orig = exchanges_mod.Exchanges.__init__

    def small_budget(self, *a, **kw):
        orig(self, *a, **kw)
        self.max_partial_bytes = 300

    monkeypatch.setattr(exchanges_mod.Exchanges, "__init__", small_budget)
    kinds = set()
    big = ("admin", "aiokafka", "confluent-codecs", "errors", "java-admin-ak", "java-codecs-ak")
    for path in (ROOT / "samples" / f"{n}.pcap" for n in big):
        kinds |= {getattr(x, "kind", None) for x in dissect(path, show_secrets=True, connections=True)}
    assert "frame_over_budget" in kinds


# -- direct cases ---------------------------------------------------------------------------------


def _size(n: int) -> bytes:
    return struct.pack(">i", n)


def test_bad_sizes_in_and_across_chunks():
    for cut in range(0, 14):
        for prefix in (_size(-1), _size(-(1 << 31)), _size(1000), _size(0x7FFFFFFF)):
            s = DualSplitter(max_frame_size=999, min_frame_size=2)
            data = _size(3) + b"abc" + prefix + b"0123456789" + _size(2) + b"zz"
            s.feed(data[:cut], 1.0)
            s.feed(data[cut:], 2.0)
            s.finish(3.0)


def test_partial_prefix_then_gaps_drop_and_finish():
    s = DualSplitter(plausible_request, min_frame_size=8)
    s.feed(b"\x00\x00", 0.0)
    s.gap(7, 1.0)  # inside a size prefix
    s.feed(b"\x00\x00\x00\x10abc", 2.0)
    s.gap(0, 3.0)  # while hunting
    s.finish(4.0)
    s = DualSplitter()
    s.feed(_size(100) + b"x" * 30, 0.0)
    s.drop(1.0, "budget")  # the rest is skipped as it comes
    s.drop(1.5, "again")  # nothing in progress: no anomaly
    s.gap(20, 2.0)  # inside the skipped rest
    s.feed(b"y" * 10, 2.5)
    s.gap(100, 2.6)  # past its end: hunting
    s.feed(b"y" * 60 + _size(1) + b"z", 3.0)
    s.feed(_size(5) + b"ab", 4.0)
    s.finish(5.0)
    s.feed(_size(1) + b"q", 6.0)  # after finish(), as frames.py allows
    s.finish(7.0)


def test_verified_beats_earlier_undecided_and_true_does_not():
    def verdicts(buf, pos, end):
        tag = bytes(buf[pos + 4 : pos + 5])
        return {b"W": None, b"T": True, b"V": VERIFIED}.get(tag, False)

    for chunk in (1, 3, 7, 100):
        s = DualSplitter(verdicts, min_frame_size=1, hunting=True)
        data = (
            b"\xff" * 3
            + _size(50)
            + b"W"
            + b"\xff" * 4
            + _size(1)
            + b"T"
            + b"\xff" * 2
            + _size(2)
            + b"Vv"
            + _size(1)
            + b"T"
        )
        for i in range(0, len(data), chunk):
            s.feed(data[i : i + chunk], float(i))
        s.finish(99.0)


def test_hunt_window_bounds_the_undecided_offsets():
    # a candidate that is never decided: held up to HUNT_WINDOW bytes, then given up
    def never_decided(buf, pos, end):
        return None if buf[pos + 4 : pos + 8] == b"WAIT" else buf[pos + 4 : pos + 8] == b"GOOD" and VERIFIED

    junk = b"\x7f" * (1 << 16)
    for hunting, first in ((True, never_decided), (False, None)):
        s = DualSplitter(never_decided, min_frame_size=4, hunting=hunting, plausible_first=first)
        s.feed((b"" if hunting else _size(-1)) + _size(0x100000) + b"WAIT", 0.0)
        peak = 0
        for k in range(HUNT_WINDOW // len(junk) + 2):
            s.feed(junk, float(k))
            peak = max(peak, s.rs.buffered)
        assert peak <= HUNT_WINDOW
        s.feed(_size(4) + b"GOOD" + _size(1) + b"x", 1e3)
        s.finish(2e3)


def test_midstream_first_offset_waits_for_plausible_first():
    lenient = lambda b, p, e: plausible_request(b, p, e, strict=False)  # noqa: E731
    frames = [f for f in _real_frames()[0] if len(f) < 200][:20]
    data = b"".join(_size(len(f)) + f for f in frames)
    for chunk in (1, 2, 5, 13, 64):
        for first in (None, lenient):
            s = DualSplitter(plausible_request, min_frame_size=8, hunting=True, plausible_first=first)
            for i in range(0, len(data), chunk):
                s.feed(data[i : i + chunk], float(i))
            s.gap(0, 1e4)
            s.feed(data[7:], 1e5)
            s.finish(1e6)


def test_long_garbage_in_small_chunks():
    rng = random.Random(7)
    junk = bytes(rng.getrandbits(8) for _ in range(200_000))
    s = DualSplitter(_pseudo_random(3), min_frame_size=4, max_frame_size=1 << 16, hunting=True)
    for i in range(0, len(junk), 1460):
        s.feed(junk[i : i + 1460], float(i))
    s.finish(1e9)


# -- hypothesis streams ---------------------------------------------------------------------------


@cache
def _real_frames() -> tuple[list[bytes], list[bytes]]:
    """Requests and responses (without size prefix) from the samples."""
    reqs, resps = [], []
    for name in ("java-codecs-ak.pcap", "kafka-python-basic.pcap", "admin.pcap", "sasl-ak.pcap"):
        for it in dissect(ROOT / "samples" / name, show_secrets=True):
            if type(it) is Exchange:
                if it.request_raw and len(it.request_raw) <= 3000:
                    reqs.append(bytes(it.request_raw))
                if it.response_raw and len(it.response_raw) <= 3000:
                    resps.append(bytes(it.response_raw))
    return reqs, resps


def _pseudo_random(seed: int):
    """A deterministic plausible(): the candidate's first bytes decide (None / False / True / VERIFIED)."""

    def plausible(buf, pos, end):
        h = zlib.crc32(bytes(buf[pos : pos + 8]), seed)
        if end - pos < 4 + h % 37:
            return None
        return (False, False, False, True, VERIFIED, None)[(h >> 8) % 6]

    return plausible


def _response_plausible(corrs: frozenset, window: int):
    """Like exchanges' response test: a pending correlation id, decided when the frame is whole."""

    def plausible(buf, pos, end):
        if end - pos < 8:
            return None
        size, corr = struct.unpack_from(">ii", buf, pos)
        if corr not in corrs:
            return False
        if end - pos >= 4 + size:
            return VERIFIED
        return None if size + 4 <= window else True

    return plausible


def _response_first(corrs: frozenset):
    def plausible(buf, pos, end):
        if end - pos < 8:
            return None
        corr = struct.unpack_from(">i", buf, pos + 4)[0]
        return corr in corrs or 0 <= corr < min(corrs, default=0)

    return plausible


@st.composite
def scenarios(draw):
    reqs, resps = _real_frames()
    kind = draw(st.sampled_from(["request", "response", "random", "always"]))
    max_frame_size = draw(st.sampled_from([DEFAULT_MAX_FRAME_SIZE, 5000, 300, 64, 0]))
    min_frame_size = draw(st.sampled_from([0, 0, 4, 8, 30, -2]))
    hunting = draw(st.booleans())
    first = None
    if kind == "request":
        plausible = plausible_request
        if hunting and draw(st.booleans()):
            first = lambda b, p, e: plausible_request(b, p, e, strict=False)  # noqa: E731
        real = reqs
    elif kind == "response":
        real = resps
        chosen = draw(st.sets(st.sampled_from(resps), max_size=8))
        corrs = frozenset(struct.unpack_from(">i", f)[0] for f in chosen)
        plausible = _response_plausible(corrs, draw(st.sampled_from([HUNT_WINDOW, 100])))
        if hunting and draw(st.booleans()):
            first = _response_first(corrs)
    else:
        real = reqs + resps
        plausible = _pseudo_random(draw(st.integers(0, 3))) if kind == "random" else _always
        if hunting and draw(st.booleans()):
            first = draw(st.sampled_from([_always, _pseudo_random(9), lambda b, p, e: None]))

    piece = st.one_of(
        st.sampled_from(real).map(lambda f: _size(len(f)) + f),
        st.binary(max_size=60).map(lambda b: _size(len(b)) + b),
        st.integers(0, 3000).map(lambda n: _size(n) + bytes(n)),
        st.binary(min_size=1, max_size=40),  # garbage
        st.integers(-(1 << 31), -1).map(_size),  # negative size
        st.integers(max(max_frame_size, 0) + 1, (1 << 31) - 1).map(_size),  # oversized
    )
    stream = b"".join(draw(st.lists(piece, max_size=25)))
    events = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(stream)),
                st.one_of(
                    st.tuples(st.just("gap"), st.one_of(st.integers(0, 12), st.integers(0, 400)), st.booleans()),
                    st.tuples(st.just("drop")),
                    st.tuples(st.just("finish")),
                ),
            ),
            max_size=10,
        )
    )
    chunks = draw(st.lists(st.one_of(st.integers(1, 40), st.integers(1, 2000)), min_size=1, max_size=10))
    return dict(
        plausible=plausible,
        first=first,
        hunting=hunting,
        max_frame_size=max_frame_size,
        min_frame_size=min_frame_size,
        stream=stream,
        events=sorted(events, key=lambda e: e[0]),
        chunks=chunks,
        end=draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios())
def test_generated_streams(sc):
    s = DualSplitter(
        sc["plausible"],
        max_frame_size=sc["max_frame_size"],
        min_frame_size=sc["min_frame_size"],
        hunting=sc["hunting"],
        plausible_first=sc["first"],
    )
    stream, chunks = sc["stream"], sc["chunks"]
    pos = k = 0
    ts = 0.0

    def feed_to(stop):
        nonlocal pos, k, ts
        while pos < stop:
            n = min(chunks[k % len(chunks)], stop - pos)
            k += 1
            ts += 0.5
            s.feed(stream[pos : pos + n], ts)
            pos += n

    for at, ev in sc["events"]:
        feed_to(at)
        ts += 0.25
        if ev[0] == "gap":
            lost = min(ev[1], len(stream) - pos)
            s.gap(lost if ev[2] else 0, ts)
            pos += lost
        elif ev[0] == "drop":
            s.drop(ts, "frames in progress held too much")
        else:
            s.finish(ts)
    feed_to(len(stream))
    if sc["end"]:
        s.finish(ts + 1)
        assert s.rs.buffered == 0


def test_drop_counts_the_dropped_frames_bytes():
    """drop() frees the frame in progress: its prefix and the bytes held so far are dropped bytes,
    and the rest of it as it is skipped, so every byte fed is still accounted for."""
    for sp in (FrameSplitter(), _native.FrameSplitter()):
        sp.feed(_size(100) + b"x" * 30, 0.0)
        sp.drop(1.0, "budget")
        sp.feed(b"y" * 70, 2.0)
        assert (sp.dropped, sp.buffered) == (104, 0)
