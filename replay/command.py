"""`kafkawire replay`: the command-line face of plan -> sender -> compare."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap/pcapng files or directories")
    p.add_argument("--to", required=True, metavar="HOST:PORT", help="the target broker")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, metavar="F", help="captured timing / F (default 1)")
    pace.add_argument("--max-speed", action="store_true", help="send as fast as the target answers")
    p.add_argument("--api", action="append", default=[], metavar="NAMES", help="only these APIs (comma list)")
    p.add_argument("--client-id", metavar="PATTERN", help="only clients whose id matches (fnmatch)")
    p.add_argument("--connection", type=int, metavar="ID", help="only this captured connection")
    p.add_argument("--allow-writes", action="store_true", help="also send Produce, CreateTopics, commits, ...")
    p.add_argument("--strict", action="store_true", help="also compare offsets and high watermarks")
    p.add_argument("--dry-run", action="store_true", help="print the plan without sending anything")
    p.add_argument("--report", metavar="FILE.json", help="write every difference, rewrite and skip as JSON")
    p.add_argument("--port", type=int, action="append", default=[], help="another Kafka port besides 9092")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds for each socket operation")


def run(args: argparse.Namespace) -> int:
    import dissector
    from replay import compare, plan, sender
    from protocol import registry

    if args.speed <= 0:
        sys.stderr.write("kafkawire replay: --speed must be > 0\n")
        return 2
    apis = [a for v in args.api for a in v.split(",") if a]
    exchanges = list(dissector.dissect(args.captures, ports=args.port))
    if args.dry_run:
        # Without a target to ask, assume it accepts every version the registry knows.
        ranges = {k: (min(v), max(v)) for k in registry.api_keys() if (v := registry.request_versions(k))}
    else:
        try:
            ranges = sender.api_versions(args.to, timeout=args.timeout)
        except (OSError, sender.ReplayError, ValueError) as e:
            sys.stderr.write(f"kafkawire replay: cannot ask {args.to} for its versions: {e}\n")
            return 1
    conns = plan.plan(exchanges, ranges, apis=apis, client_id=args.client_id, connection=args.connection,
                      allow_writes=args.allow_writes)
    if args.dry_run:
        sys.stdout.write("\n".join(plan.summary(conns)) + "\n")
        return 0
    answers = sender.replay(conns, args.to, speed=None if args.max_speed else args.speed, timeout=args.timeout)
    report = compare.compare(conns, answers, strict=args.strict)
    sys.stdout.write("\n".join(compare.text(report)) + "\n")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray)) else str(o))
    return 0
