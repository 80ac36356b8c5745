"""The Spark engine on a real standalone cluster (tests/spark_cluster.py) whose worker Python has
kafkawire's dependencies but not kafkawire: the job ships the native core, every task runs on it,
and the tables equal `kafkawire land`'s; where the workers have kafkawire installed, theirs is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from landing.schemas import DERIVED, TABLES  # noqa: E402
from landing.spark import _native_file, native_build  # noqa: E402
from tests.spark_cluster import Cluster, deps_only_python, spark_env  # noqa: E402
from tests.test_spark import as_text  # noqa: E402
from tests.test_spark import _rotate, assert_same, tables  # noqa: E402

# a standalone Spark cluster set up for the module: minutes, so in .ci/run's slow run
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
KAFKAWIRE = str(Path(sys.executable).with_name("kafkawire"))  # the console script of this install


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(Cluster, the workers' Python without kafkawire); two Workers with a core each."""
    tmp = tmp_path_factory.mktemp("cluster")
    python = deps_only_python(tmp / "worker-python")
    try:
        with Cluster(tmp, cores=1, workers=2) as c:
            yield c, python
    except RuntimeError as e:
        pytest.fail(str(e))


def run(args: list, python: str, cwd: Path, env_extra=None, **kw) -> subprocess.CompletedProcess:
    """A driver process outside the checkout, its executors on `python` (PYSPARK_PYTHON)."""
    env = spark_env(PYSPARK_PYTHON=python, **(env_extra or {}))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw)


def land(captures: list, out: Path, *more, python: str, master: str) -> subprocess.CompletedProcess:
    args = [KAFKAWIRE, "land", *map(str, captures), "--out", str(out), "--engine", "spark", "--master", master, *more]
    return run(args, python, out.parent)


def local_land(captures: list, out: Path, *more) -> None:
    r = subprocess.run(
        [KAFKAWIRE, "land", *map(str, captures), "--out", str(out), "--quiet", *more], capture_output=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]


def task_lines(c: Cluster, before: set) -> list[list[str]]:
    """The new apps' task lines, split: [.., "task", stage, part, "on", "the", "native", "core", build, "(origin:", path)]."""
    # a line ends with the path's ")"; anything after it is another writer's (the executor's log)
    return [line.split("kafkawire: ", 1)[1].split(")", 1)[0].split() for line in c.task_lines(c.apps() - before)]


CAPS = [SAMPLES / "java-codecs-ak.pcap", SAMPLES / "errors.pcap"]


@pytest.fixture(scope="module")
def shipped(cluster, tmp_path_factory):
    """One application on the cluster whose workers have no kafkawire (tests/spark_cluster.py's driver):
    (its output folder, run.json, the executors' task lines, split), with `land`'s tables beside it."""
    c, python = cluster
    tmp = tmp_path_factory.mktemp("shipped")
    _rotate(SAMPLES / "java-codecs-ak.pcap", tmp / "whole.pcap", tmp / "rot")
    local_land(CAPS, tmp / "local")
    local_land([tmp / "whole.pcap"], tmp / "whole")
    local_land([SAMPLES / "errors.pcap"], tmp / "errors", "--records")
    out = tmp / "out"
    out.mkdir()
    before = c.apps()
    driver = [sys.executable, str(ROOT / "tests" / "spark_cluster.py"), c.url, str(out), str(tmp / "rot")]
    driver.append(str(tmp / "whole.pcap"))
    r = run([*driver, str(SAMPLES / "errors.pcap"), *map(str, CAPS)], python, tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    yield tmp, json.loads((out / "run.json").read_text()), task_lines(c, before)


def test_land_on_a_cluster_without_kafkawire(shipped):
    tmp, _, lines = shipped
    assert_same(tmp / "local", tmp / "out" / "cli", records=False)
    assert len(tables(tmp / "local", records=False)["exchanges"]) > 50
    # every task (the session's warm-up, both stages of both land jobs, the source's reads) ran on the driver's native
    # core, shipped with the job: the workers have no kafkawire
    assert {w[1] for w in lines} == {"warm", "scan", "land", "read"}
    assert {(w[5], w[6], w[7]) for w in lines} == {("native", "core", native_build())}
    assert {w[8] for w in lines} == {"(shipped:"}
    assert all("/kafkawire-" in w[9] and not w[9].startswith(str(ROOT)) for w in lines)


def test_rotated_set_and_split_file_on_a_cluster_without_kafkawire(shipped):
    tmp, got, lines = shipped
    assert got["status"] == 0 and got["faults"] == []
    assert_same(tmp / "whole", tmp / "out" / "land", records=False)
    assert_same(tmp / "whole", tmp / "out" / "split", records=False)
    # both workers ran tasks (an executor each: their logs name their hosts alike, their dirs differ)
    assert len({w[9] for w in lines}) == 2
    # land_spark's own report of its stage-2 tasks: the native core, the job's copy of it
    assert got["engines"] and {tuple(e[2:5]) for e in got["engines"]} == {("native", "shipped", native_build())}


def test_data_source_on_a_cluster_without_kafkawire(shipped):
    import pandas as pd

    tmp, _, _ = shipped
    want = tables(tmp / "errors")
    for t in TABLES:
        df = pd.read_pickle(tmp / "out" / f"{t}.pkl")
        for col in df.columns:  # Spark hands timestamps over naive, in the session's zone (UTC)
            if str(df[col].dtype).startswith("datetime64") and df[col].dt.tz is None:
                df[col] = df[col].dt.tz_localize("UTC")
        df = as_text(df).sort_values(list(df.columns)).reset_index(drop=True)
        assert list(df.columns) == list(want[t].columns) and df.equals(want[t]), t
        assert len(df) > 0 or t in ("anomalies", *DERIVED), t  # errors.pcap has no group that settles


def test_workers_with_kafkawire_installed_use_theirs(cluster, tmp_path):
    c, _ = cluster
    caps = [SAMPLES / "errors.pcap"]
    local_land(caps, tmp_path / "local")
    before = c.apps()
    # the workers' Python is this one: kafkawire installed (editable, this checkout's build)
    r = land(caps, tmp_path / "cluster", python=sys.executable, master=c.url)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same(tmp_path / "local", tmp_path / "cluster", records=False)
    lines = task_lines(c, before)
    assert lines and {(w[7], w[8]) for w in lines} == {(native_build(), "(installed:")}
    assert {w[9].rstrip(")") for w in lines} == {_native_file()}  # this checkout's, not the job's copy


@pytest.mark.slow
def test_a_worker_with_another_build_fails_its_tasks_in_one_line(cluster, tmp_path):
    import shutil

    c, _ = cluster
    # the workers' kafkawire: this checkout's sources with a native core of another build
    other = tmp_path / "other"
    other.mkdir()
    for pkg in ("protocol", "landing"):
        (other / pkg).symlink_to(ROOT / pkg)
    shutil.copytree(ROOT / "dissector", other / "dissector", ignore=shutil.ignore_patterns("__pycache__"))
    ext = other / "dissector" / Path(_native_file()).name
    ext.write_bytes(ext.read_bytes() + b"\0")  # still loads; another build id
    python = deps_only_python(tmp_path / "py")
    site = next(Path(tmp_path / "py" / "lib").glob("python3*/site-packages"))
    (site / "other_kafkawire.pth").write_text(f"{other}\n")
    env = {"PYSPARK_SUBMIT_ARGS": "--conf spark.task.maxFailures=1 pyspark-shell"}
    args = [KAFKAWIRE, "land", str(SAMPLES / "errors.pcap"), "--out", str(tmp_path / "t"), "--engine", "spark"]
    r = run([*args, "--master", c.url], python, tmp_path, env_extra=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if "kafkawire: the worker's native core" in line]
    assert len(lines) == 1 and lines[0].startswith("kafkawire: the worker's native core "), r.stderr[-3000:]
    assert f"is build {native_build()}" not in lines[0] and f"the driver's is {native_build()}" in lines[0]
    assert "(installed)" in lines[0] and str(ext) in lines[0]
