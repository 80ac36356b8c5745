"""The landed tables as Delta Lake tables, and the runs that land them (delta-rs: `deltalake`).

    lake = Lake("tables/", mode="append")     # or "error" (the default), "overwrite"; or a URI
    run = lake.begin(files)                   # LakeExists in error mode if DIR holds tables
    # run.files: the captures to land (those already landed are in run.skipped)
    ... write the tables under run.staging (<table>/date=YYYY-MM-DD/*.parquet, a local folder), the
        carried state under run.state_dir (in append mode it starts as the last run's) ...
    run.commit(counts, names=..., unresolved=..., paths=..., remove=...)   # or run.abort()

Layout of DIR (a local path, or any URI dissector.fs reads: s3://, gs://, abfs://, hdfs://):

    DIR/<table>/                 a Delta table per table, partitioned by `date`: _delta_log/ and
                                 date=YYYY-MM-DD/part-<run>-<n>.parquet
    DIR/_kafkawire/runs/         the lake's own Delta table: a row per run (its number, mode and time,
                                 the captures it landed with their content ids, the state it carries
                                 to the next append, the topic names known, the placeholders still
                                 unnamed, and its commit plan: every table's files added and removed)
    DIR/_kafkawire/groups/       a Delta table of the group APIs' exchange rows, which the group tables
                                 are made from anew at every run
    DIR/_kafkawire/staging/<run> a local lake's run's files before they move into the tables

Every reader (deltalake, Spark with delta-spark, DuckDB's delta extension, polars, pandas and
pyarrow through deltalake) reads a table through its log: a file the log does not add is not
part of the table, so files written ahead of a commit, or left by a killed run, are never read.

A run is committed in three steps, each a Delta commit carrying the run's transaction identifier
(txn, application APP, version = the run's number): the run's files move (or upload) into the
tables' folders, unseen; the run's row is committed to the runs table, at the version the run
began from, without retry, so that of two runs at once the second fails (LakeBusy) instead of
forking the carried state; then each table's files are committed, added and removed in one
commit (mode overwrite: the old files all removed in it, so a reader sees the old table or the
new one). A run killed before its row is committed lands nothing (its captures are not in the
runs table: the next run lands them); one killed after it is completed by the next run, which
commits each table whose txn version is still below the run's (Lake.recover): nothing is lost or
landed twice, and the state and the tables cannot disagree (both come from the same row).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote

from landing.schemas import DERIVED, PARTITION, SCHEMAS, TABLES

__all__ = [
    "APP",
    "GROUP_ROWS",
    "HOME",
    "Lake",
    "LakeBusy",
    "LakeExists",
    "LakeOptions",
    "MODES",
    "Run",
    "content_id",
    "delta_dataset",
    "delta_options",
    "group_schema",
    "is_delta",
    "options_differ",
    "table_schema",
    "write_atomic",
    "write_empty",
]

MODES = ("error", "overwrite", "append")
HOME = "_kafkawire"
RUNS = "runs"  # HOME/runs: the runs table
GROUP_ROWS = "groups"  # HOME/groups: the group APIs' exchange rows, which the group tables are made from
APP = "kafkawire-land"  # the txn application id of every commit a run makes
EMPTY = "part-empty.parquet"  # a plain export's empty table: its one file, at the table's root
_STOP_AFTER = "KAFKAWIRE_TEST_STOP_AFTER_COMMITS"  # tests: die after this many commits of a run


class LakeExists(Exception):
    """Error mode, and the directory already holds landed tables (the message is the CLI's one line)."""


class LakeBusy(Exception):
    """Another run committed to the lake while this one ran (the message is the CLI's one line)."""


class LakeOptions(Exception):
    """An append whose --port/--records/--no-payloads differ from those the lake's open connections
    were carried with (the message is the CLI's one line)."""


def options_differ(out, were: dict) -> LakeOptions:
    flags = (
        [f"--port {p}" for p in were["ports"]]
        + ["--records"] * were["records"]
        + ["--no-payloads"] * (not were["payloads"])
    )
    return LakeOptions(
        f"kafkawire: {out} was landed with {' '.join(flags) or 'no --port, --records or --no-payloads'}: "
        "append with the same options (or land elsewhere)"
    )


_SAMPLE = 1 << 20  # the head and tail read whole...
_SAMPLES = 16  # ...and this many 64 KiB pieces evenly between them


def content_id(path: str | os.PathLike) -> str:
    """sha256 of a file's size, its first and last MiB and 16 pieces of 64 KiB between: hashing every
    byte took 0.66 s/GB, a third of landing large batches.  Captures differ there (every record
    header holds its time), so two files that agree on all of it are copies of one capture.  A
    remote file (dissector.fs) costs 18 ranged reads at most, not a download."""
    return _identify(path)[0]


def _identify(path: str | os.PathLike) -> tuple[str, int]:
    """(content id, size) of a file, a remote one's size from the same open as its reads."""
    from dissector import fs

    path = fs.local(path)
    if fs.is_uri(path):
        with fs.open_random(path) as f:
            return _content_id(f.size, f.read_at), f.size
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return _content_id(size, lambda n, at: os.pread(f.fileno(), n, at)), size


def _content_id(size: int, read_at) -> str:
    h = hashlib.sha256(b"kafkawire-content-1")
    h.update(size.to_bytes(8, "big"))
    if size <= 2 * _SAMPLE + _SAMPLES * (64 << 10):
        for at in range(0, size, _SAMPLE):
            h.update(read_at(min(_SAMPLE, size - at), at))
        return h.hexdigest()
    h.update(read_at(_SAMPLE, 0))
    step = (size - 2 * _SAMPLE) // (_SAMPLES + 1)
    for i in range(1, _SAMPLES + 1):
        h.update(read_at(64 << 10, _SAMPLE + i * step))
    h.update(read_at(_SAMPLE, size - _SAMPLE))
    return h.hexdigest()


def write_empty(table_dir: Path, table) -> None:
    """A plain Parquet export's empty table (replay --out): no rows, the table's columns and `date`
    (string), at the table's root. table: a landing table's name, or a schema partitioned the same way."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table_dir.mkdir(parents=True, exist_ok=True)
    schema = (SCHEMAS[table] if isinstance(table, str) else table).append(pa.field(PARTITION, pa.string()))
    tmp = table_dir / f".{EMPTY}.tmp"
    pq.write_table(schema.empty_table(), tmp, compression="zstd")
    os.replace(tmp, table_dir / EMPTY)


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` in one step: a reader, or a run killed midway, sees the old bytes
    or the new, never part of them (a hidden temp file beside it, synced, then renamed).  The temp
    file's name is its writer's own: two writers of one path (two streaming queries sharing a state
    directory) each rename a whole file, and the last one stays."""
    path = Path(path)
    # not mkstemp: its 0600 would keep other users (Spark workers, readers) out of a landed file
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def delta_options(uri: str) -> dict[str, str] | None:
    """deltalake's storage_options for a lake at `uri`: an S3 endpoint of the environment's
    (AWS_ENDPOINT_URL), over plain HTTP when it says so; None (delta-rs's own defaults) otherwise."""
    from dissector import fs

    if not fs.is_uri(uri) or not uri.lower().startswith(("s3://", "s3a://")):
        return None
    # delta-rs commits with a conditional PUT (If-None-Match), which S3 and its clones honour: no
    # locking option is needed (seen on the wire against SeaweedFS)
    opts = {}
    endpoint, region = fs.s3_env()
    if endpoint:
        opts["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    if region:
        opts["AWS_REGION"] = region
    return opts


def _stats(path: str, filesystem=None) -> tuple[int, str]:
    """A Parquet file's size and its Delta stats (numRecords, nullCount; min and max of its integer
    columns: readers skip files by them), from its footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if filesystem is None:
        size = os.path.getsize(path)
        meta = pq.read_metadata(path)
    else:
        size = filesystem.get_file_info(path).size
        with filesystem.open_input_file(path) as f:
            meta = pq.read_metadata(f)
    schema = meta.schema.to_arrow_schema()
    nulls: dict[str, int] = {}
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    unknown: set[str] = set()
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for j in range(rg.num_columns):
            c = rg.column(j)
            name = c.path_in_schema
            if "." in name or name in unknown:
                continue  # a nested column's leaves: no stats for it
            st = c.statistics
            if st is None or st.null_count is None:
                unknown.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + st.null_count
            if pa.types.is_integer(schema.field(name).type):
                if st.has_min_max:
                    lo[name] = st.min if name not in lo else min(lo[name], st.min)
                    hi[name] = st.max if name not in hi else max(hi[name], st.max)
                elif st.null_count < c.num_values:
                    unknown.add(name)  # values without a min and max: none is said for the file
    for name in unknown:
        for d in (nulls, lo, hi):
            d.pop(name, None)
    lo = {k: v for k, v in lo.items() if k in hi}
    stats = {"numRecords": meta.num_rows, "nullCount": nulls, "minValues": lo, "maxValues": hi}
    return size, json.dumps(stats)


def is_delta(uri: str, storage: dict | None = None) -> bool:
    """Whether a Delta table is at `uri`; a store that cannot be reached is RemoteError (one line)."""
    from deltalake import DeltaTable

    from dissector.fs import RemoteError

    try:
        return DeltaTable.is_deltatable(uri, storage_options=storage)
    except OSError as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RemoteError(f"cannot reach {uri}: {why}") from None


def delta_dataset(uri: str, schema, storage: dict | None = None, partitioned: bool = True, table=None):
    """A Delta table's current version as a pyarrow dataset of its files, read with `schema` (its
    `date` from the files' folders when `partitioned`) through pyarrow's own filesystems.

    Not DeltaTable.to_pyarrow_dataset(): its default filesystem wraps Python file objects, one of
    which an Arrow I/O thread could still be releasing as the interpreter exits, aborting it (seen
    in 5-15% of runs here, on local and S3 tables alike). table: the DeltaTable at `uri` when the
    caller has opened it (a version it read already)."""
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

    from dissector import fs

    dt = table if table is not None else DeltaTable(uri, storage_options=storage)
    if fs.is_uri(uri):
        filesystem, base = fs.filesystem_of(uri)
    else:
        filesystem, base = pafs.LocalFileSystem(), uri
    paths = pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
    files = [f"{base}/{unquote(p)}" for p in paths]
    part = pads.partitioning(pa.schema([(PARTITION, pa.string())]), flavor="hive") if partitioned else None
    return pads.dataset(
        files, schema=schema, format="parquet", filesystem=filesystem, partitioning=part, partition_base_dir=base
    )


class Lake:
    """A landed directory: its Delta tables and its runs."""

    def __init__(self, out: str | os.PathLike, mode: str = "error"):
        from dissector import fs

        if mode not in MODES:
            raise ValueError(f"kafkawire: unknown mode {mode!r} (one of {', '.join(MODES)})")
        self.given = os.fspath(out)  # as the user wrote it, for messages
        where = fs.local(self.given)
        self.remote = fs.is_uri(where)
        self.uri = where.rstrip("/") if self.remote else os.path.abspath(where)
        self.out = Path(self.uri) if not self.remote else None  # a local lake's folder
        self.mode = mode
        self.storage = delta_options(self.uri)
        if self.remote:
            self.filesystem, self.root = fs.filesystem_of(self.uri)
        else:
            import pyarrow.fs as pafs

            self.filesystem, self.root = pafs.LocalFileSystem(), self.uri
        self.home = self.out / HOME if self.out is not None else None

    def table_uri(self, table: str) -> str:
        return f"{self.uri}/{table}"

    def spark_uri(self, table: str) -> str:
        """A table's location as Spark's Hadoop filesystems name it (s3:// is s3a:// there)."""
        uri = self.table_uri(table)
        return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri

    def _home_uri(self, name: str) -> str:
        return f"{self.uri}/{HOME}/{name}"

    def delta(self, uri: str):
        """The Delta table at `uri`, or None when there is none."""
        from deltalake import DeltaTable

        if not is_delta(uri, self.storage):
            return None
        return DeltaTable(uri, storage_options=self.storage)

    def runs_table(self):
        return self.delta(self._home_uri(RUNS))

    def holds_tables(self) -> bool:
        if self.runs_table() is not None:
            return True
        # one listing of the lake's folder, then a probe of the table folders it holds (in a store,
        # a request each)
        import pyarrow.fs as pafs

        listed = self.filesystem.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        names = {info.base_name for info in listed}
        if any(self.delta(self.table_uri(t)) is not None for t in TABLES if t in names):
            return True
        if self.out is not None:  # an older kafkawire's Parquet lake (its manifest), or plain Parquet
            return (self.out / HOME / "manifest.json").exists() or any((self.out / t).exists() for t in TABLES)
        return False

    def runs(self, dt=None) -> list[dict]:
        """Every run's row (plan and state left out), oldest first. dt: the runs table as the
        caller opened it (else its latest version)."""
        dt = dt if dt is not None else self.runs_table()
        if dt is None:
            return []
        cols = [c for c in _RUN_COLUMNS if c not in ("state", "plan")]
        rows = self._runs_dataset(dt).to_table(columns=cols).to_pylist()
        return sorted(rows, key=lambda r: r["run"])

    def last_run(self, dt=None) -> dict | None:
        """The newest run's whole row (its plan and state too), or None. dt: as for runs()."""
        dt = dt if dt is not None else self.runs_table()
        if dt is None:
            return None
        n = dt.transaction_version(APP)
        if n is None:
            return None
        # only here: pyarrow.dataset imports pandas, a quarter of a second a fresh landing never needs
        import pyarrow.dataset as pads

        rows = self._runs_dataset(dt).to_table(filter=pads.field("run") == n).to_pylist()
        return rows[0] if rows else None

    def _runs_dataset(self, dt):
        return delta_dataset(self._home_uri(RUNS), _runs_schema(), self.storage, partitioned=False, table=dt)

    def begin(self, files) -> Run:
        """Check the mode, complete a run that was killed after its commit point, and start a run of
        `files` (their content ids computed here; those landed before, or twice in `files`, are skipped)."""
        files = [os.fspath(f) for f in files]
        if self.mode == "error" and self.holds_tables():
            raise LakeExists(
                f"kafkawire: {self.given} already holds landed tables; "
                "use --mode append to add captures or --mode overwrite to replace them"
            )
        if self.out is not None and (self.out / HOME / "manifest.json").exists():
            raise LakeExists(
                f"kafkawire: {self.given} holds tables an older kafkawire landed as plain Parquet: "
                "land into a new directory, or remove it first (kafkawire replaces no data it was not told to)"
            )
        if self.out is not None:
            _tidy_staging(self.out / HOME / "staging")
        self.recover()
        return Run(self, files)

    def recover(self) -> None:
        """Complete the last run: commit each table its plan names whose txn version is below the run's."""
        last = self.last_run()
        if last is not None:
            _apply(self, last["run"], json.loads(last["plan"]))


_RUN_COLUMNS = ("run", "id", "mode", "landed", "captures", "rows", "topic_names", "pending", "state", "plan")


def _runs_schema():
    import pyarrow as pa

    capture = pa.struct([("path", pa.string()), ("content", pa.string()), ("size", pa.int64())])
    state = pa.struct([("name", pa.string()), ("data", pa.binary())])
    return pa.schema(
        [
            ("run", pa.int64()),
            ("id", pa.string()),
            ("mode", pa.string()),
            ("landed", pa.string()),
            ("captures", pa.list_(capture)),
            ("rows", pa.string()),  # JSON: rows landed per table
            ("topic_names", pa.string()),  # JSON: topic id -> name, every name the lake knows
            ("pending", pa.string()),  # JSON: [{ids, files}]: placeholders unnamed and the files holding them
            ("state", pa.list_(state)),  # the carried state's files (landing.carry, landing.spark)
            ("plan", pa.string()),  # JSON: table -> {mode, add: [...], remove: [...]}
        ]
    )


def group_schema():
    """The group rows' table's schema (the exchanges' columns landing.groups reads)."""
    import pyarrow as pa

    from landing.schemas import GROUP_SOURCE

    ex = SCHEMAS["exchanges"]
    return pa.schema([ex.field(c) for c in GROUP_SOURCE])


def table_schema(table: str):
    """A table's schema as its Delta table holds it: the landing schema and `date`."""
    import pyarrow as pa

    if table == GROUP_ROWS:
        return group_schema()
    return SCHEMAS[table].append(pa.field(PARTITION, pa.string()))


class Run:
    """One landing into a Lake: its number, staging and state folders, the files it lands."""

    groups: Path  # the group APIs' exchange rows this run writes (staging/HOME/groups)

    def __init__(self, lake: Lake, files: list[str]):
        from dissector import fs

        self.lake = lake
        runs = lake.runs_table()
        self.version = runs.version() if runs is not None else None  # the runs table this run began from
        last = (runs.transaction_version(APP) if runs is not None else None) or 0
        self.number = last + 1  # the txn version of every commit of this run (it grows across overwrites)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.id = f"{stamp}-{secrets.token_hex(3)}"
        if lake.out is not None:
            self.staging = lake.out / HOME / "staging" / self.id
        else:
            self.staging = Path(tempfile.mkdtemp(prefix=f"kafkawire-run-{self.id}-"))
        self.state_dir = self.staging / HOME / "state"
        self.groups = self.staging / HOME / GROUP_ROWS
        # one version of the runs table read throughout: the one this run commits on top of
        prev = lake.last_run(runs) if lake.mode == "append" and runs is not None else None
        self.topic_names = json.loads(prev["topic_names"]) if prev else {}
        self.pending = json.loads(prev["pending"]) if prev else []
        known = {}
        if lake.mode == "append" and runs is not None:
            known = {c["content"]: {**c, "run": r["id"]} for r in lake.runs(runs) for c in r["captures"]}
        self.files, self.skipped, self.entries = [], [], []
        for path in files:
            digest, size = _identify(path)
            if digest in known:
                self.skipped.append((path, known[digest]))
                continue
            local = fs.local(path)
            where = local if fs.is_uri(local) else os.path.abspath(local)
            entry = {"path": where, "content": digest, "size": size}
            known[digest] = entry
            self.files.append(path)
            self.entries.append(entry)
        self.state_dir.mkdir(parents=True)
        for item in (prev or {}).get("state") or []:
            p = self.state_dir / item["name"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(item["data"])
        self.committing = False

    def abort(self) -> None:
        """Drop the run's staging (its files never were part of a table, or are in the tables now)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.staging.parent.rmdir()  # absent, or another run's inside

    def commit(
        self,
        counts: dict[str, int],
        *,
        names: dict[str, str] | None = None,
        unresolved=(),
        paths=(),
        remove=(),
        added: dict[str, list[dict]] | None = None,
        committer=None,
    ) -> dict:
        """Put the staged tables and state in place and record the run; returns the run's plan.

        names: topic id (uuid string) -> name, every name this run learned; unresolved: the
        `topic-id:<uuid>` placeholders still in its files; paths: its staged files that may hold
        them. Placeholders named by an earlier run are resolved in the staged files here; files of
        earlier runs that hold placeholders this one names are written anew (the old ones removed
        in the same commit). remove: files of earlier runs (relative to the lake) this run
        supersedes (landing.carry's provisional rows). added: table -> files already written into
        its folder by this run (Spark's Delta writer: landing.spark_delta), as plan entries, added
        with the staged ones. committer(table, step, number): commits a table's step instead of
        delta-rs (Spark's). A staged file at the path of an earlier run's file replaces it."""
        from landing.keys import UNRESOLVED
        from landing.names import resolve_file

        lake = self.lake
        names = names or {}
        counts.update(self._derive(names))  # the caller's counts gain the group tables too
        known = dict(self.topic_names)
        learned = {k: v for k, v in names.items() if k not in known}
        known.update(names)
        # this run's placeholders that only earlier runs named (its own names are in its files already)
        mine = {u for u in unresolved if u[len(UNRESOLVED) :] not in names and u[len(UNRESOLVED) :] in known}
        if mine:
            fix = {u: known[u[len(UNRESOLVED) :]] for u in mine}
            for p in paths:
                self.resolve(p, fix)
        left = sorted(u for u in unresolved if u[len(UNRESOLVED) :] not in known)

        current = {t: _files(lake, t) for t in (*TABLES, GROUP_ROWS)} if lake.mode == "append" else {}
        # earlier runs' files with placeholders this run names: written anew into staging
        rewrites: dict[str, dict] = {}
        pending = []
        for entry in self.pending:
            ids = [u for u in entry["ids"] if u[len(UNRESOLVED) :] in learned]
            for f in entry["files"] if ids else ():
                rewrites.setdefault(f, {}).update({u: learned[u[len(UNRESOLVED) :]] for u in ids})
            rest = [u for u in entry["ids"] if u not in ids]
            if rest:
                pending.append({"ids": rest, "files": entry["files"]})
        for rel, fix in rewrites.items():
            table = rel.split("/", 1)[0]
            if rel not in current.get(table, {}):
                continue  # superseded since (a provisional file), or replaced by an overwrite
            dst = self.staging / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            _fetch(lake, rel, dst)
            resolve_file(dst, fix)

        plan: dict[str, dict] = {}
        made: dict[str, str] = {}  # staged path -> its path in the lake
        for t in (*TABLES, GROUP_ROWS):
            prefix = t if t != GROUP_ROWS else f"{HOME}/{GROUP_ROWS}"
            src = self.staging / prefix
            mode = _mode(lake, t, counts, current)
            if mode is None:
                continue
            adds, removes = [], []
            for f in sorted(src.rglob("*.parquet")) if src.is_dir() else []:
                inside = f.relative_to(src).as_posix()
                if self.id not in f.stem:
                    # the run's id in every name it adds, so that no run's file replaces another's
                    if f"{prefix}/{inside}" in current.get(t, {}):
                        removes.append(f"{prefix}/{inside}")  # an earlier run's file, written anew
                    stem = f.stem[len("part-") :] if f.stem.startswith("part-") else f.stem
                    inside = f"{inside.rsplit('/', 1)[0]}/" * ("/" in inside) + f"part-{self.id}-{stem}.parquet"
                made[str(f)] = f"{prefix}/{inside}"
                adds.append(_add_entry(f, inside))
            adds += (added or {}).get(t, [])
            if mode == "append":
                removes += [rel for rel in remove if rel.startswith(f"{prefix}/")]
            plan[t] = {
                "mode": mode,
                "add": adds,
                "remove": [_remove_entry(current[t][r], r) for r in dict.fromkeys(removes) if r in current.get(t, {})]
                if mode == "append"
                else [],
            }
        if left:
            files = [made.get(str(p)) or made.get(str(self.staging / p)) or str(p) for p in paths]
            pending.append({"ids": left, "files": [f for f in files if not os.path.isabs(f)]})

        # the files move (or upload) into the tables' folders: unseen until each table's commit
        for staged, rel in made.items():
            _publish(lake, Path(staged), rel)
        state = [
            {"name": p.relative_to(self.state_dir).as_posix(), "data": p.read_bytes()}
            for p in sorted(self.state_dir.rglob("*"))
            if p.is_file()
        ]
        row = {
            "run": self.number,
            "id": self.id,
            "mode": lake.mode,
            "landed": _now(),
            "captures": self.entries,
            "rows": json.dumps(counts, sort_keys=True),
            "topic_names": json.dumps(known, sort_keys=True),
            "pending": json.dumps(pending, sort_keys=True),
            "state": state,
            "plan": json.dumps(plan, sort_keys=True),
        }
        self.committing = True
        _commit_run(lake, self, row)
        _apply(lake, self.number, plan, committer)
        self.abort()
        return plan

    def resolve(self, path: str | os.PathLike, fix: dict[str, str]) -> None:
        """Names in place of placeholders in one of this run's staged files (its path, or its path
        relative to the staging folder)."""
        from landing.names import resolve_file

        p = Path(path)
        resolve_file(p if p.is_absolute() else self.staging / p, fix)

    def _derive(self, names: dict[str, str]) -> dict[str, int]:
        """landing.groups' tables from every run's group exchanges (the committed ones and this
        run's), written into staging."""
        import pyarrow.parquet as pq

        from landing import pyrows
        from landing.groups import write_tables
        from landing.keys import UNRESOLVED
        from landing.names import resolve_table

        rows: dict = {}
        known = {UNRESOLVED + k: v for k, v in {**self.topic_names, **names}.items()}
        tables = []
        uri = self.lake._home_uri(GROUP_ROWS)
        if self.lake.mode == "append" and self.lake.delta(uri) is not None:
            tables.append(delta_dataset(uri, group_schema(), self.lake.storage, partitioned=False).to_table())
        if self.groups.is_dir():
            # ParquetFile, not read_table: that goes through pyarrow.dataset, which imports pandas
            tables += [pq.ParquetFile(f).read() for f in sorted(self.groups.glob("*.parquet"))]
        for table in tables:
            if known and table.num_rows:
                table, _ = resolve_table(table.select(list(group_schema().names)), known)
            for r in pyrows.rows(table):
                # an exchange left unanswered at the end of one append is answered in the next
                old = rows.get(r["exchange_id"])
                if old is None or old["status"] == "unanswered":
                    rows[r["exchange_id"]] = r
        return write_tables(rows.values(), self.staging, f"part-{self.id}-groups.parquet")


def _mode(lake: Lake, table: str, counts: dict, current: dict) -> str | None:
    """How a run commits a table: append, overwrite, or not at all (None)."""
    if table in DERIVED:
        return "overwrite"  # made anew from every run's group exchanges
    append = "append" if lake.mode == "append" else "overwrite"
    if table == GROUP_ROWS or table in counts or (lake.mode == "append" and current.get(table)):
        return append
    if lake.mode == "overwrite" and lake.delta(lake.table_uri(table)) is not None:
        return "overwrite"  # a table this run does not land (records without --records): emptied
    return None


def _fetch(lake: Lake, rel: str, dst: Path) -> None:
    """A committed file of the lake copied to a local path."""
    import pyarrow.fs as pafs

    if lake.remote:
        pafs.copy_files(
            f"{lake.root}/{rel}",
            str(dst),
            source_filesystem=lake.filesystem,
            destination_filesystem=pafs.LocalFileSystem(),
        )
    else:
        shutil.copyfile(lake.out / rel, dst)


def _add_entry(path: Path, rel_in_table: str) -> dict:
    size, stats = _stats(str(path))
    return {"path": rel_in_table, "size": size, "partition": _partition(rel_in_table), "stats": stats}


def _remove_entry(info: dict, rel: str) -> dict:
    return {"path": rel.split("/", 1)[1], "size": info["size"], "partition": info["partition"]}


def _partition(rel_in_table: str) -> dict:
    """A file's partition values from its path (date=YYYY-MM-DD/...; the hive null for none)."""
    head = rel_in_table.split("/", 1)[0]
    if "/" not in rel_in_table or not head.startswith(f"{PARTITION}="):
        return {}
    value = head[len(PARTITION) + 1 :]
    return {PARTITION: None if value == "__HIVE_DEFAULT_PARTITION__" else value}


def _files(lake: Lake, table: str) -> dict[str, dict]:
    """A table's files now (relative to the lake) -> their size and partition values."""
    import pyarrow as pa

    uri = lake._home_uri(GROUP_ROWS) if table == GROUP_ROWS else lake.table_uri(table)
    dt = lake.delta(uri)
    if dt is None:
        return {}
    prefix = f"{HOME}/{GROUP_ROWS}" if table == GROUP_ROWS else table
    acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    out = {}
    for a in acts:
        parts = {k[len("partition.") :]: v for k, v in a.items() if k.startswith("partition.")}
        out[f"{prefix}/{a['path']}"] = {"size": a["size_bytes"], "partition": parts}
    return out


def _publish(lake: Lake, staged: Path, rel: str) -> None:
    """A staged file into its table's folder (a rename, or an upload to a remote lake): unseen by
    every reader until the table's commit adds it."""
    if lake.remote:
        _put(lake.filesystem, lake.root, staged, rel)
    else:
        dst = lake.out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, dst)


def _put(filesystem, root: str, local: Path, rel: str) -> None:
    import pyarrow.fs as pafs

    pafs.copy_files(
        str(local), f"{root}/{rel}", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem
    )


_commits = 0


def _step() -> None:
    """Tests: die after the Nth commit of this process (KAFKAWIRE_TEST_STOP_AFTER_COMMITS)."""
    global _commits
    _commits += 1
    if _commits == int(os.environ.get(_STOP_AFTER, "-1")):
        os._exit(9)


def _txn(number: int, retries: int | None = None):
    from deltalake.transaction import CommitProperties, Transaction

    return CommitProperties(
        app_transactions=[Transaction(APP, number, int(time.time() * 1000))], max_commit_retries=retries
    )


def _commit_run(lake: Lake, run: Run, row: dict) -> None:
    """The run's commit point: its row in the runs table, at the version the run began from."""
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    from deltalake import DeltaTable
    from landing import pyrows

    data = pyrows.table([row], _runs_schema())
    busy = LakeBusy(f"kafkawire: another run landed into {lake.given} while this one ran: land again")
    target: object = lake._home_uri(RUNS)
    if run.version is None and lake.runs_table() is not None:
        raise busy  # another run created the lake meanwhile
    if run.version is not None:
        now = lake.runs_table()
        if now is None or now.version() != run.version:
            raise busy
        # committed on top of the version the run began from, without retry: a run that committed
        # since makes this commit fail, where a retry would stack the two runs' states
        target = DeltaTable(lake._home_uri(RUNS), version=run.version, storage_options=lake.storage)
    try:
        write_deltalake(
            target,
            data,
            mode="overwrite" if lake.mode == "overwrite" or run.version is None else "append",
            storage_options=lake.storage,
            commit_properties=_txn(run.number, retries=0),
            schema_mode="overwrite" if lake.mode == "overwrite" else None,
        )
    except CommitFailedError:
        raise busy from None
    _step()


def _apply(lake: Lake, number: int, plan: dict, committer=None) -> None:
    """Commit each table of a run's plan whose txn version is below the run's (a table committed
    before a kill is not committed twice): through delta-rs, or committer(table, step, number)."""
    from deltalake import Schema
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

    now = int(time.time() * 1000)
    for t in (*TABLES, GROUP_ROWS):
        step = plan.get(t)
        if step is None:
            continue
        uri = lake._home_uri(GROUP_ROWS) if t == GROUP_ROWS else lake.table_uri(t)
        dt = lake.delta(uri)
        if dt is not None and (dt.transaction_version(APP) or 0) >= number:
            continue
        if committer is not None:
            committer(t, step, number)
            _step()
            continue
        adds = [AddAction(a["path"], a["size"], a["partition"], now, True, a["stats"]) for a in step["add"]]
        removes = [RemoveAction(r["path"], True, now, r["size"], r["partition"]) for r in step["remove"]]
        schema = Schema.from_arrow(table_schema(t))
        parts = [] if t == GROUP_ROWS else [PARTITION]
        if dt is None:
            create_table_with_add_actions(
                uri,
                schema,
                adds,
                mode="error",
                partition_by=parts,
                storage_options=lake.storage,
                commit_properties=_txn(number),
            )
        else:
            dt.create_write_transaction(
                adds + removes, step["mode"], schema, partition_by=parts, commit_properties=_txn(number)
            )
        _step()


def _tidy_staging(folder: Path) -> None:
    """Drop what killed runs left staged (never part of a table)."""
    if folder.is_dir():
        for d in folder.iterdir():
            shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.rmdir()
