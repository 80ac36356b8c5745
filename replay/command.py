"""`kafkawire replay`: the command-line face of plan -> sender -> compare."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Replay's own options; the capture filters (--api, --client-id, --topic, --connection, --errors-only,
    --min-latency, --time-from/--time-to) are dissect's, added by the cli."""
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap/pcapng files or directories")
    p.add_argument("--to", required=True, metavar="HOST:PORT", help="the target broker")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, metavar="F", help="captured timing / F (default 1)")
    pace.add_argument("--max-speed", action="store_true", help="send as fast as the target answers")
    p.add_argument("--allow-writes", action="store_true", help="also send Produce, CreateTopics, commits, ...")
    p.add_argument("--strict", action="store_true", help="also compare offsets and high watermarks")
    p.add_argument("--dry-run", action="store_true", help="print the plan without sending anything")
    p.add_argument("--report", metavar="FILE.json", help="write every difference, rewrite and skip as JSON")
    p.add_argument("--out", metavar="DIR", help="write Parquet tables of the replayed exchanges and differences")
    p.add_argument("--quiet", action="store_true", help="only the per-API table and the rewrite counts")
    p.add_argument("--port", type=int, action="append", default=[], help="another Kafka port besides 9092")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds for each socket operation")
    s = p.add_argument_group("SASL (captured logins are replaced by a fresh one with these credentials)")
    s.add_argument("--sasl-mechanism", metavar="M", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    s.add_argument("--sasl-username", metavar="U")
    s.add_argument("--sasl-password-env", metavar="VAR", help="the environment variable holding the password")
    # a password typed on the command line is refused without being shown (the cli keeps argparse's
    # own messages from showing it too: kafkawire.cli.scrub_secrets)
    s.add_argument("--sasl-password", action=_NoPassword, help=argparse.SUPPRESS)


class _NoPassword(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            "--sasl-password is not an option: the password comes from an environment variable "
            "(--sasl-password-env VAR), never from the command line, where other users and the "
            "shell's history see it"
        )


def _fail(msg: str, code: int) -> int:
    sys.stderr.write(f"kafkawire replay: {msg}\n")
    return code


def run(args: argparse.Namespace) -> int:
    import dissector
    from protocol import registry
    from replay import compare, plan, sasl, sender
    from replay.session import Session

    if args.speed <= 0:
        return _fail("--speed must be > 0", 2)
    try:
        creds = sasl.from_args(args.sasl_mechanism, args.sasl_username, args.sasl_password_env)
        keep = args.make_filter(args) if getattr(args, "make_filter", None) else None
    except (sasl.LoginError, ValueError) as e:
        return _fail(str(e), 2)
    from dissector.files import unreadable
    from dissector.items import file_fault

    for path in args.captures:
        if (why := unreadable(path)) is not None:
            return _fail(why, 2)
    from dissector.tls import KeyLogError

    try:
        items = list(dissector.dissect(args.captures, ports=args.port, tls_keylog=getattr(args, "tls_keylog", None)))
    except KeyLogError as e:
        return _fail(str(e), 2)
    faults = [f for f in map(file_fault, items) if f is not None]
    if faults and not args.dry_run:
        # a live replay of half a capture would send half a conversation: refuse; the plan is still shown
        return _fail(faults[0] + " (nothing sent; --dry-run shows the plan of what was read before it)", 2)
    exchanges = [i for i in items if i.type == "exchange"]
    if args.dry_run:
        # Without a target to ask, assume it accepts every version the registry knows.
        ranges = {k: (min(v), max(v)) for k in registry.api_keys() if (v := registry.request_versions(k))}
    else:
        try:
            ranges = sender.api_versions(args.to, timeout=args.timeout)
        except (OSError, sender.ReplayError, ValueError) as e:
            return _fail(f"cannot ask {args.to} for its versions: {e}", 1)
    conns = plan.plan(exchanges, ranges, allow_writes=args.allow_writes, sasl=creds, keep=keep)
    if args.dry_run:
        sys.stdout.write("\n".join(plan.summary(conns)) + "\n")
        for f in faults:
            _fail(f, 2)
        return 2 if faults else 0
    import gc
    import threading

    # The captured exchanges are read once and kept, and what the replay adds is answers it keeps too: a full
    # collection over them stalled every connection's pacing at once (40-90 ms, measured in
    # bench/bench_replay.py), so the collector sits out the replay (reference counting still frees garbage).
    gc.freeze()
    gc.disable()
    session, interrupted = Session(exchanges), threading.Event()
    answers = sender.replay(
        conns,
        args.to,
        speed=None if args.max_speed else args.speed,
        timeout=args.timeout,
        session=session,
        ranges=ranges,
        sasl=creds,
        allow_writes=args.allow_writes,
        interrupted=interrupted,
    )
    report = compare.compare(conns, answers, strict=args.strict)
    sys.stdout.write("\n".join(compare.text(report, quiet=args.quiet)) + "\n")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray)) else str(o))
    if args.out:
        from replay import tables

        counts = tables.write(args.out, answers, report, target=args.to)
        if not args.quiet:
            sys.stdout.write(f"wrote {args.out}: " + ", ".join(f"{n:,} {t}" for t, n in counts.items()) + "\n")
    if interrupted.is_set():
        sys.stderr.write("kafkawire replay: interrupted (Ctrl-C): the report covers what was answered so far\n")
        return 130
    return 0
