"""End-to-end `kafkawire dissect` vs tshark on the same capture, in the same run.

    python samples/make_captures.py bench --mtu1500      # once: bench/out/loopback{,-1500}.pcap
    python bench/bench_dissect.py [CAPTURE ...] [--port N] [--repeat N]

Default capture: bench/out/loopback-1500.pcap (real clients and broker,
re-segmented into 1500-byte-MTU segments). Each contender runs as its own
child process; wall time is the best of --repeat runs, peak RSS comes from
os.wait4's rusage of that child alone:

  kafkawire jsonl      python -m dissector.cli dissect FILE --port P --format jsonl > /dev/null
  kafkawire count      dissector.dissect(...) counting exchanges (library API, no output)
  tshark               tshark -o tcp.reassemble_out_of_order:TRUE -d tcp.port==P,kafka
                              -T fields -e kafka.api_key -e kafka.correlation_id -r FILE

Prints packets/s, MB/s (of capture file), peak RSS, and the throughput ratio
to tshark (higher is better for us) plus what each found (exchanges, Kafka PDUs).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker import first_syn_port  # noqa: E402

DEFAULT = ROOT / "bench" / "out" / "loopback-1500.pcap"

COUNT_SNIPPET = """
import sys
from dissector import dissect
ports = [int(p) for p in sys.argv[2:]]
n = a = 0
for x in dissect([sys.argv[1]], ports=ports):
    if x.type == "exchange":
        n += 1
    else:
        a += 1
print(n, a)
"""


def capture_facts(path: Path) -> tuple[int, int | None]:
    """(packets, broker port)."""
    import dpkt

    with open(path, "rb") as f:
        packets = sum(1 for _ in dpkt.pcap.UniversalReader(f))
    return packets, first_syn_port(path)


def run(cmd: list[str], stdout) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KiB, exit status) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT)
    # wait4 gives this child's own rusage; RUSAGE_CHILDREN would be the max over all.
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, usage.ru_maxrss, proc.returncode


def best_of(n: int, cmd: list[str], out_path: Path | None = None) -> tuple[float, int]:
    walls, rss = [], 0
    for _ in range(n):
        with open(out_path or os.devnull, "wb") as out:
            wall, peak, _ = run(cmd, out)
        walls.append(wall)
        rss = max(rss, peak)
    return min(walls), rss


def bench_file(path: Path, port: int | None, repeat: int, tshark: str | None) -> None:
    size = path.stat().st_size
    packets, found_port = capture_facts(path)
    port = port or found_port or 9092
    print(f"\n{path}  {size / 1e6:.1f} MB, {packets} packets, broker port {port}")
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        wall, rss = best_of(repeat, [py, "-m", "dissector.cli", "dissect", str(path), "--port", str(port),
                                     "--format", "jsonl"])
        rows.append(("kafkawire dissect --format jsonl", wall, rss, ""))
        wall, rss = best_of(repeat, [py, "-c", COUNT_SNIPPET, str(path), str(port)], out)
        n, anomalies = out.read_text().split()
        rows.append(("kafkawire dissect() exchanges-only count", wall, rss, f"{n} exchanges, {anomalies} anomalies"))
        if tshark:
            wall, rss = best_of(repeat, [tshark, "-o", "tcp.reassemble_out_of_order:TRUE", "-d", f"tcp.port=={port},kafka",
                                         "-T", "fields", "-e", "kafka.api_key", "-e", "kafka.correlation_id",
                                         "-r", str(path)], out)
            pdus = sum(len(line.split("\t")[0].split(",")) for line in out.read_text().splitlines()
                       if line.split("\t")[0])
            rows.append(("tshark -T fields kafka.api_key,correlation_id", wall, rss, f"{pdus} Kafka PDUs"))
    ref = rows[-1][1] if tshark else None
    print(f"{'':46} {'seconds':>8} {'packets/s':>11} {'MB/s':>7} {'peak RSS':>9} {'vs tshark':>9}  found")
    for name, wall, rss, found in rows:
        ratio = f"{ref / wall:8.2f}x" if ref else "        -"
        print(f"{name:46} {wall:8.2f} {packets / wall:11,.0f} {size / 1e6 / wall:7.1f} {rss / 1024:7.0f}MB {ratio}  {found}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*", type=Path, default=[DEFAULT])
    ap.add_argument("--port", type=int, help="broker port (default: destination of the first SYN)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the best wall time counts")
    args = ap.parse_args(argv)
    missing = [p for p in args.captures if not p.is_file()]
    if missing:
        print(f"missing {missing[0]}: make it with `python samples/make_captures.py bench --mtu1500`", file=sys.stderr)
        return 2
    tshark = shutil.which("tshark")
    if not tshark:
        print("tshark not found: measuring kafkawire only", file=sys.stderr)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for path in args.captures:
        bench_file(path, args.port, args.repeat, tshark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
