"""The Python reference for dissector.ranges: what dissector/ranges.py was in Python (the same header
walks; a range read through the Python capture reader's own record readers behind a window: prefix,
then the range's bytes) and landing.spark._scan_arrow's bucketing; check() compares the native ranges
with it (tests/test_ranges.py, and the fuzz target `ranges`)."""

from __future__ import annotations

import io
import os
import zlib
from struct import Struct

from tests.oracle import capture

from dissector import ranges
from dissector.files import FILE_ERRORS, open_capture

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


def read_range(r, order: int = 0, index: int = 0):
    """The native core's rows of one range in capture order (its packet batches, unpacked)."""
    for _, _, batch in ranges.scan(r, order, index):
        yield from ranges.batch_rows(batch)


def conn_bucket(key, n: int) -> int:
    """The bucket of a connection: crc32 of its conn_key's repr, modulo n."""
    return zlib.crc32(repr(key).encode()) % n


def py_bucket(row, n: int) -> int:
    """the bucket of conn_key(pkt)."""
    a, b = (row[1], row[2]), (row[3], row[4])
    key = (a, b) if a <= b else (b, a)
    return zlib.crc32(repr(key).encode()) % n


def py_scan(rows, n: int, chunk_rows: int, chunk_bytes: int):
    """the native scan's loop over a range's rows: (chunks, (last, top))."""
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
            native_rows = list(read_range(r, order, index))
            assert _same(native_rows, rows), f"{path} @ {target}: rows of range {start}-{end}"
            # what landing.spark's plan counts when the walk could not (and a damaged range's walk
            # count can differ from what its reader reads: plan numbers by the walk's)
            counted = sum(1 for rec in _py_range_records(path, start, end, pre, order) if rec[2] >= 0)
            native = ranges.core()
            assert native.count_frames(path, start, end, pre, order, open_capture, FILE_ERRORS) == counted
            if frames is None:
                assert ranges.split_ranges(path, target, count=True)[order].frames == counted
            for n in buckets:
                for chunk_rows, chunk_bytes in ((4096, 1 << 20), (7, 3000)):
                    want_chunks, want_ends = py_scan(rows, n, chunk_rows, chunk_bytes)
                    s = ranges.scan(r, order, index, buckets=n, chunk_rows=chunk_rows, chunk_bytes=chunk_bytes)
                    got_chunks = [(b, c, list(ranges.batch_rows(batch))) for b, c, batch in s]
                    assert _same(got_chunks, want_chunks), f"{path} @ {target}: chunks, {n} buckets"
                    assert _same(s.ends, want_ends)
                    assert s.frames == index + counted
                    for k in range(n):
                        kept = [
                            row
                            for _, _, batch in ranges.scan(r, order, index, buckets=n, keep=k)
                            for row in ranges.batch_rows(batch)
                        ]
                        mine = [row for b, _, rs in want_chunks if b == k for row in rs]
                        assert _same(kept, mine), f"{path} @ {target}: bucket {k} of {n}"
            index += counted if frames is None else frames
            seen += 1
    return seen
