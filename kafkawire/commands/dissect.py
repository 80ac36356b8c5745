"""`kafkawire dissect`: the Kafka exchanges of captures as text or jsonl lines, in request-time order."""

from __future__ import annotations

import argparse
import sys

from dissector import native
from dissector.native import DEFAULT_MAX_FRAME_SIZE
from kafkawire.options import (
    Live,
    Progress,
    add_captures,
    add_filters,
    add_live,
    add_prometheus,
    add_quiet,
    add_tls,
    tls_keylogs,
    make_filter,
    quiet_broken_pipe,
    start_prometheus,
    tls_note,
)

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    dis = sub.add_parser(
        "dissect",
        help="decode the Kafka exchanges in packet captures",
        description="Decode every Kafka exchange in packet captures: one line (text) or JSON "
        "object (jsonl) per exchange or anomaly, in request-time order.",
        epilog="examples:\n  kafkawire dissect capture.pcap\n"
        "  kafkawire dissect rotated/ --port 29092 --format jsonl > out.jsonl\n"
        "  kafkawire dissect capture.pcap --api Produce,Fetch --topic 'orders*' --min-latency 100\n"
        "  kafkawire dissect capture.pcap --errors-only --time-from 2026-11-21T21:53:00\n"
        "  tcpdump -i eth0 -U -w - 'tcp port 9092' | kafkawire dissect -\n"
        "  kafkawire dissect -i eth0 --port 9093 --duration 60\n\n"
        "exit status: 0 ok; 2 a capture file is missing, empty, corrupt or cut short "
        "(what came before the fault is still written) or the options are wrong; 130 a live "
        "capture stopped by Ctrl-C (what was read is written)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_captures(dis, live=True)
    add_tls(dis)
    add_live(dis)
    dis.add_argument("--format", choices=("text", "jsonl"), default="text")
    dis.add_argument("--records", action="store_true", help="include decoded record batches instead of summaries")
    dis.add_argument("--raw", action="store_true", help="jsonl: add request_raw/response_raw (hex, no size prefix)")
    dis.add_argument(
        "--no-payloads",
        action="store_true",
        help="drop record keys, values and header values (sizes kept; record data in --raw starred)",
    )
    dis.add_argument(
        "--show-secrets",
        action="store_true",
        help="do not redact SASL passwords, proofs, tokens, delegation-token HMACs, SCRAM credentials",
    )
    dis.add_argument(
        "--max-frame-size",
        type=int,
        default=DEFAULT_MAX_FRAME_SIZE,
        metavar="BYTES",
        help=f"frames above this size are an anomaly (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    add_quiet(dis, "no progress bar on stderr")
    add_prometheus(
        dis,
        "with -i or -: requests, latency histograms, errors, bytes, in flight, rebalances of the "
        "exchanges the filters keep",
    )
    add_filters(dis)
    dis.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_frame_size <= 0:
        print("kafkawire: --max-frame-size must be positive", file=sys.stderr)
        return 2
    try:
        keep = make_filter(args)
    except ValueError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return 2
    keylogs = tls_keylogs(args)
    if keylogs is None:
        return 2
    live = Live(args)
    files = live.files()
    if files is None:
        return 2
    watching = None
    if args.prometheus is not None:
        why = None if live.streaming else "--prometheus goes with a live source: -i IFACE or - (top serves a file's)"
        try:
            exporter = start_prometheus(args.prometheus) if why is None else None
        except ValueError as e:
            why = str(e)
        if why is not None:
            live.stop()
            print(f"kafkawire: {why}", file=sys.stderr)
            return 2
        watching = _Watch(exporter)
    # Every line is the native core's, with every option and filter. Like tshark: everything decoded
    # before a file fault is written, and the fault makes the exit status 2.
    faults: list = []
    tls: dict = {}
    sys.stdout.flush()
    # a bar between output lines on one terminal garbles both
    quiet = args.quiet or sys.stdout.isatty() or live.streaming
    try:
        with live, Progress("dissecting", quiet=quiet) as progress:
            native.write(
                files,
                sys.stdout.buffer,
                args.format,
                ports=args.port,
                max_frame_size=args.max_frame_size,
                show_secrets=args.show_secrets,
                records=args.records,
                raw=args.raw,
                payloads=not args.no_payloads,
                keep=keep,
                progress=progress,
                faults=faults,
                tls_keylogs=keylogs,
                tls_summary=tls,
                live=args.order if live.streaming or args.order == "arrival" else None,
                watch=watching.observe if watching else None,
                in_flight=watching.in_flight if watching else None,
            )
            sys.stdout.buffer.flush()
    except BrokenPipeError:
        return quiet_broken_pipe()
    tls_note(tls, args.quiet)
    faults = live.faults(faults)
    for fault in faults:
        print(f"kafkawire: {fault}", file=sys.stderr)
    return live.status(faults)


class _Watch:
    """A live `dissect`'s side of the exporter: each item it writes a line for, and now and then
    the requests its engine holds unanswered (dissector.native.write's watch and in_flight)."""

    def __init__(self, exporter):
        from kafkawire.top.model import Rebalances

        self.exporter = exporter
        self.groups = Rebalances()

    def observe(self, item) -> None:
        self.exporter.observe(item)
        if item.type == "exchange":
            if item.ts is not None:
                self.groups.request(item, item.ts)
            if item.response_ts is not None:
                self.groups.response(item, item.response_ts)
                self.groups.expire(item.response_ts)

    def in_flight(self, rows: list) -> None:
        """rows: [(api, client id, broker, request time)] awaiting their answer now."""
        apis: dict[str, int] = {}
        for api, *_ in rows:
            apis[api] = apis.get(api, 0) + 1
        self.exporter.refresh(apis, {r.group_id: r.members for r in self.groups.in_progress()})
