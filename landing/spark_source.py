"""The `kafkawire` batch data source: spark.read.format("kafkawire").option("table", T).load(paths)
reads captures straight into a DataFrame of one landing table (default exchanges), through PySpark's
Python data source API. landing.spark.register() makes it available in a session; its stream
reader is landing.spark_stream's.

One read task, one native pass over the capture set (each byte read once), land's exact rows
including the topic names learned late; filters on `date` are pushed down. A source's tasks cannot
talk (a data source has no shuffle), so the source cannot split the work and stay exact:
`land --engine spark` does (docs/spark.md)."""

from __future__ import annotations

from landing.schemas import DERIVED, PARTITION, SCHEMAS, TABLES
from landing.spark_rows import arrow_schema, option_list, option_payloads, option_ports, table_due, to_arrow

__all__ = ["source_classes", "source_paths", "source_partitions", "source_filters", "source_read"]

# the filters on `date` the reader applies itself (Spark then does not): (kind, value) pairs
DATE_FILTERS = {"EqualTo", "In", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "IsNotNull"}


def source_paths(options: dict) -> list:
    """The capture paths `load()` was given (ValueError, in one line, for a bad table or none)."""
    table = options.get("table", "exchanges")
    if table not in TABLES:
        raise ValueError(f"kafkawire: unknown table {table!r} (one of {', '.join(TABLES)})")
    paths = option_list(options.get("paths") or options.get("path"))
    if not paths:
        raise ValueError("kafkawire: load(path) or load([paths]) needs capture paths")
    return paths


def source_partitions(options: dict) -> list[list]:
    """The read tasks: one, holding the capture set's files.

    One task, because a source's read tasks cannot talk: split by connections, each would read the
    whole input and miss the topic names learned on the others' connections; split by byte ranges,
    the connections running across an edge and the connections table would be cut. One native pass
    reads each byte once and makes land's exact rows."""
    from dissector.files import capture_files

    return [capture_files(source_paths(options))]


def source_filters(filters) -> tuple[list, list]:
    """(the pushed filters this source applies as (kind, value), the ones Spark must apply)."""
    mine, rest = [], []
    for f in filters:
        kind = type(f).__name__
        if kind in DATE_FILTERS and tuple(getattr(f, "attribute", ())) == (PARTITION,):
            mine.append((kind, list(f.value) if kind == "In" else getattr(f, "value", None)))
        else:
            rest.append(f)
    return mine, rest


def keep_dates(batch, filters: list):
    """The rows of a table's batch whose `date` passes the pushed filters."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not filters or not batch.num_rows:
        return batch
    date = batch.column(PARTITION)
    ops = {
        "EqualTo": pc.equal,
        "GreaterThan": pc.greater,
        "GreaterThanOrEqual": pc.greater_equal,
        "LessThan": pc.less,
        "LessThanOrEqual": pc.less_equal,
    }
    mask = None
    for kind, value in filters:
        if kind == "In":
            m = pc.is_in(date, value_set=pa.array([str(v) for v in value], pa.string()))
        elif kind == "IsNotNull":
            m = pc.is_valid(date)
        else:
            m = ops[kind](date, value)
        mask = m if mask is None else pc.and_(mask, m)
    return batch.filter(pc.fill_null(mask, False))


def source_read(options: dict, files: list, filters: list = (), keylogs=()):
    """The read task: its table's rows, as `land` makes them, from one native pass over the capture
    set. Rows naming a topic only by id are held back until the end, when the names learned anywhere
    in the set are put in (land rewrites its files for that; rows already handed to Spark cannot be).
    keylogs: key log texts (landing.spark_rows.keylogs)."""
    from dissector import native
    from landing.names import resolve_table
    from landing.writer import TopicNames, native_batch, native_columns

    table = options.get("table", "exchanges")
    if table in DERIVED:
        yield from _derived_read(options, files, filters, keylogs)
        return
    want = arrow_schema(table)
    engine = native.lander(files, ports=option_ports(options), columns=native_columns(), tls_keylogs=keylogs)
    engine.set_row_options(table == "records", option_payloads(options))
    held = []

    def out(final: bool = False):
        batch, _, marked = native_batch(engine, table)
        batch = keep_dates(batch, filters)
        if marked and not final:
            held.append(batch)
        elif batch.num_rows:
            yield batch

    while engine.next_batch() is not None:
        if table_due(engine, table):
            for b in out():
                yield to_arrow(b, want)
    for b in out(final=True):
        held.append(b)
    names = TopicNames(engine).resolved()
    for b in held:
        if names:
            b = resolve_table(b, names)[0]
        if b.num_rows:
            yield to_arrow(b, want)


def _derived_read(options: dict, files: list, filters: list, keylogs=()):
    """A group table (landing.groups) read by the source: the set's exchanges of the group APIs,
    from the same single pass, made into the table at the end (a rebalance spans connections)."""
    import pyarrow as pa

    from landing.groups import day, rebalances
    from landing.writer import group_exchanges

    table = options["table"]
    rows: list = []
    for b in source_read({**options, "table": "exchanges"}, files, keylogs=keylogs):
        kept = group_exchanges(b)
        if kept is not None:
            rows += kept.to_pylist()
    data = dict(zip(DERIVED, rebalances(rows), strict=True))[table]
    for r in data:
        r[PARTITION] = day(r, table)
    batch = pa.RecordBatch.from_pylist(data, schema=SCHEMAS[table].append(pa.field(PARTITION, pa.string())))
    batch = keep_dates(batch, filters)
    if batch.num_rows:
        yield to_arrow(batch, arrow_schema(table))


def source_classes(boot, check: bool):
    """The `kafkawire` data source's class, for jobs whose tasks boot with `boot` (landing.spark's
    booter: on a cluster's executor it puts the shipped kafkawire on the path and, given a stage,
    checks the native core; `check`: whether the driver's build is known to check against).

    Spark pickles the classes by value (they are made in a function) and runs their methods in Python
    workers, on the driver's host (schema, partitions) and on the executors (read), which may not
    import kafkawire: each method boots before it touches kafkawire and reads no global here (its
    code is in the module-level functions, reached through mod())."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from landing.spark_stream import stream_reader_class

    def mod(stage=None, name="landing.spark_source"):
        import importlib

        boot(stage)
        return importlib.import_module(name)

    stream_reader = stream_reader_class(mod, check)

    class _Files(InputPartition):
        def __init__(self, files: list):
            super().__init__(0)
            self.files = files

    class KafkawireReader(DataSourceReader):
        def __init__(self, options, schema):
            self.options = dict(options)
            self.filters: list = []
            # the set's files, listed once: its key logs are read here, and its one read task reads it
            [self.files] = mod().source_partitions(self.options)  # fails early on a bad table or no paths
            self.keylogs = mod(name="landing.spark_rows").keylogs(self.options, self.files)

        def pushFilters(self, filters):
            # needs spark.sql.python.filterPushdown.enabled (session() sets it)
            self.filters, rest = mod().source_filters(filters)
            yield from rest

        def partitions(self):
            return [_Files(self.files)]

        def read(self, partition):
            m = mod("read" if check else None)
            yield from m.source_read(self.options, partition.files, self.filters, self.keylogs)

    class KafkawireDataSource(DataSource):
        """spark.read.format("kafkawire").option("table", T).load(paths): one landing table, read from captures."""

        @classmethod
        def name(cls):
            return "kafkawire"

        def schema(self):
            return mod(name="landing.spark_rows").spark_schema(self.options.get("table", "exchanges"))

        def reader(self, schema):
            return KafkawireReader(self.options, schema)

        def streamReader(self, schema):
            # spark.readStream.format("kafkawire").load(DIR): landing.spark_stream
            return stream_reader(self.options, schema)

    return KafkawireDataSource
