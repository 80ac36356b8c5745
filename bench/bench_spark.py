"""Spark at scale: `land --engine spark` against the local engine (`kafkawire land`, one process, one
core) on the same input, at 1x, 4x and 16x, as one pcap split into byte ranges and as a rotated set.

    python bench/bench_spark.py [--copies 336] [--scale 1,4,16] [--parts 16] [--repeat 1]
                                [--cluster 16] [--keep DIR]

Input: samples/*.pcap (real clients and brokers) laid end to end (a copy lasts about a minute) and
replayed --copies x scale times into one pcap, each copy on its own addresses (127.0.k.x) and at a
later time, so connections stay distinct; 336 copies = 141 MB, so 16x = 2.26 GB. The rotated set
is the same packets cut into --parts files (tcpdump -C style: connections run across the cuts);
the pcap is split into 64 MiB byte ranges.

Engines, each run a fresh process:
- local: `kafkawire land` (the whole process, start-up included);
- Spark local[1] and local[2]: `land_spark` timed from a started SparkSession (the session's
  start-up is reported apart), its stages' times and shuffle bytes read from Spark's event log;
- at the scales in --cluster: a standalone cluster on 127.0.0.1 (tests/spark_cluster.py: pyspark's
  Master, Workers of one core and 1 GB each) with one Worker, then two, whose Python lacks kafkawire
  (the job ships the native core; every task's engine is counted from the executors' logs).
Peak RSS is sampled every 0.25 s from /proc: the largest Python worker (an executor's Python, where
the native core runs), and the JVM (the driver's in local mode, the executors' on the cluster).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dpkt

ROOT = Path(__file__).resolve().parents[1]


def make(copies: int, out: Path, sources: list[Path] | None = None) -> Path:
    """`copies` of the sources (default samples/*.pcap) laid end to end, each copy on its own
    addresses and later in time."""
    base = []
    for p in sources or sorted((ROOT / "samples").glob("*.pcap")):
        with open(p, "rb") as f:
            r = dpkt.pcap.Reader(f)
            if r.datalink() != dpkt.pcap.DLT_EN10MB:
                continue
            recs = list(r)
        # the samples were captured over two days: laid end to end (1 s apart) a copy lasts about a
        # minute, so the input is a capture of minutes, not of weeks of near-empty daily partitions
        first = min(ts for ts, _ in recs)
        at = base[-1][0] + 1 if base else first
        base.extend((at + ts - first, buf) for ts, buf in sorted(recs, key=lambda x: x[0]))
    t0, span = base[0][0], base[-1][0] - base[0][0] + 1
    with open(out, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=dpkt.pcap.DLT_EN10MB)
        for k in range(copies):
            for ts, buf in base:
                if k and len(buf) >= 34 and buf[12:14] == b"\x08\x00":
                    b = bytearray(buf)  # a.K1.K2.d: each copy its own hosts, both directions alike
                    b[27] = b[31] = k // 250
                    b[28] = b[32] = 1 + k % 250
                    buf = bytes(b)
                # whole microseconds: dpkt rounds the fraction itself, and a float just under a
                # second rounds to a fraction of 1000000, which readers (ours too) take for corruption
                sec, us = divmod(round((t0 + (ts - t0) + k * span) * 1e6), 1_000_000)
                w.writepkt(buf, sec + us / 1e6)
    return out


def rotate(src: Path, folder: Path, parts: int = 8) -> list[Path]:
    folder.mkdir(exist_ok=True)
    with open(src, "rb") as f:
        recs = list(dpkt.pcap.Reader(f))
    files = []
    for i in range(parts):
        p = folder / f"cap{i:02d}.pcap"
        with open(p, "wb") as f:
            w = dpkt.pcap.Writer(f, linktype=dpkt.pcap.DLT_EN10MB)
            for ts, buf in recs[len(recs) * i // parts : len(recs) * (i + 1) // parts]:
                w.writepkt(buf, ts)
        files.append(p)
    return files


JOB = """
import json, sys, time
t = time.perf_counter()
from landing.spark import session, land_spark
master, out, target, evlog, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": evlog, "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
spark = session(master, conf=conf)
started = time.perf_counter() - t
t = time.perf_counter()
counts, _ = land_spark(paths, out, spark=spark, target_bytes=target, catalog=False, mode="overwrite")
job = time.perf_counter() - t
spark.stop()
print(json.dumps({"session": started, "job": job, "exchanges": counts["exchanges"]}))
"""


SOURCE = """
import json, sys, time
from landing.spark import register, session
spark = session(sys.argv[1])
register(spark)
t = time.perf_counter()
n = spark.read.format("kafkawire").option("table", "exchanges").load(sys.argv[2]).count()
print(json.dumps({"job": time.perf_counter() - t, "exchanges": n}))
"""


def source_run(master: str, path) -> dict:
    """The `kafkawire` data source reading the exchanges table of `path` (a count: every row made)."""
    r = subprocess.run(
        [sys.executable, "-c", SOURCE, master, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=3600
    )
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


class Peak:
    """Peak RSS (MiB) of the Python workers and of the JVMs, sampled from /proc while it runs."""

    def __init__(self):
        self.python = self.jvm = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def _run(self):
        me = os.getpid()
        while not self._stop.wait(0.25):  # often enough for peaks that last seconds, cheap for the runs
            for d in glob.glob("/proc/[0-9]*"):
                try:
                    pid = int(d[6:])
                    if pid == me:
                        continue
                    cmd = open(f"{d}/cmdline", "rb").read().replace(b"\0", b" ")
                    rss = next(int(x.split()[1]) for x in open(f"{d}/status") if x.startswith("VmRSS")) / 1024
                except (OSError, StopIteration, ValueError):
                    continue
                if b"java" in cmd.split(b" ")[0]:
                    if b"SparkSubmit" in cmd or b"CoarseGrainedExecutor" in cmd:
                        self.jvm = max(self.jvm, rss)
                elif b"spark_daemon" in cmd or b"pyspark.daemon" in cmd or b"pyspark/worker" in cmd:
                    self.python = max(self.python, rss)


def events(folder: Path) -> dict:
    """From a Spark event log: each stage's wall time (s) and tasks' CPU time (s), and shuffle bytes written."""
    stages, cpu, shuffle = {}, {}, 0
    for f in folder.rglob("*"):
        if not f.is_file() or f.name.startswith("."):
            continue
        for line in open(f, errors="replace"):
            e = json.loads(line)
            if e["Event"] == "SparkListenerStageCompleted":
                i = e["Stage Info"]
                name = i["Stage Name"].split(" at ")[0]
                stages[i["Stage ID"]] = (name, (i["Completion Time"] - i["Submission Time"]) / 1000)
            elif e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics"):
                m = e["Task Metrics"]
                cpu[e["Stage ID"]] = cpu.get(e["Stage ID"], 0) + m.get("Executor CPU Time", 0) / 1e9
                shuffle += m.get("Shuffle Write Metrics", {}).get("Shuffle Bytes Written", 0)
    return {
        "stages": [(n, round(w, 2), round(cpu.get(k, 0), 2)) for k, (n, w) in sorted(stages.items())],
        "shuffle": shuffle,
    }


def pinned(cores: int | None) -> list[str]:
    """A command prefix that runs a process (and all it starts) on the first `cores` CPUs only."""
    return [] if cores is None else ["taskset", "-c", ",".join(map(str, range(cores)))]


def spark_run(master: str, paths, out: Path, target: int, env: dict | None = None, cores: int | None = None) -> dict:
    ev = Path(tempfile.mkdtemp(prefix="kw-ev-"))
    try:
        with Peak() as peak:
            r = subprocess.run(
                [*pinned(cores), sys.executable, "-c", JOB, master, str(out), str(target), str(ev), *map(str, paths)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=3600,
                env=env,
            )
        if r.returncode:
            sys.exit(r.stderr[-3000:])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res.update(events(ev), python_mb=round(peak.python), jvm_mb=round(peak.jvm))
        return res
    finally:
        shutil.rmtree(ev, ignore_errors=True)


def local_run(paths, out: Path, cores: int | None = None) -> dict:
    kw = str(Path(sys.executable).with_name("kafkawire"))
    argv = [*pinned(cores), kw, "land", *map(str, paths), "--out", str(out), "--quiet", "--mode", "overwrite"]
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)  # this process's own peak RSS, not every child's so far
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.exit(err[-3000:])
    return {"job": wall, "rss_mb": round(usage.ru_maxrss / 1024)}


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=336, help="sample replays in the 1x input (336: 141 MB)")
    ap.add_argument("--scale", default="1,4,16", help="input sizes, in multiples of --copies")
    ap.add_argument("--parts", type=int, default=16, help="files of the rotated set")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each job (medians)")
    ap.add_argument("--cluster", default="16", help="scales also run on a standalone cluster (1, then 2 workers)")
    ap.add_argument("--keep", help="make and keep the inputs in this folder (reused when there)")
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="copy this capture instead of samples/*.pcap (e.g. bench/out/small-1500.pcap: 1x = --copies of it)",
    )
    ap.add_argument("--source", action="store_true", help="also time the data source (exchanges) on the pcap")
    ap.add_argument(
        "--cluster-only", action="store_true", help="only the standalone cluster runs (no local engine, no local[N])"
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="one core means one CPU: the local engine and local[1] (JVM and Python workers) run on CPU 0 only, "
        "and each cluster Worker (its executor and Python workers) on a CPU of its own (taskset)",
    )
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kw-bench-spark-"))
    data = Path(a.keep) if a.keep else tmp
    data.mkdir(parents=True, exist_ok=True)
    cluster_scales = {int(x) for x in a.cluster.split(",") if x}
    print(f"{os.cpu_count()} cores, load {load()}; 1x = {a.copies} copies of samples/*.pcap; {a.repeat} run(s) each")
    rows = []
    try:
        for k in (int(x) for x in a.scale.split(",")):
            big = data / (f"{a.source.stem}-x{a.copies * k}.pcap" if a.source else f"x{k}.pcap")
            if not big.exists():
                make(a.copies * k, big, [a.source] if a.source else None)
            rot = data / f"rot-{big.stem}"
            if not rot.exists():
                rotate(big, rot, a.parts)
            size = big.stat().st_size
            for shape, paths in (("1 pcap, 64 MiB ranges", [big]), (f"{a.parts} rotated files", [rot])):
                res: dict = {}
                for _ in range(0 if a.cluster_only else a.repeat):
                    one = 1 if a.pin else None
                    res.setdefault("local", []).append(local_run(paths, tmp / "out", one))
                    for m, cores in (("local[1]", one), ("local[2]", None)):
                        res.setdefault(m, []).append(spark_run(m, paths, tmp / "out", 64 << 20, cores=cores))
                if k in cluster_scales:
                    res.update(cluster(tmp, paths, a.repeat, a.pin))
                if a.source and len(paths) == 1 and paths[0] == big:
                    res["source"] = [source_run("local[2]", big) for _ in range(a.repeat)]
                med = {m: statistics.median(r["job"] for r in v) for m, v in res.items() if m != "engines"}
                rows.append((k, shape, size, med, res))
                print(
                    json.dumps({"scale": k, "shape": shape, "bytes": size, "median_job": med, "runs": res}), flush=True
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload at the end {load()}\n")
    print(
        "| scale | input | GB | local engine | local[1] | local[2] | local[2] / local engine | local[2] / local[1] |"
        " s/GB local engine, local[2] | shuffle MB | peak RSS Python worker / JVM (local[2]) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, shape, size, med, res in rows:
        if "local" not in med:  # --cluster-only
            continue
        gb = size / 1e9
        r2 = res["local[2]"][0]
        print(
            f"| {k}x | {shape} | {gb:.2f} | {med['local']:.1f} s | {med['local[1]']:.1f} s | {med['local[2]']:.1f} s |"
            f" {med['local'] / med['local[2]']:.2f}x | {med['local[1]'] / med['local[2]']:.2f}x |"
            f" {med['local'] / gb:.1f}, {med['local[2]'] / gb:.1f} | {r2['shuffle'] / 1e6:.0f} |"
            f" {r2['python_mb']} / {r2['jvm_mb']} MiB |"
        )
    for k, shape, _, med, res in rows:
        if "source" in med:
            print(f"data source {k}x: {med['source']:.1f} s against land {med['local']:.1f} s")
        if "cluster 2x1" in med:
            print(
                f"cluster {k}x {shape}: 1 worker {med['cluster 1x1']:.1f} s, 2 workers {med['cluster 2x1']:.1f} s"
                f" -> {med['cluster 1x1'] / med['cluster 2x1']:.2f}x; tasks: {res['engines']}"
            )


def cluster(tmp: Path, paths, repeat: int, pin: bool = False) -> dict:
    """land_spark on a standalone cluster of one 1-core Worker, then of two, whose Python lacks kafkawire."""
    sys.path.insert(0, str(ROOT))
    from tests.spark_cluster import Cluster, deps_only_python, spark_env

    worker_py = deps_only_python(tmp / "py") if not (tmp / "py").exists() else str(tmp / "py" / "bin" / "python")
    out: dict = {}
    engines = set()
    for n in (1, 2):
        with Cluster(tmp / f"cluster{n}", cores=1, workers=n, memory="2g", pin=pin) as c:
            env = spark_env(PYSPARK_PYTHON=worker_py, PYSPARK_DRIVER_PYTHON=sys.executable)
            for _ in range(repeat):
                out.setdefault(f"cluster {n}x1", []).append(spark_run(c.url, paths, tmp / "out", 64 << 20, env))
            engines |= {" ".join(line.split()[5:8]) + " " + line.split()[-2].strip("(:") for line in c.task_lines()}
        shutil.rmtree(tmp / f"cluster{n}", ignore_errors=True)
    out["engines"] = sorted(engines)
    return out


if __name__ == "__main__":
    main()
