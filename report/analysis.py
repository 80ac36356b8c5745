"""Latency and error analysis over landed tables, with pandas (no JVM).

Every function takes the landed directory (or a `Tables` already read) and
returns a pandas DataFrame; `report()` gathers them all. report/spark_analysis.py
computes the same numbers with Spark SQL over the catalog tables, and a test
holds the two to the same figures.

Percentiles are exact with linear interpolation (numpy's default, and Spark
SQL's `percentile`), so both engines agree to the last digit.
"""

from __future__ import annotations

import json
import re
import os

import pandas as pd
import pyarrow as pa

__all__ = [
    "Tables",
    "latency",
    "latency_over_time",
    "errors",
    "errors_over_time",
    "slowest",
    "version_matrix",
    "kafka4_readiness",
    "throughput",
    "throughput_over_time",
    "batching",
    "broker_versions",
    "consumer_lag",
    "produce_to_fetch",
    "rebalances",
    "partitions_moved",
    "tls_connections",
    "report",
    "QUANTILES",
]

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
# jsonl/table columns that identify the parties
_EXCHANGE_COLS = [
    "exchange_id",
    "connection_id",
    "ts",
    "response_ts",
    "latency_ms",
    "client",
    "broker",
    "client_id",
    "api_key",
    "api_name",
    "api_version",
    "response_version",
    "correlation_id",
    "status",
    "error_codes",
    "topics",
    "group_id",
    "request_json",
    "response_json",
]


class Tables:
    """The landed tables of one directory, read once and kept (None for a table that is not there)."""

    def __init__(self, out: str | os.PathLike):
        self.out = out  # a folder, or a lake's URI
        self._cache: dict[str, pd.DataFrame | None] = {}

    @classmethod
    def of(cls, source) -> Tables:
        """The Tables given, or those of the directory given (a report's analyses share one)."""
        return source if isinstance(source, Tables) else cls(source)

    def get(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        key = name if columns is None else f"{name}:{','.join(columns)}"
        if key not in self._cache:
            from landing.writer import dataset, has_table
            from landing.schemas import SCHEMAS

            if not has_table(self.out, name):
                self._cache[key] = pd.DataFrame(columns=columns or [f.name for f in SCHEMAS[name]])
            else:
                self._cache[key] = dataset(self.out, name).to_table(columns=columns).to_pandas()
        return self._cache[key]


def _answered(t: Tables) -> pd.DataFrame:
    ex = t.get(
        "exchanges",
        [
            "ts",
            "latency_ms",
            "api_name",
            "api_version",
            "client_id",
            "broker",
            "exchange_id",
            "client",
            "correlation_id",
        ],
    )
    return ex[ex["latency_ms"].notna()]


def _percentiles(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=[*by, "count", *QUANTILES, "max"])
    g = df.groupby(by, dropna=False)["latency_ms"]
    out = g.agg(count="count", max="max")
    for name, q in QUANTILES.items():
        out[name] = g.quantile(q)
    out = out.reset_index()[[*by, "count", *QUANTILES, "max"]]
    out["count"] = out["count"].astype("int64")
    return out.sort_values(by, kind="stable").reset_index(drop=True)


def latency(source, by: str | list[str] = ("api_name", "api_version")) -> pd.DataFrame:
    """count, p50, p90, p99 and max latency (ms) of answered exchanges, grouped by `by`
    (any exchanges columns: api_name, api_version, client_id, broker, ...)."""
    by = [by] if isinstance(by, str) else list(by)
    return _percentiles(_answered(Tables.of(source)), by)


def latency_over_time(source, bucket: str = "1min", by: str = "api_name") -> pd.DataFrame:
    """The same figures per time bucket (`1s`, `1min`, ...) and `by` (api_name by default)."""
    ex = _answered(Tables.of(source)).copy()
    ex["bucket"] = ex["ts"].dt.floor(bucket)
    return _percentiles(ex, ["bucket", by])


def errors(source, by: str | list[str] = ("api_name", "code", "name", "retriable")) -> pd.DataFrame:
    """How many times each error code was answered, grouped by `by` (api_name, topic, client_id, ...)."""
    by = [by] if isinstance(by, str) else list(by)
    er = Tables.of(source).get("errors")
    if er.empty:
        return pd.DataFrame(columns=[*by, "count"])
    out = er.groupby(by, dropna=False).size().rename("count").reset_index()
    return out.sort_values(["count", *by], ascending=[False] + [True] * len(by), kind="stable").reset_index(drop=True)


def errors_over_time(source, bucket: str = "1min") -> pd.DataFrame:
    er = Tables.of(source).get("errors").copy()
    if er.empty:
        return pd.DataFrame(columns=["bucket", "api_name", "name", "count"])
    er["bucket"] = er["ts"].dt.floor(bucket)
    out = er.groupby(["bucket", "api_name", "name"]).size().rename("count").reset_index()
    return out.sort_values(["bucket", "api_name", "name"], kind="stable").reset_index(drop=True)


def slowest(source, n: int = 20) -> pd.DataFrame:
    ex = _answered(Tables.of(source))
    cols = [
        "ts",
        "latency_ms",
        "api_name",
        "api_version",
        "client_id",
        "client",
        "broker",
        "correlation_id",
        "exchange_id",
    ]
    return ex.sort_values(["latency_ms", "exchange_id"], ascending=[False, True]).head(n)[cols].reset_index(drop=True)


def version_matrix(source) -> pd.DataFrame:
    """Per client id and API: the versions sent, how many exchanges, whether Kafka 4 removed
    any of those versions, UNSUPPORTED_VERSION (35) answers and exchanges that did not decode."""
    from protocol.registry import removed_in_kafka4

    ex = Tables.of(source).get(
        "exchanges", ["client_id", "api_key", "api_name", "api_version", "status", "error_codes"]
    )
    ex = ex[ex["api_key"].notna() & ex["api_version"].notna()].copy()
    if ex.empty:
        return pd.DataFrame(
            columns=[
                "client_id",
                "api_name",
                "api_key",
                "versions",
                "exchanges",
                "removed_in_kafka4",
                "unsupported_version",
                "undecodable",
            ]
        )
    ex["removed"] = [
        bool(removed_in_kafka4(int(k), int(v))) for k, v in zip(ex["api_key"], ex["api_version"], strict=True)
    ]
    ex["unsupported"] = [35 in list(c) if c is not None else False for c in ex["error_codes"]]
    ex["undecodable"] = ex["status"] == "undecodable"
    ex["client_id"] = ex["client_id"].fillna("")
    g = ex.groupby(["client_id", "api_name", "api_key"])
    out = g.agg(
        versions=("api_version", lambda s: sorted({int(v) for v in s})),
        exchanges=("api_version", "size"),
        removed_in_kafka4=("removed", "any"),
        unsupported_version=("unsupported", "sum"),
        undecodable=("undecodable", "sum"),
    ).reset_index()
    out["api_key"] = out["api_key"].astype("int64")
    for c in ("unsupported_version", "undecodable", "exchanges"):
        out[c] = out[c].astype("int64")
    return out.sort_values(["client_id", "api_key"], kind="stable").reset_index(drop=True)


BATCH_COLS = [
    "ts",
    "direction",
    "client",
    "client_id",
    "topic",
    "partition",
    "records",
    "bytes",
    "uncompressed_bytes",
    "codec",
]


def throughput(source, by: list[str] | None = None) -> pd.DataFrame:
    """Bytes and records produced and fetched per `by` (default the topic; or topic and
    partition, or client id), from the batches table (record batch headers: no --records
    needed), with bytes per second over the capture's span (its first batch to its last), top
    talkers first. Produced counts the Produce requests' batches, fetched the Fetch answers'."""
    by = list(by or ["topic"])
    b = Tables.of(source).get("batches", BATCH_COLS)
    cols = [*by, "produced_batches", "produced_records", "produced_bytes", "produced_bytes_per_s"]
    cols += ["fetched_batches", "fetched_records", "fetched_bytes", "fetched_bytes_per_s"]
    if b.empty:
        return pd.DataFrame(columns=cols)
    span = max((b["ts"].max() - b["ts"].min()).total_seconds(), 1e-3)
    b = b.assign(client_id=b["client_id"].fillna(""))
    g = b.groupby([*by, "direction"], dropna=False).agg(
        batches=("records", "size"), records=("records", "sum"), bytes=("bytes", "sum")
    )
    out = g.unstack("direction", fill_value=0)
    rows = pd.DataFrame(index=out.index)
    for d, name in (("produce", "produced"), ("fetch", "fetched")):
        for m in ("batches", "records", "bytes"):
            rows[f"{name}_{m}"] = out[(m, d)].astype("int64") if (m, d) in out.columns else 0
        rows[f"{name}_bytes_per_s"] = rows[f"{name}_bytes"] / span
    rows = rows.reset_index()
    order = (rows["produced_bytes"] + rows["fetched_bytes"]).sort_values(ascending=False, kind="stable").index
    return rows.loc[order, cols].reset_index(drop=True)


def throughput_over_time(source, bucket: str = "1min") -> pd.DataFrame:
    """Bytes produced and fetched per time bucket and topic."""
    b = Tables.of(source).get("batches", BATCH_COLS)
    if b.empty:
        return pd.DataFrame(columns=["ts", "topic", "direction", "bytes", "records"])
    g = b.groupby([pd.Grouper(key="ts", freq=bucket), "topic", "direction"], dropna=False)
    return g.agg(bytes=("bytes", "sum"), records=("records", "sum")).reset_index()


BATCHING_COLS = [
    "client_id",
    "client",
    "topic",
    "batches",
    "records",
    "records_per_batch_p50",
    "records_per_batch_p90",
    "records_per_batch_max",
    "bytes_per_batch_p50",
    "bytes_per_batch_p90",
    "bytes_per_batch_max",
    "codecs",
    "bytes",
    "uncompressed_bytes",
    "compression_ratio",
]


def batching(source) -> pd.DataFrame:
    """How each producer (client id and connection) batches and compresses per topic: batches,
    records and bytes per batch (p50, p90, max), codecs, the bytes on the wire against the
    bytes uncompressed and their ratio (uncompressed / compressed; the core decompresses each
    batch for it). The wire does not carry the producer's batch.size or linger.ms, so how full
    a batch is against them is not here."""
    b = Tables.of(source).get("batches", BATCH_COLS)
    b = b[b["direction"] == "produce"]
    if b.empty:
        return pd.DataFrame(columns=BATCHING_COLS)
    b = b.assign(client_id=b["client_id"].fillna(""))
    g = b.groupby(["client_id", "client", "topic"], dropna=False)
    out = g.agg(
        batches=("records", "size"),
        records=("records", "sum"),
        records_per_batch_p50=("records", "median"),
        records_per_batch_p90=("records", lambda s: s.quantile(0.9)),
        records_per_batch_max=("records", "max"),
        bytes_per_batch_p50=("bytes", "median"),
        bytes_per_batch_p90=("bytes", lambda s: s.quantile(0.9)),
        bytes_per_batch_max=("bytes", "max"),
        codecs=("codec", lambda s: ",".join(sorted(set(s)))),
        bytes=("bytes", "sum"),
        uncompressed_bytes=("uncompressed_bytes", "sum"),
    ).reset_index()
    out["compression_ratio"] = out["uncompressed_bytes"] / out["bytes"]
    return out.sort_values(["client_id", "client", "topic"], kind="stable").reset_index(drop=True)[BATCHING_COLS]


KAFKA4_COLS = [
    "client_id",
    "software",
    "host",
    "api_name",
    "api_key",
    "version",
    "exchanges",
    "first_seen",
    "last_seen",
    "kafka4_lowest",
    "upgrade",
]
# KIP-896's survey of client releases that send none of the versions Kafka 4 removed
KAFKA4_CLIENTS = "kafka-python 2.0.2, librdkafka 1.8.2, Java 2.1, Sarama 1.30.1, KafkaJS 1.15.0"


def kafka4_readiness(source) -> pd.DataFrame:
    """Every client that sent an API version Kafka 4 no longer accepts (KIP-896; the versions
    only the older spec defines): client id, its software name and version from its ApiVersions
    request (KIP-511, none from a client older than that), host, the API and version, how often,
    first and last seen, the lowest version Kafka 4 takes (null: the API is gone) and what to
    upgrade to. Empty when every client would keep working."""
    from protocol.registry import removed_in_kafka4, request_versions

    ex = Tables.of(source).get(
        "exchanges",
        ["connection_id", "ts", "client", "client_id", "api_key", "api_name", "api_version", "request_json"],
    )
    ex = ex[ex["api_key"].notna() & ex["api_version"].notna()]
    keys = [int(k) for k in ex["api_key"]]
    removed = [bool(removed_in_kafka4(k, int(v))) for k, v in zip(keys, ex["api_version"], strict=True)]
    bad = ex[removed].copy()
    if bad.empty:
        return pd.DataFrame(columns=KAFKA4_COLS)
    # the software each connection named in its ApiVersions request
    software: dict = {}
    for conn, key, body in zip(ex["connection_id"], keys, ex["request_json"], strict=True):
        if key == 18 and body and "ClientSoftwareName" in body:
            req = json.loads(body)
            name, ver = req.get("ClientSoftwareName"), req.get("ClientSoftwareVersion")
            if name:
                software[conn] = f"{name} {ver}" if ver else name
    bad["software"] = [software.get(c) for c in bad["connection_id"]]
    bad["host"] = [_host(c) for c in bad["client"]]
    bad["client_id"] = bad["client_id"].fillna("")
    bad["version"] = bad["api_version"].astype("int64")
    g = bad.groupby(["client_id", "software", "host", "api_name", "api_key", "version"], dropna=False)
    out = g.agg(exchanges=("ts", "size"), first_seen=("ts", "min"), last_seen=("ts", "max")).reset_index()
    lowest, upgrade = [], []
    for key, name in zip(out["api_key"], out["api_name"], strict=True):
        kept = [v for v in request_versions(int(key)) if not removed_in_kafka4(int(key), v)]
        lowest.append(min(kept) if kept else None)
        upgrade.append(
            f"{name} v{min(kept)}+ (as {KAFKA4_CLIENTS} send)"
            if kept
            else f"none: {name} is gone (a ZooKeeper-mode inter-broker API)"
        )
    out["kafka4_lowest"] = pd.array(lowest, dtype="Int64")
    out["software"] = out["software"].astype(object).where(out["software"].notna(), None)
    out["upgrade"] = upgrade
    out["api_key"] = out["api_key"].astype("int64")
    return out.sort_values(["client_id", "host", "api_key", "version"], kind="stable").reset_index(drop=True)[
        KAFKA4_COLS
    ]


def _host(address) -> str | None:
    """The host of an ip:port (or [ipv6]:port) address."""
    if not isinstance(address, str):
        return None
    host = address.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


def broker_versions(source) -> pd.DataFrame:
    """What each broker advertised in its ApiVersions answers: broker, api_key, min, max (the widest seen)."""
    ex = Tables.of(source).get("exchanges", ["broker", "api_key", "status", "response_json"])
    ex = ex[(ex["api_key"] == 18) & (ex["status"] == "ok")]
    rows = []
    for broker, body in zip(ex["broker"], ex["response_json"], strict=True):
        for k in (json.loads(body).get("ApiKeys") or []) if body else []:
            rows.append((broker, k["ApiKey"], k["MinVersion"], k["MaxVersion"]))
    df = pd.DataFrame(rows, columns=["broker", "api_key", "min_version", "max_version"])
    if df.empty:
        return df
    out = (
        df.groupby(["broker", "api_key"])
        .agg(min_version=("min_version", "min"), max_version=("max_version", "max"))
        .reset_index()
    )
    return out.sort_values(["broker", "api_key"], kind="stable").reset_index(drop=True)


def _groups_by_client(t: Tables) -> dict[str, str]:
    """client id -> consumer group, from the group APIs each client id used (the last one wins)."""
    ex = t.get("exchanges", ["ts", "client_id", "group_id"])
    ex = ex[ex["group_id"].notna() & ex["client_id"].notna()].sort_values("ts", kind="stable")
    return dict(zip(ex["client_id"], ex["group_id"], strict=True))


def consumer_lag(source) -> pd.DataFrame:
    """Per Fetch partition: the fetch offset and the high watermark in its answer; lag = hw - offset.

    The group is the one the fetching client id joined or committed for (None for consumers
    without a group)."""
    t = Tables.of(source)
    ex = t.get("exchanges", ["ts", "client_id", "api_key", "status", "request_json", "response_json", "exchange_id"])
    ex = ex[(ex["api_key"] == 1) & (ex["status"] == "ok")]
    groups = _groups_by_client(t)
    rows = []
    for ts, cid, req, resp, eid in zip(
        ex["ts"], ex["client_id"], ex["request_json"], ex["response_json"], ex["exchange_id"], strict=True
    ):
        if not req or not resp:
            continue
        wanted = {}
        for topic in json.loads(req).get("Topics") or []:
            name = topic.get("Topic") or topic.get("TopicName")
            for p in topic.get("Partitions") or []:
                wanted[(name, p.get("Partition"))] = p.get("FetchOffset")
        for topic in json.loads(resp).get("Responses") or []:
            name = topic.get("Topic") or topic.get("TopicName")
            for p in topic.get("Partitions") or []:
                key = (name, p.get("PartitionIndex"))
                hw = p.get("HighWatermark")
                if key in wanted and hw is not None and hw >= 0 and not p.get("ErrorCode"):
                    rows.append((ts, groups.get(cid), cid, name, key[1], wanted[key], hw, hw - wanted[key], eid))
    cols = ["ts", "group_id", "client_id", "topic", "partition", "fetch_offset", "high_watermark", "lag", "exchange_id"]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["ts", "exchange_id", "topic", "partition"], kind="stable").reset_index(drop=True)


def produce_to_fetch(source) -> pd.DataFrame:
    """Records seen both produced and fetched (same topic, partition, offset): the delay from
    the Produce request to the Fetch response that delivered them (first fetch of each record)."""
    rec = Tables.of(source).get("records", ["ts", "direction", "topic", "partition", "offset"])
    rec = rec[rec["offset"].notna()]
    cols = ["topic", "partition", "offset", "produced", "fetched", "delay_ms"]
    if rec.empty:
        return pd.DataFrame(columns=cols)
    prod = rec[rec["direction"] == "produce"].groupby(["topic", "partition", "offset"])["ts"].min().rename("produced")
    fetch = rec[rec["direction"] == "fetch"].groupby(["topic", "partition", "offset"])["ts"].min().rename("fetched")
    both = pd.concat([prod, fetch], axis=1, join="inner").reset_index()
    both["delay_ms"] = (both["fetched"] - both["produced"]).dt.total_seconds() * 1000.0
    both["offset"] = both["offset"].astype("int64")
    return both[cols].sort_values(["topic", "partition", "offset"], kind="stable").reset_index(drop=True)


REBALANCE_COLS = [
    "group_id",
    "protocol",
    "generation",
    "protocol_name",
    "leader",
    "member_count",
    "began",
    "settled",
    "stopped_ms",
    "trigger",
    "trigger_detail",
    "reason",
    "partitions",
    "moved",
]


def rebalances(source) -> pd.DataFrame:
    """Every group generation (KIP-848: epoch) in the order the rebalances began: who triggered
    it, how long the group was stopped, how many partitions it assigned and moved (the
    group_generations table, members left out: member_count counts them)."""
    g = Tables.of(source).get("group_generations", REBALANCE_COLS)
    return g.sort_values(["began", "group_id", "generation"], kind="stable").reset_index(drop=True)


def partitions_moved(source) -> pd.DataFrame:
    """The partitions that changed owner in a rebalance: group, generation, topic, partition,
    from whom to whom, when (group_assignments rows with a previous member)."""
    cols = [
        "ts",
        "group_id",
        "protocol",
        "generation",
        "topic",
        "partition",
        "previous_member",
        "member_id",
        "client_id",
    ]
    a = Tables.of(source).get("group_assignments", cols)
    a = a[a["previous_member"].notna()]
    return a.sort_values(["ts", "group_id", "topic", "partition"], kind="stable").reset_index(drop=True)


TLS_COLS = ["tls_version", "tls_cipher_suite", "decrypted", "connections", "exchanges", "bytes"]
# a tls_encrypted anomaly's detail (native/py/src/tls.rs): its version, suite and bytes
_ENCRYPTED = re.compile(r"^TLS connection \((\S+) ([^,)\s]+)[^)]*\): \d+ records, (\d+) bytes not decrypted")


def tls_connections(source) -> pd.DataFrame:
    """TLS connections by version and cipher suite: those decrypted (connections, exchanges, bytes of
    the decrypted streams) and those left encrypted (their tls_encrypted anomalies: connections, bytes
    of TLS records)."""
    t = Tables.of(source)
    cols = ["tls_version", "tls_cipher_suite", "tls_decrypted", "exchanges", "bytes_to_broker", "bytes_to_client"]
    try:
        c = t.get("connections", cols)
    except (KeyError, ValueError, pa.ArrowInvalid):
        c = pd.DataFrame(columns=cols)  # tables landed before kafkawire read TLS
    c = c[c["tls_version"].notna()]
    rows = [
        (v, s, True, len(g), int(g["exchanges"].sum()), int((g["bytes_to_broker"] + g["bytes_to_client"]).sum()))
        for (v, s), g in c.groupby(["tls_version", "tls_cipher_suite"], dropna=False)
    ]
    a = t.get("anomalies", ["kind", "detail"])
    enc: dict[tuple[str, str], list[int]] = {}
    for detail in a.loc[a["kind"] == "tls_encrypted", "detail"]:
        m = _ENCRYPTED.match(detail)
        key = (m.group(1), m.group(2)) if m else ("unknown", "unknown")
        n = enc.setdefault(key, [0, 0])
        n[0] += 1
        n[1] += int(m.group(3)) if m else 0
    rows += [(v, s, False, n, 0, b) for (v, s), (n, b) in enc.items()]
    out = pd.DataFrame(rows, columns=TLS_COLS)
    return out.sort_values(["decrypted", "tls_version", "tls_cipher_suite"], ascending=[False, True, True]).reset_index(
        drop=True
    )


def report(source, bucket: str = "1min", top: int = 20) -> dict[str, pd.DataFrame]:
    """Every analysis, by name: what `kafkawire report` prints."""
    t = Tables.of(source)
    lag = consumer_lag(t)
    p2f = produce_to_fetch(t)
    return {
        "latency_by_api": latency(t),
        "latency_by_client": latency(t, ["client_id", "api_name"]),
        "latency_by_broker": latency(t, ["broker"]),
        "latency_over_time": latency_over_time(t, bucket),
        "errors_by_api": errors(t),
        "errors_by_topic": errors(t, ["topic", "name"]),
        "errors_by_client": errors(t, ["client_id", "name"]),
        "errors_over_time": errors_over_time(t, bucket),
        "slowest": slowest(t, top),
        "version_matrix": version_matrix(t),
        "kafka4_readiness": kafka4_readiness(t),
        "throughput_by_topic": throughput(t).head(top),
        "throughput_by_partition": throughput(t, ["topic", "partition"]).head(top),
        "throughput_by_client": throughput(t, ["client_id"]).head(top),
        "batching": batching(t),
        "broker_versions": broker_versions(t),
        "consumer_lag": (
            lag.groupby(["group_id", "topic", "partition"], dropna=False)["lag"]
            .agg(["count", "max", "last"])
            .reset_index()
            if not lag.empty
            else lag
        ),
        "produce_to_fetch": (_delay_summary(p2f)),
        "rebalances": (reb := rebalances(t)),
        "longest_rebalances": reb[reb["stopped_ms"].notna()]
        .sort_values("stopped_ms", ascending=False, kind="stable")
        .head(top)
        .reset_index(drop=True),
        "partitions_moved": partitions_moved(t),
        "tls": tls_connections(t),
    }


def _delay_summary(p2f: pd.DataFrame) -> pd.DataFrame:
    if p2f.empty:
        return pd.DataFrame(columns=["topic", "records", *QUANTILES, "max"])
    g = p2f.groupby("topic")["delay_ms"]
    out = g.agg(records="count", max="max")
    for name, q in QUANTILES.items():
        out[name] = g.quantile(q)
    return out.reset_index()[["topic", "records", *QUANTILES, "max"]]
