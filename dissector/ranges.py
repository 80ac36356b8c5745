"""Byte ranges of one capture file, cut at packet boundaries, each readable on its own.

    for r in split_ranges("big.pcap", 64 << 20):
        for bucket, chunk, batch in scan(r, buckets=8):   # batch: pyarrow, PACKET_SCHEMA
            ...

An uncompressed pcap or pcapng is walked header by header (seeking past the
packet bytes), so a 1 GB file is planned by reading a few MB.  A pcapng range
carries the section and interface blocks in force at its start (`preamble`),
so it decodes alone.  A remote file (URIs: dissector.fs) is cut at boundaries found in a window
of bytes read at each cut (dissector.resync); its ranges' frames are not counted.  Compressed files
and files whose headers go wrong are one range: their reader reports the fault where it is.
`frames` counts a local range's records.

The native core does the work (native/py/src/ranges.rs): splitting, reading, and
the per-connection bucketing of landing.spark's stage 1, whose bucket of a
connection is `zlib.crc32(repr(key).encode()) % buckets`, key its two endpoints in order.
A range's packets leave it as Arrow record batches (PACKET_SCHEMA), built in
Rust without a Python object per packet, and a lander takes such batches back
(lander_input) the same way: that is what Spark's shuffle moves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dissector.files import FILE_ERRORS, open_capture
from dissector.native import arrow_array, core

__all__ = [
    "Range",
    "Scan",
    "split_ranges",
    "scan",
    "bucket_of",
    "packet_schema",
    "lander_input",
    "batch_rows",
]

# A row: a Packet's fields (ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index)
# or a CaptureAnomaly's (ts, kind, detail, index).
Row = tuple

# A packet batch's columns: a Packet's fields, or (anomaly not null) a CaptureAnomaly's ts,
# index, kind (`anomaly`) and detail, the others zero.  seq and ack are u32 and flags u8 on the
# wire; wider signed types here because Spark's Arrow types have no unsigned ones.  `at` is where
# the payload sits in the range's file when it was left there (scan(refs=True)), its bytes then
# empty, or -1; `size` is the payload's length either way.
PACKET_COLUMNS = (
    ("ts", "float64"),
    ("src", "string"),
    ("sport", "int32"),
    ("dst", "string"),
    ("dport", "int32"),
    ("seq", "int64"),
    ("ack", "int64"),
    ("flags", "int16"),
    ("payload", "binary"),
    ("missing", "int64"),
    ("index", "int64"),
    ("anomaly", "string"),
    ("detail", "string"),
    ("at", "int64"),
    ("size", "int32"),
)


@dataclass(frozen=True, slots=True)
class Range:
    path: str
    start: int | None  # None: the whole file through its own reader (compressed, bad, or small)
    end: int | None
    frames: int | None  # records in the range (None: not counted)
    preamble: bytes = b""  # pcap: the file header; pcapng: SHB + IDBs in force at `start`


class Scan(Protocol):
    """A range being read: (bucket, chunk number, packet batch) per full chunk of a bucket, then the rest."""

    def __iter__(self) -> Iterator[tuple[int, int, Any]]: ...
    def __next__(self) -> tuple[int, int, Any]: ...

    @property
    def ends(self) -> tuple[float | None, float | None]:
        """(the last packet's time, the latest packet time) of the packets read so far."""

    @property
    def frames(self) -> int:
        """The index of the last frame read (the range's first index plus its frames so far)."""


def packet_schema():
    """The pyarrow schema of a packet batch (PACKET_COLUMNS)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(n, getattr(pa, "string" if t == "string" else t)(), nullable=n in ("anomaly", "detail"))
            for n, t in PACKET_COLUMNS
        ]
    )


class _Batches:
    """The native RangeScan's chunks, their column buffers wrapped as pyarrow record batches."""

    def __init__(self, native_scan):
        self._scan = native_scan
        self._schema = packet_schema()

    def __iter__(self):
        return self

    def __next__(self):
        import pyarrow as pa

        b, chunk, (n, specs) = next(self._scan)
        arrays = [arrow_array(spec, f.type) for spec, f in zip(specs, self._schema, strict=True)]
        return b, chunk, pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    @property
    def ends(self):
        return self._scan.ends

    @property
    def frames(self):
        return self._scan.frames


def lander_input(batches) -> Iterator[tuple]:
    """Packet batches (PACKET_SCHEMA) as a lander's `packets` take them: (rows, each column's
    Arrow buffers), read by the native core without a Python object per packet.  A batch made
    with refs comes as (batch, Range): its payloads are read from that range of its file, mapped."""
    names = [n for n, _ in PACKET_COLUMNS]
    for item in batches:
        batch, where = item if isinstance(item, tuple) else (item, None)
        if batch.schema.names != names:
            raise ValueError(f"a packet batch has columns {batch.schema.names}, not {names}")
        cols = []
        for a in batch.columns:
            if a.offset:  # a slice: its buffers start before it
                import pyarrow as pa

                a = pa.concat_arrays([a])
            # pyarrow's buffers say they hold signed bytes; the core reads unsigned ones
            cols.append([None if b is None else memoryview(b).cast("B") for b in a.buffers()])
        if where is None:
            yield batch.num_rows, cols
        else:
            yield batch.num_rows, cols, (where.path, where.start or 0, where.end or 0)


def batch_rows(batch) -> Iterator[Row]:
    """A packet batch's rows as tuples (a Packet's fields, or a CaptureAnomaly's), in order."""
    d = batch.to_pydict()
    for i in range(batch.num_rows):
        if d["anomaly"][i] is not None:
            yield d["ts"][i], d["anomaly"][i], d["detail"][i], d["index"][i]
        else:
            yield tuple(d[n][i] for n, _ in PACKET_COLUMNS[:11])


def split_ranges(path: str | os.PathLike, target_bytes: int, *, count: bool = False) -> list[Range]:
    """Ranges of about `target_bytes` each, at record (pcap) or packet-block (pcapng) boundaries.
    count: read the ranges whose frames the walk could not count (a compressed file, the range
    holding a bad header) to count them."""
    from dissector import fs

    path = fs.local(os.fspath(path))
    native = core()
    if fs.is_uri(path):
        # a remote file's cut points are found in a window of bytes read at each (dissector.resync):
        # walking its headers would cost a round trip per packet. Its ranges' frames are not
        # counted (that would read it all): landing.spark numbers them after its stage 1
        out = _remote_ranges(path, target_bytes) or [Range(path, None, None, None)]
    else:
        out = [Range(path, *t) for t in native.split_ranges(path, target_bytes)]
    if count:
        out = [
            r
            if r.frames is not None
            else replace(r, frames=native.count_frames(path, r.start, r.end, r.preamble, 0, open_capture, FILE_ERRORS))
            for r in out
        ]
    return out


WINDOW = 1 << 20  # bytes read at each cut of a remote file to find a record boundary in


def _remote_ranges(path: str, target_bytes: int) -> list[Range] | None:
    """A remote uncompressed pcap or pcapng cut at record boundaries near every `target_bytes`,
    each range a ranged read of its own (None: one range, read front to back: small, compressed,
    or a cut point not found with confidence)."""
    from dissector import fs, resync

    with fs.open_random(path) as f:
        if f.size <= target_bytes:
            return None
        head = resync.head_of(f.read_at(min(WINDOW, f.size), 0))
        if head is None:
            return None
        find = resync.pcap_boundary if head.fmt == "pcap" else resync.pcapng_boundary
        cuts = [head.first]
        for at in range(target_bytes, f.size, target_bytes):
            at -= at % 4  # pcapng blocks start 4-byte aligned
            if at <= cuts[-1]:
                continue
            n = min(WINDOW, f.size - at)
            found = find(f.read_at(n, at), head, at_end=at + n == f.size)
            if found is None:
                return None
            cuts.append(at + found)
        cuts.append(f.size)
    cuts = sorted(set(cuts))
    # pcapng's first range reads the section header itself, as a local file's does
    first = 0 if head.fmt == "pcapng" else head.first
    out = [Range(path, first, cuts[1], None, head.preamble if head.fmt == "pcap" else b"")]
    out += [Range(path, a, b, None, head.preamble) for a, b in zip(cuts[1:], cuts[2:], strict=False)]
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
    refs: bool = False,
) -> Scan:
    """The packets of one range (`index` frames come before it in the whole run), each packet's in the
    bucket of its connection (anomalies in bucket 0), as (bucket, chunk, batch) whenever a bucket
    holds `chunk_rows` rows or `chunk_bytes` payload bytes, then each bucket's rest in bucket order.
    keep: only that bucket's rows (`ends` still covers every packet).  refs: payloads stay in the
    file, the rows saying where (`at`, `size`); lander_input(((batch, r), ...)) reads them there."""
    return _Batches(
        core().RangeScan(
            path=r.path,
            start=r.start,
            end=r.end,
            preamble=r.preamble,
            order=order,
            index=index,
            buckets=buckets,
            opener=open_capture,
            file_errors=FILE_ERRORS,
            keep=keep,
            chunk_rows=chunk_rows,
            chunk_bytes=chunk_bytes,
            refs=refs,
        )
    )


def bucket_of(src: str, sport: int, dst: str, dport: int, buckets: int) -> int:
    """The bucket scan() gives a connection (either direction)."""
    return core().bucket_of(src, sport, dst, dport, buckets)
