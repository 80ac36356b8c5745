"""The `kafkawire` streaming source: a directory tcpdump rotates into (or a prefix in an object
store: dissector.fs), read as a stream of one landing table, through PySpark's Python data
source streaming API (Spark 4).

    register(spark)                                   # landing.spark: batch and streaming
    (spark.readStream.format("kafkawire").option("table", "exchanges").load("caps/")
        .writeStream.option("checkpointLocation", "ck/").format("parquet").start("out/"))

Files are the offsets. The directory's complete files are ordered as `land --follow` orders them
(landing.follow: by first packet time; every file but the newest is complete), and an offset is
the last file read: {"ts": its first packet time, "file": its name} ("" for none yet). A
micro-batch (start, end] is the complete files after start up to end, read in one task by a
native lander restored from the state carried after start, in order; the state after end is
written for the next batch. maxFilesPerTrigger bounds the files of a batch; Trigger.AvailableNow
reads the files complete when the query starts.

The carried state: a file per offset, state-<ts>-<hash of the name>.bin, under the option
`stateDir` (default DIR/.kafkawire-stream/<options>/: hidden, so neither the follow nor the source
reads it as a capture; <options> a hash of ports, payloads, records and key logs, which the
state depends on). The state for an offset is a function of the files up to it: a batch re-run
after a failure restores the same state and makes the same rows, and writes the same state
(atomically) again. With a stateDir of its own (one per query: beside its checkpoint, say),
commit(end) drops the states before end; the default folder may serve several queries over DIR at
different offsets (the states are the same for each: a function of the files), so nothing is
dropped there: each state is the size of the connections open at its offset.

Exactly once: Spark checkpoints each batch's offsets before it runs and its commit after the sink
has it; a restarted query re-runs an uncommitted batch over the same offsets, which this source
turns into the same files, state and rows (deterministic), so an idempotent sink (the file sink,
or foreachBatch keyed by batch id) holds each row once.

Only final rows come out: a batch ends at its last file's last packet, where the lander hands out
the state (landing.carry), and the rows only the end of input would make (connections still
open, requests unanswered at the edge) are not emitted: those connections are carried, and their
exchanges come out in the batch whose files complete them. The newest file is never read (it is
being written): a stream that has ended keeps its last file's exchanges until a later file
appears (land the set with `land` or `land --follow --until-idle` for the end). Rows that name a
topic only by id keep their `topic-id:` placeholder when the name comes in a later batch (a batch
puts in the names it knows, the carried ones included). The group tables (made from every
exchange at the end) are not served as streams.

A file deleted before its batch read it (a ring buffer) is left out with a line on the task's
stderr; the connections carried run across the hole as in landing.follow. A batch re-run after
that makes other rows than its first run did: exactly once holds for the files still there.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

__all__ = ["stream_reader_class", "stream_state_dir"]


def _key(e) -> tuple[float, str]:
    return (e.start, os.path.basename(e.path))


def _off_key(off: dict) -> tuple[float, str] | None:
    return None if not off.get("file") else (float(off["ts"]), off["file"])


def _offset(e) -> dict:
    return {"ts": repr(e.start), "file": os.path.basename(e.path)}


def stream_dir(options: dict) -> str:
    from dissector import fs

    d = options.get("path")
    if not d or not (fs.is_uri(d) or os.path.isdir(d)):
        raise ValueError(f"kafkawire: readStream.load(DIR) needs the directory tcpdump rotates into (got {d!r})")
    return d.rstrip("/") if fs.is_uri(d) else d


def stream_state_dir(options: dict) -> str:
    """The option stateDir, else DIR/.kafkawire-stream/<a hash of the options the state depends on>."""
    if options.get("stateDir"):
        return options["stateDir"]
    what = json.dumps(
        [options.get(k, "") for k in ("ports", "payloads", "records", "tls_keylog")], sort_keys=True
    ).encode()
    return f"{stream_dir(options)}/.kafkawire-stream/{hashlib.sha256(what).hexdigest()[:12]}"


def _complete(directory: str) -> list:
    from landing.follow import complete, scan

    return [e for e in complete(scan(directory)) if e.start is not None]


def stream_latest(directory: str, start: dict, max_files: int | None, target: dict | None) -> dict:
    """The offset after up to max_files complete files past `start` (never past `target`)."""
    after, cap = _off_key(start), _off_key(target) if target else None
    new = [e for e in _complete(directory) if (after is None or _key(e) > after) and (cap is None or _key(e) <= cap)]
    if max_files:
        new = new[:max_files]
    return _offset(new[-1]) if new else start


def stream_files(directory: str, start: dict, end: dict) -> list[str]:
    """The complete files of the batch (start, end], in order (those deleted since are gone)."""
    after, upto = _off_key(start), _off_key(end)
    if upto is None:
        return []
    return [e.path for e in _complete(directory) if (after is None or _key(e) > after) and _key(e) <= upto]


def _state_path(state_dir: str, off: dict) -> str:
    """Where the state after an offset is kept: a file in a folder, or an object under a prefix."""
    name = hashlib.sha256(off["file"].encode()).hexdigest()[:16]
    return f"{state_dir.rstrip('/')}/state-{off['ts']}-{name}.bin"


def _read_state(path: str) -> bytes:
    from dissector import fs

    return fs.read_bytes(path) if fs.is_uri(path) else Path(path).read_bytes()


def _write_state(path: str, data: bytes) -> None:
    from dissector import fs
    from landing.lake import write_atomic

    if fs.is_uri(path):
        fs.write_bytes(path, data)  # a PUT replaces an object whole
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)


def stream_commit(state_dir: str, end: dict) -> None:
    """Drop the states of the offsets before `end` (Spark will not ask for them again)."""
    from dissector import fs

    upto = _off_key(end)
    remote = fs.is_uri(state_dir)
    if upto is None or not (remote or os.path.isdir(state_dir)):
        return
    keep = _state_path(state_dir, end).rsplit("/", 1)[1]
    listed = (
        [u for u, _, _ in fs.entries(state_dir)] if remote else [str(p) for p in Path(state_dir).glob("state-*.bin")]
    )
    for p in listed:
        name = p.rsplit("/", 1)[1]
        if not name.startswith("state-") or not name.endswith(".bin"):
            continue
        try:
            ts = float(name[len("state-") :].rsplit("-", 1)[0])
        except ValueError:
            continue
        if name != keep and ts <= upto[0]:
            if remote:
                fs.delete(p)
            else:
                Path(p).unlink(missing_ok=True)


def stream_read(options: dict, files: list, start: dict, end: dict, state_dir: str, keylogs):
    """A batch's task: the table's final rows of `files` (as Spark takes them), read from the state
    after `start`; the state after `end` written for the next batch. keylogs: key log texts
    (landing.spark_rows.keylogs)."""
    from dissector import fs, native
    from dissector.items import file_fault
    from landing.names import resolve_table
    from landing.schemas import DERIVED
    from landing.spark_rows import arrow_schema, option_payloads, option_ports, table_due, to_arrow
    from landing.writer import TopicNames, native_batch, native_columns

    table = options.get("table", "exchanges")
    if table in DERIVED:
        raise ValueError(f"kafkawire: the {table} table is not served as a stream (land the set for it)")
    state = None
    if _off_key(start) is not None:
        try:
            state = _read_state(_state_path(state_dir, start))
        except FileNotFoundError:
            raise RuntimeError(
                f"kafkawire: the stream's state after {start['file']} is not in {state_dir}: "
                "start the query afresh (a new checkpoint) or give the stateDir it ran with"
            ) from None
    present = [f for f in files if (fs.exists(f) if fs.is_uri(f) else os.path.exists(f))]
    for f in files:
        if f not in present:
            print(f"kafkawire: {f} was deleted before it was read (tcpdump -W ring buffer?)", file=sys.stderr)
    engine = native.lander(
        present,
        ports=option_ports(options),
        columns=native_columns(),
        carry=True,
        state=state or None,
        tls_keylogs=keylogs,
    )
    engine.set_row_options(table == "records", option_payloads(options))
    out, held, blob = [], [], None

    def take():
        batch, _, marked = native_batch(engine, table)
        if batch.num_rows:
            (held if marked else out).append(batch)

    while (b := engine.next_batch()) is not None:
        for it in b:
            if (fault := file_fault(it)) is not None:
                print(f"kafkawire: {fault}", file=sys.stderr)
        if (blob := engine.carried()) is not None:
            break  # every packet read: the rows so far are final; the end of input's are not wanted
        if table_due(engine, table):
            take()
    take()
    names = TopicNames(engine).resolved()
    if blob is None:  # no packet at all (every file gone): the state goes on as it was
        blob = state or b""
    _write_state(_state_path(state_dir, end), bytes(blob))
    want = arrow_schema(table)
    for batch in out + [resolve_table(b, names)[0] if names else b for b in held]:
        yield to_arrow(batch, want)


def stream_reader_class(mod, check: bool):
    """The stream reader class of the `kafkawire` source. mod(stage, name): the module `name`, imported
    after the task has booted for `stage` (landing.spark_source.source_classes). Made in a function,
    so Spark pickles it by value."""
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow

    def stream(stage=None):
        return mod(stage, "landing.spark_stream")

    class _Batch(InputPartition):
        def __init__(self, files, start, end, keylogs):
            super().__init__(0)
            self.files, self.start, self.end, self.keylogs = files, start, end, keylogs

    class KafkawireStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options, schema):
            m = stream()
            self.options = dict(options)
            if self.options.get("table", "exchanges") in mod(name="landing.schemas").DERIVED:
                raise ValueError(f"kafkawire: the {self.options['table']} table is not served as a stream")
            self.dir = m.stream_dir(self.options)
            self.state_dir = m.stream_state_dir(self.options)
            if "://" not in self.state_dir:  # an object store has no folders to make
                os.makedirs(self.state_dir, exist_ok=True)
            n = int(self.options.get("maxFilesPerTrigger", 0) or 0)
            self.max_files = n if n > 0 else None
            self.target = None

        def initialOffset(self):
            return {"ts": "", "file": ""}

        def getDefaultReadLimit(self):
            return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

        def latestOffset(self, start, limit=None):
            n = limit.max_files if isinstance(limit, ReadMaxFiles) else None
            return stream().stream_latest(self.dir, start, n, self.target)

        def prepareForTriggerAvailableNow(self):
            self.target = stream().stream_latest(self.dir, self.initialOffset(), None, None)

        def partitions(self, start, end):
            files = stream().stream_files(self.dir, start, end)
            if not files:
                return []
            keylogs = mod(name="landing.spark_rows").keylogs(self.options, files)
            return [_Batch(files, start, end, keylogs)]

        def read(self, partition):
            m = stream("read" if check else None)
            yield from m.stream_read(
                self.options, partition.files, partition.start, partition.end, self.state_dir, partition.keylogs
            )

        def commit(self, end):
            if self.options.get("stateDir"):  # the query's own: no other query needs its states
                stream().stream_commit(self.state_dir, end)

    return KafkawireStreamReader
