"""`land --mode error|overwrite|append` into Delta Lake tables (landing.lake): the runs table, commits
that a kill cannot half-do, readers that always see a whole table, empty tables every reader reads,
on real samples with the real engines, the CLI in a process of its own where it is killed."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from landing.schemas import TABLES
from landing.writer import dataset
from tests.rowsets import RowSet

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
A, B = SAMPLES / "aiokafka.pcap", SAMPLES / "errors.pcap"  # no connection in common
EMPTY_RECORDS = SAMPLES / "admin.pcap"  # --records: an empty records table
APP = "kafkawire-land"


def land(*args) -> tuple[int, str]:
    """`kafkawire land ARGS --quiet` in this process: (exit status, stderr)."""
    from kafkawire.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["land", *map(str, args), "--quiet"])
    return rc, err.getvalue()


def land_process(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kafkawire", "land", *map(str, args), "--quiet"],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def rows(out: Path) -> dict[str, RowSet]:
    """Every table's rows as a multiset, read through its Delta log as any reader would."""
    from deltalake import DeltaTable

    return {t: RowSet(dataset(out, t).to_table()) for t in TABLES if DeltaTable.is_deltatable(str(out / t))}


def delta(out: Path, table: str):
    from deltalake import DeltaTable

    return DeltaTable(str(out / table))


def runs(out: Path) -> list[dict]:
    from landing.lake import Lake

    return Lake(out).runs()


def files(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """A and B landed in one run: what two appended runs must give (they share no connection)."""
    out = tmp_path_factory.mktemp("both") / "t"
    assert land(A, B, "--out", out, "--records") == (0, "")
    return rows(out)


def test_every_table_is_a_delta_table_with_the_run_in_its_log(tmp_path):
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    for t in TABLES:
        dt = delta(out, t)
        assert dt.transaction_version(APP) == 1
        assert dt.metadata().partition_columns == ["date"]
    (run,) = runs(out)
    assert run["run"] == 1 and run["mode"] == "error"
    assert [(c["path"], c["size"]) for c in run["captures"]] == [(str(A), A.stat().st_size)]
    # the table's rows are what its log adds: a stray Parquet file in its folder is not read
    n = dataset(out, "exchanges").count_rows()
    stray = out / "exchanges" / "date=2026-01-01" / "stray.parquet"
    stray.parent.mkdir()
    shutil.copy(next((out / "exchanges").rglob("part-*.parquet")), stray)
    assert dataset(out, "exchanges").count_rows() == n
    assert not (out / "_kafkawire" / "staging").exists()


def test_error_is_the_default_and_touches_nothing(tmp_path):
    out = tmp_path / "t"
    assert land(A, "--out", out) == (0, "")
    before = files(out)
    for mode in ([], ["--mode", "error"]):
        rc, err = land(B, "--out", out, *mode)
        assert rc == 2
        assert err == (
            f"kafkawire: {out} already holds landed tables; "
            "use --mode append to add captures or --mode overwrite to replace them\n"
        )
    assert files(out) == before
    # a directory of tables without the runs table is refused too
    shutil.rmtree(out / "_kafkawire")
    assert land(B, "--out", out)[0] == 2
    # and an older kafkawire's Parquet lake (its manifest) is never written into, whatever the mode
    old = tmp_path / "old"
    (old / "_kafkawire").mkdir(parents=True)
    (old / "_kafkawire" / "manifest.json").write_text("{}")
    for mode in ("append", "overwrite"):
        rc, err = land(B, "--out", old, "--mode", mode)
        assert rc == 2 and "older kafkawire" in err and len(err.splitlines()) == 1
    assert sorted(os.listdir(old)) == ["_kafkawire"]


def test_overwrite_replaces_in_one_commit_per_table(tmp_path):
    out, alone = tmp_path / "t", tmp_path / "b"
    assert land(A, "--out", out, "--records") == (0, "")
    assert land(B, "--out", out, "--mode", "overwrite") == (0, "")
    assert land(B, "--out", alone) == (0, "")
    got = rows(out)
    assert got["records"] == []  # not landed by the run that replaced the tables: emptied
    del got["records"]
    assert got == rows(alone)
    assert [c["path"] for r in runs(out) for c in r["captures"]] == [str(B)]
    # the old version is still there to read (time travel), and the new one is one commit later
    ex = delta(out, "exchanges")
    assert ex.version() == 1 and ex.transaction_version(APP) == 2
    from deltalake import DeltaTable

    a = tmp_path / "a"
    assert land(A, "--out", a) == (0, "")
    assert DeltaTable(str(out / "exchanges"), version=0).to_pyarrow_dataset().count_rows() == len(rows(a)["exchanges"])
    assert not (out / "_kafkawire" / "staging").exists()


def test_append_adds_new_captures_once(tmp_path, both):
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    assert land(B, "--out", out, "--records", "--mode", "append") == (0, "")
    assert rows(out) == both
    r = runs(out)
    assert [(c["path"], c["size"]) for x in r for c in x["captures"]] == [
        (str(A), A.stat().st_size),
        (str(B), B.stat().st_size),
    ]
    import json

    assert json.loads(r[1]["rows"])["errors"] == 7 and r[1]["run"] == 2
    # the same bytes again, under its name and another: nothing added, one line each
    copy = tmp_path / "renamed.pcap"
    shutil.copy(A, copy)
    before = files(out)
    rc, err = land(A, copy, "--out", out, "--records", "--mode", "append")
    assert rc == 0
    lines = err.splitlines()
    assert lines[0].startswith(f"kafkawire: {A} already landed (run ")
    assert lines[1].startswith(f"kafkawire: {copy} already landed as {A} (run ")
    assert lines[2] == f"kafkawire: every capture is already landed in {out}; nothing to do"
    assert len(lines) == 3
    assert files(out) == before
    # a new capture beside a landed one: only the new one lands
    fresh = tmp_path / "fresh"
    assert land(A, "--out", fresh, "--records") == (0, "")
    rc, err = land(A, B, "--out", fresh, "--records", "--mode", "append")
    assert rc == 0 and len(err.splitlines()) == 1 and rows(fresh) == both


def _read_everywhere(out: Path, table: str) -> int:
    """A table's rows, read by deltalake, pyarrow, pandas, polars and DuckDB, which must agree."""
    import duckdb
    import polars as pl

    dt = delta(out, table)
    arrow = dt.to_pyarrow_dataset()
    n = arrow.count_rows()
    assert "date" in arrow.schema.names
    assert len(dt.to_pandas()) == n
    assert dataset(out, table).to_table().num_rows == n
    assert pl.read_delta(str(out / table)).height == n
    assert duckdb.sql("SELECT count(*), count(date) FROM arrow").fetchall() == [(n, n)]
    return n


def test_empty_tables_read_everywhere_before_and_after_an_append(tmp_path):
    from report.analysis import report

    out = tmp_path / "t"
    assert land(EMPTY_RECORDS, "--out", out, "--records") == (0, "")
    assert _read_everywhere(out, "records") == 0 and _read_everywhere(out, "anomalies") == 0
    assert _read_everywhere(out, "exchanges") == 12
    assert _read_everywhere(out, "group_generations") == _read_everywhere(out, "group_assignments") == 0
    assert report(out)  # the pandas report reads them
    assert land(A, "--out", out, "--records", "--mode", "append") == (0, "")
    assert _read_everywhere(out, "records") == 60
    assert _read_everywhere(out, "anomalies") == 0
    # the group tables made anew with the appended capture's group
    assert _read_everywhere(out, "group_generations") == 1 and _read_everywhere(out, "group_assignments") == 4
    assert report(out)


def test_topic_names_learned_by_a_later_run(tmp_path):
    """Placeholders pending in the runs table are named by the run that learns them: the earlier
    run's file is written anew and the old one removed in the same commit."""
    import json

    from landing.lake import Lake

    out = tmp_path / "t"
    # run 1: a row whose topic is known only by id
    run = Lake(out, "error").begin([])
    tid = "0b7bd4b5-4ae4-4ad9-8e1c-2b8a3fd6c8a1"
    part = run.staging / "errors" / "date=2026-01-01" / "part-0.parquet"
    _write_errors(part, [f"topic-id:{tid}"])
    run.commit({"errors": 1}, names={}, unresolved=[f"topic-id:{tid}"], paths=[part])
    assert json.loads(Lake(out).last_run()["pending"])[0]["ids"] == [f"topic-id:{tid}"]
    assert _topics(out) == [f"topic-id:{tid}"]
    # run 2 learns the name
    run = Lake(out, "append").begin([])
    run.commit({"errors": 0}, names={tid: "orders"})
    assert _topics(out) == ["orders"]
    last = Lake(out).last_run()
    assert json.loads(last["pending"]) == [] and json.loads(last["topic_names"]) == {tid: "orders"}
    # the placeholder's version stays readable in the table's history
    from deltalake import DeltaTable

    assert DeltaTable(str(out / "errors"), version=0).to_pyarrow_dataset().to_table().column("topic").to_pylist() == [
        f"topic-id:{tid}"
    ]
    # run 3 writes the placeholder again: resolved from the runs table before its commit
    run = Lake(out, "append").begin([])
    part = run.staging / "errors" / "date=2026-01-02" / "part-0.parquet"
    _write_errors(part, [f"topic-id:{tid}"])
    run.commit({"errors": 1}, names={}, unresolved=[f"topic-id:{tid}"], paths=[part])
    assert _topics(out) == ["orders", "orders"]


def _write_errors(path: Path, topics: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from landing.schemas import SCHEMAS

    sch = SCHEMAS["errors"]
    path.parent.mkdir(parents=True)
    cols = {f.name: pa.nulls(len(topics), f.type) for f in sch}
    cols["topic"] = pa.array(topics, pa.string())
    pq.write_table(pa.table(cols, schema=sch), path)


def _topics(out: Path) -> list:
    return sorted(dataset(out, "errors").to_table().column("topic").to_pylist())


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """~25 MB: the samples laid end to end, 60 times on distinct hosts (bench/bench_spark.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_spark
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return bench_spark.make(60, tmp_path_factory.mktemp("big") / "big.pcap")


@pytest.fixture(scope="module")
def big_whole(big, tmp_path_factory) -> dict:
    """The rows of A, B and `big` landed in one run (--records), landed once for the module."""
    whole = tmp_path_factory.mktemp("big-whole") / "t"
    assert land(A, B, big, "--out", whole, "--records") == (0, "")
    return rows(whole)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_kill_mid_land_keeps_the_tables_and_the_next_run_finishes(tmp_path, big, big_whole, sig):
    out = tmp_path / "t"
    assert land(A, B, "--out", out, "--records") == (0, "")
    before = rows(out)
    p = land_process(big, "--out", out, "--records", "--mode", "append")
    staging = out / "_kafkawire" / "staging"
    deadline = time.monotonic() + 60
    while not any(staging.rglob("*.parquet")):  # rows are being written
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    if sig == signal.SIGINT:  # Ctrl-C: the run drops its own staged files
        assert p.returncode != 0 and not any(staging.rglob("*.parquet")), err
    assert rows(out) == before  # what a reader sees: the earlier run's rows only
    assert [c["path"] for r in runs(out) for c in r["captures"]] == [str(A), str(B)]
    # the next run discards the dead run's files and lands the capture
    rc, err = land(big, "--out", out, "--records", "--mode", "append")
    assert (rc, err) == (0, "")
    assert not staging.exists()
    assert rows(out) == big_whole


# a run's commits: its row in the runs table, then the 7 tables and the group rows' table
COMMITS = 9


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("after", range(0, COMMITS))
def test_a_kill_at_every_commit_step_is_completed_by_the_next_run(tmp_path, both, mode, after):
    """SIGKILL-like death (os._exit) after each of a run's commits: before its row is committed
    nothing of it is seen and the next run lands the capture; after it, the next run (any mode)
    commits the tables still behind, and the capture is not landed twice."""
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    before = rows(out)
    env = {"KAFKAWIRE_TEST_STOP_AFTER_COMMITS": str(after)} if after else {"KAFKAWIRE_TEST_STOP_AFTER_COMMITS": "0"}
    p = land_process(B, "--out", out, "--records", "--mode", mode, env=env)
    _, err = p.communicate(timeout=120)
    if after == 0:  # no kill: the run as it is
        assert p.returncode == 0, err
    else:
        assert p.returncode == 9, err
    if after == 1:
        # its row committed, no table yet: readers see the old tables
        assert rows(out) == before
    rc, err = land(B, "--out", out, "--records", "--mode", "append")
    assert rc == 0, err
    assert after == 0 or "already landed" in err
    if mode == "append":
        assert rows(out) == both
    else:
        alone = tmp_path / "b"
        assert land(B, "--out", alone, "--records") == (0, "")
        assert rows(out) == rows(alone)
    for t in TABLES:
        assert delta(out, t).transaction_version(APP) == 2


@pytest.mark.slow  # a Spark session in a process of its own per step: 15-20 s each
@pytest.mark.parametrize("after", range(1, COMMITS))
def test_a_spark_land_killed_in_its_commit_is_completed_by_the_next_run(tmp_path, both, after):
    """The Spark engine's run, whose tables delta-spark commits, killed after each of its commits
    (its row in the runs table, then each table's; every step runs with -m slow, the local engine's
    kills at every step in the default run): the next run (here the local engine's append)
    completes it from the plan; nothing is lost or doubled."""
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    env = {"KAFKAWIRE_TEST_STOP_AFTER_COMMITS": str(after)}
    p = land_process(B, "--out", out, "--records", "--mode", "append", "--engine", "spark", env=env)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 9, err[-3000:]
    rc, err = land(B, "--out", out, "--records", "--mode", "append")
    assert rc == 0 and "already landed" in err, err
    assert rows(out) == both
    assert all(delta(out, t).transaction_version(APP) == 2 for t in TABLES)


def test_a_kill_before_the_run_commits_lands_nothing(tmp_path, both):
    """Killed after its files moved into the tables' folders but before its row: no reader sees
    them, the capture is not landed, the next run lands it once."""
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    before = rows(out)
    from landing import lake

    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, os\n"
            "import landing.lake as lake\n"
            "real = lake._commit_run\n"
            "def die(*a, **k):\n"
            "    os._exit(9)\n"
            "lake._commit_run = die\n"
            "from kafkawire.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n",
            "land",
            str(B),
            "--out",
            str(out),
            "--records",
            "--mode",
            "append",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 9, p.stderr
    assert lake.HOME == "_kafkawire"
    assert rows(out) == before and len(runs(out)) == 1
    rc, err = land(B, "--out", out, "--records", "--mode", "append")
    assert (rc, err) == (0, "")
    assert rows(out) == both


@pytest.mark.slow
def test_a_reader_always_reads_a_whole_table_during_overwrite_and_append(tmp_path, big):
    """A reader polling the exchanges table while runs overwrite and append it sees, every time,
    exactly one landing's rows: the old table, the new one, or the appended one, never none or a mix."""
    out = tmp_path / "t"
    assert land(A, "--out", out) == (0, "")
    sizes = {}
    for name, srcs in {"a": [A], "big": [big], "big+b": [big, B]}.items():
        ref = tmp_path / f"ref-{name}"
        assert land(*srcs, "--out", ref) == (0, "")
        sizes[dataset(ref, "exchanges").count_rows()] = name
    seen: list = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                n = dataset(out, "exchanges").to_table(columns=["exchange_id"]).num_rows
            except FileNotFoundError as e:  # pragma: no cover - what the test is for
                seen.append(repr(e))
                continue
            seen.append(n)

    t = threading.Thread(target=poll)
    t.start()
    try:
        assert land(big, "--out", out, "--mode", "overwrite") == (0, "")
        assert land(B, "--out", out, "--mode", "append") == (0, "")
    finally:
        stop.set()
        t.join(timeout=60)
    assert len(seen) > 5
    assert set(seen) <= set(sizes), {x for x in seen if x not in sizes}
    assert {sizes[n] for n in seen} >= {"big+b"}


def test_a_second_run_at_once_is_refused(tmp_path):
    from landing.lake import Lake, LakeBusy

    out = tmp_path / "t"
    assert land(A, "--out", out) == (0, "")
    run = Lake(out, "append").begin([B])  # a run in progress
    try:
        assert land(B, "--out", out, "--mode", "append") == (0, "")  # another one commits first
        with pytest.raises(LakeBusy, match="another run landed into"):
            run.commit({"exchanges": 0})
    finally:
        run.abort()
    assert len(runs(out)) == 2
    rc, err = land(B, "--out", out, "--mode", "append")
    assert rc == 0 and "already landed" in err


@pytest.mark.slow  # five Spark landings and Spark's Delta reads: about 20 s
def test_spark_append_catalog_and_empty_tables(spark, tmp_path):
    """The Spark engine appends as the local one does; kafka_* are Delta tables in Spark's catalog;
    every table, the empty one too, reads in Spark (delta-spark) and in the other readers; Spark's
    Delta reader and delta-rs agree on every table, either engine's."""
    from landing.spark import land_spark

    out = tmp_path / "t"
    land_spark([str(EMPTY_RECORDS)], out, spark=spark, records=True)
    assert spark.read.format("delta").load(str(out / "records")).count() == 0
    assert spark.table("kafka_records").count() == 0
    assert _read_everywhere(out, "records") == 0
    local = tmp_path / "local"
    assert land(EMPTY_RECORDS, "--out", local, "--records") == (0, "")
    assert spark.read.format("delta").load(str(local / "anomalies")).count() == 0  # the local engine's too

    with pytest.raises(Exception, match="already holds landed tables"):
        land_spark([str(A)], out, spark=spark, records=True)
    land_spark([str(A), str(B)], out, spark=spark, records=True, mode="append")
    skipped: list = []
    counts, _ = land_spark([str(A)], out, spark=spark, records=True, mode="append", skipped=skipped)
    assert [s[0] for s in skipped] == [str(A)] and not any(counts.values())

    assert land(A, B, "--out", local, "--records", "--mode", "append") == (0, "")
    assert rows(out) == rows(local)
    assert _read_everywhere(out, "records") == 61
    for t in ("exchanges", "records", "anomalies", "group_assignments"):
        n = dataset(out, t).count_rows()
        assert spark.table(f"kafka_{t}").count() == n
        assert spark.read.format("delta").load(str(local / t)).count() == n
    # Spark's Delta writer wrote and committed every version of the Spark lake's tables, each
    # with its run's transaction id, which delta-rs reads back
    history = spark.sql(f"DESCRIBE HISTORY delta.`{out / 'exchanges'}`").collect()
    assert len(history) == delta(out, "exchanges").version() + 1
    assert all(h.engineInfo.startswith("Apache-Spark/") and h.operation == "WRITE" for h in history)
    assert delta(out, "exchanges").transaction_version("kafkawire-land") == max(r["run"] for r in runs(out))
    assert all(f.endswith(".snappy.parquet") for f in delta(out, "exchanges").file_uris())
    plan = spark.sql("SELECT * FROM kafka_exchanges WHERE date = '2026-11-21'")._jdf.queryExecution()
    assert "date" in plan.executedPlan().toString() and "PartitionFilters" in plan.executedPlan().toString()


def test_a_rotated_set_appended_file_by_file_equals_one_run(tmp_path):
    """Eight rotated files (connections cut mid-stream at every edge), landed by eight `land --mode
    append` runs as tcpdump would hand them over, give the tables of landing the set in one run,
    with --records; after each run the tables are those of the parts so far."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_spark import make, rotate

    from landing.lake import Lake

    parts = rotate(make(3, tmp_path / "whole.pcap"), tmp_path / "rot", 8)
    assert land(tmp_path / "rot", "--out", tmp_path / "one", "--records")[0] == 0
    for k, part in enumerate(parts, 1):
        rc, err = land(part, "--out", tmp_path / "lake", "--mode", "append", "--records")
        assert rc == 0, err
        if k in (1, 4):
            so_far = tmp_path / f"so-far-{k}"
            assert land(*parts[:k], "--out", so_far, "--records")[0] == 0
            assert rows(tmp_path / "lake") == rows(so_far), k
    want = rows(tmp_path / "one")
    assert rows(tmp_path / "lake") == want
    assert len(want["exchanges"]) > 1000 and len(want["records"]) > 100
    # the carried state stays small: open connections, not the input
    state = sum(len(f["data"]) for f in Lake(tmp_path / "lake").last_run()["state"])
    assert 0 < state < 256 << 10
    # landing a part again adds nothing
    assert land(parts[3], "--out", tmp_path / "lake", "--mode", "append", "--records")[0] == 0
    assert rows(tmp_path / "lake") == want


def test_writers_of_one_file_at_once_each_replace_it_whole(tmp_path):
    # two streaming queries sharing a state directory write the same state file at the same moment
    import threading

    from landing.lake import write_atomic

    path = tmp_path / "state.bin"
    blobs = [bytes([i]) * 50_000 for i in range(8)]
    errors = []

    def write(blob):
        try:
            for _ in range(10):
                write_atomic(path, blob)
        except OSError as e:  # pragma: no cover - the failure this test is for
            errors.append(e)

    threads = [threading.Thread(target=write, args=(b,)) for b in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert path.read_bytes() in blobs
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]  # no temp file left behind
    assert path.stat().st_mode & 0o044  # readable by others, as a file written with open() is
