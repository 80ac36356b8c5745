"""Run the fuzz targets: coverage-guided with atheris (libFuzzer), for a bounded budget or for hours.

    python -m tests.fuzz.run seed                       # (re)build the seed corpora from samples/
    python -m tests.fuzz.run frame --seconds 300        # one target, 5 minutes
    python -m tests.fuzz.run all --seconds 60           # every target in turn, 60 s each
    python -m tests.fuzz.run all --seconds 3600 --jobs 2

Seeds are made from the bundled real captures into tests/fuzz/work/seeds/TARGET
(a run makes them when missing); what a run adds to the corpus stays under
tests/fuzz/work/TARGET (git-ignored); an input that breaks an invariant (an
exception other than the target's allowed one, a failed assert, more than
--timeout seconds, more than --malloc-mb in one allocation or --rss-mb in
all) is written to tests/fuzz/crashers/TARGET/ by libFuzzer, where
tests/test_fuzz.py replays it in every test run. Each target runs in its own
child process, so a crash or a timeout in one does not end the others; the
summary line per target is libFuzzer's own (inputs run, coverage `cov:`,
features `ft:`, corpus size).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORK = HERE / "work"  # git-ignored: what runs add, logs
CORPUS = WORK / "seeds"  # made from samples/ by `seed` (a run makes them when missing)
CRASHERS = HERE / "crashers"
UNINSTRUMENTED = {"_units"}
GENERATED = {"frame", "exchanges"}  # targets whose coverage is mostly inside the registry's generated decoders


def _save(target: str, data: bytes, into: Path) -> None:
    d = into / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def seed(into: Path = CORPUS) -> dict[str, int]:
    """Seeds from the bundled real captures: frames of every API seen, their record sets, small
    captures (whole and cut), byte streams of both directions."""
    sys.path.insert(0, str(ROOT))
    import dissector
    from protocol import registry
    from tests.fuzz.targets import case_prefix

    counts: dict[str, int] = {}

    def add(target, data):
        if len(data) <= 64 << 10:
            _save(target, data, into)
            counts[target] = counts.get(target, 0) + 1

    seen = set()
    for pcap in sorted((ROOT / "samples").glob("*.pcap")):
        blob = pcap.read_bytes()
        if len(blob) < 200_000:
            add("capture", blob)
            add("capture", blob[: len(blob) // 2])
            add("native", blob)
            add("native", blob[: len(blob) // 2])
            add("ranges", bytes([len(blob) % 200]) + blob)
        for item in dissector.dissect([pcap], show_secrets=False):
            if item.type != "exchange" or item.api_key is None:
                continue
            key = (item.api_key, item.api_version)
            if key in seen:
                continue
            seen.add(key)
            known = registry.has(item.api_key, item.api_version, "request")
            if item.request_raw and known:
                add("frame", case_prefix(item.api_key, item.api_version, "request") + b"\x01" + item.request_raw)
                add(
                    "exchanges",
                    bytes(
                        [
                            min(
                                255,
                                len(item.request_raw)
                                * 255
                                // (len(item.request_raw) + len(item.response_raw or b"") + 8),
                            )
                        ]
                    )
                    + len(item.request_raw).to_bytes(4, "big")
                    + item.request_raw
                    + (len(item.response_raw).to_bytes(4, "big") + item.response_raw if item.response_raw else b""),
                )
            if (
                item.response_raw
                and item.response_version is not None
                and registry.has(item.api_key, item.response_version, "response")
            ):
                add("frame", case_prefix(item.api_key, item.response_version, "response") + b"\x00" + item.response_raw)
            for body in (item.request, item.response):
                for raw in _record_fields(body):
                    add("records", raw)
    for i in range(8):
        add("tcp", bytes([i, 7 * i]) + b"".join(bytes([0, 100 * j % 256, 5, 0x40, 0x18, 0]) for j in range(12)))
        add("compare", bytes(range(i * 16, i * 16 + 40)))
    for pcap in sorted((ROOT / "samples" / "tls").glob("*.pcap")):
        # one seed per TLS connection (its handshake, records, close) of the first few of each sample
        for i, blob in enumerate(_connections(pcap)):
            if i < 6:
                add("tls", blob)
    return counts


def _connections(pcap: Path) -> list[bytes]:
    """pcap's packets as one small pcap per TCP connection, in the order they begin."""
    import io

    import dpkt

    flows: dict = {}
    with open(pcap, "rb") as f:
        r = dpkt.pcap.Reader(f)
        link = r.datalink()
        for ts, buf in r:
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            key = tuple(sorted([tcp.sport, tcp.dport]))
            flows.setdefault(key, []).append((ts, buf))
    out = []
    for pkts in flows.values():
        b = io.BytesIO()
        w = dpkt.pcap.Writer(b, linktype=link, snaplen=262144)
        for ts, buf in pkts:
            w.writepkt(buf, ts)
        out.append(b.getvalue())
    return out


def _record_fields(body, depth=0):
    if depth > 8:
        return
    if isinstance(body, dict):
        for k, v in body.items():
            if k == "Records" and isinstance(v, (bytes, bytearray, memoryview)) and len(v):
                yield bytes(v)
            elif isinstance(v, (dict, list)):
                yield from _record_fields(v, depth + 1)
    elif isinstance(body, list):
        for v in body:
            yield from _record_fields(v, depth + 1)


def _child(
    target: str,
    seconds: int,
    timeout: int,
    malloc_mb: int,
    rss_mb: int,
    max_len: int,
    quick: bool,
    work: Path,
    rng_seed: int,
) -> None:
    """Inside the child: atheris over one target."""
    import atheris

    sys.path.insert(0, str(ROOT))
    # atheris 2.3's bytecode instrumentation makes the oracle's capture._units (a generator) segfault on
    # Python 3.11: those two modules are instrumented function by function below, without it.
    with atheris.instrument_imports(
        include=["protocol", "dissector", "replay", "tests.oracle"],
        exclude=["tests.oracle.capture", "dissector.ranges"],
    ):
        import dissector.ranges  # noqa: F401
        import tests.oracle.capture, tests.oracle.exchanges, tests.oracle.frames, tests.oracle.tcp  # noqa: E401,F401
        import protocol.codec, protocol.records, protocol.compression, replay.compare  # noqa: E401,F401
        from tests.fuzz.targets import TARGETS, generated
    import inspect

    import dissector.ranges  # noqa: E401
    import tests.oracle.capture

    for mod in (tests.oracle.capture, dissector.ranges):
        for name, fn in vars(mod).items():
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__ and name not in UNINSTRUMENTED:
                atheris.instrument_func(fn)
    if target in GENERATED and not quick:  # the registry compiles its decoders at run time: instrument
        # them too (about a minute for all 740 of them, so --quick runs go without)
        for fn in generated():
            atheris.instrument_func(fn)
    fn = TARGETS[target]
    corpus = work / "seeds" / target
    work = work / target
    crash = CRASHERS / target
    work.mkdir(parents=True, exist_ok=True)
    crash.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.argv[0],
        str(work),
        str(corpus),
        f"-max_total_time={seconds}",
        f"-timeout={timeout}",
        f"-malloc_limit_mb={malloc_mb}",
        f"-rss_limit_mb={rss_mb}",
        f"-max_len={max_len}",
        f"-artifact_prefix={crash}/",
        "-print_final_stats=1",
    ] + ([f"-seed={rng_seed}"] if rng_seed else [])
    atheris.Setup(argv, fn)
    atheris.Fuzz()


def run(
    targets: list[str],
    seconds: int,
    timeout: int,
    malloc_mb: int,
    rss_mb: int,
    jobs: int,
    quick: bool = False,
    work: Path = WORK,
    rng_seed: int = 0,
) -> int:
    if not (work / "seeds").is_dir():
        seed(work / "seeds")
    status = 0
    queue = list(targets)
    live: list[tuple[str, subprocess.Popen, Path]] = []
    while queue or live:
        while queue and len(live) < jobs:
            t = queue.pop(0)
            log = work / f"{t}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            max_len = 1 << 17 if t in ("capture", "ranges") else 1 << 16
            cmd = [
                sys.executable,
                "-m",
                "tests.fuzz.run",
                "--child",
                t,
                "--seconds",
                str(seconds),
                "--timeout",
                str(timeout),
                "--malloc-mb",
                str(malloc_mb),
                "--rss-mb",
                str(rss_mb),
                "--max-len",
                str(max_len),
                "--work",
                str(work),
                "--seed",
                str(rng_seed),
            ] + (["--quick"] if quick else [])
            live.append((t, subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT), log))
        time.sleep(0.5)
        for entry in list(live):
            t, p, log = entry
            if p.poll() is None:
                continue
            live.remove(entry)
            text = log.read_text(errors="replace")
            runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
            last = [ln for ln in text.splitlines() if re.match(r"#\d+\s+(DONE|pulse|NEW|REDUCE|INITED)", ln)]
            found = [ln for ln in text.splitlines() if "Test unit written to" in ln]
            print(
                f"{t:<10} exit {p.returncode}  inputs {runs[-1] if runs else '?'}  "
                f"{last[-1].split(None, 1)[1] if last else ''}  {'FOUND: ' + found[-1] if found else ''}"
            )
            if p.returncode or found:
                status = 1
                tail = [ln for ln in text.splitlines() if ln.strip()][-25:]
                print("\n".join("    " + ln for ln in tail))
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="a target name, 'all', or 'seed'")
    ap.add_argument("--seconds", type=int, default=60, help="per target")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    ap.add_argument("--malloc-mb", type=int, default=512, help="the largest single allocation")
    ap.add_argument("--rss-mb", type=int, default=2048)
    ap.add_argument("--jobs", type=int, default=1, help="targets at once")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="do not instrument the registry's generated decoders (saves a minute per target)",
    )
    ap.add_argument("--work", type=Path, default=WORK, help="corpus, seeds and logs (default tests/fuzz/work)")
    ap.add_argument("--seed", type=int, default=0, help="libFuzzer's random seed (0: a new one each run)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--max-len", type=int, default=1 << 16, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(
            args.target,
            args.seconds,
            args.timeout,
            args.malloc_mb,
            args.rss_mb,
            args.max_len,
            args.quick,
            args.work,
            args.seed,
        )
        return 0
    sys.path.insert(0, str(ROOT))
    if args.target == "seed":
        for t, n in sorted(seed().items()):
            print(f"{t}: {n} seeds")
        return 0
    from tests.fuzz.targets import TARGETS

    targets = list(TARGETS) if args.target == "all" else [args.target]
    for t in targets:
        if t not in TARGETS:
            print(f"unknown target {t!r}; one of {', '.join(TARGETS)}", file=sys.stderr)
            return 2
    return run(
        targets, args.seconds, args.timeout, args.malloc_mb, args.rss_mb, args.jobs, args.quick, args.work, args.seed
    )


if __name__ == "__main__":
    sys.exit(main())
