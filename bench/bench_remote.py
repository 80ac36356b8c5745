"""Captures read from an object store against the same captures on local disk: `kafkawire land`
(the local engine) and `kafkawire dissect --format jsonl`, each run a fresh process, the two inputs
in turn (A B A B ...), ratios pair by pair and their median.

    python bench/bench_remote.py [--copies 332] [--repeat 5] [--keep DIR]

Input: bench_spark.make()'s capture (samples/*.pcap replayed --copies times on distinct addresses;
332 copies = ~363 MB, the realistic-profile size the lakehouse issue names), on local disk and
uploaded to a SeaweedFS S3 store on 127.0.0.1 (tests/object_store.py, the tests' store). The store
runs on the same 2 cores as kafkawire, so its own CPU is in the remote figures: on a real store it
is on other machines, and a real network adds latency that the read-ahead (dissector.fs) hides.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_spark import make  # noqa: E402

from tests.object_store import ObjectStore  # noqa: E402


def timed(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MB) of one process."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status):
        sys.exit(p.stderr.read().decode(errors="replace")[-3000:])
    return wall, usage.ru_utime + usage.ru_stime, round(usage.ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=332, help="sample replays in the input (332: ~363 MB)")
    ap.add_argument("--repeat", type=int, default=5, help="pairs of runs of each command")
    ap.add_argument("--keep", help="make and keep the input in this folder (reused when there)")
    args = ap.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kafkawire-bench-remote-"))
    work.mkdir(parents=True, exist_ok=True)
    cap = work / f"input-{args.copies}.pcap"
    if not cap.exists():
        make(args.copies, cap)
    size = cap.stat().st_size
    kw = str(Path(sys.executable).with_name("kafkawire"))
    with ObjectStore(Path(tempfile.mkdtemp(prefix="kafkawire-store-"))) as store:
        store.make_bucket("bench")
        uri = f"s3://bench/{cap.name}"
        store.upload(cap, uri)
        env = {**os.environ, **store.env()}
        print(f"input: {size / 1e6:.0f} MB, {args.repeat} pairs, store {store.endpoint}")
        jobs = {
            "land": lambda src: [kw, "land", src, "--out", str(work / "tables"), "--mode", "overwrite", "--quiet"],
            "dissect jsonl": lambda src: [kw, "dissect", src, "--format", "jsonl"],
        }
        for name, argv in jobs.items():
            ratios, local, remote = [], [], []
            timed(argv(uri), env)  # warm-up: the store's caches and the page cache, both
            for _ in range(args.repeat):
                a = timed(argv(str(cap)), env)
                b = timed(argv(uri), env)
                local.append(a)
                remote.append(b)
                ratios.append(a[0] / b[0])  # speed of remote relative to local (1.0: as fast)
            med = statistics.median
            print(
                f"{name:14} local {med(x[0] for x in local):6.2f} s ({size / 1e6 / med(x[0] for x in local):5.0f} MB/s, "
                f"RSS {max(x[2] for x in local)} MB)  remote {med(x[0] for x in remote):6.2f} s "
                f"(RSS {max(x[2] for x in remote)} MB)  remote speed / local: median {med(ratios):.2f} "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
