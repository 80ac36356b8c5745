"""The `kafkawire` command: one entry point, one subcommand per job.

The top of the house: it parses options and calls the public faces of the packages below it
(dissector, the tables and Spark engines, the report, replay); nothing below imports it."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from dissector import native
from dissector.files import capture_files
from dissector.fs import RemoteError
from dissector.items import file_fault
from dissector.native import DEFAULT_MAX_FRAME_SIZE, NativeCoreMissing


def _cmd_apis(args: argparse.Namespace) -> int:
    from protocol.registry import coverage, data_versions, removed_in_kafka4

    if args.nested:
        return _nested_apis(args, data_versions)
    if args.internal:
        return _internal_apis(args, data_versions)
    rows = coverage()
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kafkawire schema registry: {len(rows)} APIs")
    table.add_column("key", justify="right")
    table.add_column("name")
    table.add_column("versions")
    table.add_column("flexible")
    table.add_column("removed in Kafka 4")
    for row in rows:
        table.add_row(
            str(row["api_key"]),
            row["name"],
            _ranges(row["versions"]),
            _ranges(row["flexible_versions"]) or "-",
            _ranges([v for v in row["versions"] if removed_in_kafka4(row["api_key"], v)]) or "-",
        )
    Console().print(table)
    return 0


def _nested_apis(args: argparse.Namespace, data_versions) -> int:
    """`apis --nested`: the payloads decoded inside bytes fields, and their versions."""
    rows = []
    for kind, api, direction, field in native.nested_payloads():
        known = kind[0].isupper()  # a registry type, not "the request it carries"
        versions = data_versions(kind) if known else []
        rows.append({"type": kind, "versions": versions, "api": api, "direction": direction, "field": field})
    return _listing(
        args,
        rows,
        "payloads decoded inside bytes fields (docs/commands.md: Payloads inside payloads)",
        {
            "type": lambda r: r["type"],
            "versions": lambda r: _ranges(r["versions"]) or "-",
            "API": lambda r: r["api"],
            "direction": lambda r: r["direction"],
            "field": lambda r: r["field"],
        },
    )


def _internal_apis(args: argparse.Namespace, data_versions) -> int:
    """`apis --internal`: the internal topics' record types and their versions."""
    rows = [
        {
            "topic": topic,
            "type_id": type_id,
            "key": key,
            "key_versions": data_versions(key) if key else [],
            "value": value,
            "value_versions": data_versions(value),
        }
        for topic, type_id, key, value in native.internal_schemas()
    ]
    return _listing(
        args,
        rows,
        "internal topics' records (docs/commands.md: Internal topics)",
        {
            "topic": lambda r: r["topic"],
            "type": lambda r: str(r["type_id"]),
            "key": lambda r: r["key"] or "-",
            "value": lambda r: r["value"],
            "versions": lambda r: _ranges(r["value_versions"]),
        },
    )


def _listing(args: argparse.Namespace, rows: list[dict], title: str, columns: dict) -> int:
    """`apis`' listings: the rows as a JSON array with --json, else a table of `columns` (name -> cell)."""
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(*(cell(r) for cell in columns.values()))
    Console().print(table)
    return 0


def _ranges(versions: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5': the compact form Kafka's own docs use."""
    out, start = [], None
    for i, v in enumerate(versions):
        if start is None:
            start = v
        if i + 1 == len(versions) or versions[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


def _cmd_dissect(args: argparse.Namespace) -> int:
    if args.max_frame_size <= 0:
        print("kafkawire: --max-frame-size must be positive", file=sys.stderr)
        return 2
    try:
        keep = _filter(args)
    except ValueError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return 2
    keylogs = _keylogs(args)
    if keylogs is None:
        return 2
    live = _Live(args)
    files = live.files()
    if files is None:
        return 2
    # Every line is the native core's, with every option and filter. Like tshark: everything decoded
    # before a file fault is written, and the fault makes the exit status 2.
    faults: list = []
    tls: dict = {}
    sys.stdout.flush()
    # a bar between output lines on one terminal garbles both
    quiet = args.quiet or sys.stdout.isatty() or live.streaming
    try:
        with live, _Progress("dissecting", quiet=quiet) as progress:
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
            )
            sys.stdout.buffer.flush()
    except BrokenPipeError:
        return _quiet_broken_pipe()
    _tls_note(tls, args.quiet)
    faults = live.faults(faults)
    for fault in faults:
        print(f"kafkawire: {fault}", file=sys.stderr)
    return live.status(faults)


def _tls_note(tls: dict, quiet: bool) -> None:
    """One stderr line when TLS connections stayed encrypted (each is also a tls_encrypted anomaly)."""
    n = tls.get("undecrypted", 0)
    if n and not quiet:
        print(
            f"kafkawire: {n} of {tls['connections']} TLS connections ({tls['undecrypted_bytes']:,} bytes) "
            "were not decrypted: see their tls_encrypted anomalies; --tls-keylog FILE decrypts them (docs/tls.md)",
            file=sys.stderr,
        )


class _Progress:
    """A rich progress line on stderr while packets are read, only when stderr is a terminal."""

    def __init__(self, what: str, quiet: bool = False):
        self.what, self.quiet = what, quiet
        self.bar = self.task = None

    def __enter__(self):
        if sys.stderr.isatty() and not self.quiet:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                SpinnerColumn(),
                TextColumn(self.what + ": {task.completed:,.0f} packets"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self.task = self.bar.add_task(self.what, total=None)
            self.bar.start()
        return self

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _add_captures(p: argparse.ArgumentParser, live: bool = False) -> None:
    p.add_argument(
        "captures",
        nargs="*" if live else "+",
        metavar="CAPTURE",
        help="pcap/pcapng files (gzip ok) or directories of rotated captures"
        + ("; - (or a FIFO) reads a capture stream as tcpdump -U -w - writes it" if live else ""),
    )
    p.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        help="another Kafka port besides 9092 (repeatable; other ports are auto-detected too)",
    )


def _add_tls(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tls-keylog",
        action="append",
        default=[],
        metavar="FILE",
        help="decrypt TLS connections with this NSS key log (SSLKEYLOGFILE format; repeatable; "
        "a pcapng's Decryption Secrets Blocks are used without it)",
    )


def _keylogs(args: argparse.Namespace) -> list[bytes] | None:
    """The --tls-keylog files' texts, or None after a one-line message when one cannot be used."""
    from dissector.tls import KeyLogError, read_keylogs

    try:
        return read_keylogs(getattr(args, "tls_keylog", None) or [])
    except KeyLogError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return None


def _add_live(p: argparse.ArgumentParser, order: bool = True) -> None:
    g = p.add_argument_group("live capture (docs/commands.md: Live traffic)")
    g.add_argument("-i", "--interface", metavar="IFACE", help="capture on IFACE with dumpcap (else tcpdump)")
    g.add_argument("-f", "--filter", metavar="BPF", help="capture filter (default: tcp port 9092 and the --port ports)")
    g.add_argument("--duration", type=float, metavar="S", help="stop the capture after S seconds")
    g.add_argument("--count", type=int, metavar="N", help="stop the capture after N packets")
    if not order:
        g.add_argument(
            "--rotate", type=float, default=10.0, metavar="S", help="land --follow -i: a new capture file every S s"
        )
        g.add_argument(
            "--capture-dir",
            metavar="DIR",
            help="land --follow -i: keep the capture files here (default: in the lake's _kafkawire, "
            "each deleted once it is landed)",
        )
        return
    g.add_argument(
        "--order",
        choices=("window", "arrival"),
        default="window",
        help="window: request-time order, each line as soon as nothing still open can precede it (at "
        "most the 5 s window late); arrival: each exchange as it completes",
    )


class _Stopper:
    """Ctrl-C and --duration S call stop() (which ends a live capture so that what was read is still
    written); a second Ctrl-C interrupts at once. `interrupted`: Ctrl-C came (exit status 130)."""

    def __init__(self, stop, duration: float | None = None):
        self.stop, self.duration = stop, duration
        self.interrupted = False
        self._old = self._timer = None

    def _interrupt(self, signum, frame) -> None:
        import signal

        self.interrupted = True
        signal.signal(signal.SIGINT, self._old or signal.default_int_handler)
        self.stop()

    def __enter__(self) -> _Stopper:
        import signal
        import threading

        self._old = signal.signal(signal.SIGINT, self._interrupt)
        if self.duration:
            self._timer = threading.Timer(self.duration, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        import signal

        if self._timer is not None:
            self._timer.cancel()
        signal.signal(signal.SIGINT, self._old or signal.default_int_handler)


class _Live:
    """The capture a command reads: files, a stream (`-`, a FIFO) or a live capture tool (-i), with
    Ctrl-C and --duration ending the stream so that everything read is still written."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tool = None
        self.streaming = False
        self._stopper = _Stopper(self.stop, getattr(args, "duration", None))

    def files(self) -> list[str] | None:
        """The capture paths to read (None after a one-line message)."""
        from dissector import stream

        a = self.args
        iface = getattr(a, "interface", None)
        if iface is None and not a.captures:
            print(
                "kafkawire: give a capture (a file, a directory, or - for standard input) or -i IFACE", file=sys.stderr
            )
            return None
        if iface is not None:
            if a.captures:
                print("kafkawire: give captures or -i IFACE, not both", file=sys.stderr)
                return None
            try:
                self.tool, path = stream.live_capture(iface, a.filter or stream.default_filter(a.port), a.count)
            except stream.CaptureError as e:
                print(f"kafkawire: {e}", file=sys.stderr)
                return None
            files = [path]
        else:
            files = capture_files(a.captures)
            if any(stream.is_stream(f) for f in files) and len(files) > 1:
                print("kafkawire: a stream (-, a pipe) is read alone, without other captures", file=sys.stderr)
                return None
            if not _readable([f for f in a.captures if not stream.is_stream(f)]):
                return None
        self.streaming = any(stream.is_live(f) for f in files)
        return files

    @property
    def interrupted(self) -> bool:
        return self._stopper.interrupted

    def __enter__(self) -> _Live:
        if self.streaming:
            self._stopper.__enter__()
        return self

    def stop(self) -> None:
        from dissector import stream

        if self.tool is not None:
            self.tool.stop()
        stream.stop_all()

    def __exit__(self, *exc) -> None:
        if self.streaming:
            self._stopper.__exit__(*exc)
        if self.tool is not None:
            self.tool.stop()
            said = self.tool.stats()
            if said and not getattr(self.args, "quiet", False):
                print(f"kafkawire: {self.tool.tool}: {said}", file=sys.stderr)

    def faults(self, faults: list) -> list:
        """A live capture that saw no packet is no fault (a quiet link), as for tshark."""
        from dissector.stream import live_faults

        return live_faults(faults) if self.streaming else faults

    def status(self, faults: list) -> int:
        return 130 if self.interrupted else 2 if faults else 0


def _spool(paths: list[str], into: str) -> list[str]:
    """Captures as files: a stream (`-`, a FIFO) is copied into a file in `into` as it comes, until
    it ends or Ctrl-C, for the commands that need whole files (land, report)."""
    import os

    from dissector import stream

    out = []
    for i, p in enumerate(paths):
        if not stream.is_stream(p):
            out.append(p)
            continue
        dst = os.path.join(into, f"stream-{i}.pcap")
        with stream.open_stream(p) as src, open(dst, "wb") as f:
            try:
                while (chunk := src.read1(1 << 20)) != b"":
                    if chunk:
                        f.write(chunk)
            except KeyboardInterrupt:
                pass  # what came so far is landed; a record cut at its end is the usual fault
        out.append(dst)
    return out


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (`| head`): end quietly, as a filter does."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


def _add_quiet(p: argparse.ArgumentParser, what: str) -> None:
    """--quiet silences chatter only: the data output and the error lines are the same with it."""
    if not any("--quiet" in a.option_strings for a in p._actions):  # replay may define its own
        p.add_argument("--quiet", action="store_true", help=what + "; the output and error lines stay")


def _add_filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filters (like tshark's display filters; all given must match)")
    g.add_argument(
        "--api",
        action="append",
        default=[],
        metavar="NAME",
        help="keep these APIs (name or key; repeatable or comma-separated)",
    )
    g.add_argument("--client-id", action="append", default=[], metavar="PATTERN", help="client id, shell pattern")
    g.add_argument("--topic", action="append", default=[], metavar="PATTERN", help="a topic the exchange names")
    g.add_argument(
        "--errors-only",
        action="store_true",
        help="exchanges with a non-zero error code, or unanswered/undecodable ones",
    )
    g.add_argument("--min-latency", type=float, metavar="MS", help="answered in at least this many ms")
    g.add_argument("--connection", type=int, action="append", default=[], metavar="ID", help="connection id")
    g.add_argument("--time-from", metavar="TIME", help="from this time on (epoch seconds or ISO 8601, UTC)")
    g.add_argument("--time-to", metavar="TIME", help="before this time")


def _filter(args: argparse.Namespace):
    """The Filter the options ask for (None when none is given); raises ValueError on a bad time."""
    from dissector.filters import Filter, parse_time

    f = Filter.of(
        apis=[a.strip() for v in args.api for a in v.split(",") if a.strip()],
        client_ids=args.client_id,
        topics=args.topic,
        errors_only=args.errors_only,
        min_latency=args.min_latency,
        connections=args.connection,
        time_from=None if args.time_from is None else parse_time(args.time_from),
        time_to=None if args.time_to is None else parse_time(args.time_to),
    )
    return f or None


def _watch_faults(items, faults: list):
    """Pass items through, noting the file-level faults (each becomes a stderr line and exit 2)."""
    for item in items:
        if (fault := file_fault(item)) is not None:
            faults.append(fault)
        yield item


def _readable(paths: list[str]) -> bool:
    from dissector.files import unreadable

    for path in paths:
        why = unreadable(path)
        if why is not None:
            print(f"kafkawire: {why}", file=sys.stderr)
            return False
    return True


def _land_follow(args: argparse.Namespace) -> int:
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
        keep = _filter(args)
    except ValueError as e:
        return no(str(e))
    if keep is not None:
        return no("filters do not go with --follow (an append carries every connection): filter the tables")
    if _keylogs(args) is None:  # checked here, read again for every file (clients append to them)
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
    stopping = _Stopper(tool.stop if tool is not None else lambda: None, getattr(args, "duration", None))
    try:
        with stopping if tool is not None else contextlib.nullcontext():
            f = follow(
                args.captures[0],
                args.out,
                ports=args.port,
                records=args.records,
                payloads=not args.no_payloads,
                tls_keylogs=args.tls_keylog,
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


def _cmd_land(args: argparse.Namespace) -> int:
    import os

    if getattr(args, "follow", False):
        return _land_follow(args)
    import tempfile

    from dissector.stream import is_stream

    if not _readable([c for c in args.captures if not is_stream(c)]):
        return 2
    if any(is_stream(c) for c in args.captures):
        # a stream is landed once it ends (Ctrl-C ends it): its bytes are kept in a file until then
        with tempfile.TemporaryDirectory(prefix="kafkawire-land-") as tmp:
            args.captures = _spool(args.captures, tmp)
            return _cmd_land(args)
    try:
        keep = _filter(args)
    except ValueError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return 2
    keylogs = _keylogs(args)
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
            tls_keylogs=args.tls_keylogs,
            **mode,
        )
        faults.extend(found)
        return counts
    if keep is None:
        from landing.local import land_native

        with _Progress("landing", quiet=args.quiet) as progress:
            return land_native(
                capture_files(args.captures),
                args.out,
                ports=args.port,
                records=args.records,
                payloads=not args.no_payloads,
                progress=progress,
                faults=faults,
                tls_keylogs=args.tls_keylogs,
                **mode,
            )
    from landing.local import land_local
    from landing.stitch import file_items

    with _Progress("landing", quiet=args.quiet) as progress:
        # landing.stitch numbers connections the same in any split of the capture (the Spark engine's too)
        def items(files):
            return filter(
                keep,
                _watch_faults(
                    file_items(files, ports=args.port, progress=progress, tls_keylogs=args.tls_keylogs), faults
                ),
            )

        return land_local(
            items,
            args.out,
            records=args.records,
            payloads=not args.no_payloads,
            files=capture_files(args.captures),
            faults=faults,
            **mode,
        )


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


def _cmd_report(args: argparse.Namespace) -> int:
    import os
    import tempfile

    args.bucket_given = args.bucket
    from report.analysis import report

    sources = args.sources
    landed = len(sources) == 1 and _is_lake(sources[0])
    faults: list = []
    with tempfile.TemporaryDirectory(prefix="kafkawire-report-") as tmp:
        if landed:
            out = sources[0]
        else:
            from dissector.stream import is_stream

            if not _readable([s for s in sources if not is_stream(s)]):
                return 2
            sources = _spool(sources, tmp)
            keylogs = _keylogs(args)
            if keylogs is None:
                return 2
            from landing.local import land_native

            out = os.path.join(tmp, "tables")
            with _Progress("landing", quiet=args.quiet) as progress:
                land_native(
                    capture_files(sources),
                    out,
                    ports=args.port,
                    records=True,
                    payloads=False,
                    progress=progress,
                    faults=faults,
                    tls_keylogs=keylogs,
                )
        if args.html:
            from report.html import write as write_html

            write_html(out, args.html, top=args.top, bucket=args.bucket_given)
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


def _cmd_top(args: argparse.Namespace) -> int:
    # imported when `top` runs: its model and view are no part of the other commands' start-up
    from kafkawire.top.command import run

    return run(args)


def _print_report(sections: dict) -> None:
    import pandas as pd

    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.max_rows", 200, "display.max_colwidth", 60
    ):
        for name, df in sections.items():
            title = name.replace("_", " ")
            sys.stdout.write(f"== {title} ({len(df)} rows)\n")
            sys.stdout.write((df.to_string(index=False) if len(df) else "(none)") + "\n\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkawire", description="Kafka network-traffic dissector and replay analyzer"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    apis = sub.add_parser(
        "apis",
        help="list the API keys and versions the schema registry decodes",
        epilog="examples:\n  kafkawire apis\n  kafkawire apis --json > apis.json\n  kafkawire apis --nested\n"
        "  kafkawire apis --internal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    apis.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    apis.add_argument(
        "--nested",
        action="store_true",
        help="list the payloads decoded inside bytes fields (consumer protocol, Envelope)",
    )
    apis.add_argument(
        "--internal",
        action="store_true",
        help="list the record types of Kafka's internal topics (__cluster_metadata, __consumer_offsets, "
        "__transaction_state, __share_group_state)",
    )
    apis.set_defaults(func=_cmd_apis)
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
    _add_captures(dis, live=True)
    _add_tls(dis)
    _add_live(dis)
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
    _add_quiet(dis, "no progress bar on stderr")
    _add_filters(dis)
    dis.set_defaults(func=_cmd_dissect)

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
    _add_captures(land, live=True)
    _add_tls(land)
    _add_live(land, order=False)
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
    _add_quiet(land, "no progress bar on stderr, no 'landed in DIR: ...' summary line")
    _add_filters(land)
    land.set_defaults(func=_cmd_land)

    rep = sub.add_parser(
        "report",
        help="latency, errors, versions, consumer lag from landed tables or captures",
        description="Latency percentiles per API/client/broker and over time, error codes, the "
        "slowest exchanges, the client/broker version matrix, consumer lag and "
        "produce-to-fetch latency.",
        epilog="examples:\n  kafkawire report tables/            # a directory written by `land`\n"
        "  kafkawire report capture.pcap --format json\n"
        "  kafkawire report tables/ --html report.html",
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
    _add_quiet(rep, "no progress bar while captures are landed, no 'wrote FILE' line")
    rep.add_argument("--top", type=int, default=20, help="how many of the slowest exchanges")
    rep.add_argument("--port", type=int, action="append", default=[], help="another Kafka port besides 9092")
    _add_tls(rep)
    rep.set_defaults(func=_cmd_report)

    from replay import command as replay_command

    rpl = sub.add_parser(
        "replay",
        help="re-send captured requests to a broker and diff its answers",
        epilog="examples:\n  kafkawire replay capture.pcap --to 127.0.0.1:9092 --dry-run\n"
        "  kafkawire replay capture.pcap --to kafka4:9092 --max-speed --report diff.json\n"
        "  kafkawire replay old.pcap --to kafka4:9092 --allow-writes --api Produce,Fetch\n\n"
        "exit status: 0 done (differences are findings); 1 the target could not be asked "
        "for its versions; 2 wrong options",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay_command.add_arguments(rpl)
    _add_tls(rpl)
    _add_filters(rpl)
    rpl.set_defaults(func=replay_command.run, make_filter=_filter)

    from kafkawire.top import options as top_options

    top = sub.add_parser(
        "top",
        help="a live terminal view of Kafka traffic: rates, latency, errors, in flight, rebalances",
        epilog="examples:\n  kafkawire top capture.pcap --speed 20\n"
        "  tcpdump -U -w - 'tcp port 9092' | kafkawire top -\n"
        "  kafkawire top capture.pcap --once --since-start > snapshot.txt\n\n"
        "keys: g grouping (api, client id, broker), s sort, t last interval / since start, f freeze, q quit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top_options.add_arguments(top)
    _add_tls(top)
    top.set_defaults(func=_cmd_top)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except (NativeCoreMissing, RemoteError) as e:
        line = str(e)  # a Spark task's comes already as "kafkawire: ..."
        print(line if line.startswith("kafkawire: ") else f"kafkawire: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # a table store's refusal (delta-rs: no bucket, no access, a table another tool changed): one line
        if type(e).__module__.partition(".")[0] != "deltalake":
            raise
        why = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        print(f"kafkawire: the tables could not be written or read: {why}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
