"""dissector.frames as a pure splitter on bytes: chunking, gaps, bad sizes, hunting."""

from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from tests.oracle.frames import PROBE_MAX, Frame, FrameAnomaly, FrameSplitter


def plausible_request(buf, pos, end):
    """Header-only test (the real one in exchanges also decodes): known-ish key, version, printable client id."""
    if end - pos < 14:
        return None
    size, api_key, version, corr, n = struct.unpack_from(">ihhih", buf, pos)
    if not (0 <= api_key < 100 and 0 <= version < 20 and corr >= 0 and 0 <= n <= 64 and size >= 10 + n):
        return False
    if end - pos < 14 + n:
        return None
    return all(0x20 <= c < 0x7F for c in buf[pos + 14 : pos + 14 + n])


def req(api_key: int, version: int, corr: int, client: bytes = b"cli", body: bytes = b"xyz") -> bytes:
    d = struct.pack(">hhih", api_key, version, corr, len(client)) + client + body
    return struct.pack(">i", len(d)) + d


def corr_of(frame: Frame) -> int:
    return struct.unpack_from(">i", frame.data, 4)[0]


STREAM = req(18, 4, 1) + req(3, 12, 2, body=b"a" * 1000) + req(0, 9, 3, body=b"\0" * 300) + req(1, 12, 4)
SIZES = [16, 1013, 313, 16]  # frame sizes without the prefix
OFFSETS = [0, 20, 1037, 1354]


def feed_chunks(s: FrameSplitter, data: bytes, cuts: list[int], ts: float = 0.0) -> list:
    out, prev = [], 0
    for c in sorted(set(cuts)) + [len(data)]:
        if c > prev:
            out += s.feed(data[prev:c], ts)
            prev = c
    return out


def test_whole_stream_in_one_chunk():
    out = FrameSplitter().feed(STREAM, 1.5)
    assert [len(f.data) for f in out] == SIZES
    assert [f.offset for f in out] == OFFSETS
    assert [corr_of(f) for f in out] == [1, 2, 3, 4]
    assert all(f.ts == 1.5 for f in out)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_chunking_gives_the_same_frames(cuts):
    s = FrameSplitter()
    out = feed_chunks(s, STREAM, cuts)
    assert [(f.offset, f.data) for f in out] == [
        (o, STREAM[o + 4 : o + 4 + n]) for o, n in zip(OFFSETS, SIZES, strict=True)
    ]
    assert s.buffered == 0


def test_byte_by_byte_buffers_at_most_one_frame():
    s = FrameSplitter()
    peak, frames = 0, []
    for i in range(len(STREAM)):
        frames += s.feed(STREAM[i : i + 1], float(i))
        peak = max(peak, s.buffered)
    assert [corr_of(f) for f in frames] == [1, 2, 3, 4]
    assert peak <= max(SIZES) + 4
    assert frames[1].ts == 20.0  # the time of the packet holding the frame's first byte


def test_zero_size_frame():
    out = FrameSplitter().feed(b"\0\0\0\0" + req(18, 0, 1), 0.0)
    assert [f.data for f in out[:1]] == [b""] and corr_of(out[1]) == 1


def test_gap_of_known_size_inside_a_frame_skips_exactly_that_frame():
    s = FrameSplitter(plausible_request, min_frame_size=8)
    out = s.feed(STREAM[:100], 0.0)  # frame 1 whole, frame 2 begun
    out += s.gap(500, 1.0)  # bytes 100..599 lost: all inside frame 2
    out += s.feed(STREAM[600:], 2.0)
    kinds = [type(x).__name__ for x in out]
    assert kinds == ["Frame", "FrameAnomaly", "Frame", "Frame"]
    a = out[1]
    assert a.kind == "gap_in_frame" and "500 bytes lost inside a 1013-byte frame" in a.detail
    assert struct.unpack_from(">hhi", a.head, 0) == (3, 12, 2)  # the lost frame's api key, version, correlation id
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 3, 4]
    assert out[2].offset == 1037


def test_gap_past_the_frame_end_resyncs_on_a_plausible_header():
    s = FrameSplitter(plausible_request, min_frame_size=8)
    out = s.feed(STREAM[:100], 0.0) + s.gap(1000, 1.0) + s.feed(STREAM[1100:], 2.0)
    frames = [f for f in out if type(f) is Frame]
    anomalies = [a for a in out if type(a) is FrameAnomaly]
    assert [corr_of(f) for f in frames] == [1, 4]  # frame 3 started inside the gap: gone
    assert [a.kind for a in anomalies] == ["gap_in_frame", "resync"]
    assert "skipped 254 bytes" in anomalies[1].detail  # 1100 -> 1354


def test_gap_of_unknown_size_at_a_boundary_hunts():
    s = FrameSplitter(plausible_request, min_frame_size=8)
    out = s.feed(STREAM[:20], 0.0) + s.gap(0, 1.0) + s.feed(STREAM[1037:], 2.0)
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 3, 4]
    assert [a.kind for a in out if type(a) is FrameAnomaly] == []  # found at once: nothing skipped


def test_oversized_frame_is_an_anomaly_then_resync():
    junk = b"\x7f\xff\xff\xff" + b"\x01" * 50
    s = FrameSplitter(plausible_request, min_frame_size=8, max_frame_size=1 << 20)
    out = s.feed(junk + STREAM, 0.0)
    anomalies = [a for a in out if type(a) is FrameAnomaly]
    assert anomalies[0].kind == "frame_too_large" and "2147483647" in anomalies[0].detail
    assert anomalies[1].kind == "resync" and "skipped 54 bytes" in anomalies[1].detail
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 2, 3, 4]


def test_configurable_limit():
    s = FrameSplitter(plausible_request, max_frame_size=500)
    out = s.feed(STREAM, 0.0)
    assert out[1].kind == "frame_too_large"
    # frame 2 (1013 bytes) is refused; hunting finds frames 3 and 4 by their headers
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 3, 4]


def test_negative_size():
    s = FrameSplitter(plausible_request, min_frame_size=8)
    out = s.feed(b"\xff\xff\xff\xfe" + STREAM, 0.0)
    assert out[0].kind == "bad_frame_size"
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 2, 3, 4]


def test_midstream_start_finds_first_boundary_and_keeps_hunt_window_small():
    s = FrameSplitter(plausible_request, min_frame_size=8, hunting=True)
    peak, out = 0, []
    data = STREAM[30:]  # starts inside frame 2's body
    for i in range(0, len(data), 7):
        out += s.feed(data[i : i + 7], float(i))
        peak = max(peak, s.buffered)
    assert [corr_of(f) for f in out if type(f) is Frame] == [3, 4]
    assert [a.kind for a in out if type(a) is FrameAnomaly] == ["resync"]
    assert peak <= max(SIZES) + 4
    assert s.buffered == 0


def test_midstream_start_exactly_on_a_boundary_is_silent():
    s = FrameSplitter(plausible_request, min_frame_size=8, hunting=True)
    out = s.feed(STREAM[20:], 0.0)
    assert [corr_of(f) for f in out] == [2, 3, 4]


def test_hunting_through_megabytes_of_junk_stays_bounded():
    s = FrameSplitter(plausible_request, min_frame_size=8, hunting=True)
    junk = bytes(range(256)) * 64
    peak = 0
    for _ in range(64):  # 1 MiB
        assert s.feed(junk, 0.0) == []
        peak = max(peak, s.buffered)
    assert peak <= PROBE_MAX
    out = s.feed(STREAM, 1.0)
    assert [corr_of(f) for f in out if type(f) is Frame] == [1, 2, 3, 4]


def test_end_of_stream_inside_a_frame_is_reported():
    s = FrameSplitter()
    out = s.feed(STREAM[:60], 0.0)
    end = s.finish(9.0)
    assert [corr_of(f) for f in out] == [1]
    assert len(end) == 1 and end[0].kind == "truncated_frame" and "36 bytes into 1013-byte frame" in end[0].detail
    assert s.buffered == 0


def test_midstream_first_offset_judged_even_when_bytes_trickle_in():
    s = FrameSplitter(lambda b, p, e: False, hunting=True, plausible_first=plausible_request)
    out = []
    for i in range(20, len(STREAM)):  # one byte at a time, starting on frame 2's boundary
        out += s.feed(STREAM[i : i + 1], float(i))
    # the strict predicate rejects everything; only the lenient first-offset test can sync
    assert [corr_of(f) for f in out] == [2, 3, 4]


def test_hunting_may_wait_for_a_whole_candidate_frame():
    seen = []

    def whole_frame_only(buf, pos, end):  # like the real predicates: judge a frame only when it is all there
        ok = plausible_request(buf, pos, end)
        if not ok:
            return ok
        size = struct.unpack_from(">i", buf, pos)[0]
        if end - pos < 4 + size:
            return None
        seen.append(bytes(buf[pos + 4 : pos + 4 + size]))
        return True

    s = FrameSplitter(whole_frame_only, min_frame_size=8, hunting=True)
    data = b"\x00\x01garbage" + STREAM[20:]
    out = []
    for i in range(0, len(data), 5):
        out += s.feed(data[i : i + 5], float(i))
        assert s.buffered <= max(SIZES) + 4 + 5
    frames = [f for f in out if type(f) is Frame]
    assert [corr_of(f) for f in frames] == [2, 3, 4] and all(type(f.data) is bytes for f in frames)
    assert seen[0] == STREAM[24 : 20 + 4 + SIZES[1]]
    assert [a.detail for a in out if type(a) is FrameAnomaly] == [
        "skipped 9 bytes after midstream start; frame boundary found at stream offset 9"
    ]
