"""The local engine: captures -> Parquet tables in one process, no JVM (`kafkawire land`).

land_local lands capture files on the native core, carrying the connections left open to the
next appended landing (landing.carry), or only the items a filter keeps. It writes into a lake
run's staging directory and commits it (landing.lake), through the tables' writer
(landing.writer).
"""

from __future__ import annotations

import os

from landing.lake import Lake
from landing.schemas import TABLES
from landing.writer import LocalWriter

__all__ = ["land_local", "not_interrupted"]


def land_local(
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
    filter=None,
    threads: int = 1,
) -> dict[str, int]:
    """Land capture files as tables under `out` on the native core, which writes every row
    itself; returns rows per table. File faults also go to `faults`.

    mode: error (refuse a directory that holds tables: landing.lake.LakeExists), overwrite or append
    (files landed before, same bytes under any name, are skipped: (path, the runs table's entry) go to `skipped`).
    filter: a dissector.filters.Filter; only the items it keeps make rows (connection ids as the
    tables number them). A filtered landing carries no open connections to the next append.
    threads: the connections are dissected on that many threads (0: one per core)."""
    from landing.carry import cut, land_append

    run = Lake(out, mode).begin(files)
    if skipped is not None:
        skipped.extend(run.skipped)
    if not run.files:
        run.abort()
        return {t: 0 for t in TABLES if records or t != "records"}
    if filter:
        return _land_filtered(run, ports, records, payloads, progress, faults, tls_keylogs, filter, threads)
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
            threads=threads,
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


def _land_run(run, writer, drain) -> dict[str, int]:
    """Write a lake run's rows into its staging through writer(staging) and commit them, names
    learned included; abort the run on any failure, Ctrl-C too."""
    try:
        w = writer(run.staging)
        counts = drain(w)
        names = {str(k): v for k, v in w.rows.topic_names.items()}
        run.commit(counts, names=names, unresolved=list(w.rows.unresolved), paths=w.paths)
    except BaseException:
        run.abort()
        raise
    return counts


def _land_filtered(run, ports, records, payloads, progress, faults, tls_keylogs, keep, threads) -> dict[str, int]:
    from dissector.native import lander
    from landing.carry import cut
    from landing.writer import drain_native, native_columns

    def write(staging):
        # the lake's open connections cannot go on through a filter: the next append starts afresh
        cut(run.state_dir, "", " (a filtered landing carries none): the next append starts afresh")
        run.state_dir.mkdir(parents=True, exist_ok=True)
        engine = lander(
            run.files,
            ports=ports,
            columns=native_columns(),
            progress=progress,
            tls_keylogs=tls_keylogs,
            threads=threads,
        )
        engine.set_land_filter(keep)
        return LocalWriter(staging, records=records, payloads=payloads, native=engine, **_STAGED)

    def drain(w):
        found: list = []
        counts = drain_native(w, found)
        if faults is not None:
            faults.extend(found)
        not_interrupted(found)
        return counts

    return _land_run(run, write, drain)
