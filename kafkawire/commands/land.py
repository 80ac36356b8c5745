"""`kafkawire land`: captures landed as Delta Lake tables, by the local engine or Spark, once or
following a directory tcpdump rotates into."""

from __future__ import annotations

import argparse
import contextlib
import sys

from dissector import native
from dissector.files import capture_files
from kafkawire.options import (
    Progress,
    Stopper,
    add_captures,
    add_filters,
    add_live,
    add_quiet,
    add_threads,
    add_tls,
    tls_keylogs,
    make_filter,
    readable,
    spool,
)

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    land = sub.add_parser(
        "land",
        help="write the exchanges of captures as Delta Lake tables (local or Spark)",
        description="Land captures as Delta Lake tables: exchanges, errors, connections, anomalies "
        "(and records with --records), partitioned by date=YYYY-MM-DD, in a folder or at a URI (s3://...).",
        epilog="examples:\n  kafkawire land capture.pcap --out tables/\n"
        "  kafkawire land rotated/ --out tables/ --records --no-payloads\n"
        "  kafkawire land day2.pcap --out tables/ --mode append\n"
        "  kafkawire land s3://caps/day3/ --out s3://lake/kafka/ --mode append\n"
        "  kafkawire land big.pcap --out tables/ --engine spark --master spark://127.0.0.1:7077",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_captures(land, live=True)
    add_tls(land)
    add_live(land, order=False)
    land.add_argument("--out", required=True, metavar="DIR", help="where the tables go (DIR/<table>/date=.../)")
    land.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: one process, no JVM (default); spark: a PySpark job",
    )
    land.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default local[*]); e.g. spark://HOST:7077 for a cluster",
    )
    land.add_argument(
        "--mode",
        choices=("error", "overwrite", "append"),
        default="error",
        help="when DIR already holds tables: error (default: refuse), overwrite (replace them), "
        "append (add the captures not landed before, recorded in the Delta table DIR/_kafkawire/runs)",
    )
    land.add_argument("--records", action="store_true", help="also land one row per record produced or fetched")
    land.add_argument(
        "--no-payloads", action="store_true", help="records: keep sizes, drop keys, values and header values"
    )
    land.add_argument(
        "--follow",
        action="store_true",
        help="the one CAPTURE is a directory tcpdump rotates into (-C, -G, -W): land each file as it "
        "completes, appended to DIR with the connections carried, until Ctrl-C (docs/tables.md: Following)",
    )
    land.add_argument("--poll", type=float, default=1.0, metavar="S", help="--follow: look for files every S s")
    land.add_argument(
        "--until-idle",
        type=float,
        metavar="S",
        help="--follow: stop (landing the last file too) after S s without a new file or a size change",
    )
    add_threads(land)
    add_quiet(land, "no progress bar on stderr, no 'landed in DIR: ...' summary line")
    add_filters(land)
    land.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    if getattr(args, "follow", False):
        return _follow(args)
    import tempfile

    from dissector.stream import is_stream

    if not readable([c for c in args.captures if not is_stream(c)]):
        return 2
    if any(is_stream(c) for c in args.captures):
        # a stream is landed once it ends (Ctrl-C ends it): its bytes are kept in a file until then
        with tempfile.TemporaryDirectory(prefix="kafkawire-land-") as tmp:
            args.captures = spool(args.captures, tmp)
            return run(args)
    try:
        keep = make_filter(args)
    except ValueError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return 2
    keylogs = tls_keylogs(args)
    if keylogs is None:
        return 2
    args.tls_keylogs = keylogs
    if keep is not None and args.engine == "spark":
        print(
            "kafkawire: filters are not supported with --engine spark yet (filter the tables in Spark instead)",
            file=sys.stderr,
        )
        return 2
    from landing.lake import LakeBusy, LakeExists, LakeOptions

    skipped: list = []
    faults: list = []
    try:
        counts = _land(args, keep, faults, skipped)
    except (LakeExists, LakeBusy, LakeOptions) as e:
        print(e, file=sys.stderr)
        return 2
    for path, entry in skipped:
        same = "" if entry["path"] == os.path.abspath(path) else f" as {entry['path']}"
        print(f"kafkawire: {path} already landed{same} (run {entry['run']}): skipped", file=sys.stderr)
    if skipped and not any(counts.values()) and len(skipped) == len(capture_files(args.captures)):
        print(f"kafkawire: every capture is already landed in {args.out}; nothing to do", file=sys.stderr)
        return 0
    if not args.quiet:
        print(f"landed in {args.out}: " + ", ".join(f"{n:,} {t}" for t, n in counts.items()))
    for fault in faults:
        print(f"kafkawire: {fault}", file=sys.stderr)
    return 2 if faults else 0


def _follow(args: argparse.Namespace) -> int:
    """`land --follow DIR --out LAKE`: landing.follow's loop, its one-line messages, its summary."""
    import os

    def no(line: str) -> int:
        print(f"kafkawire: {line}", file=sys.stderr)
        return 2

    if args.engine == "spark":
        return no(
            "--follow lands with the local engine; on Spark, read the directory as a stream: "
            'spark.readStream.format("kafkawire").load(DIR) (docs/spark.md: Streaming)'
        )
    if args.interface is not None:
        if args.captures:
            return no("give --follow a directory or -i IFACE, not both")
        if args.rotate <= 0:
            return no("--rotate must be positive")
    elif len(args.captures) != 1 or not os.path.isdir(args.captures[0]):
        return no("--follow takes one directory, the one tcpdump rotates into (or -i IFACE)")
    if args.mode == "overwrite":
        return no("--follow appends to the tables (--mode overwrite does not go with it)")
    if args.poll <= 0 or (args.until_idle is not None and args.until_idle < 0):
        return no("--poll must be positive and --until-idle not negative")
    try:
        keep = make_filter(args)
    except ValueError as e:
        return no(str(e))
    if keep is not None:
        return no("filters do not go with --follow (an append carries every connection): filter the tables")
    if tls_keylogs(args) is None:  # checked here, read again for every file (clients append to them)
        return 2
    from dissector.tls import KeyLogError
    from landing.follow import follow, table_rows
    from landing.lake import LakeBusy, LakeOptions

    tool = None
    if args.interface is not None:
        import tempfile

        from dissector import stream

        # the capture tool's files: kept in --capture-dir, else in a temporary folder, each deleted
        # once it is landed
        spool = args.capture_dir or tempfile.mkdtemp(prefix="kafkawire-capture-")
        os.makedirs(spool, exist_ok=True)
        tool = stream.CaptureTool(args.interface, args.filter or stream.default_filter(args.port), count=args.count)
        try:
            tool.rotate(spool, args.rotate)
        except stream.CaptureError as e:
            return no(str(e))
        args.captures = [spool]
    ours = tool is not None and not args.capture_dir

    def landed(path: str, counts: dict) -> None:
        if not args.quiet:
            print(f"landed {path}", flush=True)
        if ours:
            os.unlink(path)  # our own capture file, landed: the tables hold it now

    # -i: Ctrl-C and --duration stop the capture tool (it closes its last file); the follower lands
    # what is left once the tool has exited
    stopping = Stopper(tool.stop if tool is not None else lambda: None, getattr(args, "duration", None))
    try:
        with stopping if tool is not None else contextlib.nullcontext():
            f = follow(
                args.captures[0],
                args.out,
                ports=args.port,
                records=args.records,
                payloads=not args.no_payloads,
                tls_keylog=args.tls_keylog,
                threads=args.threads,
                poll=args.poll,
                idle_exit=args.until_idle,
                stop=(lambda: not tool.running()) if tool is not None else None,
                report=lambda line: print(line, file=sys.stderr, flush=True),
                landed=landed,
            )
    except (LakeBusy, LakeOptions) as e:
        print(e, file=sys.stderr)
        return 2
    except KeyLogError as e:
        return no(str(e))
    finally:
        if tool is not None:
            tool.stop()
    if not args.quiet:
        extra = [f"{len(f.deleted)} deleted before they were landed"] * bool(f.deleted)
        extra += [f"{len(f.skipped)} landed before"] * bool(f.skipped)
        rows = table_rows(args.out, args.records)
        print(
            f"followed {args.captures[0]}: {len(f.landed)} files landed in {args.out}"
            + (f" ({', '.join(extra)})" if extra else "")
            + "; the tables hold "
            + ", ".join(f"{n:,} {t}" for t, n in rows.items())
        )
    if ours:
        # what is left is files of no packet (a quiet rotation) unless a landing failed: those stay
        for name in os.listdir(args.captures[0]):
            path = os.path.join(args.captures[0], name)
            if not native.start_ts(path):
                os.unlink(path)
        try:
            os.rmdir(args.captures[0])
        except OSError:
            print(f"kafkawire: capture files not landed are kept in {args.captures[0]}", file=sys.stderr)
    return 130 if f.interrupted or stopping.interrupted else 2 if f.faults else 0


def _land(args: argparse.Namespace, keep, faults: list, skipped: list) -> dict[str, int]:
    mode = dict(mode=args.mode, skipped=skipped)
    if args.engine == "spark":
        from landing.spark import land_spark

        counts, found = land_spark(
            args.captures,
            args.out,
            master=args.master,
            ports=args.port,
            records=args.records,
            payloads=not args.no_payloads,
            tls_keylogs=[bytes(k) for k in args.tls_keylogs],  # texts travel to the tasks, parsed there
            **mode,
        )
        faults.extend(found)
        return counts
    from landing.local import land_local

    with Progress("landing", quiet=args.quiet) as progress:
        return land_local(
            capture_files(args.captures),
            args.out,
            ports=args.port,
            records=args.records,
            payloads=not args.no_payloads,
            progress=progress,
            faults=faults,
            tls_keylogs=args.tls_keylogs,
            filter=keep,
            threads=args.threads,
            **mode,
        )
