"""End-to-end `kafkawire dissect` vs tshark on the same captures, in the same run.

    python samples/make_captures.py bench-small --netns kwbench   # once: bench/out/small-1500.pcap
    python samples/make_captures.py bench --netns kwbench         # once: bench/out/large-1500.pcap
    python bench/bench_dissect.py [CAPTURE ...] [--repeat N] [--port N] [--tree-rss] [--json FILE] [--land]

Default captures: bench/out/small-1500.pcap and bench/out/large-1500.pcap
(whichever exist; else bench/out/loopback-1500.pcap). Each contender runs as
its own child process, stdout to /dev/null:

  jsonl   python -m kafkawire dissect FILE --port P --format jsonl
  text    python -m kafkawire dissect FILE --port P --format text
  land    python -m kafkawire land FILE --port P --out TMP --quiet   (with --land)
  tshark  tshark -o tcp.reassemble_out_of_order:TRUE -d tcp.port==P,kafka
                 -T fields -e kafka.api_key -e kafka.correlation_id -r FILE

Each command runs as a user's would, on the native core (one process).

Before timing, one untimed run of jsonl and of tshark per capture counts what
each found (exchanges; Kafka PDUs tshark printed) and warms the page cache.
Then the contenders run interleaved, jsonl text tshark jsonl text tshark ...,
--repeat rounds, so a drift in machine speed hits all of them alike. Printed
per contender: best and median wall seconds, packets/s, exchanges/s (our
exchange count for every contender, tshark included, so the rates compare),
MB/s of capture file, the throughput ratio to tshark (tshark wall / ours,
higher is better for us; best/best and median of per-round ratios), CPU
seconds (user + sys) and their ratio to tshark's, which moves less than
wall time on a busy machine, and peak RSS.

Peak RSS is os.wait4's ru_maxrss: the largest single process among the child
and the children it reaped, not their sum. With --tree-rss the script also
samples the sum of VmRSS over the child's whole process tree every 0.1 s (it
scans /proc, which costs a little CPU): the figure that matters if dissect
ever shards connections across worker processes.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker import first_syn_port, pcap_facts  # noqa: E402

OUT = ROOT / "bench" / "out"
DEFAULTS = [OUT / "small-1500.pcap", OUT / "large-1500.pcap"]
FALLBACK = OUT / "loopback-1500.pcap"
MAKE_HINT = (
    "make them with `python samples/make_captures.py bench-small --netns kwbench` and "
    "`python samples/make_captures.py bench --netns kwbench` (root; see bench/README.md)"
)


def contenders(path: Path, port: int, tshark: str | None, land_out: Path | None = None) -> dict[str, list[str]]:
    kw = [sys.executable, "-m", "kafkawire", "dissect", str(path), "--port", str(port), "--format"]
    cmds = {"jsonl": kw + ["jsonl"], "text": kw + ["text"]}
    if land_out is not None:
        cmds["land"] = [
            sys.executable,
            "-m",
            "kafkawire",
            "land",
            str(path),
            "--port",
            str(port),
            "--out",
            str(land_out),
            "--mode",
            "overwrite",  # every repeat lands into the same directory
            "--quiet",
        ]
    if tshark:
        cmds["tshark"] = [
            tshark,
            "-o",
            "tcp.reassemble_out_of_order:TRUE",
            "-d",
            f"tcp.port=={port},kafka",
            "-T",
            "fields",
            "-e",
            "kafka.api_key",
            "-e",
            "kafka.correlation_id",
            "-r",
            str(path),
        ]
    return cmds


def _tree_rss_kib(root: int) -> int:
    """Sum of VmRSS over `root` and its descendants, from one /proc scan."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
                # the command name may hold spaces or parentheses: ppid follows the last ')'
                parent[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            pass
    return total


class Run:
    """One child process: wall seconds, CPU seconds, peak RSS (KiB)."""

    def __init__(self, cmd: list[str], stdout, tree_rss: bool = False):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT)
        self.tree_kib = 0
        done = threading.Event()
        sampler = None
        if tree_rss:

            def sample() -> None:
                while not done.wait(0.1):
                    self.tree_kib = max(self.tree_kib, _tree_rss_kib(proc.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        err = proc.stderr.read()  # until the child closes it; it is small (warnings at most)
        # wait4 gives this child's own rusage (and that of the children it reaped).
        _pid, status, usage = os.wait4(proc.pid, 0)
        self.wall = time.perf_counter() - t0
        done.set()
        if sampler:
            sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()
        if proc.returncode != 0:
            raise SystemExit(
                f"{' '.join(cmd[:6])} ... failed ({proc.returncode}): {err.decode(errors='replace').strip()[-500:]}"
            )
        self.cpu = usage.ru_utime + usage.ru_stime
        self.rss_kib = usage.ru_maxrss


def count_exchanges(jsonl: Path) -> tuple[int, int]:
    """(exchanges, other rows) in a dissect jsonl file."""
    n = other = 0
    with open(jsonl, "rb") as f:
        for line in f:
            if json.loads(line).get("type") == "exchange":
                n += 1
            else:
                other += 1
    return n, other


def count_pdus(fields: Path) -> int:
    """Kafka PDUs, requests and responses, in tshark's `-e kafka.api_key -e
    kafka.correlation_id` output: every PDU has a correlation id, while a
    response has an api_key only when tshark matched its request."""
    n = 0
    with open(fields, encoding="utf-8", errors="replace") as f:
        for line in f:
            ids = line.rstrip("\n").split("\t")[-1]
            if ids.strip():
                n += len(ids.split(","))
    return n


def bench_file(
    path: Path,
    port: int | None,
    repeat: int,
    tshark: str | None,
    tree_rss: bool,
    land: bool = False,
) -> dict:
    size = path.stat().st_size
    packets, largest, _ = pcap_facts(path)
    port = port or first_syn_port(path) or 9092
    land_dir = Path(tempfile.mkdtemp(prefix="kafkawire-bench-land-")) if land else None
    cmds = contenders(path, port, tshark, land_dir)
    print(f"\n{path}  {size / 1e6:.1f} MB, {packets} packets (largest {largest} B), broker port {port}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with open(out, "wb") as f:
            Run(cmds["jsonl"], f)
        exchanges, other = count_exchanges(out)
        pdus = None
        if tshark:
            with open(out, "wb") as f:
                Run(cmds["tshark"], f)
            pdus = count_pdus(out)
    print(
        f"found: {exchanges} exchanges, {other} other rows (kafkawire); "
        + (f"{pdus} Kafka PDUs, requests + responses (tshark)" if tshark else "no tshark"),
        flush=True,
    )

    runs: dict[str, list[Run]] = {name: [] for name in cmds}
    for r in range(repeat):
        for name, cmd in cmds.items():
            with open(os.devnull, "wb") as devnull:
                runs[name].append(Run(cmd, devnull, tree_rss))
        print(f"  round {r + 1}/{repeat}: " + "  ".join(f"{n} {runs[n][-1].wall:.2f}s" for n in cmds), flush=True)

    rows = {}
    for name, rs in runs.items():
        walls = [x.wall for x in rs]
        row = {
            "best_s": min(walls),
            "median_s": statistics.median(walls),
            "cpu_s": statistics.median(x.cpu for x in rs),
            "peak_rss_mib": max(x.rss_kib for x in rs) / 1024,
        }
        if tree_rss:
            row["tree_rss_mib"] = max(x.tree_kib for x in rs) / 1024
        if tshark and name != "tshark":
            row["vs_tshark_best"] = min(x.wall for x in runs["tshark"]) / row["best_s"]
            row["vs_tshark_median"] = statistics.median(
                t.wall / x.wall for t, x in zip(runs["tshark"], rs, strict=True)
            )
            row["vs_tshark_cpu"] = statistics.median(t.cpu / x.cpu for t, x in zip(runs["tshark"], rs, strict=True))
        rows[name] = row

    hdr = (
        f"{'':8} {'best s':>7} {'median s':>8} {'packets/s':>10} {'exch/s':>8} {'MB/s':>6} "
        f"{'vs tshark':>15} {'cpu s':>6} {'cpu vs':>6} {'peak RSS':>9}" + (f" {'tree RSS':>9}" if tree_rss else "")
    )
    print(hdr)
    for name, row in rows.items():
        ratio = (
            f"{row['vs_tshark_best']:6.2f}x/{row['vs_tshark_median']:5.2f}x"
            if "vs_tshark_best" in row
            else f"{'-':>15}"
        )
        cpu_ratio = f"{row['vs_tshark_cpu']:5.2f}x" if "vs_tshark_cpu" in row else "-"
        line = (
            f"{name:8} {row['best_s']:7.2f} {row['median_s']:8.2f} {packets / row['best_s']:10,.0f} "
            f"{exchanges / row['best_s']:8,.0f} {size / 1e6 / row['best_s']:6.1f} {ratio:>15} "
            f"{row['cpu_s']:6.2f} {cpu_ratio:>6} {row['peak_rss_mib']:7.0f}MB"
        )
        if tree_rss:
            line += f" {row['tree_rss_mib']:7.0f}MB"
        print(line)
    if land_dir is not None:
        shutil.rmtree(land_dir, ignore_errors=True)
    print(
        "(rates from the best run; vs tshark = tshark wall / ours, best/best and median of per-round ratios; "
        "cpu s = median user+sys; cpu vs = median of tshark cpu / ours; RSS = max over runs)"
    )
    return {
        "capture": str(path),
        "bytes": size,
        "packets": packets,
        "largest_packet": largest,
        "port": port,
        "exchanges": exchanges,
        "tshark_pdus": pdus,
        "repeat": repeat,
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument("--port", type=int, help="broker port (default: destination of each capture's first SYN)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; best and median are reported")
    ap.add_argument("--tree-rss", action="store_true", help="also sample the summed RSS of each child's process tree")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument(
        "--land", action="store_true", help="also time `kafkawire land` (local engine, Parquet tables into a temp dir)"
    )
    args = ap.parse_args(argv)
    captures = args.captures or [p for p in DEFAULTS if p.is_file()] or [FALLBACK]
    missing = [p for p in captures if not p.is_file()]
    if missing:
        print(f"missing {missing[0]}: {MAKE_HINT}", file=sys.stderr)
        return 2
    if args.repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2
    tshark = shutil.which("tshark")
    if not tshark:
        print("tshark not found: measuring kafkawire only", file=sys.stderr)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    results = [bench_file(p, args.port, args.repeat, tshark, args.tree_rss, args.land) for p in captures]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
