"""CPU used by `kafkawire top` at a given exchange rate (default 10k exchanges/s).

    python bench/bench_top.py [--rate 10000] [--seconds 20] [--prometheus]

The exchanges of every bundled sample (samples/*.pcap) are re-timed into a stream of `--rate` exchanges
per second of capture time (each keeps its own latency, sizes, error codes and bodies) and played
through top's own loop (kafkawire.top.command.loop: the Player, the model, a redraw every second
of an 80x24 view on a rich Console writing to /dev/null) at speed 1 for `--seconds` seconds of wall
time. It prints the exchanges fed per wall second and the CPU seconds used per wall second
(time.process_time: every thread of the process, the source thread handing items over included; the
dissector's own cost is not: the items are made before the clock starts). --prometheus: with the
metrics exporter on (kafkawire.metrics, serving on a free 127.0.0.1 port), as `top --prometheus`.
The items carry their topics (dissect(by_topic=True)), as top's do; --no-topics: without them (the
model then keeps no topic grouping), the cost of top before it had one.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def template(by_topic: bool = True) -> list:
    import dissector

    out = []
    for path in sorted(glob.glob(str(ROOT / "samples" / "*.pcap"))):
        items = dissector.dissect([path], by_topic=by_topic)
        out.extend(i for i in items if i.type == "exchange" and i.ts is not None)
    return out


def stream(base: list, rate: float, n: int, t0: float) -> list:
    """n exchanges from `base`, in turn, one every 1/rate s of capture time from t0."""
    out = []
    for k in range(n):
        x = base[k % len(base)]
        ts = t0 + k / rate
        rts = None if x.response_ts is None else ts + (x.response_ts - x.ts)
        out.append(dataclasses.replace(x, ts=ts, response_ts=rts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--prometheus", action="store_true", help="with the metrics exporter on")
    ap.add_argument(
        "--no-topics", action="store_true", help="items without their topics (no topic grouping), as before it"
    )
    a = ap.parse_args()
    from rich.console import Console

    from kafkawire.top.command import Player, loop
    from kafkawire.top.model import TopModel
    from kafkawire.top.view import View

    base = template(not a.no_topics)
    items = stream(base, a.rate, int(a.rate * (a.seconds + 2)), 1_800_000_000.0)
    print(f"{len(base)} distinct exchanges from samples/*.pcap, {len(items):,} in the stream at {a.rate:,.0f}/s")
    devnull = open(os.devnull, "w")  # noqa: SIM115
    console = Console(file=devnull, force_terminal=True, width=80, height=24, color_system="truecolor")
    args = argparse.Namespace(duration=a.seconds, once=False, interval=1.0)
    model = TopModel(window=1.0)
    fed = {"n": 0}

    add = model.add

    def counted(item):
        fed["n"] += 1
        add(item)

    model.add = counted  # type: ignore[method-assign]
    source = Player(items, speed=1.0)
    exporter = None
    if a.prometheus:
        from kafkawire.metrics import Exporter
        from tests.broker import free_port

        exporter = Exporter()
        exporter.serve(f"127.0.0.1:{free_port()}")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    loop(source, model, View(), args, "x1", "bench", live=False, console=console, exporter=exporter)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(f"fed {fed['n']:,} exchanges in {wall:.1f} s wall: {fed['n'] / wall:,.0f} exchanges/s")
    print(f"CPU {cpu:.2f} s: {cpu / wall:.3f} CPU seconds per wall second ({100 * cpu / wall:.1f}% of one core)")
    snap = model.snapshot("api")
    print(f"model: {snap.total.requests:,} requests, {len(snap.rows)} APIs, in flight {snap.total.in_flight}")


if __name__ == "__main__":
    main()
