"""The Spark engine's speed-up, local[2] vs local[1], on rotated files and on one big pcap split into
byte ranges, at 1x, 4x and 16x input, and its time per GB.

    python bench/bench_spark.py [--copies N] [--scale 1,4,16] [--repeat R] [--daemon kafkawire|pyspark]

Input: the samples/*.pcap captures (real clients, real brokers) laid end to end (a copy lasts about a
minute) and replayed N times (x scale) into one pcap, each copy moved to its own addresses
(127.0.k.x) and a later time so connections stay distinct, then the same packets rotated into 8
files (tcpdump -C style, connections cut at the edges); the pcap is landed in 8 byte ranges, so
both shapes run 8 stage-1 tasks.  Each job runs in a fresh process (a new JVM, as `kafkawire land
--engine spark` would); job = land_spark alone, wall = the whole process with Spark's start.
local[1] and local[2] runs alternate, and medians are reported (and the best runs, as other work
on the machine only ever adds time): the load average is printed at the start and the end.
`--daemon pyspark` runs PySpark's own worker daemon instead of landing.spark_daemon (the
figures before it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dpkt

ROOT = Path(__file__).resolve().parents[1]


def make(copies: int, out: Path) -> Path:
    base = []
    for p in sorted((ROOT / "samples").glob("*.pcap")):
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
from landing.spark import session, land_spark
spark = session(sys.argv[1], conf=json.loads(sys.argv[2]))
t = time.perf_counter()
# every repeat lands into the same directory: replace the last one's tables, as before modes
counts, _ = land_spark(
    sys.argv[5:], sys.argv[3], spark=spark, target_bytes=int(sys.argv[4]), catalog=False, mode="overwrite"
)
job = time.perf_counter() - t
print(job, counts["exchanges"], spark.sparkContext.getConf().get("spark.python.daemon.module", "pyspark.daemon"))
"""
MASTERS = ("local[1]", "local[2]")


def run(master: str, conf: dict, paths, out: Path, target: int) -> tuple[float, float, int, str]:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", JOB, master, json.dumps(conf), str(out), str(target), *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    job, n, daemon = r.stdout.split()[-3:]
    return wall, float(job), int(n), daemon


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=40, help="sample replays in the 1x input (40: 16.8 MB)")
    ap.add_argument("--scale", default="1,4,16", help="input sizes, in multiples of --copies")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each job (medians)")
    ap.add_argument(
        "--daemon",
        choices=("kafkawire", "pyspark"),
        default="kafkawire",
        help="the Python worker daemon in local mode (pyspark: PySpark's own, as before landing.spark_daemon)",
    )
    a = ap.parse_args()
    conf = {"spark.python.daemon.module": "pyspark.daemon"} if a.daemon == "pyspark" else {}
    tmp = Path(tempfile.mkdtemp(prefix="kw-bench-spark-"))
    print(
        f"{os.cpu_count()} cores, load average {load()}; input 1x = {a.copies} copies of samples/*.pcap; "
        f"medians of {a.repeat} interleaved runs"
    )
    rows = []
    try:
        for k in (int(x) for x in a.scale.split(",")):
            big = make(a.copies * k, tmp / f"x{k}.pcap")
            size = big.stat().st_size
            files = rotate(big, tmp / f"rot{k}")
            for label, paths, target in (
                ("8 rotated files", files, 64 << 20),
                ("1 pcap, 8 ranges", [big], size // 8 + 1),
            ):
                res: dict[str, list] = {m: [] for m in MASTERS}
                for _ in range(a.repeat):  # interleaved, so both feel the same machine load
                    for m in MASTERS:
                        res[m].append(run(m, conf, paths, tmp / "out", target))
                job = {m: statistics.median(r[1] for r in v) for m, v in res.items()}
                best = {m: min(r[1] for r in v) for m, v in res.items()}  # other work only ever adds time
                wall = {m: statistics.median(r[0] for r in v) for m, v in res.items()}
                n, daemon = res["local[2]"][0][2], res["local[2]"][0][3]
                gb = size / 1e9
                rows.append((k, label, size, job, wall))
                print(
                    f"{k:>2}x {label:16} {size / 1e6:6.1f} MB, {n:,} exchanges: job local[1] {job['local[1]']:.2f} s, "
                    f"local[2] {job['local[2]']:.2f} s -> {job['local[1]'] / job['local[2]']:.2f}x "
                    f"(wall {wall['local[1]']:.1f} / {wall['local[2]']:.1f} s -> {wall['local[1]'] / wall['local[2]']:.2f}x); "
                    f"s/GB local[1] {job['local[1]'] / gb:.0f}, local[2] {job['local[2]'] / gb:.0f}; "
                    f"best {best['local[1]']:.2f} / {best['local[2]']:.2f} s -> {best['local[1]'] / best['local[2]']:.2f}x; "
                    f"runs local[1] {[round(r[1], 2) for r in res['local[1]']]} local[2] {[round(r[1], 2) for r in res['local[2]']]}; "
                    f"daemon {daemon}; load {load()}",
                    flush=True,
                )
            shutil.rmtree(tmp / f"rot{k}", ignore_errors=True)
            big.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at the end {load()}")
    print("| scale | input | MB | local[1] / local[2] job | speed-up (job, wall) | s/GB local[1] / local[2] |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, label, size, job, wall in rows:
        print(
            f"| {k}x | {label} | {size / 1e6:.1f} | {job['local[1]']:.2f} / {job['local[2]']:.2f} s | "
            f"{job['local[1]'] / job['local[2]']:.2f}x, {wall['local[1]'] / wall['local[2]']:.2f}x | "
            f"{job['local[1]'] / (size / 1e9):.0f} / {job['local[2]'] / (size / 1e9):.0f} |"
        )


if __name__ == "__main__":
    main()
