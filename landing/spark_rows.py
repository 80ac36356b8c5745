"""The landing tables' rows as the `kafkawire` data sources hand them to Spark (landing.spark_source
for batch reads, landing.spark_stream for streams): Spark's schema of a table, the Arrow schema
Spark checks a source's batches against, a batch cast to it, and the options both sources read.

Imports no pyspark at module level: the read tasks import it on executors, through the sources."""

from __future__ import annotations

import json

from landing.schemas import PARTITION, SCHEMAS

__all__ = [
    "spark_schema",
    "arrow_schema",
    "to_arrow",
    "table_due",
    "option_list",
    "option_ports",
    "option_payloads",
    "keylogs",
]


def spark_schema(table: str):
    """The table's Spark schema (StructType), `date` included."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(list(SCHEMAS[table]) + [pa.field(PARTITION, pa.string())]))


def arrow_schema(table: str):
    """The Arrow schema Spark checks a data source's batches against: timestamps in
    microseconds (the records table's `timestamp` is in ms) and lists whose items are
    named "element" (pyarrow says "item")."""
    import pyarrow as pa

    def spark_type(t):
        if pa.types.is_list(t):
            return pa.list_(pa.field("element", t.value_type))
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz=t.tz)
        return t

    return pa.schema(
        [pa.field(f.name, spark_type(f.type)) for f in SCHEMAS[table]] + [pa.field(PARTITION, pa.string())]
    )


def to_arrow(batch, schema):
    """A table's batch (landing.writer's types) with `schema`'s types (arrow_schema)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [c.cast(f.type) for c, f in zip(batch.columns, schema, strict=True)], schema=schema
    )


def table_due(engine, table: str, at: int = 8192) -> bool:
    """After a batch of a native lander: whether `table` has `at` rows pending to take. The lander makes
    every table's rows and a source serves one: the other tables' rows are dropped as they pile up."""
    from landing.writer import NATIVE_TABLES

    due = False
    for name, n in zip(NATIVE_TABLES, engine.rows_pending().rows, strict=True):
        if n < at:
            continue
        if name == table:
            due = True
        else:
            engine.rows_take(name)
    return due


def option_list(value: str | None) -> list[str]:
    """An option that names one path or several: a path, or a JSON list of paths."""
    if not value:
        return []
    return json.loads(value) if value.startswith("[") else [value]


def option_ports(options: dict) -> list[int]:
    """The `ports` option (comma-separated): ports read as Kafka besides the defaults."""
    return [int(p) for p in options.get("ports", "").split(",") if p.strip()]


def option_payloads(options: dict) -> bool:
    """The `payloads` option: whether rows carry the requests' and responses' JSON (default true)."""
    return options.get("payloads", "true") != "false"


def keylogs(options: dict, files: list) -> list[bytes]:
    """The key logs a source decrypts `files` with, read where the source is made (the driver): the
    `tls_keylog` option's files and the captures' pcapng Decryption Secrets Blocks. They travel to the
    read task inside the reader or its partition, so executors need no copy."""
    from dissector.tls import capture_keylogs, read_keylogs

    return [*read_keylogs(option_list(options.get("tls_keylog"))), *capture_keylogs(files)]
