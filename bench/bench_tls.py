"""TLS decryption's cost: `kafkawire dissect` on the same traffic captured over PLAINTEXT and
over TLS (with its NSS key log), beside tshark given the same key log; and the plaintext
pipeline against an older build.

    python bench/bench_tls.py make [--profile small|large|both] [--tls 13|12|both] [--seconds 40] [--messages 300000] [--out DIR]
    python bench/bench_tls.py run [--profile small|large|both] [--tls 13|12|both] [--repeat 5] [--copies N]
    python bench/bench_tls.py regress --old-tree DIR CAPTURE [CAPTURE ...] [--repeat 5]

`make` (root: tcpdump) runs each profile's workload once per listener against a fresh Apache
Kafka with TLS listeners (tests/kafka_jvm.py KafkaBroker(tls=True)): over PLAINTEXT, over
TLS13_AES128 (TLS 1.3, TLS_AES_128_GCM_SHA256) and with `--tls 12|both` over TLS12_AES128
(TLS 1.2, ECDHE-RSA-AES128-GCM-SHA256). Only the listener in use is captured, on lo with full
snaplen; the clients are kafka-python with one ssl.SSLContext whose keylog_filename writes the
key log. Each loopback capture (up to 64 KB segments) is then cut into MSS-1448 segments
(samples/make_captures.py `resegment`; TCP payload bytes unchanged, TLS records too):

    bench/out/tls-PROFILE-LISTENER.pcap        loopback capture (LISTENER: plain, tls13, tls12)
    bench/out/tls-PROFILE-LISTENER-1500.pcap   the same, 1500-byte MTU: what `run` reads
    bench/out/tls-PROFILE-LISTENER.keys        the key log (TLS listeners only)

Profiles, the same clients and seeds over every listener:

  small  for --seconds (40): 4 kafka-python producers, Poisson arrivals at fixed rates
         (orders 150/s linger 0 acks=all keyed + headers 100-1000 B; events 150/s linger 2
         acks=1 100-400 B; metrics 100/s linger 5 acks=1 gzip 200-1000 B; audit 50/s linger 1
         acks=all keyed + headers 300-1000 B; batch 16 KB); a consumer group of two members
         reading all four topics with small fetches (16 KB per partition, 64 KB per request,
         50 ms max wait, auto-commit every second); an admin client polling metadata, end
         offsets and the group every 200 ms.
  large  --messages (300,000) 1 KB records from one kafka-python producer (batch 1 MB,
         linger 50 ms, acks=1, uncompressed, 2 partitions), then a consumer reading them back.

`run` times whole processes, stdout to /dev/null, interleaved round by round so a drift in
machine speed hits every contender alike (--repeat rounds; medians):

  jsonl-plain  python -m kafkawire dissect PLAIN --port P --format jsonl
  jsonl-tls    python -m kafkawire dissect TLS --port P --tls-keylog KEYS --format jsonl
  text-plain, text-tls   the same with --format text
  tshark-plain tshark -o tcp.reassemble_out_of_order:TRUE -d tcp.port==P,kafka
                      -T fields -e kafka.api_key -e kafka.correlation_id -r PLAIN
  tshark-tls   tshark -o tcp.reassemble_out_of_order:TRUE -o tls.keylog_file:KEYS
                      -d tcp.port==P,tls -d tls.port==P,kafka -T fields ... -r TLS

and prints per-round-paired ratios: TLS speed relative to plaintext (plain wall / TLS wall;
issue 20 asks >= 0.5x), kafkawire against tshark on the TLS capture (tshark wall / ours), and
exchanges/s and MB/s. Exchanges are counted from one untimed jsonl run per capture.

`regress` pairs the current build against an older tree with its own native core built in
place (PYTHONPATH=DIR python -m kafkawire ...; the current one with PYTHONPATH=REPO, both from an
empty directory) on plaintext captures: the new wall over the old, round by round (lower is
better; issue 20 asks <= 1.05x).
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import random
import shutil
import ssl
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
# Every contender runs from an empty directory: `python -m` puts the working directory first on
# sys.path, and from the repo root every import also looks through the repo (2% of a 0.57 s run).
NEUTRAL = Path(tempfile.mkdtemp(prefix="kafkawire-bench-tls-"))
atexit.register(shutil.rmtree, NEUTRAL, True)
log = logging.getLogger("bench_tls")

# capture file tag -> KafkaBroker listener name (PLAINTEXT: broker.port)
LISTENERS = {"plain": "PLAINTEXT", "tls13": "TLS13_AES128", "tls12": "TLS12_AES128"}

# ------------------------------------------------------------------ workloads

SMALL_TOPICS = {"orders": 6, "events": 3, "metrics": 3, "audit": 2}
# (client id, topic, messages/s, linger.ms, acks, compression, keyed, headers, value sizes)
SMALL_PRODUCERS = [
    ("tls-orders", "orders", 150, 0, "all", None, True, True, (100, 1000)),
    ("tls-events", "events", 150, 2, 1, None, False, False, (100, 400)),
    ("tls-metrics", "metrics", 100, 5, 1, "gzip", True, False, (200, 1000)),
    ("tls-audit", "audit", 50, 1, "all", None, True, True, (300, 1000)),
]
SMALL_GROUP = "tls-readers"
LARGE_TOPIC, LARGE_PARTITIONS = "bulk", 2


def payload(i: int, size: int) -> bytes:
    """A deterministic, mildly compressible value (samples/make_captures.py's)."""
    head = f"message {i:06d} ".encode()
    return (head + b"kafkawire-sample-" * (size // 17 + 1))[:size]


def _security(ctx: ssl.SSLContext | None) -> dict:
    return {"security_protocol": "SSL", "ssl_context": ctx} if ctx else {"security_protocol": "PLAINTEXT"}


def wl_small(bootstrap: str, ctx: ssl.SSLContext | None, seconds: float) -> dict:
    """Many small requests: producers at Poisson rates, a consumer group with small fetches,
    an admin monitor. Returns what each client counted."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec

    sec = _security(ctx)
    stop = threading.Event()
    counts: dict[str, int] = {}
    errors: list[str] = []

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - reported after the run
                errors.append(f"{fn.__name__}{args[:1]}: {type(e).__name__}: {e}")

        return run

    @guarded
    def producer(spec, seed):
        cid, topic, rate, linger, acks, codec, keyed, headers, (lo, hi) = spec
        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=cid,
            linger_ms=linger,
            batch_size=16384,
            acks=acks,
            compression_type=codec,
            max_in_flight_requests_per_connection=5,
            **sec,
        )
        rng, i, due = random.Random(seed), 0, time.monotonic()
        while not stop.is_set():
            due += rng.expovariate(rate)
            pause = due - time.monotonic()
            if pause > 0:
                stop.wait(pause)
            p.send(
                topic,
                key=f"{cid}-{rng.randrange(500)}".encode() if keyed else None,
                value=payload(i, rng.randint(lo, hi)),
                headers=[("trace-id", f"{seed:02d}{i:010d}".encode()), ("origin", cid.encode())] if headers else None,
            )
            i += 1
        p.flush(timeout=15)
        p.close(timeout=10)
        counts[cid] = i

    @guarded
    def consumer(member):
        c = KafkaConsumer(
            *SMALL_TOPICS,
            bootstrap_servers=bootstrap,
            client_id=f"tls-reader-{member}",
            group_id=SMALL_GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=1000,
            session_timeout_ms=10000,
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=16384,
            fetch_max_bytes=65536,
            **sec,
        )
        seen = 0
        while not stop.is_set():
            seen += sum(len(v) for v in c.poll(timeout_ms=200).values())
        c.close()
        counts[f"tls-reader-{member}"] = seen

    @guarded
    def monitor():
        adm = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tls-monitor", **sec)
        tps = {TopicPartition(t, p): OffsetSpec.LATEST for t, n in SMALL_TOPICS.items() for p in range(n)}
        polls = 0
        while not stop.wait(0.2):
            for call, arg in (
                (adm.describe_topics, list(SMALL_TOPICS)),
                (adm.list_partition_offsets, tps),
                (adm.describe_groups, [SMALL_GROUP]),
            ):
                try:
                    call(arg)
                except Exception:  # noqa: BLE001, S112 - the group not formed yet, say; the request is captured
                    continue
            polls += 1
        adm.close()
        counts["monitor polls"] = polls

    threads = [threading.Thread(target=consumer, args=(m,)) for m in (1, 2)]
    threads.append(threading.Thread(target=monitor))
    threads += [threading.Thread(target=producer, args=(spec, n)) for n, spec in enumerate(SMALL_PRODUCERS)]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    stuck = [t.name for t in threads if t.is_alive()]
    if errors or stuck:
        raise RuntimeError(f"small: {len(errors)} client error(s) {errors[:3]}, still running: {stuck}")
    return counts


def wl_large(bootstrap: str, ctx: ssl.SSLContext | None, messages: int) -> dict:
    """Large batches: one producer (batch 1 MB, linger 50 ms, 1 KB records), then a consumer
    (no group) reading every record back."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    sec = _security(ctx)
    values = [payload(i, 1000) for i in range(1024)]
    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="tls-bulk-producer",
        batch_size=1 << 20,
        linger_ms=50,
        acks=1,
        max_request_size=4 << 20,
        **sec,
    )
    t0 = time.monotonic()
    for i in range(messages):
        p.send(LARGE_TOPIC, key=f"k{i % 64}".encode(), value=values[i % 1024], partition=i % LARGE_PARTITIONS)
    p.flush(timeout=300)
    p.close(timeout=30)
    produced_s = time.monotonic() - t0
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="tls-bulk-consumer",
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **sec,
    )
    tps = [TopicPartition(LARGE_TOPIC, n) for n in range(LARGE_PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    seen, deadline = 0, time.monotonic() + 600
    while seen < messages and time.monotonic() < deadline:
        seen += sum(len(v) for v in c.poll(timeout_ms=500, max_records=100_000).values())
    c.close()
    if seen != messages:
        raise RuntimeError(f"large: consumed {seen} of {messages}")
    return {"produced": messages, "consumed": seen, "produce_s": round(produced_s, 1)}


def _create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tls-bench-setup")
    try:
        admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    finally:
        admin.close()


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def fix_usec(pcap: Path) -> int:
    """Carry a record header's microseconds of 1000000 into its seconds, in place: dpkt's writer
    rounds a float time stamp just under a whole second up to that, which readers (kafkawire
    too) reject as corrupt. Returns how many headers it fixed."""
    import mmap
    import struct

    fixed = 0
    with open(pcap, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        end = "<" if m[:4] == b"\xd4\xc3\xb2\xa1" else ">"
        if m[:4] not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4"):
            raise SystemExit(f"{pcap}: not a microsecond pcap")
        at = 24
        while at + 16 <= len(m):
            sec, usec, caplen = struct.unpack_from(end + "III", m, at)
            if usec >= 1_000_000:
                struct.pack_into(end + "II", m, at, sec + usec // 1_000_000, usec % 1_000_000)
                fixed += 1
            at += 16 + caplen
    return fixed


def make_one(profile: str, tag: str, seconds: float, messages: int) -> dict:
    """One profile over one listener against a fresh broker: OUT/tls-PROFILE-TAG.pcap (+ .keys),
    then its -1500 copy."""
    from samples.make_captures import resegment
    from tests.broker import Tcpdump
    from tests.kafka_jvm import KafkaBroker

    OUT.mkdir(parents=True, exist_ok=True)
    pcap = OUT / f"tls-{profile}-{tag}.pcap"
    keys = pcap.with_suffix(".keys")
    keys.unlink(missing_ok=True)
    with KafkaBroker(tls=True) as broker:
        listener = LISTENERS[tag]
        if listener == "PLAINTEXT":
            port, ctx, version, suite = broker.port, None, None, None
        else:
            port, version, suite = broker.tls_listeners[listener]
            ctx = ssl.create_default_context(cafile=str(broker.tls_pem))
            ctx.keylog_filename = str(keys)
        _create_topics(broker.address, SMALL_TOPICS if profile == "small" else {LARGE_TOPIC: LARGE_PARTITIONS})
        bootstrap = f"127.0.0.1:{port}"
        log.info("%s over %s (%s %s) on %s -> %s", profile, listener, version, suite, bootstrap, pcap.name)
        dump = Tcpdump(pcap, port, buffer_kib=262144)
        dump.start()
        try:
            counts = wl_small(bootstrap, ctx, seconds) if profile == "small" else wl_large(bootstrap, ctx, messages)
        finally:
            dump.stop()
        log.info("clients: %s; tcpdump: %s", counts, dump.stats.replace("\n", "; "))
    seg = pcap.with_name(pcap.stem + "-1500.pcap")
    n_in, n_out = resegment(pcap, seg)
    if fixed := fix_usec(seg):
        log.info("%s: %d time stamps of x.1000000 s carried into the next second", seg.name, fixed)
    packets, largest, _ = pcap_facts(seg)
    fact = {
        "capture": _rel(seg),
        "listener": listener,
        "tls_version": version,
        "cipher_suite": suite,
        "port": port,
        "loopback_packets": n_in,
        "packets": packets,
        "largest_packet": largest,
        "bytes": seg.stat().st_size,
        "clients": counts,
        "tcpdump": dump.stats.strip(),
    }
    if ctx is not None:
        fact["keys"] = _rel(keys)
    fact["exchanges"] = count_exchanges(seg, port, keys if ctx is not None else None)
    log.info("%s", json.dumps(fact))
    return fact


# ---------------------------------------------------------------------- timing


def kw_cmd(pcap: Path, port: int, fmt: str, keys: Path | None, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "kafkawire", "dissect", str(pcap), "--port", str(port)]
    if keys is not None:
        cmd += ["--tls-keylog", str(keys)]
    return cmd + ["--format", fmt]


def tshark_cmd(pcap: Path, port: int, keys: Path | None) -> list[str]:
    cmd = [shutil.which("tshark") or "tshark", "-n", "-o", "tcp.reassemble_out_of_order:TRUE"]
    if keys is None:
        cmd += ["-d", f"tcp.port=={port},kafka"]
    else:
        cmd += ["-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},kafka"]
    return cmd + ["-T", "fields", "-e", "kafka.api_key", "-e", "kafka.correlation_id", "-r", str(pcap)]


def _lines(cmd: list[str]):
    """The command's output lines, streamed: this process stays small, and a child started later
    inherits its peak RSS as a floor (the fork's address space is counted in the child's)."""
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=NEUTRAL) as proc:
        yield from proc.stdout
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:8])} ... failed ({proc.returncode})")


def count_exchanges(pcap: Path, port: int, keys: Path | None) -> int:
    return sum(1 for line in _lines(kw_cmd(pcap, port, "jsonl", keys)) if line.startswith(b'{"type":"exchange"'))


def count_pdus(pcap: Path, port: int, keys: Path | None) -> int:
    """Kafka PDUs (requests + responses) tshark decoded: one correlation id each."""
    n = 0
    for line in _lines(tshark_cmd(pcap, port, keys)):
        ids = line.rstrip(b"\n").split(b"\t")[-1]
        n += len(ids.split(b",")) if ids.strip() else 0
    return n


class Run:
    """One child process, stdout to /dev/null: wall seconds, CPU seconds, peak RSS (KiB)."""

    def __init__(self, cmd: list[str], cwd: Path = NEUTRAL, env: dict | None = None):
        t0 = time.perf_counter()
        with open(os.devnull, "wb") as devnull:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=devnull, stderr=subprocess.PIPE, cwd=cwd, env=env
            )
            err = proc.stderr.read()
            _pid, status, usage = os.wait4(proc.pid, 0)
        self.wall = time.perf_counter() - t0
        proc.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd[:8])} ... failed: {err.decode(errors='replace')[-500:]}")
        self.cpu = usage.ru_utime + usage.ru_stime
        self.rss_mib = usage.ru_maxrss / 1024


def rounds(cmds: dict[str, tuple[list[str], Path, dict | None]], repeat: int, warmup: bool = True) -> dict:
    """Every command once untimed (page cache), then `repeat` interleaved rounds."""
    if warmup:
        for cmd, cwd, env in cmds.values():
            Run(cmd, cwd, env)
    runs: dict[str, list[Run]] = {name: [] for name in cmds}
    for r in range(repeat):
        for name, (cmd, cwd, env) in cmds.items():
            runs[name].append(Run(cmd, cwd, env))
        print(f"  round {r + 1}/{repeat}: " + "  ".join(f"{n} {runs[n][-1].wall:.2f}s" for n in cmds), flush=True)
    return runs


def paired(runs: dict, a: str, b: str) -> tuple[float, float, float]:
    """(min, median, max) over rounds of b's wall / a's wall: a's speed relative to b."""
    r = [y.wall / x.wall for x, y in zip(runs[a], runs[b], strict=True)]
    return min(r), statistics.median(r), max(r)


def facts_of(pcap: Path, keys: Path | None) -> dict:
    port = first_syn_port(pcap)
    packets, largest, _ = pcap_facts(pcap)
    return {
        "pcap": pcap,
        "keys": keys,
        "port": port,
        "bytes": pcap.stat().st_size,
        "packets": packets,
        "largest": largest,
        "exchanges": count_exchanges(pcap, port, keys),
        "tshark_pdus": count_pdus(pcap, port, keys) if shutil.which("tshark") else None,
    }


def copies_of(pcap: Path, copies: int) -> Path:
    """PCAP-xN.pcap: `copies` of the capture end to end, each on its own addresses (bench_spark's
    make); a TLS copy keeps its client randoms, so the one key log decrypts every copy."""
    if copies == 1:
        return pcap
    out = pcap.with_name(f"{pcap.stem}-x{copies}.pcap")
    if not out.is_file() or out.stat().st_mtime < pcap.stat().st_mtime:
        # in a child of its own: the packets it holds would raise this process's RSS (see _lines)
        code = "import sys; from pathlib import Path; from bench_spark import make; make(int(sys.argv[1]), *map(Path, sys.argv[2:3]), [Path(sys.argv[3])])"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "bench"))
        subprocess.run([sys.executable, "-c", code, str(copies), str(out), str(pcap)], env=env, check=True)
    return out


def run_profile(profile: str, tag: str, repeat: int, copies: int = 1) -> dict:
    plain = facts_of(copies_of(OUT / f"tls-{profile}-plain-1500.pcap", copies), None)
    tls = facts_of(copies_of(OUT / f"tls-{profile}-{tag}-1500.pcap", copies), OUT / f"tls-{profile}-{tag}.keys")
    for f in (plain, tls):
        print(
            f"{f['pcap'].name}: {f['bytes'] / 1e6:.1f} MB, {f['packets']:,} packets (largest {f['largest']} B), "
            f"port {f['port']}, {f['exchanges']:,} exchanges (kafkawire), {f['tshark_pdus']} Kafka PDUs (tshark)",
            flush=True,
        )
    cmds: dict = {}
    for fmt in ("jsonl", "text"):
        cmds[f"{fmt}-plain"] = (kw_cmd(plain["pcap"], plain["port"], fmt, None), NEUTRAL, None)
        cmds[f"{fmt}-tls"] = (kw_cmd(tls["pcap"], tls["port"], fmt, tls["keys"]), NEUTRAL, None)
    if shutil.which("tshark"):
        cmds["tshark-plain"] = (tshark_cmd(plain["pcap"], plain["port"], None), NEUTRAL, None)
        cmds["tshark-tls"] = (tshark_cmd(tls["pcap"], tls["port"], tls["keys"]), NEUTRAL, None)
    runs = rounds(cmds, repeat)

    print(f"\n{profile} / {tag}: {repeat} rounds, medians")
    print(f"{'':13} {'wall s':>7} {'cpu s':>6} {'exch/s':>9} {'MB/s':>7} {'peak RSS':>9}")
    table = {}
    for name, rs in runs.items():
        f = tls if name.endswith("-tls") else plain
        wall = statistics.median(x.wall for x in rs)
        row = {
            "wall_s": wall,
            "cpu_s": statistics.median(x.cpu for x in rs),
            "exchanges_per_s": f["exchanges"] / wall,
            "mb_per_s": f["bytes"] / 1e6 / wall,
            "peak_rss_mib": max(x.rss_mib for x in rs),
        }
        table[name] = row
        print(
            f"{name:13} {wall:7.2f} {row['cpu_s']:6.2f} {row['exchanges_per_s']:9,.0f} {row['mb_per_s']:7.1f} "
            f"{row['peak_rss_mib']:7.0f}MB"
        )
    ratios = {}
    pairs = [
        ("jsonl-tls", "jsonl-plain", "kafkawire jsonl: TLS speed / plaintext speed (target >= 0.5x)"),
        ("text-tls", "text-plain", "kafkawire text: TLS speed / plaintext speed"),
    ]
    if "tshark-tls" in runs:
        pairs += [
            ("jsonl-tls", "tshark-tls", "TLS capture: kafkawire jsonl vs tshark with the key log"),
            ("text-tls", "tshark-tls", "TLS capture: kafkawire text vs tshark with the key log"),
            ("jsonl-plain", "tshark-plain", "plaintext capture: kafkawire jsonl vs tshark"),
            ("tshark-tls", "tshark-plain", "tshark: TLS speed / plaintext speed"),
        ]
    # exchanges differ a little between the two runs of a profile: per exchange too
    per_exch = plain["exchanges"] / tls["exchanges"]
    print(
        "ratios (per round: B wall / A wall, min / median / max; per exchange = median scaled by the exchange counts)"
    )
    for a, b, what in pairs:
        lo, med, hi = paired(runs, a, b)
        scale = (1 / per_exch) if (a.endswith("-tls") and b.endswith("-plain")) else 1.0
        ratios[f"{a} vs {b}"] = {"min": lo, "median": med, "max": hi, "per_exchange": med * scale}
        extra = f", per exchange {med * scale:.2f}x" if scale != 1.0 else ""
        print(f"  {a:11} vs {b:12} {lo:5.2f} / {med:5.2f} / {hi:5.2f}x{extra}   {what}")
    strip = lambda f: {k: (str(v) if isinstance(v, Path) else v) for k, v in f.items()}  # noqa: E731
    return {
        "profile": profile,
        "tls": tag,
        "plain": strip(plain),
        "tls_capture": strip(tls),
        "results": table,
        "ratios": ratios,
    }


def regress(old_tree: Path, captures: list[Path], repeat: int, formats: list[str]) -> list[dict]:
    """New build against the old tree's on plaintext captures (new wall / old wall per round)."""
    # both from an empty directory, each tree first on PYTHONPATH: the same sys.path but for it
    env = dict(os.environ, PYTHONPATH=str(old_tree))
    new_env = dict(os.environ, PYTHONPATH=str(ROOT))
    probe = [sys.executable, "-c", "import kafkawire, dissector._native as n; print(kafkawire.__file__, n.__file__)"]
    for tree, e in ((old_tree, env), (ROOT, new_env)):
        check = subprocess.run(probe, cwd=NEUTRAL, env=e, capture_output=True, text=True, check=True).stdout.split()
        if not all(p.startswith(str(tree)) for p in check):
            raise SystemExit(f"PYTHONPATH={tree} does not give that tree's package: {check}")
        print(f"{'old' if tree == old_tree else 'new'}: {' '.join(check)}")
    out = []
    for pcap in captures:
        port = first_syn_port(pcap)
        print(f"\n{pcap}: {pcap.stat().st_size / 1e6:.0f} MB, port {port}", flush=True)
        for fmt in formats:
            cmds = {
                "new": (kw_cmd(pcap.resolve(), port, fmt, None), NEUTRAL, new_env),
                "old": (kw_cmd(pcap.resolve(), port, fmt, None), NEUTRAL, env),
            }
            runs = rounds(cmds, repeat)
            lo, med, hi = paired(runs, "old", "new")  # old speed relative to new = new wall / old wall
            row = {
                "capture": str(pcap),
                "format": fmt,
                "new_wall_s": statistics.median(x.wall for x in runs["new"]),
                "old_wall_s": statistics.median(x.wall for x in runs["old"]),
                "new_over_old": {"min": lo, "median": med, "max": hi},
                "cpu_new_over_old": statistics.median(
                    n.cpu / o.cpu for n, o in zip(runs["new"], runs["old"], strict=True)
                ),
            }
            print(
                f"  {fmt}: new {row['new_wall_s']:.2f}s, old {row['old_wall_s']:.2f}s; new/old wall "
                f"{lo:.3f} / {med:.3f} / {hi:.3f}x (min/median/max), cpu {row['cpu_new_over_old']:.3f}x"
            )
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("make", "run"):
        p = sub.add_parser(name)
        p.add_argument("--profile", choices=("small", "large", "both"), default="both")
        p.add_argument("--tls", choices=("13", "12", "both"), default="13")
        if name == "make":
            p.add_argument("--seconds", type=float, default=40.0, help="small profile: how long the clients run")
            p.add_argument("--messages", type=int, default=300_000, help="large profile: 1 KB records")
        else:
            p.add_argument("--repeat", type=int, default=5)
            p.add_argument(
                "--copies", type=int, default=1, help="time N copies of each capture end to end (start-up matters less)"
            )
        p.add_argument(
            "--out", type=Path, default=ROOT / "bench" / "out", help="the captures' folder (default bench/out)"
        )
        p.add_argument("--json", type=Path, help="also write the figures here")
    g = sub.add_parser("regress")
    g.add_argument("captures", nargs="+", type=Path)
    g.add_argument("--old-tree", type=Path, required=True)
    g.add_argument("--repeat", type=int, default=5)
    g.add_argument("--formats", default="jsonl,text")
    g.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    global OUT  # noqa: PLW0603 - every helper reads the captures' folder from here
    OUT = getattr(args, "out", None).resolve() if getattr(args, "out", None) else OUT
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    print(f"{os.cpu_count()} CPUs, load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    if args.cmd == "regress":
        result = regress(args.old_tree.resolve(), args.captures, args.repeat, args.formats.split(","))
    else:
        profiles = ["small", "large"] if args.profile == "both" else [args.profile]
        tags = ["tls13", "tls12"] if args.tls == "both" else [f"tls{args.tls}"]
        result = []
        for profile in profiles:
            if args.cmd == "make":
                for tag in ["plain", *tags]:
                    result.append(make_one(profile, tag, args.seconds, args.messages))
            else:
                for tag in tags:
                    result.append(run_profile(profile, tag, args.repeat, args.copies))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
