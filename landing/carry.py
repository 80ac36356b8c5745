"""Appended landings (`kafkawire land --mode append`): a rotated capture set landed file by
file as tcpdump writes it gives the tables one run over the whole set gives, connections that
run on from one file into the next stitched, not cut.

How: the native lander of each run restores what the previous run carried (dissector.native's
Engine.restore: every open connection's TCP reassembly, framing and unframed bytes, unanswered
requests, counters, stable ids; the topic names learned; the frame count), reads its files, and
after its last packet hands out the state the next run carries (Engine.carried) before it applies
the end of capture. A run cannot know it is the last, so the rows it derives only from the end of
*its* input (connections still open, requests never answered, gaps flushed at the end) are
*provisional*: written to their own files, which the next run supersedes (their rows come again,
or their sequels do, from the carried state). After run k the tables are those of one run over
parts 1..k; after the last, those of one run over all of them.

The contract with the caller (landing.lake's `--mode append`, which owns staging and the atomic
commit):

- `landed`: the table directory earlier runs were committed to (read only here, unless it is also
  `out`); `out`: where this run writes (a staging directory, or `landed` itself). Every file this
  run writes is under `out` at the relative path it is to have under `landed`, and a file there
  replaces the one of the same path (earlier runs' files rewritten because a topic name they held
  only by id was learned: temp file + os.replace when `out` is `landed`).
- File names never collide with earlier runs': `<table>/date=<day>/part-<run>.parquet` (final rows)
  and `<table>/date=<day>/provisional-<run>.parquet` (provisional), `<run>` the run number.
- `Appended.remove`: paths, relative to `landed`, of the previous run's provisional files, which
  this run supersedes; deleted here only when `out` is `landed`, else the caller deletes them at
  commit.
- The state: read from `state_dir` (none there: the first run), written to `state_out` (default
  `state_dir`) as one file, STATE, replaced atomically. It holds the engine's carried state
  (bounded by the open connections: their unframed bytes, unanswered requests, reassembly
  buffers and delivered tails, zstd-compressed, plus the topic names learned and the 4096 closed
  4-tuples the reassembler remembers), this run's provisional files, and the files that still hold
  a topic only by its id. Commit it with the tables: a state ahead of or behind its tables lands
  the next part wrong.
- `Appended.overlaps`: this run's files start before the previous runs' latest packet (parts out
  of capture order, or overlapping): worth a warning, as the tables may then differ from one run's.
- Every run must use the same `ports`, `records` and `payloads` (checked against the state), and
  parts are given in capture order (a part whose packets precede the previous part's is not
  re-merged with it, as one run would: `overlaps`).

A name learned only from a provisional row (the end of a run) is not carried: those rows are made
again by the next run, which learns it again if they still name it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from landing.lake import options_differ, write_atomic
from landing.names import resolve_file

from landing.writer import NATIVE_TABLES, LocalWriter, TopicNames, native_columns

__all__ = [
    "STATE",
    "Appended",
    "Drained",
    "check_options",
    "cut",
    "drain_carried",
    "land_append",
    "options_of",
    "read_state",
]

STATE = "state.bin"
_FORMAT = 1
_MAGIC = b"kwappend"


@dataclass
class Appended:
    """What one appended run did."""

    run: int
    counts: dict[str, int]  # final rows written per table
    provisional: dict[str, int]  # provisional rows written per table
    written: list[str] = field(default_factory=list)  # files written under `out` (relative)
    remove: list[str] = field(default_factory=list)  # superseded files under `landed` (relative)
    # a file of this run starts before the latest packet of the runs before it: one run would have
    # merged their packets in time order, appended runs read them one part after the other, so the
    # tables may differ from one run's (tcpdump's rotated files never overlap)
    overlaps: bool = False
    state: str = ""  # the state file written (under state_out)
    state_bytes: int = 0  # its size
    names: dict[str, str] = field(default_factory=dict)  # topic id -> name, every name learned
    unresolved: list[str] = field(default_factory=list)  # `topic-id:` placeholders its rows hold
    paths: list[str] = field(default_factory=list)  # its files under `out` that may hold them


def read_state(state_dir: str | os.PathLike) -> tuple[dict, bytes] | None:
    """The state a run left in `state_dir` (its description, the engine's carried bytes), or None."""
    path = Path(state_dir) / STATE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if data[: len(_MAGIC)] != _MAGIC:
        raise ValueError(f"{path}: not an appended landing's state")
    (n,) = struct.unpack_from(">I", data, len(_MAGIC))
    at = len(_MAGIC) + 4
    meta = json.loads(data[at : at + n])
    if meta.get("format") != _FORMAT:
        raise ValueError(f"{path}: state format {meta.get('format')}, this version reads {_FORMAT}")
    return meta, data[at + n :]


def _write_state(state_out: Path, meta: dict, blob: bytes) -> tuple[Path, int]:
    state_out.mkdir(parents=True, exist_ok=True)
    head = json.dumps(meta, sort_keys=True).encode()
    data = _MAGIC + struct.pack(">I", len(head)) + head + blob
    write_atomic(state_out / STATE, data)
    return state_out / STATE, len(data)


def options_of(ports, records: bool, payloads: bool) -> dict:
    """The options every appended landing of a set must share (kept with the carried state)."""
    return {"ports": sorted(int(p) for p in ports), "records": bool(records), "payloads": bool(payloads)}


def check_options(landed, were: dict, now: dict) -> None:
    """LakeOptions (the CLI's one line) when an append's options differ from the set's."""
    if were != now:
        raise options_differ(landed, were)


def cut(state: Path, whose: str, then: str = ": append with the same engine to continue them") -> None:
    """Drop a carried state this landing cannot continue (a file or a folder), saying in one line
    that the connections it held open are cut here."""
    if not state.exists() or (state.is_dir() and not any(state.iterdir())):
        return
    print(f"kafkawire: the connections the last landing {whose}left open are cut here{then}", file=sys.stderr)
    if state.is_dir():
        shutil.rmtree(state)
    else:
        state.unlink()


@dataclass
class Drained:
    """What drain_carried() wrote: rows per table (final ones, and all), the carried state, the
    final rows' files that may hold topic placeholders, and every file that may."""

    final: dict[str, int]
    total: dict[str, int]
    state: bytes
    marked: list[Path]
    paths: list[Path]


def drain_carried(
    engine,
    out: str | os.PathLike,
    tag: str,
    *,
    records: bool = False,
    payloads: bool = True,
    faults: list | None = None,
    empty_files: bool = False,
    part: str = "",
    sink=None,
) -> Drained:
    """Run a carrying lander (dissector.native.lander(carry=True)) to its end, writing its rows
    under `out`: those made before its last packet as part-<tag><part> files (final), those the end
    of its input makes as provisional-<tag><part> files. File faults also go to `faults`; sink: a
    landing.writer.Spill that takes the rows instead of files."""
    from dissector.items import file_fault

    def writer(name: str, empty: bool) -> LocalWriter:
        return LocalWriter(
            out,
            records=records,
            payloads=payloads,
            overwrite=False,
            part=name,
            empty_files=empty,
            native=engine,
            sink=sink,
        )

    w = writer(f"part-{tag}{part}", empty_files)
    final: dict[str, int] | None = None
    blob: bytes | None = None
    marked: list[Path] = []
    paths: list[Path] = []
    try:
        while (batch := engine.next_batch()) is not None:
            for it in batch:  # only file faults come out: every row is the engine's
                if faults is not None and (fault := file_fault(it)) is not None:
                    faults.append(fault)
            if blob is None and (blob := engine.carried()) is not None:
                # every packet read: the rows so far are final, the end of capture's provisional
                final = w.close()
                marked += w.paths
                paths += w.paths
                w = writer(f"provisional-{tag}{part}", False)
            else:
                w.native_rows()
    finally:
        total = w.close()
    paths += w.paths
    if blob is None or final is None:
        raise RuntimeError("the lander ended without handing out its state")
    return Drained(final, total, bytes(blob), marked, paths)


def land_append(
    files: list[str],
    out: str | os.PathLike,
    state_dir: str | os.PathLike,
    *,
    landed: str | os.PathLike | None = None,
    state_out: str | os.PathLike | None = None,
    ports=(),
    records: bool = False,
    payloads: bool = True,
    progress=None,
    faults: list | None = None,
    tag: str | None = None,
    empty_files: bool | None = None,
    tls_keylogs=(),
    threads: int = 1,
) -> Appended:
    """Land `files` (the next part(s) of a capture set, in capture order) as the continuation of
    the runs whose state is in `state_dir`; see the module's contract for `out`, `landed` and
    `state_out`. File faults also go to `faults`. tag: what names this run's files (default its
    run number); empty_files: whether tables without rows get a file (default: the first run);
    tls_keylogs: key log texts (dissector.tls.read_keylogs) this run decrypts with; threads: the
    buckets the connections are split among (0: one per core; a state made over buckets goes on
    over as many)."""
    from dissector import native

    out = Path(out)
    landed = Path(landed) if landed is not None else out
    state_out = Path(state_out) if state_out is not None else Path(state_dir)
    options = options_of(ports, records, payloads)
    prev = read_state(state_dir)
    if prev is not None:
        check_options(landed, prev[0]["options"], options)
    meta = prev[0] if prev is not None else {"run": 0, "provisional": [], "marked": []}
    run = meta["run"] + 1
    tag = tag or f"{run:06d}"

    first = min((native.start_ts(os.fsdecode(f)) for f in files), default=float("inf"))
    overlaps = prev is not None and prev[0].get("latest") is not None and first < prev[0]["latest"]
    engine = native.lander(
        files,
        ports=ports,
        columns=native_columns(),
        progress=progress,
        carry=True,
        state=prev[1] if prev is not None else None,
        tls_keylogs=tls_keylogs,
        threads=threads,
    )

    d = drain_carried(
        engine,
        out,
        tag,
        records=records,
        payloads=payloads,
        faults=faults,
        # the first run gives every table its file (readers find the schema), as a one-run landing does
        empty_files=run == 1 if empty_files is None else empty_files,
    )
    final, total, blob, marked, staged_paths = d.final, d.total, d.state, d.marked, d.paths
    provisional = {t: total[t] - final.get(t, 0) for t in total}

    written = sorted(
        str(p.relative_to(out))
        for t in NATIVE_TABLES
        for p in (out / t).glob(f"*/*-{tag}.parquet")
        if p.name in (f"part-{tag}.parquet", f"provisional-{tag}.parquet")
    )
    prov = [p for p in written if Path(p).name.startswith("provisional-")]

    # topic ids named since earlier runs wrote them: those runs' files with placeholders are
    # rewritten, as a one-run landing resolves every file at its end
    topics = TopicNames(engine)
    names = topics.resolved()
    still = [u for u in topics.unresolved if u not in names]
    earlier = [p for p in meta["marked"] if p not in meta["provisional"]]
    if any(u in names for u in meta.get("unnamed", [])):
        for rel in earlier:
            src, dst = landed / rel, out / rel
            if not src.exists():
                continue
            if dst != src:
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.with_name(dst.name + ".copy")
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
            resolve_file(dst, names)
            written.append(rel)
    mine = [str(p.relative_to(out)) for p in marked]
    # a file is kept on the list while any placeholder is unnamed: which file holds which is not kept
    marked_next = sorted(set(earlier + mine)) if still else []

    remove = list(meta["provisional"])
    if out.resolve() == landed.resolve():
        for rel in remove:
            (landed / rel).unlink(missing_ok=True)

    path, size = _write_state(
        state_out,
        {
            "format": _FORMAT,
            "run": run,
            "options": options,
            "provisional": prov,
            "marked": marked_next,
            "unnamed": sorted(still),
            "files": [os.fsdecode(f) for f in files],
            "latest": engine.latest,
        },
        bytes(blob),
    )
    return Appended(
        run=run,
        counts=final,
        provisional=provisional,
        written=sorted(set(written)),
        remove=remove,
        overlaps=overlaps,
        state=str(path),
        state_bytes=size,
        names={str(k): v for k, v in topics.topic_names.items()},
        unresolved=sorted(topics.unresolved),
        paths=[str(p) for p in staged_paths],
    )
