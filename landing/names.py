"""Topic names learned after rows were written: put in place of the `topic-id:` placeholders of
Parquet files already written (the local engine's last pass, the Spark driver's, a later appended run's)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.topics import UNRESOLVED
from landing.pyrows import column

__all__ = ["resolve_file", "resolve_table"]


_JSON_ID = re.compile(r'"TopicId":"([0-9a-f-]{36})","TopicName":null')


def resolve_file(path: Path, names: dict[str, str]) -> None:
    """Put late-learned topic names in place of `topic-id:` placeholders (and null TopicNames in JSON)."""
    # ParquetFile, not read_table: that goes through pyarrow.dataset, which imports pandas
    table, changed = resolve_table(pq.ParquetFile(path).read(), names)
    if changed:
        # hidden until replaced: no reader takes a file left by a kill here for part of the table
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)


def resolve_table(table, names: dict[str, str]) -> tuple:
    """(rows with late-learned topic names in place of their placeholders, whether any changed):
    `names` maps each `topic-id:<uuid>` placeholder to its name.  A Table or a RecordBatch."""
    by_id = {k[len(UNRESOLVED) :]: v for k, v in names.items()}
    changed = False
    cols = {}
    for name in table.schema.names:
        col = table.column(name)
        if name == "topics":
            vals = col.to_pylist()
            new = [None if v is None else [names.get(t, t) for t in v] for v in vals]
            if new != vals:
                changed, col = True, column(new, col.type)
        elif name == "topic":
            vals = col.to_pylist()
            new = [names.get(t, t) if t is not None else None for t in vals]
            if new != vals:
                changed, col = True, column(new, col.type)
        elif name in ("request_json", "response_json"):
            vals = col.to_pylist()

            def fix(m):
                n = by_id.get(m.group(1))
                return m.group(0) if n is None else f'"TopicId":"{m.group(1)}","TopicName":{_quote(n)}'

            new = [v if v is None or '"TopicName":null' not in v else _JSON_ID.sub(fix, v) for v in vals]
            if new != vals:
                changed, col = True, column(new, col.type)
        cols[name] = col
    if not changed:
        return table, False
    if "value_decoded" in table.schema.names:
        _decode_named(table, cols)
    make = pa.RecordBatch.from_pydict if isinstance(table, pa.RecordBatch) else pa.table
    return make(cols, schema=table.schema), True


def _quote(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)


def _decode_named(table, cols: dict) -> None:
    """Records whose topic is named only now (a replication Fetch of an internal topic that another
    task, or a later run, learned the name of) get what the core decodes of such records then:
    key_decoded and value_decoded, and a secret's value left out."""
    from dissector.native import internal_row, internal_topics

    before = table.column("topic").to_pylist()
    after = cols["topic"].to_pylist()
    internal = internal_topics()
    todo = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b and b in internal]
    if not todo:
        return
    keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
    control = table.column("control").to_pylist()
    kd, vd = table.column("key_decoded").to_pylist(), table.column("value_decoded").to_pylist()
    for i in todo:
        if keys[i] is None and values[i] is None:
            continue  # --no-payloads: nothing to decode, as the core leaves it
        kd[i], vd[i], secret = internal_row(after[i], keys[i], values[i], bool(control[i]))
        if secret:
            values[i] = None
    cols["key_decoded"] = column(kd, table.column("key_decoded").type)
    cols["value_decoded"] = column(vd, table.column("value_decoded").type)
    cols["value"] = column(values, table.column("value").type)
