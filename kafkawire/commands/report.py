"""`kafkawire report`: latency, errors, versions and lag from landed tables or from captures (landed
to a temporary folder first), as text, JSON or one HTML page."""

from __future__ import annotations

import argparse
import json
import sys

from dissector.files import capture_files
from kafkawire.options import Progress, add_quiet, add_threads, add_tls, tls_keylogs, readable, spool

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    rep = sub.add_parser(
        "report",
        help="latency, errors, versions, consumer lag from landed tables or captures",
        description="Latency percentiles per API/client/broker and over time, error codes, the "
        "slowest exchanges, the client/broker version matrix, consumer lag and "
        "produce-to-fetch latency.",
        epilog="examples:\n  kafkawire report tables/            # a directory written by `land`\n"
        "  kafkawire report capture.pcap --format json\n"
        "  kafkawire report tables/ --html report.html\n"
        "  kafkawire report --kafka4 capture.pcap   # exit status 1 when a client would break on Kafka 4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rep.add_argument(
        "sources",
        nargs="+",
        metavar="DIR|CAPTURE",
        help="a directory written by `kafkawire land`, or captures (landed to a temporary directory first)",
    )
    rep.add_argument("--format", choices=("text", "json"), default="text")
    rep.add_argument(
        "--bucket",
        default=None,
        help="time bucket of the over-time sections (pandas frequency: 1s, 1min, ...; default 1min, "
        "and for --html about 100 buckets over the capture)",
    )
    rep.add_argument("--html", metavar="FILE", help="write one self-contained HTML page with plots instead")
    rep.add_argument(
        "--kafka4",
        action="store_true",
        help="only the Kafka 4 readiness section: every client that sent an API version Kafka 4 removed "
        "(KIP-896); exit status 1 when there is one, for a CI job to gate on",
    )
    add_threads(rep)
    add_quiet(rep, "no progress bar while captures are landed, no 'wrote FILE' line")
    rep.add_argument("--top", type=int, default=20, help="how many of the slowest exchanges")
    rep.add_argument("--port", type=int, action="append", default=[], help="another Kafka port besides 9092")
    add_tls(rep)
    rep.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import tempfile

    args.bucket_given = args.bucket
    if args.bucket is not None:
        from pandas.tseries.frequencies import to_offset

        try:
            to_offset(args.bucket)
        except ValueError:
            print(
                f"kafkawire: --bucket {args.bucket!r} is not a time bucket (1s, 1min, 5min, 1h, ...)", file=sys.stderr
            )
            return 2
    from report.analysis import report

    sources = args.sources
    landed = len(sources) == 1 and _is_lake(sources[0])
    faults: list = []
    with tempfile.TemporaryDirectory(prefix="kafkawire-report-") as tmp:
        if landed:
            out = sources[0]
        else:
            from dissector.stream import is_stream

            if not readable([s for s in sources if not is_stream(s)]):
                return 2
            sources = spool(sources, tmp)
            keylogs = tls_keylogs(args)
            if keylogs is None:
                return 2
            from landing.local import land_local

            out = os.path.join(tmp, "tables")
            with Progress("landing", quiet=args.quiet) as progress:
                land_local(
                    capture_files(sources),
                    out,
                    ports=args.port,
                    records=True,
                    payloads=False,
                    progress=progress,
                    faults=faults,
                    tls_keylogs=keylogs,
                    threads=args.threads,
                )
        if args.kafka4:
            code = _kafka4(out, args.format)
            for fault in faults:
                print(f"kafkawire: {fault}", file=sys.stderr)
            return 2 if faults else code
        if args.html:
            from report.html import write as write_html

            try:
                write_html(out, args.html, top=args.top, bucket=args.bucket_given)
            except OSError as e:
                print(f"kafkawire: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
                return 2
            if not args.quiet:
                print(f"wrote {args.html}")
            for fault in faults:
                print(f"kafkawire: {fault}", file=sys.stderr)
            return 2 if faults else 0
        sections = report(out, bucket=args.bucket or "1min", top=args.top)
        if args.format == "json":
            json.dump(
                {k: json.loads(v.to_json(orient="records", date_format="iso")) for k, v in sections.items()}, sys.stdout
            )
            sys.stdout.write("\n")
        else:
            _print_report(sections)
    for fault in faults:
        print(f"kafkawire: {fault}", file=sys.stderr)
    return 2 if faults else 0


def _kafka4(out, fmt: str) -> int:
    """The Kafka 4 readiness section alone; 1 when a client would break, else 0."""
    from report.analysis import kafka4_readiness

    rows = kafka4_readiness(out)
    if fmt == "json":
        json.dump(json.loads(rows.to_json(orient="records", date_format="iso")), sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_report({"kafka4_readiness": rows})
        clients = rows[["client_id", "host"]].drop_duplicates()
        if rows.empty:
            print("kafka 4: no client sent an API version Kafka 4 removed")
        else:
            print(
                f"kafka 4: {len(clients)} client(s) would break: {len(rows)} API version(s) Kafka 4 removed "
                f"({', '.join(sorted({f'{a} v{v}' for a, v in zip(rows['api_name'], rows['version'], strict=True)}))})"
            )
    return 1 if len(rows) else 0


def _is_lake(path: str) -> bool:
    """A folder (or URI) that `land` wrote tables into, not captures."""
    import os

    from dissector import fs

    path = fs.local(path)
    if fs.is_uri(path):
        from landing.lake import Lake

        try:
            return Lake(path).holds_tables()
        except Exception:  # noqa: BLE001 - no lake there (no bucket, no access): read as captures, which says why
            return False
    return os.path.isdir(os.path.join(path, "exchanges"))


def _print_report(sections: dict) -> None:
    import pandas as pd

    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.max_rows", 200, "display.max_colwidth", 60
    ):
        for name, df in sections.items():
            title = name.replace("_", " ")
            sys.stdout.write(f"== {title} ({len(df)} rows)\n")
            sys.stdout.write((df.to_string(index=False) if len(df) else "(none)") + "\n\n")
