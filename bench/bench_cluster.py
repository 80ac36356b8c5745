"""`kafkawire land --engine spark` on a real standalone cluster against `kafkawire land` (the local
engine, one process) on the same capture, in the same run.

    python bench/bench_cluster.py [--copies 210] [--repeat 3] [--cores 2]

The cluster is pyspark's own Master and one Worker (`--cores`) on 127.0.0.1 (tests/spark_cluster.py),
whose Python has kafkawire's dependencies but not kafkawire: the job ships the native core to it, as
it would to a fresh cluster. Input: samples/*.pcap replayed --copies times (bench_spark.make; 210
copies: 88 MB). Each run is a fresh process, as a user types it; the medians of --repeat interleaved
runs are printed, with the engine and origin every task reported in its executor's log.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_spark import make  # noqa: E402
from tests.spark_cluster import Cluster, deps_only_python, spark_env  # noqa: E402


def timed(argv: list[str], env: dict, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=210, help="sample replays in the input (210: 88 MB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2, help="the Worker's cores")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kw-bench-cluster-"))
    kw = str(Path(sys.executable).with_name("kafkawire"))
    try:
        cap = make(a.copies, tmp / "in.pcap")
        print(f"input {cap.stat().st_size / 1e6:.1f} MB; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
        worker_py = deps_only_python(tmp / "py")
        with Cluster(tmp / "cluster", cores=a.cores) as c:
            env = spark_env(PYSPARK_PYTHON=worker_py, PYSPARK_DRIVER_PYTHON=sys.executable)
            local, cluster = [], []
            for _ in range(a.repeat):
                local.append(timed([kw, "land", str(cap), "--out", str(tmp / "local"), "--quiet"], env, tmp / "local"))
                argv = [kw, "land", str(cap), "--out", str(tmp / "spark"), "--quiet", "--engine", "spark"]
                cluster.append(timed([*argv, "--master", c.url], env, tmp / "spark"))
            lines = c.task_lines()
        engines = sorted({" ".join(line.split()[5:8]) + " " + line.split()[-2].strip("(:") for line in lines})
        lm, cm = statistics.median(local), statistics.median(cluster)
        print(f"kafkawire land (local engine, one process): median {lm:.2f} s  {local}")
        print(f"land --engine spark --master <1 worker, {a.cores} cores>: median {cm:.2f} s  {cluster}")
        print(f"cluster / local: {cm / lm:.2f}x the time; tasks reported: {engines} ({len(lines)} task lines)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
