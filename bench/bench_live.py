"""Latency of a live pipe: from a response on the wire to its line out of `kafkawire dissect -`.

    python bench/bench_live.py [--seconds 20] [--rate 50]

A Tansu broker on loopback; `tcpdump -i lo -U -w - 'tcp port P' | kafkawire dissect - --format jsonl`;
a kafka-python producer sending `--rate` records a second (linger 0, acks=1) and a consumer reading
them. Each jsonl line is stamped (wall clock) as it arrives, and compared with its exchange's
`response_ts`, the capture time (the same clock) of the first byte of the answer: that is the
whole pipeline's delay, tcpdump's buffering included. Reported as median, p99 and max, for the
default order (request-time order, the 5 s window) and for `--order arrival`, piped from tcpdump -U
(as the issue names it), from tcpdump -U --immediate-mode (no kernel buffer timeout), and through
`kafkawire dissect -i lo` (dumpcap). Needs root (tcpdump).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker import Broker  # noqa: E402


SOURCES = {
    "tcpdump -U": ["-U"],
    "tcpdump -U --immediate-mode": ["-U", "--immediate-mode"],
    "kafkawire -i lo (dumpcap)": None,
}


def run(order: str, seconds: float, rate: float, source: str = "tcpdump -U") -> dict:
    from kafka import KafkaConsumer, KafkaProducer

    with Broker() as broker:
        port = broker.port
        flags = SOURCES[source]
        kafkawire = [sys.executable, "-m", "kafkawire", "dissect", "--port", str(port), "--format", "jsonl"]
        kafkawire += ["--order", order]
        if flags is None:
            dump = None
            kw = subprocess.Popen(
                [*kafkawire, "-i", "lo"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        else:
            dump = subprocess.Popen(
                ["tcpdump", "-Z", "root", "-i", "lo", *flags, "-s", "0", "-w", "-", f"tcp port {port}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            kw = subprocess.Popen(
                [*kafkawire, "-"], stdin=dump.stdout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            dump.stdout.close()
        got: list[tuple[float, dict]] = []

        def read():
            for line in kw.stdout:
                got.append((time.time(), json.loads(line)))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        time.sleep(1.0)
        prod = KafkaProducer(bootstrap_servers=broker.address, client_id="lat-producer", linger_ms=0, acks=1)
        cons = KafkaConsumer(
            "lat", bootstrap_servers=broker.address, client_id="lat-consumer", group_id="lat", fetch_max_wait_ms=100
        )
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            prod.send("lat", b"v%d" % i)
            cons.poll(timeout_ms=0)
            i += 1
            time.sleep(1 / rate)
        prod.flush()
        prod.close()
        cons.close()
        time.sleep(1.0)
        if dump is not None:
            dump.terminate()
            dump.wait(timeout=10)
        else:
            kw.send_signal(signal.SIGINT)
        kw.wait(timeout=30)
        t.join(10)
    delays = [
        (seen - x["response_ts"]) * 1000
        for seen, x in got
        if x.get("type") == "exchange" and x.get("response_ts") and x.get("status") == "ok"
    ]
    delays.sort()
    return {
        "source": source,
        "order": order,
        "exchanges": len(delays),
        "median_ms": statistics.median(delays),
        "p99_ms": delays[min(len(delays) - 1, int(len(delays) * 0.99))],
        "max_ms": delays[-1],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0)
    a = ap.parse_args(argv)
    print(f"{'source':28} {'order':8} {'exchanges':>9} {'median ms':>10} {'p99 ms':>8} {'max ms':>8}")
    for source in SOURCES:
        for order in ("window", "arrival"):
            r = run(order, a.seconds, a.rate, source)
            print(
                f"{source:28} {r['order']:8} {r['exchanges']:9} {r['median_ms']:10.1f} {r['p99_ms']:8.1f}"
                f" {r['max_ms']:8.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
