"""Byte ranges of one capture file, cut at packet boundaries, each readable on its own.

    for r in split_ranges("big.pcap", 64 << 20):
        for bucket, chunk, rows in scan(r, buckets=8):   # rows: Packet / CaptureAnomaly fields
            ...

An uncompressed pcap or pcapng is walked header by header (seeking past the
packet bytes), so a 1 GB file is planned by reading a few MB.  A pcapng range
carries the section and interface blocks in force at its start (`preamble`),
so it decodes alone.  Compressed files, and files whose headers go wrong, are
one range: their reader reports the fault where it is.  `frames` counts the
range's records, so ranges number their frames like the whole file does.

The native core does the work (native/src/ranges.rs): splitting, reading, and
the per-connection bucketing of landing.spark's stage 1, whose bucket of a
connection is `zlib.crc32(repr(landing.stitch.conn_key(pkt)).encode()) % buckets`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from dissector.files import FILE_ERRORS, open_capture
from dissector.native import core, start_ts

__all__ = ["Range", "Scan", "split_ranges", "scan", "read_range", "bucket_of", "start_time"]

# A row: a Packet's fields (ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index)
# or a CaptureAnomaly's (ts, kind, detail, index), as landing.spark's stage 1 ships them.
Row = tuple


@dataclass(frozen=True, slots=True)
class Range:
    path: str
    start: int | None  # None: the whole file through its own reader (compressed, bad, or small)
    end: int | None
    frames: int | None  # records in the range (None: not counted)
    preamble: bytes = b""  # pcap: the file header; pcapng: SHB + IDBs in force at `start`


class Scan(Protocol):
    """A range being read: (bucket, chunk number, rows) per full chunk of a bucket, then the rest."""

    def __iter__(self) -> Iterator[tuple[int, int, list[Row]]]: ...
    def __next__(self) -> tuple[int, int, list[Row]]: ...

    @property
    def ends(self) -> tuple[float | None, float | None]:
        """(the last packet's time, the latest packet time) of the packets read so far."""

    @property
    def frames(self) -> int:
        """The index of the last frame read (the range's first index plus its frames so far)."""


def split_ranges(path: str | os.PathLike, target_bytes: int, *, count: bool = False) -> list[Range]:
    """Ranges of about `target_bytes` each, at record (pcap) or packet-block (pcapng) boundaries.
    count: read the ranges whose frames the walk could not count (a compressed file, the range
    holding a bad header) to count them."""
    path = os.fspath(path)
    native = core()
    out = [Range(path, *t) for t in native.split_ranges(path, target_bytes)]
    if count:
        out = [
            r
            if r.frames is not None
            else replace(r, frames=native.count_frames(path, r.start, r.end, r.preamble, 0, open_capture, FILE_ERRORS))
            for r in out
        ]
    return out


def scan(
    r: Range,
    order: int = 0,
    index: int = 0,
    *,
    buckets: int = 1,
    keep: int | None = None,
    chunk_rows: int = 4096,
    chunk_bytes: int = 1 << 20,
) -> Scan:
    """The rows of one range (`index` frames come before it in the whole run), each packet's in the
    bucket of its connection (anomalies in bucket 0), as (bucket, chunk, rows) whenever a bucket
    holds `chunk_rows` rows or `chunk_bytes` payload bytes, then each bucket's rest in bucket order.
    keep: only that bucket's rows (`ends` still covers every packet)."""
    return core().RangeScan(
        r.path,
        r.start,
        r.end,
        r.preamble,
        order,
        index,
        buckets,
        open_capture,
        FILE_ERRORS,
        keep,
        chunk_rows,
        chunk_bytes,
    )


def read_range(r: Range, order: int = 0, index: int = 0) -> Iterator[Row]:
    """The rows of one range in capture order."""
    for _, _, rows in scan(r, order, index):
        yield from rows


def bucket_of(src: str, sport: int, dst: str, dport: int, buckets: int) -> int:
    """The bucket scan() gives a connection (either direction)."""
    return core().bucket_of(src, sport, dst, dport, buckets)


def start_time(path: str | os.PathLike) -> float:
    """A capture file's first timestamp (its first record, even a fault; inf for none): files of
    a set are read in this order, as the native core merges them."""
    return start_ts(os.fspath(path))
