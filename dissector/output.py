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
                 "request_size", "response_size")
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


def jsonable(obj, records: bool = False):
    """A decoded body (or any value in it) as plain JSON types."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in RECORD_FIELDS and isinstance(v, (memoryview, bytes, bytearray)):
                out[k] = _records(v, records)
            else:
                out[str(k)] = jsonable(v, records)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, records) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, (memoryview, bytes, bytearray)):
        return _bytes(obj)
    if isinstance(obj, UUID):
        return str(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return {k: jsonable(getattr(obj, k), records) for k in obj.__dataclass_fields__}
    return str(obj)


def to_json(item, *, records: bool = False, raw: bool = False) -> dict:
    if item.type == "anomaly":
        return {"type": "anomaly", "connection": item.connection, "ts": item.ts, "kind": item.kind, "detail": item.detail}
    out = {"type": "exchange"}
    for k in EXCHANGE_KEYS:
        v = getattr(item, k)
        out[k] = jsonable(v, records) if k in ("request", "response") else v
    if raw:
        out["request_raw"] = None if item.request_raw is None else bytes(item.request_raw).hex()
        out["response_raw"] = None if item.response_raw is None else bytes(item.response_raw).hex()
    return out


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
    return " ".join(parts)


def write(items: Iterable, fh: IO[str], fmt: str = "text", *, records: bool = False, raw: bool = False) -> int:
    """Write every item; returns how many exchanges were written."""
    n = 0
    dumps = json.dumps
    for item in items:
        if fmt == "jsonl":
            fh.write(dumps(to_json(item, records=records, raw=raw), ensure_ascii=False) + "\n")
        else:
            fh.write(format_text(item) + "\n")
        if item.type == "exchange":
            n += 1
    return n
