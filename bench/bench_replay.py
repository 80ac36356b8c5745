"""`kafkawire replay` speed and pacing against a real Tansu broker, next to the capture and a real client.

    python samples/make_captures.py bench-small --netns kwbench   # once: bench/out/small-1500.pcap
    python samples/make_captures.py bench --netns kwbench         # once: bench/out/large-1500.pcap
    python bench/bench_replay.py [--small PCAP] [--bulk PCAP] [--seconds S] [--pace-seconds S] [--json FILE]

Three measurements, each on a fresh Tansu (memory storage, 127.0.0.1, free port):

1. small requests: the first --seconds of the small-message capture (many
   producers, consumer groups, a metadata monitor) replayed with
   `--max-speed --allow-writes`: requests/s and MB/s sent, next to the rate the
   captured clients achieved over the same requests (their captured span), and
   next to confluent-kafka producing the same records one request at a time
   (linger.ms 0, acks 1) on the same machine (requests counted by librdkafka's
   own statistics).
2. bulk produce: the Produce requests of the large-batch capture at
   `--max-speed`: MB/s of request bytes, next to the capture's rate and to
   confluent-kafka producing the same records with the captured producer's
   batching (linger.ms 5, batch.size 16384).
3. pacing fidelity at `--speed 1`: the first --pace-seconds of the small
   capture; for every request sent, the difference between the time it was
   sent and the time the sender meant to send it (the replay's start plus its
   captured offset from the first
   captured request (the target is a p99 under 2 ms), over all requests and
   over those whose send was not held for an answer when its time came (a
   consumer's next Fetch waits for the target's answer to the last one, a
   sixth Produce for one of five in flight: where the target answers slower
   than the captured broker did, those fall behind by design, and the
   replay counts them as `held`).

Replay uses the same code as the command (dissector.dissect -> replay.plan ->
replay.sender -> replay.compare); only the clock around it is the script's.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dissector  # noqa: E402
from protocol.records import read_record_set  # noqa: E402
from replay import compare, plan, sender  # noqa: E402
from replay.session import Session  # noqa: E402
from tests.broker import Broker, first_syn_port  # noqa: E402

OUT = ROOT / "bench" / "out"


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def load(pcap: Path, seconds: float | None, apis=()) -> list:
    """The capture's exchanges whose request came in its first `seconds` (all with None)."""
    port = first_syn_port(pcap)
    out, t0 = [], None
    for item in dissector.dissect([pcap], ports=[port] if port else []):
        if item.type != "exchange" or item.ts is None:
            continue
        if t0 is None:
            t0 = item.ts
        if seconds is not None and item.ts - t0 > seconds:
            break
        if not apis or item.api_name in apis:
            out.append(item)
    return out


def records_of(exchanges) -> list[tuple[str, bytes | None, bytes | None]]:
    """(topic, key, value) of every record the captured Produce requests carried, in order."""
    out = []
    for e in exchanges:
        if e.api_name != "Produce" or not isinstance(e.request, dict):
            continue
        for t in e.request.get("TopicData") or ():
            for p in t.get("PartitionData") or ():
                raw = p.get("Records")
                if raw is None:
                    continue
                for batch in read_record_set(raw).batches:
                    for r in batch.records():
                        out.append((t.get("Name") or "", r.key, r.value))
    return out


def run_replay(exchanges, address: str, speed: float | None) -> dict:
    ranges = sender.api_versions(address)
    conns = plan.plan(exchanges, ranges, allow_writes=True)
    steps = [s for c in conns for s in c.steps if s.action == "send"]
    session = Session(exchanges)
    gc.freeze()  # as the command does before it sends
    gc.disable()
    start = time.monotonic()  # the sender takes its own start microseconds later
    answers = sender.replay(
        conns, address, speed=speed, timeout=30.0, session=session, ranges=ranges, allow_writes=True
    )
    wall = time.monotonic() - start
    gc.enable()
    report = compare.compare(conns, answers)
    sent = [a for a in answers if a.sent_at is not None]
    answered = sum(1 for a in answers if a.response is not None)
    produce = sorted(a.sent_at for a in sent if a.step.exchange.api_name == "Produce")
    out = {
        "requests": len(steps),
        "sent": len(sent),
        "answered": answered,
        "failures": len(report["failures"]),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(sent) / wall, 1),
        "MB_per_s": round(sum(len(a.step.frame) + 4 for a in sent) / wall / 1e6, 2),
        # consumers' long polls (a Fetch waits for the last one's answer, up to its max wait) bound the
        # whole replay's rate; the producers' own rate shows the sender's
        "produce_per_s": round(len(produce) / max(produce[-1] - produce[0], 1e-9), 1) if len(produce) > 1 else None,
    }
    if speed is not None:
        # one clock for the whole replay: captured offset from the first captured request vs sent offset
        # the sender's own due time: its start plus the captured offset from the first captured send / speed
        paced = [a for a in sent if a.due is not None]
        errs = [abs(a.sent_at - a.due) * 1000 for a in paced]
        free = [abs(a.sent_at - a.due) * 1000 for a in paced if not a.held]
        # a held send measured from the answer it went after: its captured offset from that answer (the
        # client's own think time) against the replayed one, so the target's slower answer is not counted
        # as the sender's error
        own = [_own_error(a, speed) * 1000 for a in paced]
        out.update(
            pace_p50_ms=round(_pct(errs, 0.5), 3),
            pace_p99_ms=round(_pct(errs, 0.99), 3),
            pace_max_ms=round(max(errs), 3),
            held=len(sent) - len(free),
            free_pace_p50_ms=round(_pct(free, 0.5), 3),
            free_pace_p99_ms=round(_pct(free, 0.99), 3),
            own_pace_p50_ms=round(_pct(own, 0.5), 3),
            own_pace_p99_ms=round(_pct(own, 0.99), 3),
            own_pace_max_ms=round(max(own), 3),
            held_after_answer=sum(1 for a in paced if a.held and _captured_gap(a) is not None),
        )
    return out


def _captured_gap(a) -> float | None:
    """Seconds from the captured answer a held send went after to the captured send; None when the
    capture's client sent before that answer came (then the hold is not that answer's doing)."""
    after = a.after
    if after is None or after.step.exchange.response_ts is None or a.step.exchange.ts is None:
        return None
    gap = a.step.exchange.ts - after.step.exchange.response_ts
    return gap if gap >= 0 else None


def _own_error(a, speed: float) -> float:
    """The sender's own pacing error for one send, in seconds."""
    gap = _captured_gap(a) if a.held else None
    if gap is None:
        return abs(a.sent_at - a.due)
    return abs((a.sent_at - a.after.answered_at) - gap / speed)


def captured_rate(exchanges) -> dict:
    ts = [e.ts for e in exchanges]
    prod = sorted(e.ts for e in exchanges if e.api_name == "Produce")
    end = max((e.response_ts or e.ts) for e in exchanges)
    span = end - min(ts)
    size = sum((e.request_size or 0) + 4 for e in exchanges)
    return {
        "requests": len(exchanges),
        "span_s": round(span, 3),
        "requests_per_s": round(len(exchanges) / span, 1),
        "MB_per_s": round(size / span / 1e6, 2),
        "produce_per_s": round(len(prod) / max(prod[-1] - prod[0], 1e-9), 1) if len(prod) > 1 else None,
    }


def run_client(records, address: str, conf: dict) -> dict:
    """confluent-kafka producing `records` (to 'client-' topics): records/s, MB/s and requests/s."""
    from confluent_kafka import Producer

    stats: list = []
    p = Producer(
        {
            "bootstrap.servers": address,
            "statistics.interval.ms": 100,
            "stats_cb": lambda s: stats.append(json.loads(s)),
            **conf,
        }
    )
    size = sum(len(k or b"") + len(v or b"") for _, k, v in records)
    p.list_topics(timeout=10)
    start = time.monotonic()
    for topic, key, value in records:
        while True:
            try:
                p.produce("client-" + topic, value=value, key=key)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(60)
    wall = time.monotonic() - start
    gc.enable()
    time.sleep(0.25)  # one more statistics event after the last answer
    p.poll(0.2)
    tx = max((sum(b.get("tx", 0) for b in s.get("brokers", {}).values()) for s in stats), default=0)
    return {
        "records": len(records),
        "unsent": left,
        "wall_s": round(wall, 3),
        "records_per_s": round(len(records) / wall, 1),
        "MB_per_s": round(size / wall / 1e6, 2),
        "requests_per_s": round(tx / wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=Path, default=OUT / "small-1500.pcap")
    ap.add_argument("--bulk", type=Path, default=OUT / "large-1500.pcap")
    ap.add_argument("--seconds", type=float, default=20.0, help="how much of the small capture to replay")
    ap.add_argument("--pace-seconds", type=float, default=10.0, help="how much of it to replay at --speed 1")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    figures: dict = {}

    if args.small.exists():
        ex = load(args.small, args.seconds)
        with Broker() as b:
            figures["small_replay"] = run_replay(ex, b.address, None)
        with Broker() as b:
            figures["small_client"] = run_client(
                records_of(ex), b.address, {"linger.ms": 0, "acks": 1, "max.in.flight": 5}
            )
        figures["small_captured"] = captured_rate(ex)
        pace = [e for e in ex if e.ts - ex[0].ts <= args.pace_seconds]
        with Broker() as b:
            figures["pacing"] = run_replay(pace, b.address, 1.0)
    else:
        print(f"no {args.small}: skipping the small-request and pacing figures", file=sys.stderr)
    if args.bulk.exists():
        ex = load(args.bulk, None, apis=("Produce",))
        with Broker() as b:
            figures["bulk_replay"] = run_replay(ex, b.address, None)
        with Broker() as b:
            figures["bulk_client"] = run_client(
                records_of(ex), b.address, {"linger.ms": 5, "batch.size": 16384, "acks": 1}
            )
        figures["bulk_captured"] = captured_rate(ex)
    else:
        print(f"no {args.bulk}: skipping the bulk-produce figures", file=sys.stderr)

    for name, f in figures.items():
        print(f"{name:<15} " + "  ".join(f"{k}={v}" for k, v in f.items()))
    if "small_replay" in figures:
        r, c, k = figures["small_replay"], figures["small_captured"], figures["small_client"]
        print(
            f"small requests: replay {r['requests_per_s']} req/s = {r['requests_per_s'] / c['requests_per_s']:.2f}x "
            f"the captured clients, {r['requests_per_s'] / max(k['requests_per_s'], 1e-9):.2f}x confluent-kafka; "
            f"Produce alone {r['produce_per_s']} req/s = {r['produce_per_s'] / c['produce_per_s']:.2f}x the captured "
            f"producers"
        )
    if "bulk_replay" in figures:
        r, c, k = figures["bulk_replay"], figures["bulk_captured"], figures["bulk_client"]
        print(
            f"bulk produce: replay {r['MB_per_s']} MB/s = {r['MB_per_s'] / c['MB_per_s']:.2f}x the capture, "
            f"{r['MB_per_s'] / max(k['MB_per_s'], 1e-9):.2f}x confluent-kafka"
        )
    if "pacing" in figures:
        p = figures["pacing"]
        print(
            f"pacing at --speed 1: send offset error p50 {p['pace_p50_ms']} ms, p99 {p['pace_p99_ms']} ms "
            f"(target p99 < 2 ms), max {p['pace_max_ms']} ms; the {p['sent'] - p['held']} sends not held for an "
            f"answer: p50 {p['free_pace_p50_ms']} ms, p99 {p['free_pace_p99_ms']} ms; every send, a held one "
            f"measured from the answer it went after ({p['held_after_answer']} of {p['held']}): p50 "
            f"{p['own_pace_p50_ms']} ms, p99 {p['own_pace_p99_ms']} ms, max {p['own_pace_max_ms']} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
