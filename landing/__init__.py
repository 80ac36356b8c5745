"""Dissected exchanges -> Parquet tables (and Spark), for latency and error analysis.

    from dissector import dissect
    from landing import land_local
    land_local(dissect(["capture.pcap"]), "out/", records=True)

Modules: schemas (the tables' columns: the one source of truth), rows
(exchanges/anomalies -> Arrow record batches), local (the no-JVM engine).
Landing reads exchanges only; it never reaches into TCP or frame internals.
"""
from landing.local import LocalWriter, dataset, land_local
from landing.rows import Rows
from landing.schemas import SCHEMAS, TABLES

__all__ = ["LocalWriter", "Rows", "SCHEMAS", "TABLES", "dataset", "land_local"]
