"""Kafka record data: record batches (magic 2), legacy message sets (magic 0/1).

Decoding is lazy and never raises on bad bytes::

    rs = read_record_set(records_field)        # bytes | memoryview, e.g. a Fetch "Records"
    for batch in rs.batches:                    # batch headers only: cheap
        batch.base_offset, batch.codec_name, batch.crc_ok, batch.record_count
        for r in batch.records():               # decompresses and splits on demand
            r.offset, r.timestamp, r.key, r.value, r.headers
    rs.truncated, rs.anomalies

A partial batch at the end (normal in Fetch responses) sets ``truncated``;
garbage or an impossible length ends the set with an anomaly (a dict with
kind, offset, detail) and keeps the batches before it. A CRC mismatch only
sets ``crc_ok`` False. Faults inside a batch's records set ``batch.error`` and
keep the records decoded before the fault.

Encoding: ``build_batch`` / ``encode_batch`` (magic 2) and ``build_message_set``
(magic 0/1) write CRCs and lengths; ``rewrite_batch`` patches producer id,
epoch, base sequence (and offsets/leader epoch) of an encoded batch and fixes
its CRC without touching the records.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from collections.abc import Iterable

from crc32c import crc32c

from . import compression
from .compression import CODEC_NAMES, CompressionError, DecompressedTooLarge

__all__ = [
    "Record",
    "Batch",
    "LegacyMessage",
    "RecordSet",
    "read_record_set",
    "summarize",
    "build_batch",
    "encode_batch",
    "build_message_set",
    "rewrite_batch",
    "rewrite_records",
    "CONTROL_TYPES",
    "decode_control_record",
]

_ATTR_CODEC = 0x07
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_V2 = struct.Struct(">qiibIhiqqqhii")
_V2_CRC_START = 21  # the CRC covers attributes..end
_V2_OVERHEAD = _V2.size  # 61
_OFFSET_LEN = struct.Struct(">qi")
_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_MIN_SIZE = {0: 14, 1: 22, 2: _V2_OVERHEAD - 12}  # smallest legal length field per magic
_LOG_OVERHEAD = 12  # offset + length, outside the length

CONTROL_TYPES = {
    0: ("ABORT", "EndTxnMarker"),
    1: ("COMMIT", "EndTxnMarker"),
    2: ("LEADER_CHANGE", "LeaderChangeMessage"),
    3: ("SNAPSHOT_HEADER", "SnapshotHeaderRecord"),
    4: ("SNAPSHOT_FOOTER", "SnapshotFooterRecord"),
    5: ("KRAFT_VERSION", "KRaftVersionRecord"),
    6: ("KRAFT_VOTERS", "VotersRecord"),
}


class Record:
    """One record. ``headers`` is a list of (str key, bytes|None value).

    The deltas and ``attributes`` are kept so a batch re-encodes byte for byte.
    ``control`` is set for records of control batches (see decode_control_record).
    """

    __slots__ = (
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        "attributes",
        "offset_delta",
        "timestamp_delta",
        "control",
    )

    def __init__(
        self,
        offset=0,
        timestamp=-1,
        key=None,
        value=None,
        headers=(),
        attributes=0,
        offset_delta=None,
        timestamp_delta=None,
        control=None,
    ):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers if type(headers) is list else list(headers)
        self.attributes = attributes
        self.offset_delta = offset_delta
        self.timestamp_delta = timestamp_delta
        self.control = control

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self):
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={_short(self.value)}, headers={self.headers!r})"
        )

    def to_dict(self) -> dict:
        """Plain data for --records output; key/value stay bytes (the caller encodes them)."""
        d = {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": self.key,
            "value": self.value,
            "headers": [[k, v] for k, v in self.headers],
        }
        if self.control is not None:
            d["control"] = self.control
        return d


def _short(v):
    return repr(v) if v is None or len(v) <= 32 else repr(v[:32]) + f"...({len(v)} bytes)"


class _Base:
    """Fields shared by v2 batches and legacy messages."""

    __slots__ = (
        "position",
        "data",
        "magic",
        "crc",
        "attributes",
        "base_offset",
        "error",
        "too_large",
        "_crc_ok",
        "_max",
        "_records",
        "_dsize",
    )

    @property
    def codec(self) -> int:
        return self.attributes & _ATTR_CODEC

    @property
    def codec_name(self) -> str:
        return CODEC_NAMES.get(self.codec, f"unknown({self.codec})")

    @property
    def timestamp_type(self) -> str:
        return "LogAppendTime" if self.attributes & _ATTR_LOG_APPEND_TIME else "CreateTime"

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def crc_ok(self) -> bool:
        if self._crc_ok is None:
            self._crc_ok = self._compute_crc() == self.crc
        return self._crc_ok

    @property
    def uncompressed_size(self) -> int | None:
        """The batch's size with its records decompressed (None if they do not decompress).
        Decompresses without splitting the records when they have not been decoded yet."""
        if not self.codec:
            return len(self.data)
        if getattr(self, "_dsize", None) is None and self._records is None:
            payload, legacy = (self.data[_V2_OVERHEAD:], False) if self.magic == 2 else (self.value, True)
            if payload is None:
                return None
            try:
                n = len(compression.decompress(self.codec, payload, max_size=self._max, legacy_lz4=legacy))
            except (CompressionError, DecompressedTooLarge):
                return None
            self._dsize = len(self.data) - len(payload) + n
        return getattr(self, "_dsize", None)

    def records(self) -> list[Record]:
        """Decompress and split the records (cached). Faults set ``error``/``too_large``."""
        if self._records is None:
            out: list[Record] = []
            try:
                self._decode_into(out)
            except DecompressedTooLarge as e:
                self.too_large = True
                self.error = str(e)
            except CompressionError as e:
                self.error = str(e)
            except _Fault as e:
                self.error = str(e)
            except IndexError:
                self.error = f"record {len(out)}: data ends inside the record"
            except (ValueError, struct.error) as e:
                self.error = f"malformed records: {e}"
            self._records = out
        return self._records


class _Fault(Exception):
    """A structural fault inside a batch's records."""


class Batch(_Base):
    """A magic 2 record batch. Header fields are parsed eagerly; records lazily."""

    __slots__ = (
        "batch_length",
        "partition_leader_epoch",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    )

    def __init__(self, data, position, fields, max_decompressed):
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = fields
        self.data = data
        self.position = position
        self.error = None
        self.too_large = False
        self._crc_ok = None
        self._max = max_decompressed
        self._records = None

    transactional = property(lambda self: bool(self.attributes & _ATTR_TRANSACTIONAL))
    control = property(lambda self: bool(self.attributes & _ATTR_CONTROL))
    has_delete_horizon = property(lambda self: bool(self.attributes & _ATTR_DELETE_HORIZON))

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    def _compute_crc(self):
        return crc32c(self.data[_V2_CRC_START:])

    def payload(self):
        """The (possibly compressed) records section as stored."""
        return self.data[_V2_OVERHEAD:]

    def _decode_into(self, out):
        if self.record_count < 0:
            raise _Fault(f"negative record count {self.record_count}")
        codec = self.codec
        if codec == 0:
            buf = bytes(self.data[_V2_OVERHEAD:])
        else:
            buf = bytes(compression.decompress(codec, self.data[_V2_OVERHEAD:], max_size=self._max))
            self._dsize = _V2_OVERHEAD + len(buf)
        log_append = self.max_timestamp if self.attributes & _ATTR_LOG_APPEND_TIME else None
        _split_v2(buf, self.record_count, self.base_offset, self.base_timestamp, log_append, out)
        if self.attributes & _ATTR_CONTROL:
            for r in out:
                r.control = decode_control_record(r.key, r.value)

    def to_dict(self, records: bool = False) -> dict:
        d = {
            "position": self.position,
            "magic": 2,
            "base_offset": self.base_offset,
            "batch_length": self.batch_length,
            "partition_leader_epoch": self.partition_leader_epoch,
            "crc": self.crc,
            "crc_ok": self.crc_ok,
            "attributes": self.attributes,
            "codec": self.codec_name,
            "timestamp_type": self.timestamp_type,
            "transactional": self.transactional,
            "control": self.control,
            "has_delete_horizon": self.has_delete_horizon,
            "last_offset_delta": self.last_offset_delta,
            "base_timestamp": self.base_timestamp,
            "max_timestamp": self.max_timestamp,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "record_count": self.record_count,
        }
        if records:
            d["records"] = [r.to_dict() for r in self.records()]
            d["error"] = self.error
            d["too_large"] = self.too_large
        return d

    def __repr__(self):
        return (
            f"Batch(base_offset={self.base_offset}, records={self.record_count}, "
            f"codec={self.codec_name}, crc_ok={self.crc_ok}, bytes={len(self.data)})"
        )


class LegacyMessage(_Base):
    """A magic 0/1 message; a compressed one is a wrapper around an inner message set."""

    __slots__ = ("timestamp", "key", "value")

    def __init__(self, data, position, offset, crc, magic, attributes, timestamp, key, value, max_decompressed):
        self.data = data
        self.position = position
        self.base_offset = offset
        self.crc = crc
        self.magic = magic
        self.attributes = attributes
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.error = None
        self.too_large = False
        self._crc_ok = None
        self._max = max_decompressed
        self._records = None

    transactional = control = has_delete_horizon = property(lambda self: False)

    @property
    def record_count(self) -> int | None:
        """1 for a plain message; None for a wrapper until its records are decoded."""
        if not self.codec:
            return 1
        return None if self._records is None else len(self._records)

    def _compute_crc(self):
        return zlib.crc32(self.data[16:])

    def _decode_into(self, out):
        ts = self.timestamp
        if not self.codec:
            out.append(Record(self.base_offset, ts, _b(self.key), _b(self.value), attributes=self.attributes))
            return
        if self.value is None:
            raise _Fault("compressed wrapper message with a null value")
        inner = compression.decompress(self.codec, self.value, max_size=self._max, legacy_lz4=True)
        self._dsize = len(self.data) - len(self.value) + len(inner)
        rs = RecordSet(memoryview(inner), self._max, allow_partial=False)
        msgs = rs.batches
        if rs.anomalies:
            a = rs.anomalies[0]
            fault = f"inner message set: {a['kind']} at byte {a['offset']}: {a['detail']}"
        else:
            fault = None
        # v1 wrappers carry the absolute offset of the last inner message; inner offsets are
        # relative (0..n-1). v0 inner offsets are absolute already.
        shift = self.base_offset - msgs[-1].base_offset if self.magic == 1 and msgs else 0
        log_append = ts if self.attributes & _ATTR_LOG_APPEND_TIME else None
        for m in msgs:
            if m.codec:
                raise _Fault(f"nested compressed message at inner offset {m.base_offset}")
            if m.magic == 2:
                raise _Fault(
                    f"record batch (magic 2) inside a magic {self.magic} wrapper at inner offset {m.base_offset}"
                )
            out.append(
                Record(
                    m.base_offset + shift,
                    ts if log_append is not None else m.timestamp,
                    _b(m.key),
                    _b(m.value),
                    attributes=m.attributes,
                    offset_delta=m.base_offset,
                )
            )
        if fault:
            raise _Fault(fault)

    def to_dict(self, records: bool = False) -> dict:
        d = {
            "position": self.position,
            "magic": self.magic,
            "base_offset": self.base_offset,
            "crc": self.crc,
            "crc_ok": self.crc_ok,
            "attributes": self.attributes,
            "codec": self.codec_name,
            "timestamp_type": self.timestamp_type,
            "timestamp": self.timestamp,
            "record_count": self.record_count,
        }
        if records:
            d["records"] = [r.to_dict() for r in self.records()]
            d["record_count"] = self.record_count
            d["error"] = self.error
            d["too_large"] = self.too_large
        return d

    def __repr__(self):
        return (
            f"LegacyMessage(magic={self.magic}, offset={self.base_offset}, "
            f"codec={self.codec_name}, crc_ok={self.crc_ok})"
        )


def _b(v):
    return None if v is None else bytes(v)


def _uvarint(buf, pos):
    """Unsigned varint of up to 10 bytes at ``pos``; returns (raw value, next pos)."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Fault(f"varint longer than 10 bytes at byte {pos}")


def _varint(buf, pos):
    v, pos = _uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def _split_v2(buf, count, base_offset, base_ts, log_append_ts, out):
    """Split ``count`` records out of ``buf`` (bytes) into ``out``; the hot loop.

    Function calls dominate in CPython, so each varint has its 1- and 2-byte cases
    inline (every length of a record under 8 KiB) and only longer ones call _uvarint.
    """
    pos, end = 0, len(buf)
    append = out.append
    slow = _uvarint
    for _ in range(count):
        if pos >= end:
            raise _Fault(f"record {len(out)} missing: batch says {count} records, data ends after {len(out)}")
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif buf[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            v, pos = slow(buf, pos)
        length = (v >> 1) ^ -(v & 1)
        start = pos
        rend = pos + length
        if length < 6 or rend > end:
            raise _Fault(f"record {len(out)} at byte {start} has bad length {length}")
        attributes = buf[pos]
        b = buf[pos + 1]
        if b < 0x80:
            v, pos = b, pos + 2
        elif buf[pos + 2] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 2] << 7), pos + 3
        else:
            v, pos = slow(buf, pos + 1)
        ts_delta = (v >> 1) ^ -(v & 1)
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif buf[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            v, pos = slow(buf, pos)
        off_delta = (v >> 1) ^ -(v & 1)
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif buf[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            v, pos = slow(buf, pos)
        if v & 1:
            if v != 1:
                raise _Fault(f"record {len(out)}: negative key length {(v >> 1) ^ -1}")
            key = None
        else:
            key = buf[pos : pos + (v >> 1)]
            pos += v >> 1
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif buf[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            v, pos = slow(buf, pos)
        if v & 1:
            if v != 1:
                raise _Fault(f"record {len(out)}: negative value length {(v >> 1) ^ -1}")
            value = None
        else:
            value = buf[pos : pos + (v >> 1)]
            pos += v >> 1
        b = buf[pos]
        if b == 0:
            headers = []
            pos += 1
        else:
            headers = _headers(buf, pos, rend, len(out))
            pos = headers.pop()
        if pos != rend:
            raise _Fault(f"record {len(out)} at byte {start}: fields end at {pos}, length says {rend}")
        append(
            Record(
                base_offset + off_delta,
                base_ts + ts_delta if log_append_ts is None else log_append_ts,
                key,
                value,
                headers,
                attributes,
                off_delta,
                ts_delta,
            )
        )
    if pos != end:
        raise _Fault(f"{end - pos} bytes left after {count} records")


def _headers(buf, pos, rend, index):
    """Record headers at ``pos``; returns the list with the next position appended."""
    nh, pos = _varint(buf, pos)
    if nh < 0 or nh > rend - pos:
        raise _Fault(f"record {index}: bad header count {nh}")
    headers = []
    for _h in range(nh):
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        else:
            v, pos = _uvarint(buf, pos)
        if v & 1:
            hk = None
        else:
            hk = buf[pos : pos + (v >> 1)].decode("utf-8", "surrogateescape")
            pos += v >> 1
        b = buf[pos]
        if b < 0x80:
            v, pos = b, pos + 1
        elif buf[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            v, pos = _uvarint(buf, pos)
        if v & 1:
            hv = None
        else:
            hv = buf[pos : pos + (v >> 1)]
            pos += v >> 1
        headers.append((hk, hv))
    headers.append(pos)
    return headers


class RecordSet:
    """The record data of one partition: batches (headers parsed on first access)."""

    def __init__(self, data, max_decompressed=compression.DEFAULT_MAX_DECOMPRESSED, allow_partial=True):
        self.data = data
        self.max_decompressed = max_decompressed
        self.allow_partial = allow_partial
        self._truncated = False
        self._partial_info: dict | None = None
        self._anomalies: list[dict] = []
        self._batches = None

    @property
    def batches(self) -> list:
        self._scan_once()
        return self._batches

    def _scan_once(self) -> None:
        if self._batches is None:
            self._batches = self._scan()

    # The scan fills these in, so reading any of them runs it.
    @property
    def truncated(self) -> bool:
        """The last batch is cut off (normal at the end of a Fetch response)."""
        self._scan_once()
        return self._truncated

    @property
    def partial(self) -> dict | None:
        """What is known of the cut-off batch: offset, base_offset, length, magic, available."""
        self._scan_once()
        return self._partial_info

    @property
    def anomalies(self) -> list[dict]:
        """Faults that ended the set: dicts with kind, offset (byte in data), detail."""
        self._scan_once()
        return self._anomalies

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)

    def records(self) -> Iterable[Record]:
        for b in self.batches:
            yield from b.records()

    def _anomaly(self, kind, offset, detail):
        self._anomalies.append({"kind": kind, "offset": offset, "detail": detail})

    def _partial(self, data, pos, base_offset, length, magic):
        n = len(data)
        self._partial_info = {
            "offset": pos,
            "base_offset": base_offset,
            "length": length,
            "magic": magic,
            "available": n - pos,
        }
        need = "?" if length is None else _LOG_OVERHEAD + length
        why = None if self.allow_partial else "a cut-off batch is only normal in a Fetch response"
        if why is None and magic == 2 and n - pos >= _V2_OVERHEAD:
            why = _implausible_v2(_V2.unpack_from(data, pos))
        if why is None:
            self._truncated = True
        else:
            self._anomaly("length_past_end", pos, f"batch needs {need} bytes, {n - pos} left; {why}")

    def _scan(self):
        data = self.data
        if not isinstance(data, memoryview):
            data = memoryview(data)
        if data.ndim != 1 or data.itemsize != 1:
            data = data.cast("B")
        n = len(data)
        cap = self.max_decompressed
        out = []
        pos = 0
        unpack_v2 = _V2.unpack_from
        while pos < n:
            if n - pos < 17:
                base = _I64.unpack_from(data, pos)[0] if n - pos >= 8 else None
                length = _I32.unpack_from(data, pos + 8)[0] if n - pos >= 12 else None
                self._partial(data, pos, base, length, None)
                break
            base, length = _OFFSET_LEN.unpack_from(data, pos)
            magic = data[pos + 16]
            if magic not in _MIN_SIZE:
                self._anomaly("bad_magic", pos, f"magic byte {magic} (expected 0, 1 or 2)")
                break
            if length < _MIN_SIZE[magic]:
                self._anomaly(
                    "bad_length", pos, f"length {length} is below the {_MIN_SIZE[magic]}-byte minimum for magic {magic}"
                )
                break
            end = pos + _LOG_OVERHEAD + length
            if end > n:
                self._partial(data, pos, base, length, magic)
                break
            if magic == 2:
                out.append(Batch(data[pos:end], pos, unpack_v2(data, pos), cap))
            else:
                m = _legacy(data[pos:end], pos, magic, cap)
                if isinstance(m, str):
                    self._anomaly("bad_message", pos, m)
                    break
                out.append(m)
            pos = end
        return out

    def summary(self) -> dict:
        batches = self.batches
        codecs, magics = set(), set()
        records, unknown = 0, 0
        crc_ok = True
        for b in batches:
            codecs.add(b.codec_name)
            magics.add(b.magic)
            c = b.record_count
            if c is None:
                unknown += 1
            else:
                records += c
            if not b.crc_ok:
                crc_ok = False
        d = {
            "batches": len(batches),
            "records": records,
            "codecs": sorted(codecs),
            "magic": sorted(magics),
            "crc_ok": crc_ok,
            "truncated": self.truncated,
            "bytes": len(self.data),
            "anomalies": list(self.anomalies),
        }
        if unknown:
            d["wrappers_not_counted"] = unknown
        return d

    def to_dict(self, records: bool = False) -> dict:
        return {
            "batches": [b.to_dict(records) for b in self.batches],
            "truncated": self.truncated,
            "partial": self.partial,
            "anomalies": list(self.anomalies),
        }


def _implausible_v2(fields):
    """Why a cut-off v2 header does not look like the start of a real batch, or None.

    Telling a Fetch response's partial last batch from garbage that happens to carry
    magic 2: a real header has known attribute bits, a codec, sane counts and length.
    """
    (_base, length, _ple, _magic, _crc, attributes, last_delta, _bts, _mts, _pid, _pe, _seq, count) = fields
    if attributes & ~0x7F or (attributes & _ATTR_CODEC) > 4:
        return f"attributes 0x{attributes & 0xFFFF:04x} are not a record batch's"
    if count < 0 or last_delta < 0 or count > length:
        return f"record count {count} / last offset delta {last_delta} are impossible"
    if length > _MAX_BATCH:
        return f"length {length} is beyond any broker's limit"
    return None


_MAX_BATCH = 1 << 30


def _legacy(mv, pos, magic, cap):
    """Parse one magic 0/1 message (``mv`` spans offset..end); a str means a fault."""
    offset, _size, crc, _magic, attributes = _LEGACY.unpack_from(mv, 0)
    p = 18
    end = len(mv)
    ts = None
    if magic == 1:
        ts = _I64.unpack_from(mv, p)[0]
        p += 8
    fields = []
    for name in ("key", "value"):
        if end - p < 4:
            return f"{name} length runs past the message end"
        n = _I32.unpack_from(mv, p)[0]
        p += 4
        if n < 0:
            if n != -1:
                return f"negative {name} length {n}"
            fields.append(None)
            continue
        if n > end - p:
            return f"{name} of {n} bytes runs past the message end"
        fields.append(mv[p : p + n])
        p += n
    if p != end:
        return f"{end - p} bytes left over after the value"
    return LegacyMessage(mv, pos, offset, crc, magic, attributes, ts, fields[0], fields[1], cap)


def read_record_set(
    data, *, max_decompressed: int = compression.DEFAULT_MAX_DECOMPRESSED, allow_partial: bool = True
) -> RecordSet:
    """Wrap a ``records`` field. Nothing is parsed until ``.batches`` is touched.

    allow_partial: a batch cut off at the end is normal in Fetch responses (``truncated``);
    pass False for Produce requests, where it is an anomaly.
    """
    return RecordSet(b"" if data is None else data, max_decompressed, allow_partial)


def summarize(data, *, allow_partial: bool = True) -> dict:
    """Header-level facts about a records field; never decompresses."""
    return _summary_v2(data) or read_record_set(data, allow_partial=allow_partial).summary()


_V2_HEAD = struct.Struct(">qiibIh")  # base offset, length, leader epoch, magic, crc, attributes
_COUNT = struct.Struct(">i")


def _summary_v2(data) -> dict | None:
    """RecordSet(data).summary() for the common case, whole magic 2 batches only, without
    building Batch objects (a Produce of small records is one per exchange); None otherwise."""
    n = len(data)
    if not n or type(data) is memoryview and (data.ndim != 1 or data.itemsize != 1):
        return None
    pos = batches = records = 0
    codecs = 0  # bit c set: codec c seen
    crc_ok = True
    head, count = _V2_HEAD.unpack_from, _COUNT.unpack_from
    while pos < n:
        if n - pos < _V2_OVERHEAD:
            return None
        _base, length, _epoch, magic, crc, attributes = head(data, pos)
        end = pos + _LOG_OVERHEAD + length
        if magic != 2 or length < _V2_OVERHEAD - 12 or end > n:
            return None
        codecs |= 1 << (attributes & _ATTR_CODEC)
        records += count(data, pos + 57)[0]
        if crc_ok and crc32c(data[pos + _V2_CRC_START : end]) != crc:
            crc_ok = False
        batches += 1
        pos = end
    return {
        "batches": batches,
        "records": records,
        "codecs": list(_codec_names(codecs)),
        "magic": [2],
        "crc_ok": crc_ok,
        "truncated": False,
        "bytes": n,
        "anomalies": [],
    }


@lru_cache(maxsize=256)
def _codec_names(mask: int) -> tuple:
    return tuple(sorted(CODEC_NAMES.get(c, f"unknown({c})") for c in range(8) if mask >> c & 1))


# -- control records -----------------------------------------------------------------------


def _decode_data(name, version, buf):
    from .codec import decode_data

    return decode_data(name, version, buf)


def decode_control_record(key, value) -> dict:
    """Decode a control record's key (version, type) and value; faults go under "error"."""
    out: dict = {}
    try:
        if key is None or len(key) < 4:
            raise ValueError(f"control key of {0 if key is None else len(key)} bytes (need 4)")
        kv, t = struct.unpack_from(">hh", key, 0)
        name, spec = CONTROL_TYPES.get(t, (f"UNKNOWN({t})", None))
        out.update(type=name, type_id=t, key_version=kv)
        if spec is None or value is None:
            return out
        if spec == "EndTxnMarker":
            # Transaction markers carry their own version prefix; the KRaft ones do not.
            version = _I16.unpack_from(value, 0)[0]
            out["version"] = version
            body = memoryview(value)[2:]
        else:
            # KRaft payloads start with their own Version field: the schema version they use.
            body = memoryview(value)
            version = _I16.unpack_from(body, 0)[0]
            out["version"] = version
        out["data"] = _plain(_decode_data(spec, version, body))
    except Exception as e:  # noqa: BLE001 - any fault in a control payload is reported, not raised
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def _plain(v):
    """memoryviews from the registry become bytes so records stay comparable."""
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


# -- encoding ------------------------------------------------------------------------------


def _zz(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _encode_record(r: Record, base_offset: int, base_ts: int) -> bytes:
    od = r.offset_delta if r.offset_delta is not None else r.offset - base_offset
    td = r.timestamp_delta if r.timestamp_delta is not None else r.timestamp - base_ts
    parts = [bytes((r.attributes & 0xFF,)), _zz(td), _zz(od)]
    for v in (r.key, r.value):
        if v is None:
            parts.append(b"\x01")
        else:
            parts.append(_zz(len(v)))
            parts.append(bytes(v))
    parts.append(_zz(len(r.headers)))
    for hk, hv in r.headers:
        if hk is None:
            parts.append(b"\x01")
        else:
            k = hk.encode("utf-8", "surrogateescape") if isinstance(hk, str) else bytes(hk)
            parts.append(_zz(len(k)))
            parts.append(k)
        if hv is None:
            parts.append(b"\x01")
        else:
            parts.append(_zz(len(hv)))
            parts.append(bytes(hv))
    body = b"".join(parts)
    return _zz(len(body)) + body


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    codec: int | str = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: str = "CreateTime",
    transactional: bool = False,
    control: bool = False,
    attributes: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    level: int | None = None,
    payload: bytes | None = None,
    snappy_framing: str = "xerial",
) -> bytes:
    """Encode one magic 2 batch (with its 12-byte offset/length prefix and CRC-32C).

    Records without deltas get them from ``offset``/``timestamp`` against the base values.
    ``attributes`` overrides the flag arguments (keeps unknown bits when re-encoding).
    ``payload`` reuses an already compressed records section as is.
    """
    records = list(records)
    if isinstance(codec, str):
        codec = compression.CODEC_IDS[codec]
    if attributes is None:
        attributes = (
            codec
            | (_ATTR_LOG_APPEND_TIME if timestamp_type == "LogAppendTime" else 0)
            | (_ATTR_TRANSACTIONAL if transactional else 0)
            | (_ATTR_CONTROL if control else 0)
        )
    codec = attributes & _ATTR_CODEC
    if base_timestamp is None:
        base_timestamp = records[0].timestamp - (records[0].timestamp_delta or 0) if records else -1
    if max_timestamp is None:
        max_timestamp = max(
            (
                base_timestamp + (r.timestamp_delta if r.timestamp_delta is not None else r.timestamp - base_timestamp)
                for r in records
            ),
            default=base_timestamp,
        )
    if last_offset_delta is None:
        last_offset_delta = max(
            (r.offset_delta if r.offset_delta is not None else r.offset - base_offset for r in records), default=0
        )
    if payload is None:
        raw = b"".join(_encode_record(r, base_offset, base_timestamp) for r in records)
        payload = compression.compress(codec, raw, level=level, snappy_framing=snappy_framing) if codec else raw
    tail = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, partition_leader_epoch, 2, crc) + tail


def encode_batch(batch: Batch, records: Iterable[Record] | None = None, **overrides) -> bytes:
    """Re-encode a decoded batch, optionally with other records or header fields.

    With neither records nor codec changed, the stored (compressed) payload is reused, so
    the result is byte-identical apart from the overridden header fields.
    """
    if not isinstance(batch, Batch):
        raise TypeError("encode_batch takes a magic 2 Batch; use build_message_set for magic 0/1")
    fields = dict(
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        attributes=batch.attributes,
        base_timestamp=batch.base_timestamp,
        max_timestamp=batch.max_timestamp,
        last_offset_delta=batch.last_offset_delta,
    )
    if "codec" in overrides:
        c = overrides.pop("codec")
        c = compression.CODEC_IDS[c] if isinstance(c, str) else c
        fields["attributes"] = (batch.attributes & ~_ATTR_CODEC) | c
    fields.update(overrides)
    if records is None:
        records = batch.records()
        if batch.error:
            raise ValueError(f"cannot re-encode a batch whose records failed: {batch.error}")
        if fields["attributes"] == batch.attributes and "level" not in overrides:
            fields["payload"] = bytes(batch.payload())
            if len(records) != batch.record_count:
                raise ValueError("record count does not match the stored payload")
    return build_batch(records, **fields)


def rewrite_batch(
    data,
    *,
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    base_sequence: int | None = None,
    base_offset: int | None = None,
    partition_leader_epoch: int | None = None,
) -> bytes:
    """Patch header fields of one encoded magic 2 batch and recompute its CRC (for replay)."""
    buf = bytearray(data)
    if len(buf) < _V2_OVERHEAD or buf[16] != 2:
        raise ValueError("not a magic 2 record batch")
    if base_offset is not None:
        _I64.pack_into(buf, 0, base_offset)
    if partition_leader_epoch is not None:
        _I32.pack_into(buf, 12, partition_leader_epoch)
    if producer_id is not None:
        _I64.pack_into(buf, 43, producer_id)
    if producer_epoch is not None:
        _I16.pack_into(buf, 51, producer_epoch)
    if base_sequence is not None:
        _I32.pack_into(buf, 53, base_sequence)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[_V2_CRC_START:]))
    return bytes(buf)


def rewrite_records(
    data, *, producer_id: int | None = None, producer_epoch: int | None = None, base_sequence: int | None = None
) -> tuple[bytes, int | None]:
    """Rewrite every magic 2 batch of a records field for replay.

    Base sequences are assigned consecutively from ``base_sequence`` (each batch uses
    record_count numbers). Returns (new bytes, next sequence). Legacy messages and any
    cut-off tail are copied unchanged; anomalies raise ValueError (nothing sane to send).
    """
    rs = read_record_set(data)
    if rs.anomalies:
        a = rs.anomalies[0]
        raise ValueError(f"records field has {a['kind']} at byte {a['offset']}: {a['detail']}")
    out, seq = [], base_sequence
    for b in rs.batches:
        if b.magic != 2:
            out.append(bytes(b.data))
            continue
        out.append(rewrite_batch(b.data, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=seq))
        if seq is not None:
            seq = (seq + b.last_offset_delta + 1) & 0x7FFFFFFF
    end = rs.partial["offset"] if rs.partial else len(rs.data)
    out.append(bytes(memoryview(rs.data)[end:]))
    return b"".join(out), seq


def _legacy_message(offset, magic, attributes, timestamp, key, value) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += _I64.pack(timestamp if timestamp is not None else -1)
    for v in (key, value):
        body += _I32.pack(-1) if v is None else _I32.pack(len(v)) + bytes(v)
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return _OFFSET_LEN.pack(offset, len(msg)) + msg


def build_message_set(
    records: Iterable[Record],
    *,
    magic: int = 1,
    codec: int | str = 0,
    timestamp_type: str = "CreateTime",
    wrapper_offset: int | None = None,
    wrapper_timestamp: int | None = None,
    level: int | None = None,
) -> bytes:
    """Encode a legacy (magic 0/1) message set; with a codec, one wrapper message.

    Inner offsets of a v1 wrapper are relative (0..n-1) and the wrapper carries the last
    absolute offset; v0 inner offsets are absolute. lz4 under magic 0 gets the old broken
    header checksum, as Kafka wrote it.
    """
    if magic not in (0, 1):
        raise ValueError("legacy message sets are magic 0 or 1")
    records = list(records)
    if isinstance(codec, str):
        codec = compression.CODEC_IDS[codec]
    ts_bit = _ATTR_LOG_APPEND_TIME if timestamp_type == "LogAppendTime" and magic == 1 else 0
    if not codec:
        return b"".join(
            _legacy_message(r.offset, magic, r.attributes | ts_bit, r.timestamp, r.key, r.value) for r in records
        )
    last = records[-1].offset if records else 0
    inner = b"".join(
        _legacy_message(i if magic == 1 else r.offset, magic, r.attributes, r.timestamp, r.key, r.value)
        for i, r in enumerate(records)
    )
    value = compression.compress(codec, inner, level=level, legacy_lz4=(magic == 0))
    if wrapper_timestamp is None:
        wrapper_timestamp = max((r.timestamp for r in records if r.timestamp is not None), default=-1)
    return _legacy_message(
        last if wrapper_offset is None else wrapper_offset,
        magic,
        codec | ts_bit,
        wrapper_timestamp if magic == 1 else None,
        None,
        value,
    )
