"""The Spark engine's speed-up: local[2] vs local[1], on rotated files and on one big pcap split into ranges,
and time per GB as the input grows 1x, 4x, 16x.

    python bench/bench_spark.py [--copies N] [--scale 1,4,16] [--repeat R]

Input: the samples/*.pcap captures (real clients, real brokers) laid end to end (a copy lasts about a
minute) and replayed N times into one pcap, each copy moved to its own addresses (127.0.k.x) and a later
time so connections stay distinct, then the same packets rotated into 8 files (tcpdump -C style,
connections cut at the edges). Spark's own start in every job (JVM, Python daemon and workers) is fixed,
so the speed-up grows with --copies. Each job runs in a fresh
spark-submit-like process (a new JVM), so a run's time includes Spark's start-up, as a user's would.
"""
from __future__ import annotations

import argparse
import os
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
                    b = bytearray(buf)   # a.K1.K2.d: each copy its own hosts, both directions alike
                    b[27] = b[31] = k // 250
                    b[28] = b[32] = 1 + k % 250
                    buf = bytes(b)
                w.writepkt(buf, t0 + (ts - t0) + k * span)
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
            for ts, buf in recs[len(recs) * i // parts:len(recs) * (i + 1) // parts]:
                w.writepkt(buf, ts)
        files.append(p)
    return files


JOB = """
import sys, time
from landing.spark import session, land_spark
spark = session(sys.argv[1])
t = time.perf_counter()
counts, _ = land_spark(sys.argv[4:], sys.argv[2], spark=spark, target_bytes=int(sys.argv[3]), catalog=False)
print(time.perf_counter() - t, counts["exchanges"])
"""


def run(master: str, paths, out: Path, target: int) -> tuple[float, float, int]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", JOB, master, str(out), str(target), *map(str, paths)],
                       capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    job, n = r.stdout.split()[-2:]
    return wall, float(job), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=40, help="sample replays in the 1x input")
    ap.add_argument("--scale", default="1,4,16", help="input sizes for time per GB (multiples of --copies)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kw-bench-spark-"))
    big = make(a.copies, tmp / "big.pcap")
    size = big.stat().st_size
    files = rotate(big, tmp / "rot")
    print(f"input: {size / 1e6:.1f} MB, {a.copies} copies of samples/*.pcap; 8 rotated files; 1 pcap in ranges")
    for label, paths, target in (("8 rotated files", files, 64 << 20), ("1 pcap, ranges", [big], size // 8 + 1)):
        res = {}
        for m in ("local[1]", "local[2]"):
            res[m] = []
        for _ in range(a.repeat):   # interleaved, so both feel the same machine load
            for m in res:
                res[m].append(run(m, paths, tmp / "out", target))
        med = {m: (statistics.median(w for w, _, _ in v), statistics.median(j for _, j, _ in v)) for m, v in res.items()}
        print(f"{label}: local[1] job {med['local[1]'][1]:.1f} s (wall {med['local[1]'][0]:.1f}), "
              f"local[2] job {med['local[2]'][1]:.1f} s (wall {med['local[2]'][0]:.1f}); "
              f"speed-up job {med['local[1]'][1] / med['local[2]'][1]:.2f}x, "
              f"wall {med['local[1]'][0] / med['local[2]'][0]:.2f}x")
    for k in (int(s) for s in a.scale.split(",")):
        p = make(a.copies * k, tmp / f"x{k}.pcap")
        gb = p.stat().st_size / 1e9
        w, j, n = run("local[2]", [p], tmp / "out", p.stat().st_size // 8 + 1)
        print(f"{k}x: {gb * 1000:.0f} MB, {n:,} exchanges, local[2] job {j:.1f} s = {j / gb:.0f} s/GB (wall {w:.1f} s)")
        p.unlink()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
