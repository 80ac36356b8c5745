"""Python rows as Arrow tables, built from their buffers.

pyarrow's own converter (pa.array, Table.from_pylist) first asks whether each value is a pandas
object, which imports pandas: a fifth of a second, a third of landing a small capture, for the
few rows a landing makes in Python (the runs table's row, the group tables). These are built here
from the values' bytes instead; tests/test_pyrows.py holds them equal to pyarrow's converter.
"""

from __future__ import annotations

import datetime
from array import array

import pyarrow as pa

__all__ = ["column", "rows", "table"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICRO = datetime.timedelta(microseconds=1)
_INTS = {8: "b", 16: "h", 32: "i", 64: "q"}


def table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """`rows` (dicts; a key left out is null) as a table of `schema`, as Table.from_pylist makes it."""
    arrays = [column([r.get(f.name) for r in rows], f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def rows(data: pa.Table) -> list[dict]:
    """data.to_pylist(), with timestamp columns (microseconds) as UTC datetimes: pyarrow's own
    timestamp conversion imports pandas."""
    cols = {}
    for f in data.schema:
        col = data.column(f.name)
        if pa.types.is_timestamp(f.type) and f.type.unit == "us":
            tz = datetime.UTC if f.type.tz else None
            base = _EPOCH if tz else _EPOCH.replace(tzinfo=None)
            col = [None if v is None else base + v * _MICRO for v in col.cast(pa.int64()).to_pylist()]
        else:
            col = col.to_pylist()
        cols[f.name] = col
    names = list(cols)
    return [dict(zip(names, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def column(values: list, typ: pa.DataType) -> pa.Array:
    """Python values (None for null) as an array of `typ`: integers, floats, booleans, strings,
    bytes, timestamps in microseconds (datetimes; naive ones read as UTC), lists and structs of
    them."""
    n = len(values)
    nulls = sum(v is None for v in values)
    valid = _bits([v is not None for v in values]) if nulls else None
    if pa.types.is_struct(typ):
        children = [column([None if v is None else v.get(f.name) for v in values], f.type) for f in typ]
        return pa.Array.from_buffers(typ, n, [valid], null_count=nulls, children=children)
    if pa.types.is_list(typ):
        items: list = []
        offsets = array("i", [0])
        for v in values:
            if v is not None:
                items.extend(v)
            offsets.append(len(items))
        child = column(items, typ.value_type)
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets)], null_count=nulls, children=[child])
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        data = [b"" if v is None else v.encode() if isinstance(v, str) else bytes(v) for v in values]
        offsets = array("i", [0])
        at = 0
        for d in data:
            at += len(d)
            offsets.append(at)
        return pa.Array.from_buffers(
            typ, n, [valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))], null_count=nulls
        )
    if pa.types.is_boolean(typ):
        return pa.Array.from_buffers(typ, n, [valid, _bits([bool(v) for v in values])], null_count=nulls)
    if pa.types.is_timestamp(typ) and typ.unit == "us":
        data = array("q", [0 if v is None else _micros(v) for v in values])
    elif pa.types.is_integer(typ) and pa.types.is_signed_integer(typ):
        data = array(_INTS[typ.bit_width], [0 if v is None else v for v in values])
    elif pa.types.is_float64(typ):
        data = array("d", [0.0 if v is None else v for v in values])
    else:
        raise TypeError(f"no buffers for {typ} here")
    return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(data)], null_count=nulls)


def _micros(v: datetime.datetime) -> int:
    if v.tzinfo is None:
        v = v.replace(tzinfo=datetime.UTC)
    return (v - _EPOCH) // _MICRO


def _bits(flags: list[bool]) -> pa.Buffer:
    """A validity (or boolean) bitmap, least significant bit first."""
    out = bytearray((len(flags) + 7) // 8)
    for i, f in enumerate(flags):
        if f:
            out[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(out))
