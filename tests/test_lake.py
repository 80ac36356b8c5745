"""`land --mode error|overwrite|append`: the manifest, crash safety and empty tables (landing.lake),
on real samples with the real engines, the CLI in a process of its own where it is killed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from landing.schemas import TABLES
from tests.rowsets import RowSet

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
A, B = SAMPLES / "aiokafka.pcap", SAMPLES / "errors.pcap"  # no connection in common
EMPTY_RECORDS = SAMPLES / "admin.pcap"  # --records: an empty records table


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
    """Every table's rows as a multiset, read as any pyarrow user would."""
    return {t: RowSet(ds.dataset(out / t, partitioning="hive").to_table()) for t in TABLES if (out / t).is_dir()}


def files(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.rglob("*")) if p.is_file()}


def manifest(out: Path) -> dict:
    return json.loads((out / "_kafkawire" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """A and B landed in one run: what two appended runs must give (they share no connection)."""
    out = tmp_path_factory.mktemp("both") / "t"
    assert land(A, B, "--out", out, "--records") == (0, "")
    return rows(out)


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
    # a directory of tables landed before manifests existed is refused too
    shutil.rmtree(out / "_kafkawire")
    assert land(B, "--out", out)[0] == 2


def test_overwrite_replaces(tmp_path):
    out, alone = tmp_path / "t", tmp_path / "b"
    assert land(A, "--out", out, "--records") == (0, "")
    assert land(B, "--out", out, "--mode", "overwrite") == (0, "")
    assert land(B, "--out", alone) == (0, "")
    assert rows(out) == rows(alone)
    assert not (out / "records").exists()  # not landed by the run that replaced the tables
    m = manifest(out)
    assert [f["path"] for f in m["files"]] == [str(B)] and len(m["runs"]) == 1
    # no staging, trash or journal left ("groups": the group exchanges the group tables are made from)
    assert sorted(set(os.listdir(out / "_kafkawire")) - {"groups"}) == ["lock", "manifest.json", "state"]


def test_append_adds_new_captures_once(tmp_path, both):
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    assert land(B, "--out", out, "--records", "--mode", "append") == (0, "")
    assert rows(out) == both
    m = manifest(out)
    assert [(f["path"], f["size"]) for f in m["files"]] == [(str(A), A.stat().st_size), (str(B), B.stat().st_size)]
    assert m["runs"][1]["rows"]["errors"] == 7 and m["files"][1]["run"] == m["runs"][1]["id"]
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
    """A table's rows, read by pandas, pyarrow (hive) and DuckDB, which must agree."""
    import duckdb
    import pandas as pd

    from landing.writer import dataset

    n = len(pd.read_parquet(out / table))
    assert "date" in pd.read_parquet(out / table).columns
    assert ds.dataset(out / table, partitioning="hive").to_table().num_rows == n
    assert dataset(out, table).to_table().num_rows == n
    q = f"SELECT count(*), count(date) FROM read_parquet('{out / table}/**/*.parquet', hive_partitioning=true)"
    assert duckdb.sql(q).fetchall() == [(n, n)]
    return n


def test_empty_tables_read_everywhere_before_and_after_an_append(tmp_path):
    from report.analysis import report

    out = tmp_path / "t"
    assert land(EMPTY_RECORDS, "--out", out, "--records") == (0, "")
    assert sorted(os.listdir(out / "records")) == ["part-empty.parquet"]
    assert _read_everywhere(out, "records") == 0 and _read_everywhere(out, "anomalies") == 0
    assert _read_everywhere(out, "exchanges") == 12
    assert _read_everywhere(out, "group_generations") == _read_everywhere(out, "group_assignments") == 0
    assert report(out)  # the pandas report reads them
    # its first rows: the placeholder goes, the rows read as before
    assert land(A, "--out", out, "--records", "--mode", "append") == (0, "")
    assert "part-empty.parquet" not in os.listdir(out / "records")
    assert _read_everywhere(out, "records") == 60
    assert _read_everywhere(out, "anomalies") == 0
    # the group tables made anew with the appended capture's group: the empty placeholders go
    assert "part-empty.parquet" not in os.listdir(out / "group_generations")
    assert _read_everywhere(out, "group_generations") == 1 and _read_everywhere(out, "group_assignments") == 4
    assert report(out)


def test_topic_names_learned_by_a_later_run(tmp_path):
    """Placeholders pending in the manifest are named in earlier runs' files by the run that learns them."""
    from landing.lake import Lake

    out = tmp_path / "t"
    # run 1: a row whose topic is known only by id
    run = Lake(out, "error").begin([])
    tid = "0b7bd4b5-4ae4-4ad9-8e1c-2b8a3fd6c8a1"
    part = run.staging / "errors" / "date=2026-01-01" / "part-0.parquet"
    _write_errors(part, [f"topic-id:{tid}"])
    run.commit({"errors": 1}, names={}, unresolved=[f"topic-id:{tid}"], paths=[part])
    assert manifest(out)["pending"][0]["ids"] == [f"topic-id:{tid}"]
    # run 2 learns the name
    run = Lake(out, "append").begin([])
    run.commit({"errors": 0}, names={tid: "orders"})
    assert _topics(out) == ["orders"]
    m = manifest(out)
    assert m["pending"] == [] and m["topic_names"] == {tid: "orders"}
    # run 3 writes the placeholder again: resolved from the manifest before its commit
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
    return sorted(ds.dataset(out / "errors", partitioning="hive").to_table().column("topic").to_pylist())


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """~25 MB: the samples laid end to end, 60 times on distinct hosts (bench/bench_spark.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_spark
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return bench_spark.make(60, tmp_path_factory.mktemp("big") / "big.pcap")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_kill_mid_land_keeps_the_tables_and_the_next_run_finishes(tmp_path, big, sig):
    out, whole = tmp_path / "t", tmp_path / "whole"
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
    assert [f["path"] for f in manifest(out)["files"]] == [str(A), str(B)]
    # the next run discards the dead run's files and lands the capture
    rc, err = land(big, "--out", out, "--records", "--mode", "append")
    assert (rc, err) == (0, "")
    assert not staging.exists()
    assert land(A, B, big, "--out", whole, "--records") == (0, "")
    assert rows(out) == rows(whole)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_kill_in_the_commit_is_rolled_forward(tmp_path, both, mode):
    out = tmp_path / "t"
    assert land(A, "--out", out, "--records") == (0, "")
    # the commit's second rename: some of the run's files (append) or tables (overwrite) are in place
    p = land_process(B, "--out", out, "--records", "--mode", mode, env={"KAFKAWIRE_TEST_STOP_AFTER_RENAMES": "2"})
    _, err = p.communicate(timeout=60)
    assert p.returncode == 9, err
    assert (out / "_kafkawire" / "journal.json").exists()
    # any run finishes the commit first: B is landed then, and not again
    rc, err = land(B, "--out", out, "--records", "--mode", "append")
    assert rc == 0 and "already landed" in err
    assert not (out / "_kafkawire" / "journal.json").exists()
    if mode == "append":
        assert rows(out) == both
    else:
        alone = tmp_path / "b"
        assert land(B, "--out", alone, "--records") == (0, "")
        assert rows(out) == rows(alone)
    # no staging, trash or journal left ("groups": the group exchanges the group tables are made from)
    assert sorted(set(os.listdir(out / "_kafkawire")) - {"groups"}) == ["lock", "manifest.json", "state"]


def test_spark_append_catalog_and_empty_tables(spark, tmp_path):
    """The Spark engine appends as the local one does; kafka_* stay registered with their partitions;
    every table, the empty one too, reads with spark.read.parquet and the other readers."""
    from landing.spark import land_spark

    out = tmp_path / "t"
    land_spark([str(EMPTY_RECORDS)], out, spark=spark, records=True)
    assert spark.read.parquet(str(out / "records")).count() == 0
    assert spark.table("kafka_records").count() == 0
    assert _read_everywhere(out, "records") == 0
    local = tmp_path / "local"
    assert land(EMPTY_RECORDS, "--out", local, "--records") == (0, "")
    assert spark.read.parquet(str(local / "anomalies")).count() == 0  # the local engine's empty table too

    with pytest.raises(Exception, match="already holds landed tables"):
        land_spark([str(A)], out, spark=spark, records=True)
    land_spark([str(A), str(B)], out, spark=spark, records=True, mode="append")
    skipped: list = []
    counts, _ = land_spark([str(A)], out, spark=spark, records=True, mode="append", skipped=skipped)
    assert [s[0] for s in skipped] == [str(A)] and not any(counts.values())

    assert land(A, B, "--out", local, "--records", "--mode", "append") == (0, "")
    assert rows(out) == rows(local)
    assert _read_everywhere(out, "records") == 61
    for t in ("exchanges", "records", "anomalies"):
        assert spark.table(f"kafka_{t}").count() == spark.read.parquet(str(out / t)).count()
    dates = [r[0] for r in spark.sql("SHOW PARTITIONS kafka_exchanges").collect()]
    assert dates and all(d.startswith("date=") for d in dates)
    plan = spark.sql(f"SELECT * FROM kafka_exchanges WHERE date = '{dates[0][5:]}'")._jdf.queryExecution()
    assert "PartitionFilters: [isnotnull(date" in plan.executedPlan().toString()


def test_a_second_run_at_once_is_refused(tmp_path):
    from landing.lake import Lake

    out = tmp_path / "t"
    run = Lake(out, "append").begin([A])  # a run in progress holds DIR
    try:
        rc, err = land(B, "--out", out, "--mode", "append")
        assert (rc, err) == (2, f"kafkawire: another run is landing into {out}\n")
    finally:
        run.abort()
    assert land(B, "--out", out, "--mode", "append") == (0, "")


def test_a_rotated_set_appended_file_by_file_equals_one_run(tmp_path):
    """Eight rotated files (connections cut mid-stream at every edge), landed by eight `land --mode
    append` runs as tcpdump would hand them over, give the tables of landing the set in one run,
    with --records; after each run the tables are those of the parts so far."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_spark import make, rotate

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
    state = sum(p.stat().st_size for p in (tmp_path / "lake" / "_kafkawire" / "state").rglob("*") if p.is_file())
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
