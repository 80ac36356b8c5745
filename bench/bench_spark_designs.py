"""Spark stage-1 designs measured against each other on one input, in one session (local[2]):

    python bench/bench_spark_designs.py [--copies 1344] [--repeat 3] [--keep DIR]

- chunks (the design landing.spark runs): a range's packets leave as one row per ~1 MB Arrow
  packet batch (its IPC bytes), shuffled by bucket; stage 2 puts them back in order itself;
- packets: the same Arrow batches, but exploded into one DataFrame row per packet (the layout a
  DataFrame job would have if Spark moved the packets themselves), shuffled by bucket and sorted
  by (task, index) in the JVM, as stage 2 would need them;
- range-local: no shuffle at all, each range task dissects its own range on the native core and
  writes its tables (connections cut at every range edge: NOT land's tables; the floor a design
  that only moves the edges could approach).

For chunks and packets the job is stage 1 and the shuffle into a no-op sink (what the transport
costs); for range-local, the whole landing. Figures: wall time per stage from Spark's event log,
shuffle bytes written, and the input's MB/s; medians of --repeat runs.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_spark import events, make  # noqa: E402


def _packets(batches, tasks, n, keys):
    """Stage 1 with a row per packet: the native range scan's batches, a bucket key and order added."""
    import pyarrow as pa

    from dissector.ranges import scan
    from landing.spark import _task

    for ids in batches:
        for i in ids.column(0).to_pylist():
            no, r, rank = _task(tasks[i])
            for b, _, batch in scan(r, rank, 0, buckets=n):
                k = batch.num_rows
                yield batch.append_column("part", pa.array([keys[b]] * k, pa.int32())).append_column(
                    "task", pa.array([no] * k, pa.int32())
                )


def _local(batches, tasks, out):
    """Range-local: each range dissected alone, its tables written (no shuffle)."""
    import pyarrow as pa

    from dissector import native
    from dissector.ranges import lander_input, scan
    from landing.writer import LocalWriter, drain_native, native_columns

    for ids in batches:
        for i in ids.column(0).to_pylist():
            from landing.spark import _task

            no, r, rank = _task(tasks[i])
            s = scan(r, rank, 0, buckets=1)
            lander = native.lander(
                [], ports=(), columns=native_columns(), packets=lander_input(b for _, _, b in s), end=(0.0, None)
            )
            w = LocalWriter(out, native=lander, overwrite=False, part=f"part-{no}", empty_files=False)
            counts = drain_native(w)
            yield pa.RecordBatch.from_pydict({"n": [counts["exchanges"]]})


def one(design: str, big: str, out: str) -> float:
    """One design's job in this process's own session (its event log in the conf): its wall time."""
    from dissector.ranges import PACKET_COLUMNS
    from landing import spark as S

    spark = S.session("local[2]", conf=json.loads(os.environ["KW_CONF"]))
    tasks = S.plan([big], S.TARGET_BYTES)
    n = spark.sparkContext.defaultParallelism
    keys = S._part_keys(n)
    plain = [S._plain(t) for t in tasks]
    ship = S._ship_of(spark.sparkContext)
    ids = spark.range(0, len(tasks), 1, len(tasks))
    types = {"float64": "double", "int64": "long", "int32": "int", "int16": "short"}
    packet_schema = ", ".join(f"`{c}` {types.get(t, t)}" for c, t in PACKET_COLUMNS)
    if design == "chunks":
        df = ids.mapInArrow(S._remote(ship, None, "_scan_arrow", plain, n, keys), S._STAGE1).repartition(n, "part")
    elif design == "packets":
        df = ids.mapInArrow(_remote_here("_packets", plain, n, keys), packet_schema + ", part int, task int")
        df = df.repartition(n, "part").sortWithinPartitions("task", "index")
    else:
        df = ids.mapInArrow(_remote_here("_local", plain, out), "n long")
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - t
    spark.stop()
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=1344, help="sample replays (1344: 564 MB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="folder to make and keep the input in")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(one(*a.one))
        return
    tmp = Path(tempfile.mkdtemp(prefix="kw-designs-"))
    data = Path(a.keep) if a.keep else tmp
    big = data / f"x{a.copies // 336}.pcap" if a.copies % 336 == 0 else data / f"designs-{a.copies}.pcap"
    if not big.exists():
        make(a.copies, big)
    size = big.stat().st_size
    print(f"input {big.name} {size / 1e6:.0f} MB; local[2]; load {os.getloadavg()[0]:.2f}")
    res: dict = {}
    try:
        for _ in range(a.repeat):
            for design in ("chunks", "packets", "range-local"):
                ev = tmp / "ev"
                shutil.rmtree(ev, ignore_errors=True)
                ev.mkdir()
                shutil.rmtree(tmp / "local", ignore_errors=True)
                conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(ev)}
                conf.update({"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"})
                r = subprocess.run(
                    [sys.executable, __file__, "--one", design, str(big), str(tmp / "local")],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "KW_CONF": json.dumps(conf)},
                    cwd=ROOT,
                    timeout=3600,
                )
                if r.returncode:
                    sys.exit(r.stderr[-3000:])
                res.setdefault(design, []).append((float(r.stdout.split()[-1]), events(ev)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| design | job (median) | MB/s of input | shuffle written | stages: wall s (JVM CPU s) |")
    print("| --- | --- | --- | --- | --- |")
    for design, runs in res.items():
        w = statistics.median(x[0] for x in runs)
        ev = runs[0][1]
        stages = "; ".join(f"{wall} ({cpu})" for _, wall, cpu in ev["stages"])
        print(f"| {design} | {w:.2f} s | {size / 1e6 / w:.0f} | {ev['shuffle'] / 1e6:.0f} MB | {stages} |")


def _remote_here(name, *bound):
    """A task function calling this module's `name` (the bench runs from the checkout, local mode)."""

    def run(batches):
        sys.path.insert(0, str(ROOT / "bench"))
        import bench_spark_designs as me

        return getattr(me, name)(batches, *bound)

    return run


if __name__ == "__main__":
    main()
