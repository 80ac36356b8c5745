"""Comparing items from the native core with the Python pipeline's: equal values, and the same
JSON (so key order, which dict equality ignores, counts too)."""

from __future__ import annotations

import dataclasses
import re

import orjson

from tests.oracle.output import to_json


def _json(item) -> bytes:
    if item.type == "connection":
        return orjson.dumps({k: getattr(item, k) for k in item.__dataclass_fields__})
    return orjson.dumps(to_json(_worded_alike(item), raw=True, records=True), option=orjson.OPT_NON_STR_KEYS)


def _same_errors(obj):
    """A nested payload that does not decode is {"_error": why} in both, but the why is each
    decoder's own wording (the core's "ends in the middle of a field", Python's "field Topics,
    byte 6: array of 160 elements runs past the end"): that it failed is compared, not the words."""
    if isinstance(obj, dict):
        return {
            k: {"_error": "..."}
            if isinstance(k, str) and k.endswith("Decoded") and isinstance(v, dict) and set(v) == {"_error"}
            else _same_errors(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_same_errors(v) for v in obj]
    return obj


def _worded_alike(item):
    if item.type != "exchange":
        return item
    return dataclasses.replace(item, request=_same_errors(item.request), response=_same_errors(item.response))


def _types(obj):
    """The shape of a value with its container and scalar types (tuple vs list, memoryview vs bytes)."""
    t = type(obj)
    if t is dict:
        return {k: _types(v) for k, v in obj.items()}
    if t in (list, tuple):
        return (t.__name__, [_types(v) for v in obj])
    return t.__name__


# The rows the core alone names (test_native_frames.py's DualSplitter holds them to the oracle's
# splitter state): bytes a hunt from the midstream start skipped, which the frozen oracle drops unnamed.
_CORE_ONLY = re.compile(
    r"(client|broker): (stream ended before a frame boundary was found \(\d+ bytes skipped after midstream start\)"
    r"|skipped \d+ bytes after midstream start; frame boundary found at stream offset \d+)"
)


# A frame or size prefix that a gap ends: the core's gap_in_frame row names the bytes of it
# skipped before the gap (DualSplitter holds the count to the oracle's), the oracle's says "resyncing".
_BEFORE_GAP = re.compile(r"; skipped the \d+ bytes of it before the gap, resyncing$")


def without_core_only(got: list, want: list) -> list:
    """The core's items without the resync rows only it names (those the oracle has stay), and
    its connections' resync counts without them; its gap_in_frame rows in the oracle's words."""
    wanted = [(x.kind, x.detail) for x in want if x.type == "anomaly"]
    dropped: dict = {}
    out = []
    for x in got:
        if x.type == "anomaly" and x.kind == "resync" and _CORE_ONLY.fullmatch(x.detail):
            if (x.kind, x.detail) not in wanted:
                dropped[x.connection] = dropped.get(x.connection, 0) + 1
                continue
        if x.type == "anomaly" and x.kind == "gap_in_frame":
            x = dataclasses.replace(x, detail=_BEFORE_GAP.sub("; resyncing", x.detail))
        out.append(x)
    return [
        dataclasses.replace(x, resyncs=x.resyncs - dropped[x.connection])
        if x.type == "connection" and x.connection in dropped
        else x
        for x in out
    ]


def assert_same_items(got: list, want: list, where: str = "") -> None:
    assert len(got) == len(want), (
        f"{where}: {len(got)} native items, {len(want)} Python items\n"
        f"native: {[_json(x) for x in got]}\npython: {[_json(x) for x in want]}"
    )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is type(w), f"{where}: item {i}: {type(g).__name__} vs {type(w).__name__}"
        assert _json(g) == _json(w), f"{where}: item {i}:\nnative {_json(g)}\npython {_json(w)}"
        assert _worded_alike(g) == _worded_alike(w), f"{where}: item {i} differs in value"
        if w.type == "exchange":
            for k in ("request", "response", "error_codes", "flags", "request_raw", "response_raw"):
                assert _types(getattr(g, k)) == _types(getattr(w, k)), f"{where}: item {i}: types of {k}"
