"""The Python pipeline's writer, frozen as a test oracle (tests/oracle/__init__.py): exchanges and
anomalies as text lines or JSON lines, as the native writer (render.rs, lines.rs) must write them.

JSON form of decoded values:
- bytes/memoryview: a str when the bytes are UTF-8 text (printable, allowing
  tab/newline and the NUL/0x01 separators of SASL tokens), else {"hex": "..."}
  so that text and binary never look alike;
- UUID: its canonical str; record data (`Records` fields): the summary from
  protocol.records.summarize, or with records=True the decoded batches;
- payloads=False (--no-payloads): decoded records keep key_size/value_size and
  header keys, their keys, values and header values are null, and the record
  data in request_raw/response_raw is starred (same length).
"""

from __future__ import annotations

import time
from functools import cache
from typing import IO
from collections.abc import Iterable
from uuid import UUID

import orjson

from tests.redact_reference import star_after, star_spans
from dissector.topics import RECORD_APIS, topics
from protocol import records as rec

__all__ = ["to_json", "jsonable", "body_json", "format_text", "write", "without_raw_body", "EXCHANGE_KEYS"]

EXCHANGE_KEYS = (
    "ts",
    "response_ts",
    "latency_ms",
    "connection",
    "client",
    "broker",
    "api_key",
    "api_name",
    "api_version",
    "correlation_id",
    "client_id",
    "status",
    "error_codes",
    "request",
    "response",
    "request_size",
    "response_size",
    "response_version",
    "flags",
)
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


def _no_payloads(rs: dict) -> dict:
    """A decoded record set without keys, values and header values (PII), sizes kept."""
    for b in rs.get("batches", ()):
        for r in b.get("records") or ():
            key, value = r["key"], r["value"]
            r["key"], r["value"] = None, None
            r["key_size"] = -1 if key is None else len(key)
            r["value_size"] = -1 if value is None else len(value)
            r["headers"] = [[k, None] for k, _ in r["headers"]]
    return rs


def header_key(k):
    """A record header key for JSON: its text, or {"hex": ...} of its bytes when they are not UTF-8
    (protocol.records keeps those with surrogate escapes, so that re-encoding gives the bytes back;
    JSON cannot hold them)."""
    try:
        k.encode("utf-8")
    except UnicodeEncodeError:
        return {"hex": k.encode("utf-8", "surrogateescape").hex()}
    return k


def _keys_as_text(rs: dict) -> dict:
    for b in rs.get("batches", ()):
        for r in b.get("records") or ():
            r["headers"] = [[header_key(k), v] for k, v in r["headers"]]
    return rs


def _records(v, decode: bool, payloads: bool = True):
    try:
        if decode:
            rs = _keys_as_text(rec.read_record_set(v).to_dict(records=True))
            return jsonable(rs if payloads else _no_payloads(rs), True)
        return rec.summarize(v)  # plain JSON types already
    except Exception as e:  # noqa: BLE001 - bad record data must not stop the output
        return {"bytes": len(v), "error": f"{type(e).__name__}: {e}"}


_SCALARS = frozenset((str, int, float, bool, type(None)))
_BLOBS = (memoryview, bytes, bytearray)


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
        return {
            "type": "anomaly",
            "connection": item.connection,
            "ts": item.ts,
            "kind": item.kind,
            "detail": item.detail,
        }
    out = {"type": "exchange"}
    for k in EXCHANGE_KEYS:
        out[k] = getattr(item, k)
    out["flags"] = list(item.flags)
    if raw:
        out["request_raw"] = None if item.request_raw is None else bytes(item.request_raw).hex()
        out["response_raw"] = None if item.response_raw is None else bytes(item.response_raw).hex()
    return out


@cache
def _record_paths(api_key: int, direction: str) -> dict:
    """Where an API's record fields sit, as a trie of field names over every version
    ({"TopicData": {"PartitionData": {"Records": None}}}): finding them costs a few
    lookups per partition instead of a walk over the whole body."""
    from protocol import registry

    trie: dict = {}

    def add(fields, node) -> None:
        for f in fields:
            if f["name"] in RECORD_FIELDS:
                node[f["name"]] = None
            elif f.get("fields"):
                sub = node.get(f["name"]) or {}
                add(f["fields"], sub)
                if sub:
                    node[f["name"]] = sub

    for version in registry.request_versions(api_key):
        seg = registry.schema(api_key, version, direction)
        if seg is not None:
            add(seg["fields"], trie)
    return trie


def _record_fields(obj: dict, trie: dict, found: dict) -> None:
    """id -> records field, following the paths of `trie`."""
    for k, sub in trie.items():
        v = obj.get(k)
        if v is None:
            continue
        t = type(v)
        if sub is None:
            if t in _BLOBS:
                found[id(v)] = v
        elif t is list:
            for e in v:
                if type(e) is dict:
                    _record_fields(e, sub, found)
        elif t is dict:
            _record_fields(v, sub, found)


_OPTIONS = (
    orjson.OPT_NON_STR_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_APPEND_NEWLINE
)


class _Encoder:
    """orjson does the walking; only values it cannot write come back to Python. In the bodies of the
    APIs that carry record data, the decoder's only memoryviews are the record fields (an unknown tagged
    field is bytes), so they are told apart by type."""

    def __init__(self, records: bool, raw: bool, payloads: bool = True):
        self.records, self.raw, self.payloads = records, raw, payloads
        self.record_api = False

    def default(self, obj):
        if self.record_api and type(obj) is memoryview:
            return _records(obj, self.records, self.payloads)
        return _default(obj, self.records)

    def line(self, item) -> bytes:
        """One JSON line, newline included, as UTF-8."""
        if item.type == "anomaly":
            return orjson.dumps(
                {
                    "type": "anomaly",
                    "connection": item.connection,
                    "ts": item.ts,
                    "kind": item.kind,
                    "detail": item.detail,
                },
                option=_OPTIONS,
            )
        out = {
            "type": "exchange",
            "ts": item.ts,
            "response_ts": item.response_ts,
            "latency_ms": item.latency_ms,
            "connection": item.connection,
            "client": item.client,
            "broker": item.broker,
            "api_key": item.api_key,
            "api_name": item.api_name,
            "api_version": item.api_version,
            "correlation_id": item.correlation_id,
            "client_id": item.client_id,
            "status": item.status,
            "error_codes": item.error_codes,
            "request": item.request,
            "response": item.response,
            "request_size": item.request_size,
            "response_size": item.response_size,
            "response_version": item.response_version,
            "flags": list(item.flags),
        }
        self.record_api = item.api_key in RECORD_APIS
        if not self.payloads:
            out["response"] = without_raw_body(item.response)
        if self.raw:
            found: dict = {}
            if self.record_api and not self.payloads:
                if item.request:
                    _record_fields(item.request, _record_paths(item.api_key, "request"), found)
                if item.response:
                    _record_fields(item.response, _record_paths(item.api_key, "response"), found)
            blobs = () if self.payloads else found.values()
            for k in ("request_raw", "response_raw"):
                v = getattr(item, k)
                if v is not None and not self.payloads and _opaque(item, k):
                    v = star_after(v, 8 if k == "request_raw" else 4)
                out[k] = None if v is None else star_spans(v, [(b, ((0, len(b)),)) for b in blobs]).hex()
        return orjson.dumps(out, default=self.default, option=_OPTIONS)


def _opaque(item, raw_key: str) -> bool:
    """--no-payloads: a message that may hold record data where it cannot be found (an orphan
    response, whose API is unknown, or an undecodable Produce/Fetch/...): its bytes go whole."""
    body = item.request if raw_key == "request_raw" else item.response
    if type(body) is dict and "_raw_body" in body:
        return True
    return item.api_key in RECORD_APIS and type(body) is dict and "_decode_error" in body


def without_raw_body(body):
    """--no-payloads: an orphan response's undecoded body (it may be a Fetch answer full of records)
    reduced to its size."""
    if type(body) is dict and "_raw_body" in body:
        return dict(body, _raw_body={"bytes": len(body["_raw_body"]), "dropped": "--no-payloads"})
    return body


_BODY_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def body_json(
    body, api_key: int | None, direction: str, *, records: bool = False, summaries: dict | None = None
) -> bytes:
    """One decoded body as compact JSON (UTF-8), in the jsonl output's form: the `request_json`
    and `response_json` of the tables. summaries: id(records field) -> its summary, when the
    caller has scanned the record data already."""
    found: dict = {}
    if api_key in RECORD_APIS and type(body) is dict:
        _record_fields(body, _record_paths(api_key, direction), found)

    def default(obj):
        if id(obj) in found:
            if summaries is not None and not records:
                done = summaries.get(id(obj))
                if done is not None:
                    return done
            return _records(obj, records)
        return _default(obj, records)

    return orjson.dumps(body, default=default, option=_BODY_OPTIONS)


_second = [None, ""]  # the last whole second formatted, and its text: lines come many to a second


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    sec = int(ts // 1)
    if sec != _second[0]:
        _second[0], _second[1] = sec, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))
    return f"{_second[1]}.{int(ts % 1 * 1e6):06d}"


def format_text(item) -> str:
    """One line, tshark-summary style, in aligned columns: time, client -> broker, API and
    version, correlation id, latency, client id, topics, then status, errors and flags
    when there are any."""
    if item.type == "anomaly":
        conn = "" if item.connection is None else f" conn={item.connection}"
        return f"{_clock(item.ts)} ANOMALY{conn} {item.kind}: {item.detail}"
    from protocol.errors import error_name

    ts = item.ts if item.ts is not None else item.response_ts
    api = item.api_name or "?"
    if item.api_version is not None:
        api += f" v{item.api_version}"
    corr = "" if item.correlation_id is None else f"corr={item.correlation_id}"
    latency = "-" if item.latency_ms is None else f"{item.latency_ms:.3f}ms"
    line = (
        f"{_clock(ts)} {item.client:>21} -> {item.broker:<21} {api:<30} {corr:<11} {latency:>11}"
        f" client={item.client_id or '-':<20}"
    )
    names = topics(item)
    if names:
        line += " topics=" + ",".join(names)
    if item.status != "ok":
        line += " " + item.status.upper()
    if item.error_codes:
        line += " errors=" + ",".join(error_name(c) for c in item.error_codes)
    if item.flags:
        line += " flags=" + ",".join(item.flags)
    return line.rstrip()


def write(
    items: Iterable, fh: IO[str], fmt: str = "text", *, records: bool = False, raw: bool = False, payloads: bool = True
) -> int:
    """Write every item; returns how many exchanges were written (payloads=False: --no-payloads)."""
    n = 0
    if fmt == "jsonl":
        line = _Encoder(records, raw, payloads).line
        out = getattr(fh, "buffer", None)
        if out is None:  # a text-only stream (io.StringIO)
            for item in items:
                fh.write(line(item).decode())
                n += item.type == "exchange"
            return n
        fh.flush()
        put = out.write
        for item in items:
            put(line(item))
            n += item.type == "exchange"
        out.flush()
        return n
    for item in items:
        fh.write(format_text(item) + "\n")
        n += item.type == "exchange"
    return n
