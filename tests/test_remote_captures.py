"""Captures read from an object store by URI (dissector.fs): every command that reads captures, the
local and Spark engines, the data source, and the faults of a store that is missing things or
stops, against a real S3 store (SeaweedFS, tests/object_store.py) on 127.0.0.1. The oracle is the
same command on the same files read from local disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from landing.schemas import TABLES
from landing.writer import dataset
from tests.object_store import object_store  # noqa: F401 -- the fixture
from tests.rowsets import RowSet

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SET = ("kafka-python-basic.pcap", "old-protocol.pcap", "aiokafka.pcap")  # one capture set, a prefix
GZ = SAMPLES / "tls" / "tls-kafka-python-ak.pcap"
TLS_DSB = SAMPLES / "tls" / "tls-kafka-python-ak-dsb.pcapng"  # its key log in a secrets block


def run(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafkawire", *map(str, args)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def run_at_once(*commands: tuple[list, dict | None], timeout=300) -> list[subprocess.CompletedProcess]:
    """kafkawire commands (args, env) run side by side, as run() runs one: their CompletedProcesses."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "kafkawire", *map(str, args)],
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for args, env in commands
    ]
    try:
        done = []
        for (args, _), p in zip(commands, procs, strict=True):
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(args, p.returncode, out, err))
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def rows(out: Path) -> dict[str, RowSet]:
    return {t: RowSet(dataset(out, t).to_table()) for t in TABLES if (out / t).is_dir()}


@pytest.fixture(scope="module")
def caps(object_store, tmp_path_factory):  # noqa: F811
    """A bucket holding the set under caps/set/ (and a gzip copy of one file, a hidden file, a
    sub-prefix a directory listing does not enter); (store, env, local copy of the set)."""
    store = object_store
    bucket = "caps"
    store.make_bucket(bucket)
    local = tmp_path_factory.mktemp("set")
    for name in SET:
        shutil.copy(SAMPLES / name, local / name)
        store.upload(SAMPLES / name, f"s3://{bucket}/set/{name}")
    store.put_bytes(f"s3://{bucket}/set/.partial", b"not a capture")
    store.upload(SAMPLES / SET[0], f"s3://{bucket}/set/deeper/copy.pcap")
    import gzip

    store.put_bytes(f"s3://{bucket}/one.pcap.gz", gzip.compress((SAMPLES / SET[0]).read_bytes()))
    return store, store.env(), local


def test_dissect_reads_an_object_as_the_local_file(caps):
    _, env, local = caps
    for fmt in ("text", "jsonl"):
        remote = run("dissect", "s3://caps/set/kafka-python-basic.pcap", "--format", fmt, env=env)
        here = run("dissect", local / "kafka-python-basic.pcap", "--format", fmt)
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout == here.stdout and remote.stdout.count("\n") >= 34
    gz = run("dissect", "s3://caps/one.pcap.gz", env=env)
    assert gz.returncode == 0 and gz.stdout == run("dissect", local / "kafka-python-basic.pcap").stdout


def test_a_prefix_is_a_capture_set_as_a_directory_is(caps):
    _, env, local = caps
    remote = run("dissect", "s3://caps/set/", "--format", "jsonl", env=env)
    here = run("dissect", local, "--format", "jsonl")
    assert remote.returncode == 0, remote.stderr
    # hidden objects and deeper prefixes are left out, as a directory's hidden files and subdirectories are
    assert remote.stdout == here.stdout


def test_land_from_the_store_equals_a_local_landing(caps, tmp_path):
    _, env, local = caps
    a, b = tmp_path / "remote", tmp_path / "local"
    r = run("land", "s3://caps/set/", "--out", a, "--records", "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert run("land", local, "--out", b, "--records", "--quiet").returncode == 0
    got, want = rows(a), rows(b)
    assert got == want and len(got["exchanges"]) == 94
    # landed again: the same bytes under the same URI add nothing
    again = run("land", "s3://caps/set/", "--out", a, "--records", "--mode", "append", env=env)
    assert again.returncode == 0 and "already landed" in again.stderr
    assert rows(a) == want


def test_land_into_a_lake_in_the_store(caps, tmp_path, monkeypatch):
    """--out s3://...: Delta tables in the store, appended to, read back by landing.dataset, the
    report, polars and DuckDB, equal to a local landing of the same captures."""
    import duckdb
    import polars as pl

    _, env, local = caps
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    lake = "s3://caps/lakes/t"
    r = run("land", "s3://caps/set/kafka-python-basic.pcap", "--out", lake, "--records", "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    r = run("land", "s3://caps/set/", "--out", lake, "--records", "--mode", "append", env=env)
    assert r.returncode == 0 and "already landed" in r.stderr, r.stderr
    assert run("land", local, "--out", tmp_path / "local", "--records", "--quiet").returncode == 0
    want = rows(tmp_path / "local")
    got = {t: RowSet(dataset(lake, t).to_table()) for t in TABLES}
    assert got == want
    errors = dataset(lake, "errors")  # noqa: F841 -- DuckDB reads it by name
    n = len(want["errors"])
    assert duckdb.sql("SELECT count(*) FROM errors").fetchall() == [(n,)]
    opts = {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"], "AWS_ALLOW_HTTP": "true", "AWS_REGION": env["AWS_REGION"]}
    opts |= {"AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]}
    assert pl.read_delta(f"{lake}/errors", storage_options=opts).height == n
    rep = run("report", lake, env=env)
    assert rep.returncode == 0 and rep.stdout == run("report", tmp_path / "local").stdout


def test_report_and_replay_read_the_store(caps):
    _, env, local = caps
    uri = "s3://caps/set/old-protocol.pcap"
    rep = run("report", uri, env=env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == run("report", local / "old-protocol.pcap").stdout
    plan = run("replay", uri, "--to", "127.0.0.1:9", "--dry-run", env=env)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout == run("replay", local / "old-protocol.pcap", "--to", "127.0.0.1:9", "--dry-run").stdout


def test_top_once_reads_the_store(caps):
    _, env, local = caps
    uri = "s3://caps/set/kafka-python-basic.pcap"
    remote = run("top", uri, "--once", "--speed", "1000000", env=env)
    here = run("top", local / "kafka-python-basic.pcap", "--once", "--speed", "1000000")
    assert remote.returncode == here.returncode == 0, remote.stderr
    # the first line names the source; the figures below it are the same
    assert remote.stdout.splitlines()[1:] == here.stdout.splitlines()[1:] and "Produce" in remote.stdout


def test_missing_objects_and_unreachable_stores_are_one_line(caps):
    store, env, _ = caps
    for args in (
        ("dissect", "s3://caps/set/nothing.pcap"),
        ("land", "s3://caps/nothing/", "--out", "/tmp/kafkawire-never"),
        ("report", "s3://nobucket-here/x.pcap"),
        ("replay", "s3://caps/set/nothing.pcap", "--to", "127.0.0.1:9", "--dry-run"),
        ("land", "s3://caps/set/aiokafka.pcap", "--out", "s3://nobucket-here/lake"),
    ):
        r = run(*args, env=env, timeout=120)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kafkawire"), r.stderr
        assert "Traceback" not in r.stderr
    # wrong credentials: refused in one line that names neither key
    bad = {**env, "AWS_SECRET_ACCESS_KEY": "wrong-secret-0123", "AWS_ACCESS_KEY_ID": "wrong-key-4567"}
    r = run("dissect", "s3://caps/set/kafka-python-basic.pcap", env=bad, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "wrong-secret-0123" not in r.stderr + r.stdout and store.secret_key not in r.stderr + r.stdout


SPARK_JOB = """
import json, sys
from landing.spark import land_spark, plan, register, session
spark = session("local[2]", conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
# small ranges: each object is cut at record boundaries found in windows of its bytes
counts, faults = land_spark(["s3://caps/set/"], sys.argv[1], spark=spark, records=True, catalog=False, target_bytes=8192)
tls, tls_faults = land_spark(["s3://caps/tls.pcapng"], sys.argv[2], spark=spark, catalog=False, target_bytes=20000)
register(spark)
errors = spark.read.format("kafkawire").option("table", "errors").load("s3://caps/set/").count()
tasks = [(str(r.path), r.start, r.end) for _, r, _ in plan(["s3://caps/set/", "s3://caps/tls.pcapng"], 8192)]
# the streaming source over the prefix and over the local copy, its state kept in the store
streamed = {}
for name, where in (("remote", "s3://caps/set"), ("local", sys.argv[3])):
    q = (spark.readStream.format("kafkawire").option("table", "exchanges").option("maxFilesPerTrigger", 1).load(where)
         .writeStream.format("delta").option("checkpointLocation", f"{sys.argv[4]}/ck-{name}")
         .trigger(availableNow=True).start(f"{sys.argv[4]}/out-{name}"))
    q.awaitTermination(300)
    rows = spark.read.format("delta").load(f"{sys.argv[4]}/out-{name}").collect()
    streamed[name] = sorted(map(str, rows))
print(json.dumps({"counts": counts, "faults": faults + tls_faults, "errors": errors, "tasks": tasks,
                  "streamed": streamed}))
"""


@pytest.mark.parametrize(
    "uri,says",
    [
        # gcsfs retries a store it cannot reach for about 20 s before it gives up
        pytest.param("gs://kw-bucket/x.pcap", "cannot read gs://kw-bucket/x.pcap: ", marks=pytest.mark.slow),
        (
            "abfs://caps@kwacct.dfs.core.windows.net/x.pcap",
            "cannot read abfs://caps@kwacct.dfs.core.windows.net/x.pcap: ",
        ),
        ("az://caps/x.pcap", "az:// cannot be read here"),
        ("hdfs://127.0.0.1:1/x.pcap", "cannot reach hdfs://127.0.0.1:1: "),
    ],
)
def test_stores_that_cannot_answer_are_one_line_in_bounded_time(uri, says, tmp_path):
    """gs, abfs, az and hdfs with no store, credential or client library here: each command says so
    in one line, exit 2, within the GCS client's bounded retries (dissector.fs.GCS_RETRY_SECONDS),
    and no credential of the environment is echoed. The three commands run at once (each waits on
    its client's retries, not on the CPU); each one's time is counted from their common start."""
    import time

    secret = "kw-fake-account-key-0123456789"
    env = {"AZURE_STORAGE_ACCOUNT_KEY": secret, "AWS_SECRET_ACCESS_KEY": secret}
    argvs = (["dissect", uri], ["land", uri, "--out", tmp_path / "lake"], ["top", uri, "--once"])
    t = time.monotonic()
    done = run_at_once(*((argv, env) for argv in argvs), timeout=120)
    took = time.monotonic() - t  # each command's time is at most this
    for argv, r in zip(argvs, done, strict=True):
        assert took < 60, (argv, "took too long")
        err = [line for line in r.stderr.splitlines() if line.startswith("kafkawire")]
        assert r.returncode == 2 and len(err) == 1 and says in err[0], (argv, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and secret not in r.stdout + r.stderr, argv


@pytest.mark.slow  # Spark over the object store: about a minute
def test_spark_engine_and_data_source_read_the_store(caps, tmp_path):
    """`land --engine spark` and the data source on s3:// URIs, in a process of their own started with
    the store's environment (as a user runs them): each object is cut into byte ranges at record
    boundaries found in a ranged read at each cut (dissector.resync), each range fetched by ranged
    GETs, its payloads travelling to stage 2, which has no file to map; frames are numbered after
    stage 1. The tables equal the local engine's on the local copy, a pcapng whose key log is in
    the file (its secrets block read by the first range only) decrypted as locally. The
    streaming source reads the prefix (its carried state kept in the store) as it reads the
    local folder."""
    import json

    store, env, local = caps
    store.upload(TLS_DSB, "s3://caps/tls.pcapng")
    out = tmp_path / "spark"
    r = subprocess.run(
        [sys.executable, "-c", SPARK_JOB, str(out), str(tmp_path / "spark-tls"), str(local), str(tmp_path / "stream")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["faults"] == []
    # every object cut into ranges that cover it end to end
    by_object: dict = {}
    for path, start, end in got["tasks"]:
        by_object.setdefault(path, []).append((start, end))
    sizes = {f"s3://caps/set/{n}": (local / n).stat().st_size for n in SET}
    sizes["s3://caps/tls.pcapng"] = TLS_DSB.stat().st_size
    assert set(by_object) == set(sizes)
    for path, spans in by_object.items():
        spans.sort()
        assert len(spans) > 1 and spans[-1][1] == sizes[path], path
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)), path
    assert run("land", local, "--out", tmp_path / "local", "--records", "--quiet").returncode == 0
    want = rows(tmp_path / "local")
    assert rows(out) == want
    assert got["counts"]["exchanges"] == len(want["exchanges"])
    assert got["errors"] == len(want["errors"]) > 0
    # the streaming source reads the prefix as it reads the folder (every file but the newest)
    assert got["streamed"]["remote"] == got["streamed"]["local"] and len(got["streamed"]["local"]) > 10
    assert run("land", TLS_DSB, "--out", tmp_path / "local-tls", "--quiet").returncode == 0
    tls = rows(tmp_path / "spark-tls")
    assert tls == rows(tmp_path / "local-tls") and len(tls["exchanges"]) > 20


@pytest.fixture(scope="module")
def big(object_store, tmp_path_factory):  # noqa: F811
    """A ~200 MB capture (the basic sample again and again, a minute apart) in the store and on disk:
    many ranged reads, so a stop of the store lands mid-read."""
    import dpkt

    store = object_store
    store.make_bucket("big")
    path = tmp_path_factory.mktemp("big") / "big.pcap"
    with open(SAMPLES / "kafka-python-basic.pcap", "rb") as f:
        src = dpkt.pcap.Reader(f)
        linktype, packets = src.datalink(), list(src)
    with open(path, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=linktype)
        n = 0
        while f.tell() < 200 << 20:
            for ts, buf in packets:
                w.writepkt(buf, ts + n * 60)
            n += 1
    store.upload(path, "s3://big/big.pcap")
    return store, path


def stop_store_when(store, args: list, ready, *, env: dict | None = None, timeout: float = 240):
    """Run kafkawire ARGS with the store's environment (and `env`), call ready(process), which
    waits for the moment to cut and asserts it came, stop the store, let the command end, start
    the store again."""
    p = subprocess.Popen(
        [sys.executable, "-m", "kafkawire", *args],
        env={**os.environ, **store.env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        ready(p)
        store.stop()
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
        store.start()
    return subprocess.CompletedProcess(args, p.returncode, out, err)


def stop_store_after_first_line(store, args: list) -> subprocess.CompletedProcess:
    """stop_store_when the command has printed (or, for a quiet land, has read) something."""
    import time

    def ready(p) -> None:
        if args[0] == "dissect":
            assert "ApiVersions" in p.stdout.readline()
        else:
            time.sleep(1.5)
            assert p.poll() is None, "the land ended before the store was stopped"

    return stop_store_when(store, args, ready)


def test_a_store_that_stops_mid_read_is_a_file_fault_not_a_traceback(big):
    """dissect: what was read before is printed, the fault is one line naming the object, the
    command ends (no hang)."""
    store, _ = big
    r = stop_store_after_first_line(store, ["dissect", "s3://big/big.pcap"])
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    faults = [line for line in r.stderr.splitlines() if "s3://big/big.pcap" in line]
    assert len(faults) == 1 and "RemoteError" in faults[0], r.stderr
    assert r.stdout.count("\n") > 100


@pytest.mark.slow
def test_a_land_cut_by_the_store_commits_nothing_and_the_next_lands_it_whole(big, tmp_path):
    """land: a read the store cut short is not committed (the capture would count as landed), so the
    next run, the store back, lands the whole capture: the tables equal a landing from local disk."""
    store, local = big
    out = tmp_path / "t"
    r = stop_store_after_first_line(store, ["land", "s3://big/big.pcap", "--out", str(out), "--quiet"])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing was landed" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not any((out / t).exists() for t in TABLES)
    # the next run from the store, and the landing from local disk it must equal, at once
    again, here = run_at_once(
        (["land", "s3://big/big.pcap", "--out", out, "--quiet"], store.env()),
        (["land", local, "--out", tmp_path / "local", "--quiet"], None),
    )
    assert again.returncode == 0, again.stderr
    assert here.returncode == 0, here.stderr
    got, want = rows(out), rows(tmp_path / "local")
    assert got == want and len(got["exchanges"]) > 10_000


@pytest.mark.slow
def test_a_spark_land_cut_by_the_store_commits_nothing_and_the_next_lands_it_whole(big, tmp_path):
    """The Spark engine, the store stopped once stage 1 has begun fetching the object's ranges: the
    job fails without committing a run, and the next Spark run, the store back, lands the whole
    capture: the tables equal a local landing from disk."""
    import time

    store, local = big
    out, scratch = tmp_path / "t", tmp_path / "scratch"
    scratch.mkdir()
    args = ["land", "s3://big/big.pcap", "--out", str(out), "--engine", "spark", "--master", "local[2]", "--quiet"]

    def fetching() -> bool:  # a stage-1 task's range copy, in Spark's scratch folder under TMPDIR
        return any(f.parent.name.startswith("kafkawire-range-") for f in scratch.rglob("range"))

    def ready(p) -> None:
        deadline = time.monotonic() + 180
        while not fetching() and time.monotonic() < deadline:
            assert p.poll() is None, "the land ended before stage 1 fetched a range"
            time.sleep(0.05)
        assert fetching(), "stage 1 never began"

    # TMPDIR: where stage 1 fetches its ranges
    r = stop_store_when(store, args, ready, env={"TMPDIR": str(scratch)}, timeout=600)
    assert r.returncode != 0, r.stderr[-2000:]
    assert not (out / "_kafkawire" / "runs").exists() and not any((out / t / "_delta_log").exists() for t in TABLES)
    again = run("land", *args[1:], env=store.env(), timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert run("land", local, "--out", tmp_path / "local", "--quiet").returncode == 0
    got, want = rows(out), rows(tmp_path / "local")
    assert got == want and len(got["exchanges"]) > 10_000
