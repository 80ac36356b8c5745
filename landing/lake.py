"""A landed directory as a lake: save modes, the manifest, and commits that a crash cannot half-do.

    lake = Lake("tables/", mode="append")     # or "error" (the default), "overwrite"
    run = lake.begin(files)                   # LakeExists in error mode if DIR holds tables
    # run.files: the captures to land (those already landed are in run.skipped)
    ... write the tables under run.staging (<table>/date=YYYY-MM-DD/*.parquet), a carried
        state under run.state_dir (starts as a copy of the committed one) ...
    run.commit(counts, names=..., unresolved=..., paths=...)   # or run.abort()

Layout of DIR:

    DIR/<table>/date=YYYY-MM-DD/part-<run>-<n>.parquet    the rows, each run's files named after it
    DIR/<table>/part-empty.parquet                         a table without rows: no rows, every column
                                                           (`date` too, as a string), at the table's root
    DIR/_kafkawire/manifest.json     the landed files (path, size, content id, when, run) and runs (rows
                                     per table, mode), the topic names learned, placeholders pending
    DIR/_kafkawire/state/            carried from run to run, replaced with the tables in one commit
    DIR/_kafkawire/staging/<run>/    a run's files until its commit (never read by a reader)
    DIR/_kafkawire/journal.json      a commit's plan, while it is being done
    DIR/_kafkawire/trash/<run>/      overwrite: the replaced tables, deleted after the commit
    DIR/_kafkawire/lock              held (flock) by the run writing DIR

The leading underscore keeps `_kafkawire` out of what pyarrow, pandas and Spark read: they skip
paths starting with `_` or `.` (DuckDB's globs do not, so glob a table, `DIR/<table>/**/*.parquet`).

An empty table has its file at the table's root, not under `date=__HIVE_DEFAULT_PARTITION__`: a
null partition value leaves pyarrow (and pandas through it) unable to infer `date`'s type. The root
file is the only file of an empty table and is removed in the commit that brings the table's first
partition, since pyarrow and Spark refuse a root file next to partition directories.

Commit: the run's files are renamed to their final names inside staging (invisible), then the
journal (every rename, the file rewrites, the new manifest) is written, then the renames are done,
the manifest is written (temp file + os.replace) and the journal removed. A run killed before the
journal leaves only its staging, discarded by the next run, which lands those captures again (they
are not in the manifest). A run killed after it is rolled forward by the next run (every step is
redone if not done), so no row is lost or landed twice. Overwrite moves each old table directory to
the trash and the new one in its place (two renames per table); a reader in that instant, or until
the next run rolls a killed commit forward, finds no table directory, never a mix of old and new.

The hook for state carried across runs (e.g. connections still open at the end of a capture, to be
continued by the next appended one): write it under run.state_dir, read the committed one from
Lake.state_dir (or run.state_dir, which starts as its copy); commit() puts the new state in place in
the same journaled commit as the tables, so state and tables never disagree. Overwrite starts from
an empty state.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

from landing.schemas import DERIVED, PARTITION, SCHEMAS, TABLES

__all__ = [
    "Lake",
    "LakeExists",
    "LakeBusy",
    "LakeOptions",
    "options_differ",
    "MODES",
    "Run",
    "content_id",
    "write_empty",
    "EMPTY",
]

MODES = ("error", "overwrite", "append")
HOME = "_kafkawire"
GROUP_ROWS = "groups"  # HOME/groups: the group APIs' exchange rows, which the group tables are made from
EMPTY = "part-empty.parquet"  # an empty table's one file, at the table's root
_STOP_AFTER = "KAFKAWIRE_TEST_STOP_AFTER_RENAMES"  # tests: die after this many commit renames


class LakeExists(Exception):
    """Error mode, and the directory already holds landed tables (the message is the CLI's one line)."""


class LakeBusy(Exception):
    """Another run holds the directory's lock."""


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
    header holds its time), so two files that agree on all of it are copies of one capture."""
    h = hashlib.sha256(b"kafkawire-content-1")
    size = os.path.getsize(path)
    h.update(size.to_bytes(8, "big"))
    with open(path, "rb") as f:
        if size <= 2 * _SAMPLE + _SAMPLES * (64 << 10):
            while chunk := f.read(_SAMPLE):
                h.update(chunk)
            return h.hexdigest()
        h.update(f.read(_SAMPLE))
        step = (size - 2 * _SAMPLE) // (_SAMPLES + 1)
        for i in range(1, _SAMPLES + 1):
            f.seek(_SAMPLE + i * step)
            h.update(f.read(64 << 10))
        f.seek(size - _SAMPLE)
        h.update(f.read(_SAMPLE))
    return h.hexdigest()


def write_empty(table_dir: Path, table) -> None:
    """An empty table's file: no rows, the table's columns and `date` (string), at the table's root.
    table: a landing table's name, or the schema of another table partitioned the same way (replay's)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table_dir.mkdir(parents=True, exist_ok=True)
    schema = (SCHEMAS[table] if isinstance(table, str) else table).append(pa.field(PARTITION, pa.string()))
    tmp = table_dir / f".{EMPTY}.tmp"
    pq.write_table(schema.empty_table(), tmp, compression="zstd")
    os.replace(tmp, table_dir / EMPTY)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


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


def _write_json(path: Path, value) -> None:
    write_atomic(path, json.dumps(value, indent=1, sort_keys=True).encode())


def _partitioned(table_dir: Path) -> bool:
    return table_dir.is_dir() and any(p.name.startswith(f"{PARTITION}=") for p in table_dir.iterdir())


class Lake:
    """A landed directory: its tables, its manifest and its runs."""

    def __init__(self, out: str | os.PathLike, mode: str = "error"):
        if mode not in MODES:
            raise ValueError(f"kafkawire: unknown mode {mode!r} (one of {', '.join(MODES)})")
        self.given = os.fspath(out)  # as the user wrote it, for messages
        self.out = Path(out).absolute()
        self.mode = mode
        self.home = self.out / HOME
        self.manifest_path = self.home / "manifest.json"
        self.journal_path = self.home / "journal.json"
        self.state_dir = self.home / "state"
        self._lock = None

    def holds_tables(self) -> bool:
        # a journal: a commit was killed half-way, its tables partly in place
        return self.manifest_path.exists() or self.journal_path.exists() or any((self.out / t).exists() for t in TABLES)

    def manifest(self) -> dict:
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _empty_manifest()

    def begin(self, files) -> Run:
        """Check the mode, finish or discard what a killed run left, and start a run of `files`
        (their content ids computed here; those landed before, or twice in `files`, are skipped)."""
        files = [os.fspath(f) for f in files]
        if self.mode == "error" and self.holds_tables():
            raise LakeExists(
                f"kafkawire: {self.given} already holds landed tables; "
                "use --mode append to add captures or --mode overwrite to replace them"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self.recover()
            return Run(self, files)
        except BaseException:
            self._release()
            raise

    def _take_lock(self) -> None:
        import fcntl

        f = open(self.home / "lock", "a+")  # noqa: SIM115 -- held until the run ends
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            f.close()
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise LakeBusy(f"kafkawire: another run is landing into {self.given}") from None
            raise
        self._lock = f

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def recover(self) -> None:
        """Roll a journaled commit forward, then drop every staging and trash left by killed runs
        (their files were never visible; their captures are not in the manifest)."""
        if self.journal_path.exists():
            _apply(self, json.loads(self.journal_path.read_text(encoding="utf-8")))
        for d in ("staging", "trash"):
            shutil.rmtree(self.home / d, ignore_errors=True)


class Run:
    """One landing into a Lake: its staging directory, state directory, the files it lands."""

    groups: Path  # HOME/groups in staging: the group APIs' exchange rows of this run and the earlier ones'

    def __init__(self, lake: Lake, files: list[str]):
        self.lake = lake
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.id = f"{stamp}-{secrets.token_hex(3)}"
        self.staging = lake.home / "staging" / self.id
        self.state_dir = self.staging / HOME / "state"
        self.manifest = lake.manifest() if lake.mode == "append" else _empty_manifest()
        known = {f.get("content", f.get("sha256")): f for f in self.manifest["files"]}
        self.files, self.skipped, self.entries = [], [], []
        self.committing = False
        for path in files:
            digest = content_id(path)
            if digest in known:
                self.skipped.append((path, known[digest]))
                continue
            entry = {"path": os.path.abspath(path), "size": os.path.getsize(path), "content": digest, "run": self.id}
            known[digest] = entry
            self.files.append(path)
            self.entries.append(entry)
        self.staging.mkdir(parents=True)
        if lake.mode == "append" and lake.state_dir.is_dir():
            shutil.copytree(lake.state_dir, self.state_dir)
        else:
            self.state_dir.mkdir(parents=True)
        self.groups = self.staging / HOME / GROUP_ROWS
        if lake.mode == "append" and (lake.home / GROUP_ROWS).is_dir():
            shutil.copytree(lake.home / GROUP_ROWS, self.groups)

    def abort(self) -> None:
        """Drop the run (its staged files were never visible); once its journal is written the
        staging is the commit's source, kept for the next run to roll forward."""
        if not self.committing:
            shutil.rmtree(self.staging, ignore_errors=True)
        _tidy(self.lake)
        self.lake._release()

    def commit(
        self,
        counts: dict[str, int],
        *,
        names: dict[str, str] | None = None,
        unresolved=(),
        paths=(),
        remove=(),
    ) -> dict:
        """Put the staged tables and state in place and record the run; returns the new manifest.

        names: topic id (uuid string) -> name, every name this run learned; unresolved: the
        `topic-id:<uuid>` placeholders still in its files; paths: its staged files that may hold
        them. Placeholders named by an earlier run are resolved in the staged files here; those of
        earlier runs that this one names, in the committed files (in the journal, so a crash redoes them).
        remove: files of earlier runs (relative to the lake) this run supersedes (landing.carry's
        provisional rows), deleted in the same commit.

        A staged file keeps its name where that already names this run, or where it replaces a
        file of an earlier run at the same path (a rewrite); other names get the run's id."""
        from landing.keys import UNRESOLVED
        from landing.names import resolve_file

        lake, m = self.lake, self.manifest
        names = names or {}
        # the group tables are made anew from every run's group exchanges, replacing the last ones
        counts.update(self._derive(names))  # the caller's counts gain them too
        if lake.mode == "append":
            remove = list(remove) + [
                str(p.relative_to(lake.out))
                for t in DERIVED
                if (lake.out / t).is_dir()
                for p in (lake.out / t).rglob("*.parquet")
            ]
        known = dict(m["topic_names"])
        learned = {k: v for k, v in names.items() if k not in known}
        known.update(names)
        # this run's placeholders that only earlier runs named (its own names are in its files already)
        mine = {u for u in unresolved if u[len(UNRESOLVED) :] not in names and u[len(UNRESOLVED) :] in known}
        if mine:
            fix = {u: known[u[len(UNRESOLVED) :]] for u in mine}
            for p in paths:
                if Path(p).exists():
                    resolve_file(Path(p), fix)
        left = sorted(u for u in unresolved if u[len(UNRESOLVED) :] not in known)

        moves, made = [], {}
        for t in TABLES:
            src = self.staging / t
            if not src.is_dir():
                continue
            for f in sorted(src.rglob("*.parquet")):
                rel = f.relative_to(self.staging)
                if self.id in f.stem or (lake.mode == "append" and (lake.out / rel).exists()):
                    final = f
                else:
                    stem = f.stem[len("part-") :] if f.stem.startswith("part-") else f.stem
                    final = f.with_name(f"part-{self.id}-{stem}.parquet")
                    os.replace(f, final)  # still in staging: invisible
                made[str(f)] = final
                moves.append(str(final.relative_to(self.staging)))
        # earlier runs' placeholders this run names
        rewrites, pending = {}, []
        for entry in m["pending"]:
            ids = [u for u in entry["ids"] if u[len(UNRESOLVED) :] in learned]
            if ids:
                for f in entry["files"]:
                    rewrites.setdefault(f, {}).update({u: learned[u[len(UNRESOLVED) :]] for u in ids})
            rest = [u for u in entry["ids"] if u not in ids]
            if rest:
                pending.append({"ids": rest, "files": entry["files"]})
        if left:
            files = [str(made[p].relative_to(self.staging)) for p in map(str, paths) if p in made]
            pending.append({"ids": left, "files": files})

        tables = {}
        for t in TABLES:
            staged = _partitioned(self.staging / t)
            live = lake.mode == "append" and _partitioned(lake.out / t)
            # overwrite drops the tables this run did not land (records without --records), as a fresh land
            if t in counts or (lake.mode == "append" and (lake.out / t).exists()):
                tables[t] = "rows" if staged or live else "empty"
        now = _now()
        for e in self.entries:
            e["landed"] = now
        run = {"id": self.id, "mode": lake.mode, "landed": now, "files": [e["content"] for e in self.entries]}
        run["rows"] = dict(counts)
        journal = {
            "run": self.id,
            "mode": lake.mode,
            "moves": moves,
            "removes": [str(r) for r in remove] if lake.mode == "append" else [],
            "tables": tables,
            "rewrites": rewrites,
            "manifest": {
                "version": 1,
                "files": m["files"] + self.entries,
                "runs": m["runs"] + [run],
                "topic_names": known,
                "pending": pending,
            },
        }
        # empty tables' files are made in staging, so the commit only renames
        for t, kind in tables.items():
            if kind == "empty":
                write_empty(self.staging / t, t)
        self.committing = True
        _write_json(lake.journal_path, journal)
        _apply(lake, journal)
        self.lake._release()
        return journal["manifest"]

    def _derive(self, names: dict[str, str]) -> dict[str, int]:
        """landing.groups' tables from the group exchanges in self.groups, written into staging."""
        import pyarrow.parquet as pq

        from landing.groups import write_tables
        from landing.keys import UNRESOLVED
        from landing.names import resolve_table

        rows: dict = {}
        known = {UNRESOLVED + k: v for k, v in {**self.manifest["topic_names"], **names}.items()}
        for f in sorted(self.groups.glob("*.parquet")) if self.groups.is_dir() else []:
            table = pq.read_table(f)
            if known:
                table, _ = resolve_table(table, known)
            for r in table.to_pylist():
                # an exchange left unanswered at the end of one append is answered in the next
                old = rows.get(r["exchange_id"])
                if old is None or old["status"] == "unanswered":
                    rows[r["exchange_id"]] = r
        return write_tables(rows.values(), self.staging, f"part-{self.id}-groups.parquet")


def _empty_manifest() -> dict:
    return {"version": 1, "files": [], "runs": [], "topic_names": {}, "pending": []}


def _apply(lake: Lake, journal: dict) -> None:
    """Do a journaled commit; each step is skipped if already done, so a killed commit is redone to its end."""
    from landing.names import resolve_file

    out, run = lake.out, journal["run"]
    staging = lake.home / "staging" / run
    trash = lake.home / "trash" / run
    stop = int(os.environ.get(_STOP_AFTER, "-1"))
    done = 0

    def step():
        nonlocal done
        done += 1
        if done == stop:
            os._exit(9)  # tests: a kill in the middle of the commit

    if journal["mode"] == "overwrite":
        # the whole staged table replaces the old one: two renames per table
        for t in TABLES:
            old, new = out / t, staging / t
            if new.exists() or t not in journal["tables"]:
                if old.exists():
                    trash.mkdir(parents=True, exist_ok=True)
                    os.replace(old, trash / t)
                    step()
            if new.exists():
                os.replace(new, old)
                step()
    else:
        for rel in journal["moves"]:
            a, b = staging / rel, out / rel
            if a.exists():
                b.parent.mkdir(parents=True, exist_ok=True)
                os.replace(a, b)
                step()
        for rel in journal.get("removes", ()):
            (out / rel).unlink(missing_ok=True)
        for t, kind in journal["tables"].items():
            root = out / t / EMPTY
            if kind == "rows" and root.exists():
                root.unlink()  # no rows in it: the first partitions have arrived
            elif kind == "empty" and (staging / t / EMPTY).exists():
                (out / t).mkdir(parents=True, exist_ok=True)
                os.replace(staging / t / EMPTY, root)
        for rel, fix in journal["rewrites"].items():
            if (out / rel).exists():
                resolve_file(out / rel, fix)
    new_groups = staging / HOME / GROUP_ROWS
    if new_groups.exists():  # as the state below: this run's group exchanges, the earlier runs' included
        if (lake.home / GROUP_ROWS).exists():
            trash.mkdir(parents=True, exist_ok=True)
            os.replace(lake.home / GROUP_ROWS, trash / GROUP_ROWS)
        os.replace(new_groups, lake.home / GROUP_ROWS)
    new_state = staging / HOME / "state"
    if new_state.exists():  # else moved in already: the committed state is this run's
        if lake.state_dir.exists():
            trash.mkdir(parents=True, exist_ok=True)
            os.replace(lake.state_dir, trash / "state")
        os.replace(new_state, lake.state_dir)
    _write_json(lake.manifest_path, journal["manifest"])
    lake.journal_path.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(trash, ignore_errors=True)
    _tidy(lake)


def _tidy(lake: Lake) -> None:
    for d in ("staging", "trash"):
        try:
            (lake.home / d).rmdir()
        except OSError:  # absent, or another run's inside
            pass
