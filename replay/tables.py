"""`replay --out DIR`: the replay as Parquet tables shaped like landed ones.

The replayed exchanges are landed as a capture is: the frames the replay sent and read go through
the native core's lander as packets and landing's own writer (landing.writer.LocalWriter), so
`exchanges`, `errors`, `connections` and `anomalies` have exactly the landed columns and
partitioning (DIR/<table>/date=YYYY-MM-DD/part-0.parquet) and the same analyses read them. Two
tables of the replay's own sit beside them in the same layout:
`differences` (one row per field that differs from the captured answer) and `rewrites` (one row per value
the replay changed or request it added), joined to `exchanges` by exchange_id.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from landing.lake import write_empty
from landing.writer import LocalWriter
from landing.keys import date_of
from landing.schemas import PARTITION, TIMESTAMP, field
from replay.sender import address_of


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


_SYN, _SYN_ACK, _ACK, _PSH_ACK, _FIN_ACK = 0x02, 0x12, 0x10, 0x18, 0x11
_SEGMENT = 60_000


def packets(answers: list) -> list[tuple]:
    """The replay's conversation with the target as packet rows (dissector.native.lander's
    `packets`): per connection it opened, a handshake, each captured request's frame as sent and
    its answer's frame as read, at the times they went and came, then FINs. The replay's own
    requests (logins, retries, Metadata it added) are left out: the tables hold the captured
    requests' exchanges."""
    conns: dict[tuple[str, str], list] = {}
    for a in answers:
        if a.sent_wall is not None and a.frame is not None and a.client and a.server:
            conns.setdefault((a.client, a.server), []).append(a)
    rows = [r for (client, server), sent in conns.items() for r in _connection(client, server, sent)]
    rows.sort(key=lambda r: r[0])  # stable: a connection's own rows keep their order
    return [(*r[:10], i) for i, r in enumerate(rows)]


def _connection(client: str, server: str, sent: list) -> list[tuple]:
    from protocol import with_size

    ends = (address_of(client), address_of(server))
    events = []
    for a in sent:
        events.append((a.sent_wall, 0, with_size(a.frame)))
        if a.response_frame is not None and a.latency_ms is not None:
            events.append((a.sent_wall + a.latency_ms / 1000, 1, with_size(a.response_frame)))
    events.sort(key=lambda e: e[0])
    seq, rows = [1000, 5000], []

    def row(ts, side, flags, data=b""):
        (src, sport), (dst, dport) = ends[side], ends[1 - side]
        rows.append((ts, src, sport, dst, dport, seq[side], seq[1 - side], flags, data, 0, 0))
        seq[side] += len(data) + (flags in (_SYN, _SYN_ACK, _FIN_ACK))

    t0, t1 = events[0][0], events[-1][0]
    row(t0, 0, _SYN)
    row(t0, 1, _SYN_ACK)
    row(t0, 0, _ACK)
    for ts, side, data in events:
        for k in range(0, len(data), _SEGMENT):
            row(ts, side, _PSH_ACK, data[k : k + _SEGMENT])
    row(t1, 0, _FIN_ACK)
    row(t1, 1, _FIN_ACK)
    row(t1, 0, _ACK)
    return rows


def write(out, answers: list, report: dict, *, target: str) -> dict[str, int]:
    """Write the tables under `out`; rows per table. The replayed exchanges are landed by the
    native core from the frames the replay sent and read, as a capture of them would be."""
    from dissector.native import lander
    from landing.writer import dataset, drain_native, native_columns
    from replay.compare import rewrite_kind

    rows = packets(answers)
    ports = sorted({address_of(a.server)[1] for a in answers if a.server})
    end = (rows[-1][0], rows[-1][0]) if rows else (0.0, None)
    engine = lander([], ports=ports or [address_of(target)[1]], columns=native_columns(), packets=iter(rows), end=end)
    counts = drain_native(LocalWriter(out, native=engine))
    # each captured request's row, by the replay's connection and the correlation id it kept
    landed: dict[tuple, list] = {}
    if counts["exchanges"]:
        t = dataset(out, "exchanges").to_table(columns=["client", "correlation_id", "exchange_id", "ts"])
        for r in sorted(t.to_pylist(), key=lambda r: (r["ts"] is None, r["ts"])):
            landed.setdefault((r["client"], r["correlation_id"]), []).append(r)
    ids: dict[tuple, tuple] = {}
    for a in sorted((a for a in answers if a.frame is not None and a.sent_wall is not None), key=lambda a: a.sent_wall):
        found = landed.get((a.client, int.from_bytes(a.frame[4:8], "big", signed=True)))
        if found:
            r = found.pop(0)
            e = a.step.exchange
            ts = r["ts"]
            ids[(e.connection, e.correlation_id)] = (r["exchange_id"], None if ts is None else ts.timestamp())

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
