"""Byte ranges of one capture file, cut at packet boundaries, each readable on its own.

    for r in split_ranges("big.pcap", 64 << 20):
        for pkt in read_range(r):          # Packet / CaptureAnomaly, like read_packets
            ...

An uncompressed pcap or pcapng is walked header by header (seeking past the
packet bytes), so a 1 GB file is planned by reading a few MB.  A pcapng range
carries the section and interface blocks in force at its start (`preamble`),
so it decodes alone.  Compressed files, and files whose headers go wrong, are
one range: their reader reports the fault where it is.  `frames` counts the
range's records, so ranges number their frames like the whole file does.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from struct import Struct
from collections.abc import Iterator

from dissector.anomalies import AnomalyKind
from dissector.capture import (
    _MAX_RECORD,
    _PCAP_MAGIC,
    _PCAPNG_SHB,
    CaptureAnomaly,
    Packet,
    _Fault,
    _file_records,
    _pcap,
    _pcapng,
    packets_of,
)

__all__ = ["Range", "split_ranges", "read_range"]


@dataclass(frozen=True, slots=True)
class Range:
    path: str
    start: int | None  # None: the whole file through its own reader (compressed, bad, or small)
    end: int | None
    frames: int | None  # records in the range (None: not counted)
    preamble: bytes = b""  # pcap: the file header; pcapng: SHB + IDBs in force at `start`


def split_ranges(path: str | os.PathLike, target_bytes: int) -> list[Range]:
    """Ranges of about `target_bytes` each, at record (pcap) or packet-block (pcapng) boundaries."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
            if magic in _PCAP_MAGIC and len(head) == 24:
                return _split_pcap(f, path, head, target_bytes)
            if magic == _PCAPNG_SHB:
                return _split_pcapng(f, path, target_bytes)
    except (OSError, _Fault):
        pass
    return [Range(path, None, None, None)]


def _split_pcap(f, path: str, head: bytes, target: int) -> list[Range]:
    endian, _div, hlen = _PCAP_MAGIC[int.from_bytes(head[:4], "little")]
    rec = Struct(endian + "III").unpack_from
    size = os.fstat(f.fileno()).st_size
    out: list[Range] = []
    start = pos = 24
    n = 0
    while pos + hlen <= size:
        f.seek(pos)
        h = f.read(hlen)
        caplen = rec(h, 0)[2]
        if caplen > _MAX_RECORD or pos + hlen + caplen > size:
            break  # the reader of the last range reports it
        if pos - start >= target:
            out.append(Range(path, start, pos, n, head))
            start, n = pos, 0
        pos += hlen + caplen
        n += 1
    out.append(Range(path, start, size, n if pos >= size else None, head))
    return out


def _split_pcapng(f, path: str, target: int) -> list[Range]:
    size = os.fstat(f.fileno()).st_size
    u32 = Struct("<I").unpack_from
    out: list[Range] = []
    preamble: list[bytes] = []
    start, pos, n = None, 0, 0
    start_pre = b""
    while pos + 12 <= size:
        f.seek(pos)
        h = f.read(12)
        btype = int.from_bytes(h[:4], "little")
        if btype == _PCAPNG_SHB:
            bom = h[8:12]
            u32 = Struct(("<" if bom == b"\x4d\x3c\x2b\x1a" else ">") + "I").unpack_from
        blen = u32(h, 4)[0]
        btype = u32(h, 0)[0]
        if blen < 12 or blen % 4 or blen > _MAX_RECORD or pos + blen > size:
            break
        if btype == _PCAPNG_SHB or btype == 1:
            f.seek(pos)
            block = f.read(blen)
            preamble = [block] if btype == _PCAPNG_SHB else preamble + [block]
        elif btype in (2, 3, 6):
            if start is None:
                start, start_pre = 0, b""  # the first range reads the file from its start
            elif pos - start >= target:
                out.append(Range(path, start, pos, n, start_pre))
                start, start_pre, n = pos, b"".join(preamble), 0
            n += 1
        pos += blen
    if start is None:
        return [Range(path, None, None, None)]
    out.append(Range(path, start, size, n if pos >= size else None, start_pre))
    return out


class _Window(io.RawIOBase):
    """`prefix` then the bytes [start, end) of a file: one range as if it were a whole file."""

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


def _range_records(r: Range, order: int) -> Iterator[tuple]:
    if r.start is None:
        yield from _file_records(r.path, order)
        return
    ts = 0.0
    try:
        with open(r.path, "rb") as raw:
            if r.start == 0:
                f = _Window(raw, b"", 0, r.end)
            else:
                f = _Window(raw, r.preamble, r.start, r.end)
            head = f.read(4)
            magic = int.from_bytes(head, "little")
            reader = (
                _pcap(f, r.path, order, head, *_PCAP_MAGIC[magic])
                if magic in _PCAP_MAGIC
                else _pcapng(f, r.path, order, head)
            )
            for rec in reader:
                ts = rec[0]
                yield rec
    except _Fault as e:
        yield (ts, order, -1, (e.kind, e.detail))
    except (OSError, EOFError, ValueError) as e:
        yield (ts, order, -1, (AnomalyKind.CORRUPT_FILE, f"{r.path}: {type(e).__name__}: {e}"))


def read_range(r: Range, order: int = 0, index: int = 0) -> Iterator[Packet | CaptureAnomaly]:
    """The TCP packets of one range; `index` frames come before it in the whole run."""
    return packets_of(_range_records(r, order), index)
