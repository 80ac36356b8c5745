"""The tables' rows as landing/rows.py made them before the native core made them all: part of
the frozen test-only oracle (tests/oracle/__init__.py), to which no feature is ever added.
`land(items, out)` writes its tables as `kafkawire land` lays them out, for the tests that hold
the native rows (native/src/rows.rs) to it.

Exchanges and anomalies -> table rows (columns of plain Python values).

`Rows` takes the items `dissector.dissect()` yields and fills one column
buffer per table (landing/schemas.py); `batch(table)` hands the buffered rows
over as a pyarrow RecordBatch and starts afresh, so both engines (the local
writer and the Spark data source) stream with bounded memory.

What is promoted into columns is found with the schema registry's own facts:
fields the specs mark as topic names (entityType topicName), the TopicName the
dissector puts beside a resolved TopicId, the partition index of the structs
below a topic, and the `records` fields. Nothing here touches TCP or frames.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import struct
from functools import lru_cache
from uuid import UUID

import pyarrow as pa

from dissector.native import internal_row, internal_topics
from dissector.topics import UNRESOLVED, Plan, plan as _plan, topic_of as _topic_of, visit as _visit
from landing.schemas import PARTITION, SCHEMAS

__all__ = ["Rows", "exchange_id", "date_of", "record_totals", "UNRESOLVED"]


_PRODUCE, _FETCH, _INIT_PRODUCER_ID = 0, 1, 22
_I32 = struct.Struct(">i")
_ID = struct.Struct(">q")
_WHO_API = ("client", "broker", "client_id", "api_key", "api_name", "api_version")
# exchange attributes that are columns as they are
_EXCHANGE_ATTRS = (
    "latency_ms",
    *_WHO_API,
    "response_version",
    "correlation_id",
    "status",
    "error_codes",
    "request_size",
    "response_size",
)


def _bytes_or_none(v):
    return None if v is None else bytes(v)


def exchange_id(
    connection: int | None, correlation_id: int | None, ts: float | None, response_ts: float | None, api_key: int | None
) -> int:
    """A stable 64-bit id from what identifies an exchange in any engine and any split of the capture."""
    key = f"{connection}|{correlation_id}|{_time(ts)}|{_time(response_ts)}|{api_key}".encode()
    return _ID.unpack(hashlib.blake2b(key, digest_size=8).digest())[0]


def _time(ts: float | None) -> int | None:
    # Microseconds since the epoch: rounded to the capture's resolution, so float noise cannot change
    # an id; and pyarrow takes ints for timestamp columns, far cheaper than datetimes.
    return None if ts is None else round(ts * 1_000_000)


@lru_cache(maxsize=4096)
def _day(days: int) -> str:
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=days)).isoformat()


def date_of(ts: float | None) -> str | None:
    """The partition value of a row: its UTC date, None when the time is unknown."""
    if not ts:
        return None
    return _day(int(ts // 86400))


def _error_rows(obj, path: str, topic, partition, out: list, plan: Plan | None) -> None:
    """(path, topic, partition, code) for every non-zero *ErrorCode, wherever it is."""
    if plan is not None and plan.topic:
        topic = _topic_of(obj, plan) or topic
    if plan is not None and plan.partition is not None:
        p = obj.get(plan.partition)
        if type(p) is int:
            partition = p
    for k, v in obj.items():
        t = type(v)
        if t is int:
            if v and k.endswith("ErrorCode"):
                out.append((f"{path}{k}", topic, partition, v))
        elif t is list:
            sub = plan.children.get(k) if plan is not None else None
            for i, x in enumerate(v):
                if type(x) is dict:
                    _error_rows(x, f"{path}{k}[{i}].", topic, partition, out, sub)
        elif t is dict and not k.startswith("_"):
            _error_rows(v, f"{path}{k}.", topic, partition, out, plan.children.get(k) if plan is not None else None)


def record_totals(fields, max_decompressed: int, summaries: dict | None = None, each=None) -> tuple:
    """What the exchanges table says of an exchange's record fields: (records, bytes as sent,
    bytes decompressed (batch framing included), codecs in first-seen order, the producer id of
    the first v2 batch that has one). summaries gets id(field) -> its summary(); each(i, batch)
    is called for every batch of fields[i]. native/src/records.rs computes the same."""
    from protocol.records import read_record_set

    count = size = usize = 0
    codecs: list = []
    producer = None
    for i, blob in enumerate(fields):
        rs = read_record_set(blob, max_decompressed=max_decompressed)
        if summaries is not None:
            summaries[id(blob)] = rs.summary()
        size += len(blob)
        for b in rs.batches:
            n = b.record_count
            if b.codec_name not in codecs:
                codecs.append(b.codec_name)
            if b.magic == 2 and producer is None and b.producer_id >= 0:
                producer = b.producer_id
            u = b.uncompressed_size
            usize += len(b.data) if u is None else u
            if n is None:
                n = len(b.records())
            count += n
            if each is not None:
                each(i, b)
    return count, size, usize, codecs, producer


def _text(s: str) -> str:
    """A header key as a table's string: bytes that are not UTF-8 (records.py keeps them with
    surrogate escapes) become U+FFFD, as any UTF-8 reader shows them."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return s


def _schema_id(b) -> int | None:
    """Confluent's wire format: magic byte 0 and a 4-byte schema id before the payload."""
    if b is not None and len(b) >= 5 and b[0] == 0:
        return _I32.unpack_from(b, 1)[0]
    return None


# -- the row builder ------------------------------------------------------------------


class Rows:
    """Column buffers for every table. add(item) for each dissected item; batch(table) to take them."""

    def __init__(self, *, records: bool = False, payloads: bool = True, max_decompressed: int | None = None):
        from protocol import records as rec
        from protocol.errors import ERRORS

        self.records = records
        self.payloads = payloads
        self._rec = rec
        self._max = max_decompressed or rec.compression.DEFAULT_MAX_DECOMPRESSED
        self._errors = ERRORS
        from tests.oracle.output import body_json, without_raw_body

        self._json = body_json
        self._bare = without_raw_body
        self._summaries: dict = {}  # id(records field) -> summary, for the JSON of the exchange at hand
        self.cols = {t: {f.name: [] for f in s} | {PARTITION: []} for t, s in SCHEMAS.items()}
        self.counts = dict.fromkeys(SCHEMAS, 0)
        self.held = 0  # bytes of JSON bodies and record payloads buffered (the bulk of a row's size)
        self.topic_names: dict[UUID, str] = {}
        self.unresolved: set[str] = set()  # "topic-id:<uuid>" values written before their name was known

    def pending(self, table: str) -> int:
        return len(self.cols[table][PARTITION])

    def add(self, item) -> None:
        if item.type == "exchange":
            self._exchange(item)
        elif item.type == "anomaly":
            self._anomaly(item)
        elif item.type == "connection":
            self._connection(item)

    # -- tables ---------------------------------------------------------------------

    def _anomaly(self, a) -> None:
        c = self.cols["anomalies"]
        c["connection_id"].append(a.connection)
        c["ts"].append(_time(a.ts) if a.ts else None)
        c["kind"].append(a.kind)
        c["detail"].append(a.detail)
        c[PARTITION].append(date_of(a.ts))
        self.counts["anomalies"] += 1

    def _connection(self, k) -> None:
        c = self.cols["connections"]
        for name in c:
            if name == PARTITION:
                c[name].append(date_of(k.first_ts))
            elif name in ("first_ts", "last_ts"):
                c[name].append(_time(getattr(k, name)))
            elif name == "connection_id":
                c[name].append(k.connection)
            elif name.startswith("tls_"):
                # the TLS layer came after the freeze (it has no Python twin): its facts as the item has them
                c[name].append((k.tls or {}).get(name[4:]))
            else:
                c[name].append(getattr(k, name))
        self.counts["connections"] += 1

    def _exchange(self, x) -> None:
        row, errors = self.exchange_rows(x)
        self._append("exchanges", row)
        self.held += len(row["request_json"] or "") + len(row["response_json"] or "")
        for e in errors:
            self._append("errors", e)

    def exchange_rows(self, x) -> tuple[dict, list[dict]]:
        """An exchange's row of the exchanges table and its rows of the errors table, as column ->
        value dicts (the date partition under `date`): what add() appends. The native lander asks
        this of the exchanges whose bodies Python decoded."""
        ts = x.ts if x.ts is not None else x.response_ts
        eid = exchange_id(x.connection, x.correlation_id, x.ts, x.response_ts, x.api_key)
        date = date_of(ts)
        req, resp = x.request, x.response
        api = x.api_key
        self._learn(resp)
        promoted = self._promote(x, eid, date)
        row = {"exchange_id": eid, "connection_id": x.connection, "ts": _time(ts), "response_ts": _time(x.response_ts)}
        for k in _EXCHANGE_ATTRS:
            row[k] = getattr(x, k)
        row["flags"] = list(x.flags)
        row.update(promoted)
        known = self._summaries
        if not self.payloads:
            resp = self._bare(resp)
        row["request_json"] = None if req is None else self._json(req, api, "request", summaries=known)
        row["response_json"] = None if resp is None else self._json(resp, api, "response", summaries=known)
        row["tls_version"] = (x.tls or {}).get("version")
        row["tls_cipher_suite"] = (x.tls or {}).get("cipher_suite")
        known.clear()
        row[PARTITION] = date
        errors = self._error_rows(x, eid, ts, date) if x.error_codes and type(resp) is dict else []
        return row, errors

    def _append(self, table: str, row: dict) -> None:
        c = self.cols[table]
        for k, v in row.items():
            c[k].append(v)
        self.counts[table] += 1

    def resolved(self) -> dict[str, str]:
        """Placeholders written before their topic's name was seen -> the name seen since."""
        out = {}
        for t in self.unresolved:
            name = self.topic_names.get(UUID(t[len(UNRESOLVED) :]))
            if name is not None:
                out[t] = name
        return out

    def _learn(self, body) -> None:
        """TopicId -> name pairs from any response (Metadata, CreateTopics, ...), for the whole capture set."""
        if type(body) is not dict:
            return
        topics = body.get("Topics")
        if type(topics) is list:
            for t in topics:
                if type(t) is dict:
                    tid, name = t.get("TopicId"), t.get("Name")
                    if type(tid) is UUID and type(name) is str and tid.int:
                        self.topic_names[tid] = name

    def _promote(self, x, eid: int, date) -> dict:
        api, version = x.api_key, x.api_version
        req, resp = x.request, x.response
        out = {
            "topics": None,
            "partition_count": None,
            "group_id": None,
            "transactional_id": None,
            "acks": None,
            "timeout_ms": None,
            "producer_id": None,
            "record_count": None,
            "record_bytes": None,
            "record_bytes_uncompressed": None,
            "codecs": None,
            "max_wait_ms": None,
            "min_bytes": None,
            "isolation_level": None,
            "throttle_time_ms": None,
        }
        if api is None or version is None:
            return out
        req_ok = type(req) is dict and "_decode_error" not in req
        resp_ok = type(resp) is dict and "_decode_error" not in resp and "_raw_body" not in resp
        found_req: list = []
        found_resp: list = []
        if req_ok:
            plan = _plan(api, version, "request")
            if plan is not None:
                _visit(req, plan, None, found_req, api == _PRODUCE)
                out["group_id"] = req.get(plan.group) if plan.group else None
                out["transactional_id"] = req.get(plan.txn) if plan.txn else None
            if api == _PRODUCE:
                out["acks"], out["timeout_ms"] = req.get("Acks"), req.get("TimeoutMs")
            elif api == _FETCH:
                out["max_wait_ms"], out["min_bytes"] = req.get("MaxWaitMs"), req.get("MinBytes")
                out["isolation_level"] = req.get("IsolationLevel", 0)  # before v4 every fetch read uncommitted
        if resp_ok:
            out["throttle_time_ms"] = resp.get("ThrottleTimeMs")
            rv = x.response_version if x.response_version is not None else version
            plan = _plan(api, rv, "response")
            if plan is not None and (not found_req or api in (_FETCH, 78, _PRODUCE)):
                _visit(resp, plan, None, found_resp, api == _FETCH or api == 78)
            if api == _INIT_PRODUCER_ID:
                out["producer_id"] = resp.get("ProducerId")
        where = found_req or found_resp
        if where:
            topics = []
            for t, _, _ in where:
                t = self._topic(t)
                if t is not None and t not in topics:
                    topics.append(t)
            out["topics"] = topics
            out["partition_count"] = sum(1 for _, p, _ in found_req if p is not None) or None
        blobs = [w for w in (found_req if api == _PRODUCE else found_resp) if w[2] is not None]
        if blobs:
            self._record_columns(x, eid, date, blobs, out, found_resp if api == _PRODUCE else None)
        return out

    def _topic(self, t):
        if t is not None and t.startswith(UNRESOLVED):
            name = self.topic_names.get(UUID(t[len(UNRESOLVED) :]))
            if name is not None:
                return name
            self.unresolved.add(t)
        return t

    def _record_columns(self, x, eid, date, blobs, out, produce_answers) -> None:
        base_offsets = {}
        if produce_answers is not None and x.response is not None:
            # the offsets the broker gave each produced partition
            for t, p, _ in produce_answers:
                base_offsets.setdefault((t, p), None)
            for topic in x.response.get("Responses") or ():
                name = topic.get("Name") or topic.get("TopicName")
                for pr in topic.get("PartitionResponses") or ():
                    if not pr.get("ErrorCode"):
                        base_offsets[(name, pr.get("Index"))] = pr.get("BaseOffset")
        direction = "produce" if produce_answers is not None else "fetch"
        frame_ts = x.ts if direction == "produce" else x.response_ts

        first: dict[int, int] = {}  # field -> its first batch's base offset

        def each(i, b):
            topic, part, _ = blobs[i]
            base = base_offsets.get((topic, part)) if direction == "produce" else None
            first.setdefault(i, b.base_offset)
            self._batch_row(x, eid, date, direction, frame_ts, topic, part, b, base, first[i])
            if self.records:
                self._record_rows(x, eid, date, direction, frame_ts, topic, part, b, base)

        count, size, usize, codecs, producer = record_totals(
            [blob for _, _, blob in blobs], self._max, self._summaries, each
        )
        out["record_count"], out["record_bytes"], out["record_bytes_uncompressed"] = count, size, usize
        out["codecs"] = codecs
        if x.api_key == _PRODUCE:
            out["producer_id"] = producer

    def _batch_row(self, x, eid, date, direction, frame_ts, topic, part, b, produce_base, first) -> None:
        c = self.cols["batches"]
        v2 = b.magic == 2
        n = b.record_count
        if n is None:
            n = len(b.records())
        c["exchange_id"].append(eid)
        c["connection_id"].append(x.connection)
        c["ts"].append(_time(frame_ts))
        c["direction"].append(direction)
        c["client"].append(x.client)
        c["broker"].append(x.broker)
        c["client_id"].append(x.client_id)
        c["topic"].append(self._topic(topic))
        c["partition"].append(part)
        if direction == "fetch":
            c["base_offset"].append(b.base_offset)
        else:
            c["base_offset"].append(
                None if produce_base is None or produce_base < 0 else produce_base + b.base_offset - first
            )
        c["records"].append(n)
        c["bytes"].append(len(b.data))
        c["uncompressed_bytes"].append(len(b.data) if b.codec_name == "none" else b.uncompressed_size)
        c["codec"].append(b.codec_name)
        c["magic"].append(b.magic)
        c["producer_id"].append(b.producer_id if v2 else None)
        c["producer_epoch"].append(b.producer_epoch if v2 else None)
        c["base_sequence"].append(b.base_sequence if v2 else None)
        c["transactional"].append(b.transactional)
        c["control"].append(b.control)
        c[PARTITION].append(date)
        self.counts["batches"] += 1

    def _record_rows(self, x, eid, date, direction, frame_ts, topic, part, b, produce_base) -> None:
        c = self.cols["records"]
        v2 = b.magic == 2
        ts_type = b.timestamp_type
        payloads = self.payloads
        frame_time = _time(frame_ts)
        topic = self._topic(topic)
        for r in b.records():
            key, value = r.key, r.value
            c["exchange_id"].append(eid)
            c["connection_id"].append(x.connection)
            c["ts"].append(frame_time)
            c["direction"].append(direction)
            c["client_id"].append(x.client_id)
            c["topic"].append(topic)
            c["partition"].append(part)
            if direction == "fetch":
                c["offset"].append(r.offset)
            else:
                c["offset"].append(
                    None if produce_base is None or produce_base < 0 else produce_base + r.offset - b.base_offset
                )
            c["timestamp"].append(r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None)
            c["timestamp_type"].append(ts_type)
            # the internal topics' records and control records, as the core decodes them (its
            # internal_row); a record holding a secret keeps its value out
            decoded, secret = (None, None), False
            if b.control or topic in internal_topics():
                *decoded, secret = internal_row(topic, _bytes_or_none(key), _bytes_or_none(value), b.control)
            c["key"].append(bytes(key) if payloads and key is not None else None)
            c["value"].append(bytes(value) if payloads and value is not None and not secret else None)
            if payloads:
                self.held += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            c["key_size"].append(-1 if key is None else len(key))
            c["value_size"].append(-1 if value is None else len(value))
            c["headers"].append(
                [
                    {"key": _text(hk), "value": (bytes(hv) if payloads and hv is not None else None)}
                    for hk, hv in r.headers
                ]
            )
            c["key_schema_id"].append(_schema_id(key))
            c["value_schema_id"].append(_schema_id(value))
            c["codec"].append(b.codec_name)
            c["magic"].append(b.magic)
            c["batch_base_offset"].append(b.base_offset)
            c["producer_id"].append(b.producer_id if v2 else None)
            c["producer_epoch"].append(b.producer_epoch if v2 else None)
            c["base_sequence"].append(b.base_sequence if v2 else None)
            c["transactional"].append(b.transactional)
            c["control"].append(b.control)
            c["crc_ok"].append(b.crc_ok)
            c["key_decoded"].append(decoded[0] if payloads else None)
            c["value_decoded"].append(decoded[1] if payloads else None)
            c[PARTITION].append(date)
            self.counts["records"] += 1

    def _error_rows(self, x, eid, ts, date) -> list[dict]:
        found: list = []
        rv = x.response_version if x.response_version is not None else x.api_version
        plan = _plan(x.api_key, rv, "response") if x.api_key is not None and rv is not None else None
        _error_rows(x.response, "", None, None, found, plan)
        errors = self._errors
        t = _time(ts)
        rows = []
        for path, topic, partition, code in found:
            entry = errors.get(code)
            row = {"exchange_id": eid, "connection_id": x.connection, "ts": t}
            for k in _WHO_API:
                row[k] = getattr(x, k)
            row.update(
                path=path,
                topic=self._topic(topic),
                partition=partition,
                code=code,
                name=entry[0] if entry else f"UNKNOWN_ERROR_{code}",
                retriable=bool(entry[1]) if entry else None,
            )
            row[PARTITION] = date
            rows.append(row)
        return rows

    # -- handing over -----------------------------------------------------------------

    def batch(self, table: str) -> pa.RecordBatch:
        """The buffered rows of `table` (the `date` column last), and empty buffers."""
        cols = self.cols[table]
        sch = SCHEMAS[table]
        arrays = [pa.array(cols[f.name], type=f.type) for f in sch]
        arrays.append(pa.array(cols[PARTITION], type=pa.string()))
        for v in cols.values():
            v.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=sch.append(pa.field(PARTITION, pa.string())))


def land(items, out, *, records: bool = False, payloads: bool = True) -> dict[str, int]:
    """landing.land_local's tables made by these rows: out/<table>/date=<day>/part-0.parquet, the
    topic names learnt late put in; returns rows per table."""
    from pathlib import Path

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from landing.names import resolve_file
    from landing.schemas import DERIVED, GROUP_SOURCE, TABLES

    rows = Rows(records=records, payloads=payloads)
    for item in items:
        rows.add(item)
    tables = [t for t in TABLES if (records or t != "records") and t not in DERIVED]
    written = []
    for t in tables:
        batch = rows.batch(t)
        dates = batch.column(PARTITION)
        data = batch.drop_columns([PARTITION])
        for d in dates.unique().to_pylist() or [None]:
            part = data.filter(pc.equal(dates, d) if d is not None else pc.is_null(dates)) if len(data) else data
            folder = Path(out) / t / f"{PARTITION}={'__HIVE_DEFAULT_PARTITION__' if d is None else d}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_batches([part], schema=SCHEMAS[t]), folder / "part-0.parquet")
            written.append(folder / "part-0.parquet")
    names = rows.resolved()
    if names:
        for path in written:
            resolve_file(path, names)
    # the group tables, made from these exchanges as every engine makes them (landing.groups)
    from landing.groups import write_tables
    from landing.writer import dataset

    ex = dataset(out, "exchanges").to_table(columns=list(GROUP_SOURCE))
    derived = write_tables(ex.to_pylist(), out, "part-0.parquet")
    from landing.lake import write_empty

    for t, n in derived.items():
        if not n:
            write_empty(Path(out) / t, t)
    return {**{t: rows.counts[t] for t in tables}, **derived}
