"""Captures -> tables (Delta Lake, locally or on Spark), for latency and error analysis.

    from landing import land_local
    land_local(["capture.pcap"], "out/", records=True)

Modules: schemas (the tables' columns: the one source of truth), writer (the native core's
rows written as Parquet, by both engines; dataset(): a landed table read), local (the no-JVM
engine: captures landed, whole or filtered), carry (the open connections one landing hands the next
appended one), lake (the tables as Delta Lake tables: --mode error|overwrite|append, the runs
table, commits a kill cannot half-do), names (late topic names put into written files), keys (a
row's exchange_id and date partition), spark (the Spark engine and the `kafkawire` data source),
spark_daemon (its local-mode worker daemon). Landing takes rows from dissector's public face only.
"""

from __future__ import annotations

import importlib

__all__ = ["LocalWriter", "SCHEMAS", "TABLES", "dataset", "land_local"]

_HOME = {
    "LocalWriter": "landing.writer",
    "dataset": "landing.writer",
    "land_local": "landing.local",
    "SCHEMAS": "landing.schemas",
    "TABLES": "landing.schemas",
}


def __getattr__(name: str):
    # Imported on first use, not with the package: importing any landing module must not load pyarrow
    # (landing.spark_daemon sets pyarrow's allocator up before it loads, so that workers fork safely).
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'landing' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(home), name)
    return value


def __dir__():
    return sorted({*globals(), *__all__})
