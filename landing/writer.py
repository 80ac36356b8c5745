"""The tables' Parquet writer: rows made by the native core's lander stream into one pyarrow
ParquetWriter per (table, date) partition; a row group is flushed whenever a table has
`row_group` rows buffered, so memory is bounded by open connections (the dissector's state) and
one row group per table, not by the capture's size.

Topic ids named only by a later Metadata response (anywhere in the capture set) are resolved
after the last row: the few files that hold such rows are rewritten once with the names.
Both engines write through it (landing.local, landing.carry, landing.spark's stage 2).
"""

from __future__ import annotations

import array
import functools
import os
import queue
import secrets
import shutil
import threading
from pathlib import Path
from uuid import UUID

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.native import arrow_array
from dissector.topics import UNRESOLVED
from landing.groups import GROUP_APIS
from landing.lake import HOME, GROUP_ROWS, write_empty
from landing.names import resolve_file
from landing.schemas import GROUP_SOURCE, PARTITION, SCHEMAS, TABLES

__all__ = [
    "LocalWriter",
    "NATIVE_TABLES",
    "Spill",
    "TopicNames",
    "dataset",
    "drain_native",
    "has_table",
    "group_exchanges",
    "native_batch",
    "native_columns",
]

ROW_GROUP = 64 * 1024
_RECORD_ROW_GROUP = 8 * 1024  # record rows carry payloads: smaller groups keep memory flat
MAX_HELD = 8 << 20  # flush every table once this many body/payload bytes are buffered
SPILL_PIECE = 2 << 20  # bytes of rows a Spark task hands over in one row (Spill)
WRITES_QUEUED = 4  # row groups waiting for the writing thread (each up to a row group's bytes)


class LocalWriter:
    """Write the tables under `out`: out/<table>/date=YYYY-MM-DD/part-0.parquet (an empty table:
    out/<table>/part-empty.parquet, landing.lake.write_empty). land_local writes through one into
    a run's staging directory (landing.lake), replay --out into its own."""

    def __init__(
        self,
        out: str | os.PathLike,
        *,
        native,
        records: bool = False,
        payloads: bool = True,
        row_group: int = ROW_GROUP,
        overwrite: bool = True,
        part: str = "part-0",
        empty_files: bool = True,
        sink=None,
    ):
        """native: the native lander (dissector.native.lander) whose rows this writes. sink: a Spill
        that takes the rows instead of Parquet files (a Spark task's, which hands them to Spark's
        writer)."""
        self.out = Path(out)
        self.sink = sink
        self.part = part  # file name in each partition (one per Spark task)
        self.empty_files = empty_files  # an empty table still gets a file (off in Spark tasks: the driver adds it)
        self.tables = tuple(t for t in TABLES if t in NATIVE_TABLES and (records or t != "records"))
        # the group APIs' exchanges, kept aside for the tables made from them (landing.groups)
        self._groups: list[pa.RecordBatch] = []
        self.limits = {t: (min(row_group, _RECORD_ROW_GROUP) if t == "records" else row_group) for t in TABLES}
        self._writers: dict[tuple[str, str | None], pq.ParquetWriter] = {}
        self._marked: set[tuple[str, str | None]] = set()  # writers given rows with a topic known only by id
        self._writes: Writes | None = None
        native.set_row_options(records, payloads)
        self.native = native
        self.rows = TopicNames(native)
        if overwrite:
            for t in TABLES:
                shutil.rmtree(self.out / t, ignore_errors=True)
        self.out.mkdir(parents=True, exist_ok=True)

    def native_rows(self) -> None:
        """After each item or batch of a lander: flush the tables whose rows filled up."""
        pending = self.native.rows_pending()
        for t, n in zip(NATIVE_TABLES, pending.rows, strict=True):
            if t in self.tables and (pending.held > MAX_HELD or n >= self.limits[t]):
                self._flush(t)

    def close(self) -> dict[str, int]:
        """Flush, close, resolve late topic names; returns rows written per table.
        `paths` then lists the files that may hold placeholders (for a resolver that knows more names)."""
        for t in self.tables:
            self._flush(t, final=True)
        if self.sink is not None:
            if self._groups:
                self.sink.put(GROUP_ROWS, None, self.part, True, pa.Table.from_batches(self._groups).combine_chunks())
                self._groups.clear()
            self.paths = []
            made = dict(zip(NATIVE_TABLES, self.native.rows_state().counts, strict=True))
            return {t: made[t] for t in self.tables}
        if self._writes is not None:
            self._writes.close()
        for w in self._writers.values():
            w.close()
        # only these files can change when a name turns up (a task writes a file per table and
        # date, most without any placeholder: reading them all back cost more than writing them)
        self.paths = [Path(self._writers[k].where) for k in self._marked]
        self._writers.clear()
        if self._groups:
            # a file per writer (a Spark task, a landing's final or provisional rows): the run's
            # commit reads them all (landing.lake)
            folder = self.out / HOME / GROUP_ROWS
            folder.mkdir(parents=True, exist_ok=True)
            name = f"rows-{self.part}-{secrets.token_hex(4)}.parquet"
            # (their topic placeholders are resolved there, with every name the run and the lake know)
            pq.write_table(pa.Table.from_batches(self._groups), folder / name)
            self._groups.clear()
        names = self.rows.resolved()
        if names:
            for p in self.paths:
                resolve_file(p, names)
        made = dict(zip(NATIVE_TABLES, self.native.rows_state().counts, strict=True))
        return {t: made[t] for t in self.tables}

    def _flush(self, table: str, final: bool = False) -> None:
        # a lander over buckets hands each bucket's batch apart (a row group each), then an empty one
        while (got := native_batch(self.native, table))[0].num_rows:
            self._write(table, *got)
        if final and self.empty_files and not any(k[0] == table for k in self._writers):
            write_empty(self.out / table, table)

    def _write(self, table: str, batch: pa.RecordBatch, distinct=None, marked=None) -> None:
        """distinct, marked: the batch's dates and whether it names a topic only by id, when its
        maker knows them (the native rows do); else they are found here."""
        if table == "exchanges":
            kept = group_exchanges(batch)
            if kept is not None:
                self._groups.append(kept)
        if distinct is not None and len(distinct) == 1:
            self._put(table, distinct[0], batch.drop_columns([PARTITION]), bool(marked))
            return
        dates = batch.column(PARTITION)
        data = (
            batch.drop_columns([PARTITION])
            if hasattr(batch, "drop_columns")
            else pa.RecordBatch.from_arrays(batch.columns[:-1], schema=SCHEMAS[table])
        )
        distinct = dates.unique().to_pylist()
        for d in distinct:
            part = (
                data
                if len(distinct) == 1
                else data.filter(pa.compute.equal(dates, d) if d is not None else pa.compute.is_null(dates))
            )
            self._put(table, d, part, _placeholders(part))

    def _put(self, table: str, date: str | None, batch: pa.RecordBatch, marked: bool) -> None:
        if self.sink is not None:
            self.sink.put(table, date, self.part, marked, batch)
        else:
            if self._writes is None:
                self._writes = Writes()
            self._writes.put(self._writer(table, date), batch)
        if marked:
            self._marked.add((table, date))

    def _writer(self, table: str, date: str | None) -> pq.ParquetWriter:
        w = self._writers.get((table, date))
        if w is None:
            value = "__HIVE_DEFAULT_PARTITION__" if date is None else date
            folder = self.out / table / f"{PARTITION}={value}"
            folder.mkdir(parents=True, exist_ok=True)
            # JSON bodies and payloads are nearly all distinct: dictionary pages would only cost memory
            plain = {"request_json", "response_json", "key", "value", "detail"}
            w = pq.ParquetWriter(
                folder / f"{self.part}.parquet",
                SCHEMAS[table],
                compression="zstd",
                use_dictionary=[f.name for f in SCHEMAS[table] if f.name not in plain],
            )
            self._writers[(table, date)] = w
        return w


class Writes:
    """Row groups encoded and written on a thread of their own, in the order given: pyarrow lets
    go of the GIL while it compresses and writes, so the next rows are made meanwhile (a fifth of
    a landing's time, which the reading thread spent waiting)."""

    def __init__(self):
        self._todo: queue.Queue = queue.Queue(WRITES_QUEUED)
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kafkawire-parquet", daemon=True)
        self._thread.start()

    def put(self, writer: pq.ParquetWriter, batch: pa.RecordBatch) -> None:
        self._raise()
        self._todo.put((writer, batch))

    def close(self) -> None:
        """Wait for every row group given; a write's error is raised here."""
        self._todo.put(None)
        self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    def _run(self) -> None:
        while (job := self._todo.get()) is not None:
            if self._failed is None:  # after a failure the rest are only taken, so put() never blocks
                try:
                    job[0].write_batch(job[1])
                except BaseException as e:  # noqa: BLE001 (raised on the caller's thread)
                    self._failed = e


class Spill:
    """A Spark task's rows (LocalWriter's sink), held in one local file until the task hands them to
    Spark as Arrow: the task's input is still streaming in while they are made, and Spark's writer
    can only take them once the task's generator yields."""

    def __init__(self, path: str | os.PathLike):
        self.f = open(path, "w+b")  # noqa: SIM115 (closed by read's end or close)
        self.index: list[tuple] = []

    def put(self, table: str, date: str | None, part: str, marked: bool, batch) -> None:
        """part: the writer's file stem (provisional-... for the rows the end of input makes)."""
        for whole in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
            # a few MB a piece: each is a row in Spark, which holds a cached batch of them in its heap
            step = max(1, whole.num_rows * SPILL_PIECE // max(1, whole.nbytes))
            for at in range(0, whole.num_rows, step):
                buf = whole.slice(at, step).serialize()
                self.index.append((table, date, part.startswith("provisional-"), marked, self.f.tell(), buf.size))
                self.f.write(buf)

    def read(self):
        """(table, date, provisional, marked, Arrow IPC message bytes) per batch put, in order."""
        self.f.flush()
        for table, date, provisional, marked, at, n in self.index:
            self.f.seek(at)
            yield table, date, provisional, marked, self.f.read(n)
        self.close()

    def close(self) -> None:
        self.f.close()


def group_exchanges(batch: pa.RecordBatch) -> pa.RecordBatch | None:
    """The rows of an exchanges batch that the group tables are made from (landing.groups), in the
    columns they need; None when it has none."""
    # imported here: pyarrow.compute (and making an array) imports pandas, which the Spark
    # workers' daemon must import after this module (landing.spark_daemon)
    import pyarrow.compute as pc

    mask = pc.is_in(batch.column("api_key"), value_set=_group_keys())
    if not pc.any(mask).as_py():
        return None
    kept = batch.filter(mask)
    return pa.RecordBatch.from_arrays([kept.column(c) for c in GROUP_SOURCE], names=list(GROUP_SOURCE))


@functools.cache
def _group_keys() -> pa.Array:
    """GROUP_APIS as an int16 array, made from its bytes: pa.array() of Python values imports pandas
    (to check for its types), which a landing otherwise never needs."""
    return pa.Array.from_buffers(pa.int16(), len(GROUP_APIS), [None, pa.py_buffer(array.array("h", GROUP_APIS))])


NATIVE_TABLES = (
    "exchanges",
    "errors",
    "connections",
    "anomalies",
    "records",
    "batches",
)  # the native row makers' tables, in order


def native_columns() -> dict[str, list[str]]:
    """The columns of the tables a native lander writes (its configuration's `columns`)."""
    return {t: SCHEMAS[t].names for t in NATIVE_TABLES}


def native_batch(native, table: str) -> tuple[pa.RecordBatch, list, bool]:
    """A native lander's rows of a table, its distinct dates, and whether a row names a topic only by id."""
    taken = native.rows_take(table)
    sch = SCHEMAS[table]
    arrays = [arrow_array(c, f.type) for c, f in zip(taken.columns, sch, strict=False)]
    arrays.append(arrow_array(taken.date, pa.string()))
    batch = pa.RecordBatch.from_arrays(arrays, schema=sch.append(pa.field(PARTITION, pa.string())))
    return batch, taken.dates, taken.marked


class TopicNames:
    """A row maker's topic-id -> name map and the `topic-id:` placeholders its rows hold."""

    def __init__(self, native):
        self.native = native
        self.topic_names = native.rows_state().names  # shared with the lander: it grows as rows are made

    @property
    def unresolved(self) -> set[str]:
        """The placeholders the rows made so far hold."""
        return self.native.rows_state().unresolved

    def resolved(self) -> dict[str, str]:
        """Placeholders written before their topic's name was seen -> the name seen since."""
        out = {}
        for t in self.unresolved:
            name = self.topic_names.get(UUID(t[len(UNRESOLVED) :]))
            if name is not None:
                out[t] = name
        return out


def _placeholders(batch: pa.RecordBatch) -> bool:
    """Whether rows hold a topic known only by its id: a `topic-id:` placeholder or a null TopicName in JSON."""
    import pyarrow.compute as pc

    for name in ("topics", "topic", "request_json", "response_json"):
        if name not in batch.schema.names:
            continue
        col = batch.column(name)
        if name == "topics":
            hit = pc.starts_with(pc.list_flatten(col), UNRESOLVED)
        elif name == "topic":
            hit = pc.starts_with(col, UNRESOLVED)
        else:
            hit = pc.match_substring(col, '"TopicName":null')
        if pc.any(hit).as_py():
            return True
    return False


def _table_uri(out: str | os.PathLike, table: str) -> str:
    from dissector import fs

    where = fs.local(os.fspath(out))
    return f"{where.rstrip('/')}/{table}" if fs.is_uri(where) else os.path.join(os.path.abspath(where), table)


def has_table(out: str | os.PathLike, table: str) -> bool:
    """Whether the lake (or plain export) at `out` holds `table`."""
    from dissector import fs
    from landing.lake import delta_options, is_delta

    uri = _table_uri(out, table)
    if is_delta(uri, delta_options(uri)):
        return True
    return not fs.is_uri(uri) and os.path.isdir(uri)


def dataset(out: str | os.PathLike, table: str):
    """A landed table (a Delta table: landing.lake) as a pyarrow dataset of its current version, `date`
    a string column; a local path or a URI (an S3 endpoint taken from the environment as landing
    does). A folder of plain Parquet files (replay --out's export) is read as one."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from landing.lake import delta_dataset, delta_options, is_delta

    uri = _table_uri(out, table)
    storage = delta_options(uri)
    part = ds.partitioning(pa.schema([(PARTITION, pa.string())]), flavor="hive")
    if not is_delta(uri, storage):
        return ds.dataset(uri, format="parquet", partitioning=part)
    if table not in SCHEMAS:  # a Delta table of another writer's beside the landed ones
        dt = DeltaTable(uri, storage_options=storage)
        schema = pa.schema(dt.schema().to_arrow())
        return delta_dataset(uri, schema, storage, partitioned=dt.metadata().partition_columns == [PARTITION])
    # the table's files at its current version, read with the landing schema's own types (Delta's
    # have microsecond timestamps only: its dataset would widen the records' millisecond ones)
    return delta_dataset(uri, SCHEMAS[table].append(pa.field(PARTITION, pa.string())), storage)


def drain_native(w: LocalWriter, faults: list | None = None) -> dict[str, int]:
    """Run the writer's native lander to its end, flushing its rows as they fill; close the writer
    and return rows per table. File faults also go to `faults`."""
    from dissector.items import file_fault

    engine = w.native
    try:
        while (batch := engine.next_batch()) is not None:
            for it in batch:  # only file faults come out: every row is the engine's
                if faults is not None and (fault := file_fault(it)) is not None:
                    faults.append(fault)
            w.native_rows()
    finally:
        counts = w.close()
    return counts
