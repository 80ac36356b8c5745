"""The local engine: captures -> Parquet tables in one process, no JVM (`kafkawire land`).

land_native lands capture files on the native core, carrying the connections left open to the
next appended landing (landing.carry); land_local lands items from anywhere (filtered ones).
Both write into a lake run's staging directory and commit it (landing.lake), through the
tables' writer (landing.writer).
"""

from __future__ import annotations

import os

from landing.lake import Lake
from landing.schemas import TABLES
from landing.writer import LocalWriter

__all__ = ["land_local", "land_native", "not_interrupted"]


def land_native(
    files: list[str],
    out: str | os.PathLike,
    *,
    ports=(),
    records: bool = False,
    payloads: bool = True,
    progress=None,
    faults: list | None = None,
    mode: str = "error",
    skipped: list | None = None,
    tls_keylogs=(),
) -> dict[str, int]:
    """land_local(landing.stitch.file_items(files), records=records, payloads=payloads) on the
    native core, which writes the rows itself. The same tables; file faults also go to `faults`.

    mode: error (refuse a directory that holds tables: landing.lake.LakeExists), overwrite or append
    (files landed before, same bytes under any name, are skipped: (path, the runs table's entry) go to `skipped`)."""
    from landing.carry import cut, land_append

    run = Lake(out, mode).begin(files)
    if skipped is not None:
        skipped.extend(run.skipped)
    if not run.files:
        run.abort()
        return {t: 0 for t in TABLES if records or t != "records"}
    cut(run.state_dir / "spark", "(Spark engine) ")  # landing.spark's per-bucket states
    found: list = []
    try:
        # every landing carries its open connections to the next appended one (landing.carry): the
        # rows only the end of this input makes are provisional, superseded by the next append
        a = land_append(
            run.files,
            run.staging,
            run.state_dir,
            landed=run.lake.out,
            ports=ports,
            records=records,
            payloads=payloads,
            progress=progress,
            faults=found,
            tag=run.id,
            empty_files=False,
            tls_keylogs=tls_keylogs,
        )
        if faults is not None:
            faults.extend(found)
        not_interrupted(found)
        counts = {t: a.counts.get(t, 0) + a.provisional.get(t, 0) for t in a.counts}
        run.commit(counts, names=a.names, unresolved=a.unresolved, paths=a.paths, remove=a.remove)
    except BaseException:
        run.abort()
        raise
    return counts


def not_interrupted(faults: list) -> None:
    """RemoteError (a run's one line) when a remote read ended early: the run is not committed, so the
    next one lands those captures whole once the store answers again (dissector.fs.interrupted)."""
    from dissector.fs import RemoteError, interrupted

    cut = interrupted(faults)
    if cut is not None:
        raise RemoteError(f"{cut}; nothing was landed: land again when the store answers")


_STAGED = dict(overwrite=False, empty_files=False)  # the lake's commit writes the empty tables


def _land_run(run, writer, drain, records: bool) -> dict[str, int]:
    """Write a lake run's rows into its staging through writer(staging) (None: nothing to land) and
    commit them, names learned included; abort the run on any failure, Ctrl-C too."""
    try:
        w = writer(run.staging)
        if w is None:
            run.abort()
            return {t: 0 for t in TABLES if records or t != "records"}
        counts = drain(w)
        names = {str(k): v for k, v in w.rows.topic_names.items()}
        run.commit(counts, names=names, unresolved=list(w.rows.unresolved), paths=w.paths)
    except BaseException:
        run.abort()
        raise
    return counts


def land_local(
    items,
    out: str | os.PathLike,
    *,
    records: bool = False,
    payloads: bool = True,
    mode: str = "error",
    files: list | None = None,
    skipped: list | None = None,
    faults: list | None = None,
) -> dict[str, int]:
    """Write every item of `dissector.dissect()` as tables under `out`; returns rows per table.

    mode: as land_native's. files: the captures the items come from, for the runs table; then `items`
    is called with those of them not landed before and gives their items (skipped ones go to `skipped`).
    faults: the file faults the items' reader found, filled while they are read: the run is not
    committed if a remote read was cut short (not_interrupted)."""
    run = Lake(out, mode).begin(files or [])
    if skipped is not None:
        skipped.extend(run.skipped)

    def write(staging):
        from landing.carry import cut

        if files is not None and not run.files:
            return None
        # items carry no engine state: the connections open at the end of the lake's last landing
        # are cut here, and the next append starts afresh
        cut(run.state_dir, "", " (a filtered landing carries none): the next append starts afresh")
        run.state_dir.mkdir(parents=True, exist_ok=True)
        return LocalWriter(staging, records=records, payloads=payloads, **_STAGED)

    def drain(w):
        try:
            for item in items(run.files) if files is not None else items:
                w.add(item)
        finally:
            counts = w.close()
        not_interrupted(faults or [])
        return counts

    return _land_run(run, write, drain, records)
