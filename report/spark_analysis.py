"""The analyses of report/analysis.py in Spark SQL, for tables too big for pandas.

Each function takes a SparkSession and either a landed directory or nothing
(then the catalog tables kafka_exchanges, kafka_errors, kafka_records are
used) and returns a Spark DataFrame with the columns of its pandas twin.
`percentile` is Spark SQL's exact one, linear between ranks like numpy, so the
figures match the local engine's (a test holds them together).
"""

from __future__ import annotations

import pandas as pd

__all__ = [
    "views",
    "latency",
    "latency_over_time",
    "errors",
    "slowest",
    "version_matrix",
    "broker_versions",
    "consumer_lag",
    "produce_to_fetch",
    "rebalances",
    "partitions_moved",
]

_PCT = (
    "count(*) AS count, percentile(latency_ms, 0.5) AS p50, percentile(latency_ms, 0.9) AS p90, "
    "percentile(latency_ms, 0.99) AS p99, max(latency_ms) AS max"
)


_VIEWS: dict = {}


def views(spark, out: str | None = None) -> dict[str, str]:
    """Names to query: temp views over `out`'s Delta tables (a folder or a lake's URI; made once per
    session), or the catalog tables."""
    from landing.lake import Lake

    where = None if out is None else Lake(out).uri
    key = (id(spark), where)
    if key in _VIEWS and all(spark.catalog.tableExists(n) for n in _VIEWS[key].values()):
        return _VIEWS[key]
    names = {}
    for t in ("exchanges", "errors", "records", "group_generations", "group_assignments"):
        if out is None:
            names[t] = f"kafka_{t}"
            continue
        lake = Lake(out)
        name = f"kw_{t}_{abs(hash(where)) % 10**8}"
        if lake.delta(lake.table_uri(t)) is not None:
            # through the table's log: its current version, never a file a later commit removed
            spark.read.format("delta").load(lake.spark_uri(t)).createOrReplaceTempView(name)
        else:  # not landed (records without --records): an empty table of the right columns
            from landing.schemas import SCHEMAS

            spark.createDataFrame(SCHEMAS[t].empty_table()).createOrReplaceTempView(name)
        names[t] = name
    _VIEWS[key] = names
    return names


def _by(by) -> list[str]:
    return [by] if isinstance(by, str) else list(by)


def latency(spark, out: str | None = None, by=("api_name", "api_version")):
    v, cols = views(spark, out), ", ".join(_by(by))
    return spark.sql(
        f"SELECT {cols}, {_PCT} FROM {v['exchanges']} WHERE latency_ms IS NOT NULL GROUP BY {cols} ORDER BY {cols}"
    )


def latency_over_time(spark, out: str | None = None, bucket: str = "1min", by: str = "api_name"):
    v = views(spark, out)
    s = pd.Timedelta(bucket).total_seconds()
    b = f"timestamp_micros(CAST(floor(unix_micros(ts) / {s * 1e6}) * {s * 1e6} AS BIGINT))"
    return spark.sql(
        f"SELECT {b} AS bucket, {by}, {_PCT} FROM {v['exchanges']} WHERE latency_ms IS NOT NULL "
        f"GROUP BY 1, {by} ORDER BY 1, {by}"
    )


def errors(spark, out: str | None = None, by=("api_name", "code", "name", "retriable")):
    v, cols = views(spark, out), ", ".join(_by(by))
    return spark.sql(f"SELECT {cols}, count(*) AS count FROM {v['errors']} GROUP BY {cols} ORDER BY count DESC, {cols}")


def slowest(spark, out: str | None = None, n: int = 20):
    v = views(spark, out)
    return spark.sql(
        f"SELECT ts, latency_ms, api_name, api_version, client_id, client, broker, correlation_id, "
        f"exchange_id FROM {v['exchanges']} WHERE latency_ms IS NOT NULL "
        f"ORDER BY latency_ms DESC, exchange_id LIMIT {int(n)}"
    )


def version_matrix(spark, out: str | None = None):
    from protocol import registry

    v = views(spark, out)
    removed = [
        (k, ver)
        for k in registry.api_keys()
        for ver in registry.request_versions(k)
        if registry.removed_in_kafka4(k, ver)
    ]
    spark.createDataFrame(removed, "api_key SMALLINT, api_version SMALLINT").createOrReplaceTempView(
        "kw_removed_in_kafka4"
    )
    return spark.sql(f"""
        SELECT coalesce(e.client_id, '') AS client_id, e.api_name, CAST(e.api_key AS BIGINT) AS api_key,
               array_sort(collect_set(CAST(e.api_version AS BIGINT))) AS versions, count(*) AS exchanges,
               max(r.api_key IS NOT NULL) AS removed_in_kafka4,
               CAST(sum(CASE WHEN array_contains(e.error_codes, CAST(35 AS SMALLINT)) THEN 1 ELSE 0 END) AS BIGINT)
                   AS unsupported_version,
               CAST(sum(CASE WHEN e.status = 'undecodable' THEN 1 ELSE 0 END) AS BIGINT) AS undecodable
        FROM {v["exchanges"]} e LEFT JOIN kw_removed_in_kafka4 r
          ON e.api_key = r.api_key AND e.api_version = r.api_version
        WHERE e.api_key IS NOT NULL AND e.api_version IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 3""")


def broker_versions(spark, out: str | None = None):
    v = views(spark, out)
    return spark.sql(f"""
        SELECT broker, CAST(k.ApiKey AS BIGINT) AS api_key, CAST(min(k.MinVersion) AS BIGINT) AS min_version,
               CAST(max(k.MaxVersion) AS BIGINT) AS max_version
        FROM (SELECT broker, explode(from_json(response_json,
                'STRUCT<ApiKeys: ARRAY<STRUCT<ApiKey: INT, MinVersion: INT, MaxVersion: INT>>>').ApiKeys) AS k
              FROM {v["exchanges"]} WHERE api_key = 18 AND status = 'ok')
        GROUP BY broker, k.ApiKey ORDER BY broker, api_key""")


def consumer_lag(spark, out: str | None = None):
    v = views(spark, out)
    req = (
        "STRUCT<Topics: ARRAY<STRUCT<Topic: STRING, TopicName: STRING, "
        "Partitions: ARRAY<STRUCT<Partition: INT, FetchOffset: BIGINT>>>>>"
    )
    resp = (
        "STRUCT<Responses: ARRAY<STRUCT<Topic: STRING, TopicName: STRING, Partitions: ARRAY<STRUCT<"
        "PartitionIndex: INT, ErrorCode: INT, HighWatermark: BIGINT>>>>>"
    )
    return spark.sql(f"""
        WITH fetch AS (SELECT exchange_id, ts, client_id, request_json, response_json FROM {v["exchanges"]}
                       WHERE api_key = 1 AND status = 'ok'),
        wanted AS (SELECT exchange_id, coalesce(t.Topic, t.TopicName) AS topic, p.Partition AS partition,
                          p.FetchOffset AS fetch_offset
                   FROM fetch LATERAL VIEW explode(from_json(request_json, '{req}').Topics) AS t
                              LATERAL VIEW explode(t.Partitions) AS p),
        got AS (SELECT exchange_id, ts, client_id, coalesce(t.Topic, t.TopicName) AS topic,
                       p.PartitionIndex AS partition, p.HighWatermark AS high_watermark, p.ErrorCode AS error_code
                FROM fetch LATERAL VIEW explode(from_json(response_json, '{resp}').Responses) AS t
                           LATERAL VIEW explode(t.Partitions) AS p),
        groups AS (SELECT client_id, max_by(group_id, ts) AS group_id FROM {v["exchanges"]}
                   WHERE group_id IS NOT NULL AND client_id IS NOT NULL GROUP BY client_id)
        SELECT g.ts, gr.group_id, g.client_id, g.topic, g.partition, w.fetch_offset, g.high_watermark,
               g.high_watermark - w.fetch_offset AS lag, g.exchange_id
        FROM got g JOIN wanted w ON g.exchange_id = w.exchange_id AND g.topic <=> w.topic AND g.partition = w.partition
             LEFT JOIN groups gr ON g.client_id = gr.client_id
        WHERE g.high_watermark >= 0 AND (g.error_code IS NULL OR g.error_code = 0)
        ORDER BY g.ts, g.exchange_id, g.topic, g.partition""")


def produce_to_fetch(spark, out: str | None = None):
    v = views(spark, out)
    return spark.sql(f"""
        WITH r AS (SELECT ts, direction, topic, partition, offset FROM {v["records"]} WHERE offset IS NOT NULL),
        p AS (SELECT topic, partition, offset, min(ts) AS produced FROM r WHERE direction = 'produce' GROUP BY 1, 2, 3),
        f AS (SELECT topic, partition, offset, min(ts) AS fetched FROM r WHERE direction = 'fetch' GROUP BY 1, 2, 3)
        SELECT p.topic, p.partition, p.offset, produced, fetched,
               CAST(unix_micros(fetched) - unix_micros(produced) AS DOUBLE) / 1000 AS delay_ms
        FROM p JOIN f ON p.topic = f.topic AND p.partition = f.partition AND p.offset = f.offset
        ORDER BY 1, 2, 3""")


def rebalances(spark, out: str | None = None):
    """analysis.rebalances: every group generation, in the order the rebalances began."""
    from report.analysis import REBALANCE_COLS

    t = views(spark, out)["group_generations"]
    return spark.sql(f"SELECT {', '.join(REBALANCE_COLS)} FROM {t} ORDER BY began, group_id, generation")


def partitions_moved(spark, out: str | None = None):
    """analysis.partitions_moved: the partitions that changed owner in a rebalance."""
    t = views(spark, out)["group_assignments"]
    cols = "ts, group_id, protocol, generation, topic, partition, previous_member, member_id, client_id"
    return spark.sql(
        f"SELECT {cols} FROM {t} WHERE previous_member IS NOT NULL ORDER BY ts, group_id, topic, partition"
    )
