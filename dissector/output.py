"""Exchanges and anomalies as text lines or JSON lines.

JSON form of decoded values:
- bytes/memoryview: a str when the bytes are UTF-8 text (printable, allowing
  tab/newline and the NUL/0x01 separators of SASL tokens), else {"hex": "..."}
  so that text and binary never look alike;
- UUID: its canonical str; record data (`Records` fields): the summary from
  protocol.records.summarize, or with records=True the decoded batches.
"""
from __future__ import annotations

import json
import time
from typing import IO, Iterable
from uuid import UUID

__all__ = ["to_json", "jsonable", "format_text", "write", "EXCHANGE_KEYS"]

EXCHANGE_KEYS = ("ts", "response_ts", "latency_ms", "connection", "client", "broker", "api_key", "api_name",
                 "api_version", "correlation_id", "client_id", "status", "error_codes", "request", "response",
                 "request_size", "response_size", "response_version", "flags")
RECORD_FIELDS = frozenset(("Records", "UnalignedRecords"))
_SEPARATORS = frozenset("\t\n\r\0\x01")


def _bytes(v) -> str | dict:
    b = bytes(v)
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}
    if all(c.isprintable() or c in _SEPARATORS for c in s):
        return s
    return {"hex": b.hex()}


def _records(v, decode: bool):
    try:
        from protocol import records as rec
    except ImportError:  # record parsing not available: say how much there was
        return {"bytes": len(v)}
    try:
        if decode:
            return jsonable(rec.read_record_set(v).to_dict(records=True), True)
        return jsonable(rec.summarize(v), False)
    except Exception as e:  # noqa: BLE001 - bad record data must not stop the output
        return {"bytes": len(v), "error": f"{type(e).__name__}: {e}"}


_SCALARS = frozenset((str, int, float, bool, type(None)))
_BLOBS = (memoryview, bytes, bytearray)
RECORD_APIS = frozenset((0, 1, 59, 78))   # Produce, Fetch, FetchSnapshot, ShareFetch: the ones with records fields


def jsonable(obj, records: bool = False):
    """A decoded body (or any value in it) as plain JSON types."""
    t = type(obj)
    if t is dict:
        out = {}
        for k, v in obj.items():
            tv = type(v)
            if tv in _SCALARS:
                out[k] = v
            elif k in RECORD_FIELDS and tv in _BLOBS:
                out[k] = _records(v, records)
            else:
                out[k] = jsonable(v, records)
        return out
    if t is list or t is tuple:
        return [v if type(v) in _SCALARS else jsonable(v, records) for v in obj]
    if t in _SCALARS:
        return obj
    return _default(obj, records)


def _default(obj, records: bool = False):
    """Values json cannot write itself (also json.dumps' default= hook)."""
    if isinstance(obj, _BLOBS):
        return _bytes(obj)
    if isinstance(obj, UUID):
        return str(obj)
    if isinstance(obj, dict) or isinstance(obj, (list, tuple)):
        return jsonable(obj, records)
    if hasattr(obj, "__dataclass_fields__"):
        return {k: jsonable(getattr(obj, k), records) for k in obj.__dataclass_fields__}
    return str(obj)


def to_json(item, *, records: bool = False, raw: bool = False) -> dict:
    """The JSON object of one item, plain JSON types only."""
    out = _shallow(item, raw)
    if out["type"] == "exchange":
        out["request"] = jsonable(out["request"], records)
        out["response"] = jsonable(out["response"], records)
    return out


def _shallow(item, raw: bool) -> dict:
    if item.type == "anomaly":
        return {"type": "anomaly", "connection": item.connection, "ts": item.ts, "kind": item.kind, "detail": item.detail}
    out = {"type": "exchange"}
    for k in EXCHANGE_KEYS:
        out[k] = getattr(item, k)
    out["flags"] = list(item.flags)
    if raw:
        out["request_raw"] = None if item.request_raw is None else bytes(item.request_raw).hex()
        out["response_raw"] = None if item.response_raw is None else bytes(item.response_raw).hex()
    return out


def _record_fields(obj, found: dict) -> None:
    """id -> records field, for the bodies of the few APIs that carry record data."""
    if type(obj) is list:
        for v in obj:
            if type(v) is dict or type(v) is list:
                _record_fields(v, found)
        return
    for k, v in obj.items():
        t = type(v)
        if t is dict or t is list:
            _record_fields(v, found)
        elif k in RECORD_FIELDS and t in _BLOBS:
            found[id(v)] = v


class _Encoder:
    """json's C encoder does the walking; only values it cannot write come back to
    Python, and record fields are told apart from other bytes by identity."""

    def __init__(self, records: bool, raw: bool):
        self.records, self.raw = records, raw
        self.found: dict = {}
        self.encode = json.JSONEncoder(ensure_ascii=False, default=self.default).encode

    def default(self, obj):
        if id(obj) in self.found:
            return _records(obj, self.records)
        return _default(obj, self.records)

    def line(self, item) -> str:
        out = _shallow(item, self.raw)
        found = self.found
        found.clear()
        if out["type"] == "exchange" and (item.api_key in RECORD_APIS):
            for body in (item.request, item.response):
                if body:
                    _record_fields(body, found)
        return self.encode(out)


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}"


def format_text(item) -> str:
    """One line, tshark-summary style."""
    if item.type == "anomaly":
        conn = "" if item.connection is None else f" conn={item.connection}"
        return f"{_clock(item.ts)} ANOMALY{conn} {item.kind}: {item.detail}"
    from protocol.errors import error_name

    ts = item.ts if item.ts is not None else item.response_ts
    api = item.api_name or "?"
    if item.api_version is not None:
        api += f" v{item.api_version}"
    parts = [_clock(ts), f"{item.client} -> {item.broker}", api]
    if item.correlation_id is not None:
        parts.append(f"corr={item.correlation_id}")
    parts.append("-" if item.latency_ms is None else f"{item.latency_ms:.3f}ms")
    if item.client_id is not None:
        parts.append(f"client={item.client_id}")
    if item.status != "ok":
        parts.append(item.status.upper())
    if item.error_codes:
        parts.append("errors=" + ",".join(error_name(c) for c in item.error_codes))
    if item.flags:
        parts.append("flags=" + ",".join(item.flags))
    return " ".join(parts)


def write(items: Iterable, fh: IO[str], fmt: str = "text", *, records: bool = False, raw: bool = False) -> int:
    """Write every item; returns how many exchanges were written."""
    n = 0
    if fmt == "jsonl":
        line = _Encoder(records, raw).line
        for item in items:
            fh.write(line(item) + "\n")
            n += item.type == "exchange"
        return n
    for item in items:
        fh.write(format_text(item) + "\n")
        n += item.type == "exchange"
    return n
