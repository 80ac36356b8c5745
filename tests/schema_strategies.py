"""Hypothesis strategies built from the registry's schema data: values any version can carry.

They mirror the wire rules the compiler follows (which fields a version has,
nullability, tagged fields present or absent), so a generated value must survive
encode -> decode unchanged.
"""

from __future__ import annotations

from hypothesis import strategies as st

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _in(rng, v):
    return rng is not None and rng[0] <= v <= rng[1]


def _scalar(ftype: str):
    if ftype in _INT_RANGES:
        lo, hi = _INT_RANGES[ftype]
        return st.integers(lo, hi)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=12),
        "records": st.binary(max_size=24),
        "uuid": st.uuids(),
    }[ftype]


def field_value(f: dict, version: int, flexible: bool, depth: int):
    nullable = _in(f.get("nullable"), version)
    if f["type"] == "struct":
        elem = struct_value(f["fields"], version, flexible, depth + 1)
    else:
        elem = _scalar(f["type"])
    if f.get("array"):
        value = st.lists(elem, max_size=3 if depth < 2 else 1)
        if f["type"] in _INT_RANGES or f["type"] in ("bool", "float64"):
            value = value.map(tuple)  # numbers come back as the tuple struct unpacks
    else:
        value = elem
    return st.one_of(st.none(), value) if nullable else value


def struct_value(fields: list[dict], version: int, flexible: bool, depth: int = 0):
    required, optional = {}, {}
    for f in fields:
        if not _in(f["versions"], version):
            continue
        tagged = flexible and _in(f.get("tagged"), version)
        (optional if tagged else required)[f["name"]] = field_value(f, version, flexible, depth)
    if flexible:
        # Tags above any Kafka uses: they must come back as raw bytes, in order.
        optional["_unknown_tagged_fields"] = st.dictionaries(
            st.integers(1000, 1100), st.binary(max_size=6), min_size=1, max_size=2
        )
    return st.fixed_dictionaries(required, optional=optional)
