"""`land --engine spark` on a standalone cluster whose Workers share no folder with the driver (nor
with each other): the captures are read from, and the tables written to, a real S3 store (SeaweedFS,
tests/object_store.py), as on a cluster of machines of their own.

Each Worker (tests/spark_cluster.py, Cluster(private=True)) runs in a mount namespace of its own in
which its folder tmp/worker-i/ is /tmp (its work, local and temp folders, and its Python without
kafkawire), and the real /tmp (the driver's temp folders: the session's, the ship() archive's, a
remote lake's run staging), the checkout's samples/ and kafkawire's Ivy cache are empty: a task
that needed a path of the driver's would fail. Where a process may not make namespaces, each Worker
still has folders of its own (own_dirs) but could see the driver's.

The oracle is the local engine's landing of local copies of the same captures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from landing.schemas import TABLES  # noqa: E402
from landing.spark import ivy_cache, native_build  # noqa: E402
from landing.writer import dataset  # noqa: E402
from tests.object_store import object_store  # noqa: E402, F401 -- the fixture
from tests.rowsets import RowSet  # noqa: E402
from tests.spark_cluster import WORKER_PYTHON, Cluster, deps_only_python, private_tmp_works, spark_env  # noqa: E402

# a standalone Spark cluster set up for the module: minutes, so in .ci/run's slow run
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SET = ("kafka-python-basic.pcap", "old-protocol.pcap", "aiokafka.pcap")  # the first landing: a prefix
MORE = "errors.pcap"  # appended after

# The driver: one application, a process of its own (the store's environment, its TMPDIR its own):
# land the set into the lake, count kafka_exchanges in the catalog, append MORE, count again, then
# ask the executors what they see of the driver's folders. JSON on its last line of stdout.
DRIVER = r"""
import json, os, sys, tempfile, time
from landing.spark import land_spark, session

master, lake, first, more = sys.argv[1:5]
hidden = sys.argv[5:]
t0 = time.monotonic()
# the Workers are all on 127.0.0.1: Spark would read another executor's shuffle files from "this host's"
# disk, a path only that Worker has (its private /tmp); Workers on machines of their own fetch them
spark = session(master, conf={"spark.shuffle.readHostLocalDisk": "false"})
out = {"session": time.monotonic() - t0, "tmp": tempfile.gettempdir(), "steps": []}
try:
    for caps, mode in (([first], "error"), ([more], "append")):
        t = time.monotonic()
        engines = []
        counts, faults = land_spark(caps, lake, spark=spark, records=True, engines=engines, mode=mode)
        landed = time.monotonic() - t
        catalog = {n: spark.table(f"kafka_{n}").count() for n in ("exchanges", "records")}
        step = {"counts": counts, "faults": faults, "engines": engines, "catalog": catalog}
        out["steps"].append({**step, "seconds": landed, "count_seconds": time.monotonic() - t - landed})

    def look(_):
        import os, tempfile
        # a hidden folder is not there, or is an empty tmpfs mounted over it
        return [os.getcwd(), tempfile.gettempdir(), os.environ.get("SPARK_LOCAL_DIRS", "")] + [
            os.path.isdir(p) and len(os.listdir(p)) > 0 for p in hidden
        ]

    out["seen"] = spark.sparkContext.parallelize(range(4), 4).map(look).collect()
finally:
    spark.stop()
print(json.dumps(out))
"""


def local_land(captures: list, out: Path, *more) -> None:
    args = [sys.executable, "-m", "kafkawire", "land", *map(str, captures), "--out", str(out), "--records", "--quiet"]
    r = subprocess.run([*args, *more], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]


def rows(out) -> dict[str, RowSet]:
    """Every landed table of a lake (a local path, or an s3:// URI with the store's env in os.environ)."""
    return {t: RowSet(dataset(out, t).to_table()) for t in TABLES}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(Cluster, its Workers' Python, whether they are private): two Workers of a core each, each
    with its own folders and (where namespaces can be made) nothing else of /tmp."""
    tmp = tmp_path_factory.mktemp("isolated-cluster")
    # a Worker's private /tmp hides the real one: where this Python (and so the Workers' Spark and
    # packages) lives under /tmp, as in a fresh clone made by tests/test_readme.py, own folders only
    under_tmp = any(Path(p).resolve().is_relative_to("/tmp") for p in (sys.prefix, ROOT))
    private = private_tmp_works() and not under_tmp
    for i in range(2):  # a Python without kafkawire in each Worker's own folder (its /tmp/py when private)
        deps_only_python(tmp / f"worker-{i}" / "py")
    python = WORKER_PYTHON if private else str(tmp / "worker-0" / "py" / "bin" / "python")
    # the checkout's captures and the Ivy cache the driver's session takes the Delta and s3a jars from;
    # pytest's folders (and the driver's TMPDIR among them) when they are not under /tmp
    hide = [p for p in (SAMPLES, Path(ivy_cache()), tmp_path_factory.getbasetemp()) if Path(p).is_dir()]
    try:
        with Cluster(tmp, cores=1, workers=2, own_dirs=True, private=private, hide=hide) as c:
            yield c, python, private
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def landed(cluster, object_store, tmp_path_factory):  # noqa: F811
    """The captures in the store, the driver's run, and the local engine's landings of the same
    captures: a dict of what the tests look at."""
    c, python, private = cluster
    store = object_store
    tag = uuid.uuid4().hex[:8]
    caps, lakes = store.make_bucket(f"cluster-caps-{tag}"), store.make_bucket(f"cluster-lake-{tag}")
    tmp = tmp_path_factory.mktemp("isolated-land")
    local = tmp / "set"
    local.mkdir()
    for name in SET:
        shutil.copy(SAMPLES / name, local / name)
        store.upload(SAMPLES / name, f"{caps}/set/{name}")
    store.upload(SAMPLES / MORE, f"{caps}/more/{MORE}")
    # the local engine: the set, then the same append; and all the captures in one landing
    local_land([local], tmp / "local")
    first = rows(tmp / "local")
    local_land([SAMPLES / MORE], tmp / "local", "--mode", "append")
    local_land([local, SAMPLES / MORE], tmp / "all")

    driver_tmp, cwd = tmp / "driver-tmp", tmp / "driver"
    driver_tmp.mkdir()
    cwd.mkdir()
    lake = f"{lakes}/t"
    hidden = [str(driver_tmp), str(SAMPLES), str(local), ivy_cache()]
    before = c.apps()
    env = spark_env(PYSPARK_PYTHON=python, TMPDIR=str(driver_tmp), **store.env())
    t0 = time.monotonic()
    args = [sys.executable, "-c", DRIVER, c.url, lake, f"{caps}/set/", f"{caps}/more/", *hidden]
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    (tmp / "driver.stderr").write_text(r.stderr)
    assert r.returncode == 0, _why(r.stderr)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    got["seconds"] = seconds
    steps = ", ".join(f"{s['seconds']:.1f} + {s['count_seconds']:.1f}" for s in got["steps"])
    print(f"\nspark cluster + store: driver {seconds:.1f} s (session {got['session']:.1f} s, land + count: {steps} s)")
    apps = c.apps() - before
    return {
        "cluster": c,
        "private": private,
        "store": store,
        "lake": lake,
        "tmp": tmp,
        "driver_tmp": driver_tmp,
        "got": got,
        "apps": apps,
        "first": first,
    }


def _why(stderr: str) -> str:
    """A failed driver's Python traceback and the first lines of the Java ones (their causes)."""
    lines = stderr.splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith("\tat "))[-6000:]


@pytest.fixture
def store_env(landed, monkeypatch):
    """The store's AWS_* variables in os.environ: landing.writer.dataset() reads s3:// lakes with them."""
    for k, v in landed["store"].env().items():
        monkeypatch.setenv(k, v)


def test_the_workers_share_no_folder_with_the_driver(landed):
    c, got, apps = landed["cluster"], landed["got"], landed["apps"]
    assert len(apps) == 1  # the driver's one application
    # every executor (one per Worker) worked in its own Worker's folder
    owners = {i for i in range(c.workers) for d in c.executor_dirs(apps) if c.root(i) in d.parents}
    assert owners == {0, 1}
    # the driver's runs staged a remote lake's files in its own TMPDIR (landing.lake), and removed them
    assert got["tmp"] == str(landed["driver_tmp"])
    assert not list(landed["driver_tmp"].glob("kafkawire-run-*"))
    if not landed["private"]:
        pytest.skip(
            "no private /tmp for the Workers here (no mount namespaces, or this Python lives under /tmp): own folders only"
        )
    # what the executors saw: their own /tmp, not the driver's temp folder, the checkout's captures,
    # their local copy, or the Ivy cache
    for cwd, tmp, local_dirs, *exists in got["seen"]:
        assert cwd.startswith("/tmp/work/app-") and tmp == "/tmp/tmp" and local_dirs.startswith("/tmp/local/")
        assert exists == [False] * 4


def test_tasks_ran_the_shipped_native_core_on_both_workers(landed):
    c, got, apps = landed["cluster"], landed["got"], landed["apps"]
    for step in got["steps"]:
        engines = step["engines"]
        assert engines and {tuple(e[2:5]) for e in engines} == {("native", "shipped", native_build())}
        if landed["private"]:  # the job's copy of the core, unpacked in the executor's own folder
            assert all(e[5].startswith("/tmp/work/app-") and "/kafkawire-" in e[5] for e in engines)
    # the executors' logs: every task of every stage on the native core, the one the job shipped
    lines = [ln.split("kafkawire: ", 1)[1].split(")", 1)[0].split() for ln in c.task_lines(apps)]
    assert {w[1] for w in lines} >= {"warm", "scan", "land"}
    assert {(w[5], w[6], w[7], w[8]) for w in lines} == {("native", "core", native_build(), "(shipped:")}
    for i in range(c.workers):
        logs = [d / "stderr" for d in c.executor_dirs(apps) if c.root(i) in d.parents]
        assert any("kafkawire: task " in f.read_text(errors="replace") for f in logs if f.is_file()), i


def test_land_from_the_store_into_the_store_equals_the_local_engine(landed, store_env):
    got, lake = landed["got"], landed["lake"]
    first, append = got["steps"]
    assert first["faults"] == [] and append["faults"] == []
    # the first landing as it was committed: read back after the append, the lake's first version
    # is not what rows() reads, so the counts stand for it (and the catalog's count is Delta's)
    want_first = landed["first"]
    assert first["counts"] == {t: len(want_first[t]) for t in first["counts"]}
    assert first["catalog"]["exchanges"] == len(want_first["exchanges"]) == 94
    assert first["catalog"]["records"] == len(want_first["records"]) > 0
    # after the append: the local engine's landing of all the captures, in two runs or in one
    got_rows = rows(lake)
    assert got_rows == rows(landed["tmp"] / "local")
    assert got_rows == rows(landed["tmp"] / "all")
    assert append["catalog"]["exchanges"] == len(got_rows["exchanges"]) > 94
    assert append["catalog"]["records"] == len(got_rows["records"])
