"""dissector.ranges (the native core's range splitting and reading) against the Python reference.

The reference is what dissector/ranges.py was in Python: the same header walks, a range read
through the Python capture reader's own record readers behind a window (prefix, then the
range's bytes), and landing.spark._scan's bucketing loop. Both must give the same ranges
(starts, ends, frame counts, preambles), the same rows (packets, anomalies with their kinds,
details and frame indices) and the same buckets and chunks, on every sample, shared capture,
fuzz crasher, damaged file, multi-section pcapng and mutated file.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from pathlib import Path
from struct import Struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from tests.oracle import capture
except ImportError:
    from dissector import capture

from dissector import ranges
from tests.pcapgen import ETHERNET, RAW, SLL2, Flow, frame, write_pcap, write_pcapng

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "pcaps"
TARGETS = [1, 700, 2048, 1 << 16, 64 << 20]

# ---------------------------------------------------------------- the Python reference


def py_split(path: str, target: int) -> list[tuple]:
    """The old split_ranges, as (start, end, frames, preamble)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
            if magic in capture._PCAP_MAGIC and len(head) == 24:
                return _py_split_pcap(f, head, target)
            if magic == capture._PCAPNG_SHB:
                return _py_split_pcapng(f, target)
    except (OSError, capture._Fault):
        pass
    return [(None, None, None, b"")]


def _py_split_pcap(f, head: bytes, target: int) -> list[tuple]:
    endian, _div, hlen = capture._PCAP_MAGIC[int.from_bytes(head[:4], "little")]
    rec = Struct(endian + "III").unpack_from
    size = os.fstat(f.fileno()).st_size
    out = []
    start = pos = 24
    n = 0
    while pos + hlen <= size:
        f.seek(pos)
        h = f.read(hlen)
        caplen = rec(h, 0)[2]
        if caplen > capture._MAX_RECORD or pos + hlen + caplen > size:
            break
        if pos - start >= target:
            out.append((start, pos, n, head))
            start, n = pos, 0
        pos += hlen + caplen
        n += 1
    out.append((start, size, n if pos >= size else None, head))
    return out


def _py_split_pcapng(f, target: int) -> list[tuple]:
    size = os.fstat(f.fileno()).st_size
    u32 = Struct("<I").unpack_from
    out = []
    preamble: list[bytes] = []
    start, pos, n = None, 0, 0
    start_pre = b""
    while pos + 12 <= size:
        f.seek(pos)
        h = f.read(12)
        btype = int.from_bytes(h[:4], "little")
        if btype == capture._PCAPNG_SHB:
            u32 = Struct(("<" if h[8:12] == b"\x4d\x3c\x2b\x1a" else ">") + "I").unpack_from
        blen = u32(h, 4)[0]
        btype = u32(h, 0)[0]
        if blen < 12 or blen % 4 or blen > capture._MAX_RECORD or pos + blen > size:
            break
        if btype == capture._PCAPNG_SHB or btype == 1:
            f.seek(pos)
            block = f.read(blen)
            preamble = [block] if btype == capture._PCAPNG_SHB else preamble + [block]
        elif btype in (2, 3, 6):
            if start is None:
                start, start_pre = 0, b""
            elif pos - start >= target:
                out.append((start, pos, n, start_pre))
                start, start_pre, n = pos, b"".join(preamble), 0
            n += 1
        pos += blen
    if start is None:
        return [(None, None, None, b"")]
    out.append((start, size, n if pos >= size else None, start_pre))
    return out


class _Window(io.RawIOBase):
    def __init__(self, f, prefix: bytes, start: int, end: int):
        self._f, self._pre, self._left = f, prefix, end - start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        if self._pre:
            out, self._pre = (self._pre, b"") if n < 0 or n >= len(self._pre) else (self._pre[:n], self._pre[n:])
            return out
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n) if n > 0 else b""
        self._left -= len(data)
        return data

    def read(self, n: int = -1) -> bytes:
        parts = []
        while n < 0 or n > 0:
            b = self.read1(n)
            if not b:
                break
            parts.append(b)
            if n > 0:
                n -= len(b)
        return b"".join(parts)


def _py_range_records(path, start, end, preamble, order):
    if start is None:
        yield from capture._file_records(path, order)
        return
    ts = 0.0
    try:
        with open(path, "rb") as raw:
            f = _Window(raw, b"", 0, end) if start == 0 else _Window(raw, preamble, start, end)
            head = f.read(4)
            magic = int.from_bytes(head, "little")
            reader = (
                capture._pcap(f, path, order, head, *capture._PCAP_MAGIC[magic])
                if magic in capture._PCAP_MAGIC
                else capture._pcapng(f, path, order, head)
            )
            for rec in reader:
                ts = rec[0]
                yield rec
    except capture._Fault as e:
        yield (ts, order, -1, (e.kind, e.detail))
    except (OSError, EOFError, ValueError) as e:
        yield (ts, order, -1, ("corrupt_file", f"{path}: {type(e).__name__}: {e}"))


def _row(pkt) -> tuple:
    if type(pkt) is capture.CaptureAnomaly:
        return (pkt.ts, pkt.kind, pkt.detail, pkt.index)
    return (
        pkt.ts,
        pkt.src,
        pkt.sport,
        pkt.dst,
        pkt.dport,
        pkt.seq,
        pkt.ack,
        pkt.flags,
        pkt.payload,
        pkt.missing,
        pkt.index,
    )


def py_rows(path, start, end, preamble, order=0, index=0) -> list[tuple]:
    return [_row(p) for p in capture.packets_of(_py_range_records(path, start, end, preamble, order), index)]


def py_bucket(row, n: int) -> int:
    """landing.spark._bucket(landing.stitch.conn_key(pkt), n)."""
    a, b = (row[1], row[2]), (row[3], row[4])
    key = (a, b) if a <= b else (b, a)
    return zlib.crc32(repr(key).encode()) % n


def py_scan(rows, n: int, chunk_rows: int, chunk_bytes: int):
    """landing.spark._scan's loop over a range's rows: (chunks, (last, top))."""
    out, last, top = [], None, None
    acc = [[] for _ in range(n)]
    size, chunk = [0] * n, [0] * n
    for row in rows:
        if len(row) == 4:
            b = 0
        else:
            ts = last = row[0]
            if top is None or ts > top:
                top = ts
            b = py_bucket(row, n)
            size[b] += len(row[8])
        acc[b].append(row)
        if len(acc[b]) >= chunk_rows or size[b] >= chunk_bytes:
            out.append((b, chunk[b], acc[b]))
            acc[b], size[b] = [], 0
            chunk[b] += 1
    for b in range(n):
        if acc[b]:
            out.append((b, chunk[b], acc[b]))
    return out, (last, top)


# ---------------------------------------------------------------- comparing


def _same(a, b) -> bool:
    """Rows equal, NaN times included."""
    return a == b or repr(a) == repr(b)


def check(path, targets=TARGETS, buckets=(1, 3)) -> int:
    """Native and Python ranges of `path` equal at every target; the number of ranges compared."""
    path = str(path)
    seen = 0
    for target in targets:
        want = py_split(path, target)
        got = [(r.start, r.end, r.frames, r.preamble) for r in ranges.split_ranges(path, target)]
        assert got == want, f"{path} @ {target}: split"
        index = 0
        for order, (start, end, frames, pre) in enumerate(want):
            r = ranges.Range(path, start, end, frames, pre)
            rows = py_rows(path, start, end, pre, order, index)
            native_rows = list(ranges.read_range(r, order, index))
            assert _same(native_rows, rows), f"{path} @ {target}: rows of range {start}-{end}"
            # what landing.spark's plan counts when the walk could not (and a damaged range's walk
            # count can differ from what its reader reads: plan numbers by the walk's)
            counted = sum(1 for rec in _py_range_records(path, start, end, pre, order) if rec[2] >= 0)
            assert ranges._core().count_frames(path, start, end, pre, order, ranges._open) == counted
            if frames is None:
                assert ranges.split_ranges(path, target, count=True)[order].frames == counted
            for n in buckets:
                for chunk_rows, chunk_bytes in ((4096, 1 << 20), (7, 3000)):
                    want_chunks, want_ends = py_scan(rows, n, chunk_rows, chunk_bytes)
                    s = ranges.scan(r, order, index, buckets=n, chunk_rows=chunk_rows, chunk_bytes=chunk_bytes)
                    got_chunks = list(s)
                    assert _same(got_chunks, want_chunks), f"{path} @ {target}: chunks, {n} buckets"
                    assert _same(s.ends, want_ends)
                    assert s.frames == index + counted
                    for k in range(n):
                        kept = [row for _, _, rs in ranges.scan(r, order, index, buckets=n, keep=k) for row in rs]
                        mine = [row for b, _, rs in want_chunks if b == k for row in rs]
                        assert _same(kept, mine), f"{path} @ {target}: bucket {k} of {n}"
            index += counted if frames is None else frames
            seen += 1
    return seen


SAMPLES = sorted((ROOT / "samples").glob("*.pcap")) + (sorted(SHARED.glob("*")) if SHARED.is_dir() else [])
CRASHERS = sorted(p for p in (ROOT / "tests" / "fuzz" / "crashers").glob("*/*") if p.is_file())


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples(path):
    assert check(path) >= len(TARGETS)


@pytest.mark.parametrize("path", CRASHERS, ids=lambda p: p.parent.name + "/" + p.name[:14])
def test_fuzz_crashers(path):
    check(path)


def test_whole_file_rows_are_the_ranges_rows_in_a_row():
    """Cut anywhere, the ranges of a clean file give read_packets' rows, numbered alike."""
    path = str(ROOT / "samples" / "confluent-codecs.pcap")
    whole = [_row(p) for p in capture.read_packets([path])]
    for target in (1, 1000, 1 << 16):
        rows, index = [], 0
        for r in ranges.split_ranges(path, target):
            rows += ranges.read_range(r, 0, index)
            index += r.frames
        assert rows == whole


def _pcapng_blocks(blob: bytes):
    """(ts units in us, caplen, origlen, frame) of each record of a pcap."""
    pos = 24
    while pos + 16 <= len(blob):
        sec, usec, caplen, orig = struct.unpack_from("<IIII", blob, pos)
        yield sec * 1_000_000 + usec, caplen, orig, blob[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen


def _block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(e + "II", btype, len(body) + 12) + body + struct.pack(e + "I", len(body) + 12)


def multi_section_pcapng(src: Path) -> bytes:
    """A sample as a pcapng of three sections (little-, big-, little-endian), each with its own
    interfaces (us, ns with an offset, 2^-20), packets as EPBs, obsolete PBs and SPBs, and
    blocks of other types (name resolution, statistics, custom) between them."""
    recs = list(_pcapng_blocks(src.read_bytes()))
    out = []
    third = len(recs) // 3
    for s, part in enumerate((recs[:third], recs[third : 2 * third], recs[2 * third :])):
        e = ">" if s == 1 else "<"
        out.append(_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1)))
        ifaces = [(6, 0), (9, -5), (0x94, 0)]  # (tsresol, tsoffset)
        for res, off in ifaces:
            opts = struct.pack(e + "HHB3x", 9, 1, res)
            if off:
                opts += struct.pack(e + "HHq", 14, 8, off)
            out.append(_block(e, 1, struct.pack(e + "HHI", ETHERNET, 0, 262144) + opts + struct.pack(e + "HH", 0, 0)))
        for i, (us, caplen, orig, data) in enumerate(part):
            iface = i % 3
            res, off = ifaces[iface]
            t = us - off * 1_000_000
            units = t * 1000 if res == 9 else (t << 20) // 1_000_000 if res == 0x94 else t
            if i % 11 == 5:
                out.append(_block(e, 3, struct.pack(e + "I", orig) + data))  # SPB: interface 0
            elif i % 13 == 7:
                out.append(
                    _block(
                        e, 2, struct.pack(e + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, caplen, orig) + data
                    )
                )
            else:
                out.append(
                    _block(e, 6, struct.pack(e + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, caplen, orig) + data)
                )
            if i % 17 == 3:
                out.append(_block(e, 4, b"\0\0\0\0"))  # name resolution
            if i % 19 == 4:
                out.append(_block(e, 5, struct.pack(e + "III", 0, 0, 0)))  # interface statistics
            if i % 23 == 2:
                out.append(_block(e, 0xBAD, b"custom"))
    return b"".join(out)


@pytest.mark.parametrize("name", ["confluent-codecs.pcap", "java-txn-ak.pcap", "admin.pcap"])
def test_pcapng_several_sections_and_interfaces(tmp_path, name):
    path = tmp_path / (name + "ng")
    path.write_bytes(multi_section_pcapng(ROOT / "samples" / name))
    assert check(path) > 3 * len(TARGETS)
    gz = tmp_path / (name + "ng.gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    check(gz, targets=[2048])


def _damaged():
    from tests.test_corrupt_files import KINDS, damaged

    return [(k, damaged(k)[0]) for k in KINDS]


@pytest.mark.parametrize("kind,blob", _damaged(), ids=lambda x: x if isinstance(x, str) else "")
def test_damaged_files(tmp_path, kind, blob):
    path = tmp_path / kind
    path.write_bytes(blob)
    check(path)
    gz = tmp_path / (kind + ".gz")
    gz.write_bytes(gzip.compress(blob))
    check(gz, targets=[2048], buckets=(2,))


def test_small_odd_and_missing_files(tmp_path):
    ng = multi_section_pcapng(ROOT / "samples" / "admin.pcap")
    cases = {
        "empty": b"",
        "two": b"\xd4\xc3",
        "pcap-header-only": (ROOT / "samples" / "admin.pcap").read_bytes()[:24],
        "pcap-header-cut": (ROOT / "samples" / "admin.pcap").read_bytes()[:20],
        "shb-only": ng[:28],
        "bad-bom": ng[:8] + b"\x01\x02\x03\x04" + ng[12:],
        "idb-then-cut": ng[:200],
        "garbage": b"hello, this is not a capture at all" * 40,
        "bz2": __import__("bz2").compress((ROOT / "samples" / "admin.pcap").read_bytes()),
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        check(tmp_path / name, targets=[1, 2048])
    check(tmp_path / "missing", targets=[1])


def _flow() -> list:
    f = Flow()
    return f.handshake() + [p for _ in range(6) for p in (f.send("c", b"x" * 300), f.send("s", b"y" * 40))] + f.close()


_FLOW = _flow()
_SEEDS = {
    "pcap": lambda p: write_pcap(p, _FLOW, vlans=((0x8100, 5),)),
    "pcap-ns-sll2": lambda p: write_pcap(p, _FLOW, linktype=SLL2, nano=True),
    "pcapng": lambda p: write_pcapng(
        p,
        [(ETHERNET, 9), (RAW, 6)],
        [(i % 2, i, frame(x, ETHERNET) if i % 2 == 0 else bytes(x)) for i, x in enumerate(_FLOW)],
    ),
    "pcapng-3-sections": lambda p: p.write_bytes(multi_section_pcapng(ROOT / "samples" / "admin.pcap")) and p,
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(_SEEDS)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 10**6),
    target=st.sampled_from([1, 100, 500, 3000]),
)
def test_mutated_files(tmp_path_factory, kind, edits, cut, target):
    path = tmp_path_factory.mktemp("rg") / "x"
    _SEEDS[kind](path)
    blob = bytearray(path.read_bytes())
    for pos, val in edits:
        blob[pos % len(blob)] = val
    path.write_bytes(bytes(blob[: len(blob) - cut % 40]))
    check(path, targets=[target], buckets=(3,))


def test_bucket_of_is_landing_spark_bucket():
    from landing.spark import _bucket
    from landing.stitch import conn_key

    class P:
        def __init__(self, src, sport, dst, dport):
            self.src, self.sport, self.dst, self.dport = src, sport, dst, dport

    for src, sport, dst, dport in [
        ("10.0.0.1", 9092, "10.0.0.2", 50000),
        ("10.0.0.2", 50000, "10.0.0.1", 9092),
        ("::1", 9092, "::ffff:1.2.3.4", 1),
        ("fe80::1", 0, "fe80::1", 65535),
        ("1.1.1.1", 5, "1.1.1.1", 4),
    ]:
        for n in (1, 2, 7, 64):
            assert ranges.bucket_of(src, sport, dst, dport, n) == _bucket(conn_key(P(src, sport, dst, dport)), n)
