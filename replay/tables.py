"""`replay --out DIR`: the replay as Parquet tables shaped like landed ones.

The replayed exchanges go through landing's own writer (landing.writer.LocalWriter), so `exchanges` and
`errors` have exactly the landed columns and partitioning (DIR/<table>/date=YYYY-MM-DD/part-0.parquet) and
the same analyses read them. Two tables of the replay's own sit beside them in the same layout:
`differences` (one row per field that differs from the captured answer) and `rewrites` (one row per value
the replay changed or request it added), joined to `exchanges` by exchange_id.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from landing.lake import write_empty
from landing.writer import LocalWriter
from landing.keys import date_of, exchange_id
from landing.schemas import PARTITION, TIMESTAMP, field


_REPLAYED = [
    field("exchange_id", pa.int64(), "the replayed exchange (joins the replay's exchanges table)"),
    field("ts", TIMESTAMP, "when the replayed request was sent"),
    field("connection", pa.int32(), "the captured connection (jsonl numbering) the request came from"),
    field("correlation_id", pa.int32(), "the captured correlation id (kept on replay)"),
    field("api_name", pa.string(), "API name"),
    field("captured_version", pa.int16(), "the captured request's version"),
    field("replayed_version", pa.int16(), "the version sent to the target"),
]
DIFFERENCES = pa.schema(
    _REPLAYED
    + [
        field("path", pa.string(), "where in the response, e.g. Topics[Name=t].Partitions[PartitionIndex=0].ErrorCode"),
        field("captured", pa.string(), "the captured value as JSON"),
        field("replayed", pa.string(), "the target's value as JSON"),
    ]
)
REWRITES = pa.schema(
    _REPLAYED
    + [
        field("kind", pa.string(), "what was rewritten: version, MemberId, GenerationId, TopicId, Records (...), ..."),
        field("change", pa.string(), "the change as in the report: 'path old -> new', or the request added"),
    ]
)
SCHEMAS = {"differences": DIFFERENCES, "rewrites": REWRITES}


def replayed_exchange(a, target: str):
    """One answer as an exchange item (the dissector's item type, filled from the replay)."""
    e = a.step.exchange
    response_ts = a.sent_wall + a.latency_ms / 1000 if a.sent_wall is not None and a.latency_ms is not None else None
    from protocol.codec import decode_request
    from replay.sender import error_codes_in

    request = a.request
    if request is None and a.frame is not None:
        request = decode_request(a.frame).body
    if a.response is not None:
        status = "ok"
    elif a.error.startswith("undecodable"):
        status = "undecodable"
    else:
        status = "unanswered"
    return dataclasses.replace(
        e,
        ts=a.sent_wall,
        response_ts=response_ts,
        latency_ms=a.latency_ms,
        client=a.client or e.client,
        broker=target,
        api_version=a.step.version,
        status=status,
        error_codes=[c for c in error_codes_in(a.response) if c] if a.response is not None else [],
        request=request,
        response=a.response,
        request_size=len(a.frame) if a.frame is not None else None,
        response_size=a.response_size,
        request_raw=a.frame,
        response_raw=None,
        response_version=a.step.version,
        flags=(),
    )


def write(out, answers: list, report: dict, *, target: str) -> dict[str, int]:
    """Write the tables under `out`; rows per table."""
    from replay.compare import rewrite_kind

    writer = LocalWriter(out)
    ids: dict[tuple, tuple] = {}
    for a in answers:
        if a.sent_at is None or a.sent_wall is None:
            continue
        x = replayed_exchange(a, target)
        writer.add(x)
        e = a.step.exchange
        ids[(e.connection, e.correlation_id)] = (
            exchange_id(x.connection, x.correlation_id, x.ts, x.response_ts, x.api_key),
            x.ts,
        )
    counts = writer.close()

    def base(row):
        eid, ts = ids.get((row["connection"], row["correlation_id"]), (None, None))
        return {
            "exchange_id": eid,
            "ts": None if ts is None else round(ts * 1_000_000),
            "connection": row["connection"],
            "correlation_id": row["correlation_id"],
            "api_name": row["api"],
            "captured_version": row["captured_version"],
            "replayed_version": row["replayed_version"],
        }

    diffs = [
        dict(base(d), path=d["path"], captured=_json(d["captured"]), replayed=_json(d["replayed"]))
        for d in report["differences"]
    ]
    rewrites = [dict(base(w), kind=rewrite_kind(c), change=c) for w in report["rewrites"] for c in w["changes"]]
    rewrites += [
        dict(base(w), kind=("retried: " if " again" in x else "request added: ") + x.split(" ", 1)[0], change=x)
        for w in report["rewrites"]
        for x in w["added"]
    ]
    for table, rows in (("differences", diffs), ("rewrites", rewrites)):
        _write_table(Path(out), table, rows)
        counts[table] = len(rows)
    return counts


def _json(v) -> str:
    return json.dumps(v, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray, memoryview)) else str(o))


def _write_table(out: Path, table: str, rows: list[dict]) -> None:
    """Hive-partitioned by date like the landed tables; an empty table still gets a file (its
    schema), at the table's root as theirs (landing.lake)."""
    shutil.rmtree(out / table, ignore_errors=True)
    sch = SCHEMAS[table]
    by_date: dict = {}
    for r in rows:
        by_date.setdefault(date_of(r["ts"] / 1_000_000 if r["ts"] else None), []).append(r)
    if not by_date:
        write_empty(out / table, sch)
    for date, part in by_date.items():
        folder = out / table / f"{PARTITION}={'__HIVE_DEFAULT_PARTITION__' if date is None else date}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(part, schema=sch), folder / "part-0.parquet", compression="zstd")
