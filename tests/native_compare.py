"""Comparing items from the native core with the Python pipeline's: equal values, and the same
JSON (so key order, which dict equality ignores, counts too)."""

from __future__ import annotations

import dataclasses

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
