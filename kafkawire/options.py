"""What the commands share: their common options (captures, TLS key logs, live capture, filters,
--quiet), the capture they read (files, a stream or a live tool, with Ctrl-C and --duration), the
progress line and the one-line messages."""

from __future__ import annotations

import argparse
import sys

from dissector.files import capture_files
from dissector.items import file_fault

__all__ = [
    "Live",
    "Progress",
    "Stopper",
    "add_captures",
    "add_filters",
    "add_live",
    "add_prometheus",
    "add_quiet",
    "add_tls",
    "tls_keylogs",
    "make_filter",
    "quiet_broken_pipe",
    "readable",
    "spool",
    "start_prometheus",
    "tls_note",
    "watch_faults",
]


def tls_note(tls: dict, quiet: bool) -> None:
    """One stderr line when TLS connections stayed encrypted (each is also a tls_encrypted anomaly)."""
    n = tls.get("undecrypted", 0)
    if n and not quiet:
        print(
            f"kafkawire: {n} of {tls['connections']} TLS connections ({tls['undecrypted_bytes']:,} bytes) "
            "were not decrypted: see their tls_encrypted anomalies; --tls-keylog FILE decrypts them (docs/tls.md)",
            file=sys.stderr,
        )


class Progress:
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


def add_captures(p: argparse.ArgumentParser, live: bool = False) -> None:
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


def add_tls(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tls-keylog",
        action="append",
        default=[],
        metavar="FILE",
        help="decrypt TLS connections with this NSS key log (SSLKEYLOGFILE format; repeatable; "
        "a pcapng's Decryption Secrets Blocks are used without it)",
    )


def tls_keylogs(args: argparse.Namespace) -> list | None:
    """The --tls-keylog files, each parsed once (dissector.tls.load_keylogs: a run in this process
    takes that parse), or None after a one-line message when one cannot be used."""
    from dissector.tls import KeyLogError, load_keylogs

    try:
        return load_keylogs(getattr(args, "tls_keylog", None) or [])
    except KeyLogError as e:
        print(f"kafkawire: {e}", file=sys.stderr)
        return None


def add_live(p: argparse.ArgumentParser, order: bool = True) -> None:
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


class Stopper:
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

    def __enter__(self) -> Stopper:
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


class Live:
    """The capture a command reads: files, a stream (`-`, a FIFO) or a live capture tool (-i), with
    Ctrl-C and --duration ending the stream so that everything read is still written."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tool = None
        self.streaming = False
        self._stopper = Stopper(self.stop, getattr(args, "duration", None))

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
            if not readable([f for f in a.captures if not stream.is_stream(f)]):
                return None
        self.streaming = any(stream.is_live(f) for f in files)
        return files

    @property
    def interrupted(self) -> bool:
        return self._stopper.interrupted

    def __enter__(self) -> Live:
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


def spool(paths: list[str], into: str) -> list[str]:
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


def quiet_broken_pipe() -> int:
    """The reader of our output went away (`| head`): end quietly, as a filter does."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


def add_quiet(p: argparse.ArgumentParser, what: str) -> None:
    """--quiet silences chatter only: the data output and the error lines are the same with it."""
    if not any("--quiet" in a.option_strings for a in p._actions):  # replay may define its own
        p.add_argument("--quiet", action="store_true", help=what + "; the output and error lines stay")


def add_prometheus(p: argparse.ArgumentParser, what: str) -> None:
    """--prometheus HOST:PORT: serve the traffic's metrics for Prometheus to scrape (kafkawire.metrics)."""
    p.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help=f"serve Prometheus metrics on http://HOST:PORT/metrics ({what})",
    )


def start_prometheus(address: str | None):
    """The exporter serving on `address`, or None without one; ValueError with a one-line reason."""
    if address is None:
        return None
    from kafkawire.metrics import Exporter, parse_address

    parse_address(address)
    exporter = Exporter()
    try:
        exporter.serve(address)
    except OSError as e:
        raise ValueError(f"--prometheus {address}: cannot listen there: {e.strerror or e}") from None
    return exporter


def add_threads(p: argparse.ArgumentParser) -> None:
    """--threads: how many threads the local engine dissects on (its connections split among them)."""
    p.add_argument(
        "--threads",
        type=_threads,
        default=0,
        metavar="N",
        help="threads the local engine runs on, each dissecting its share of the connections "
        "(default: one per core; 1: one thread)",
    )


def _threads(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 < n <= 1024:
        raise argparse.ArgumentTypeError(f"a number from 1 to 1024, not {text!r}")
    return n


def add_filters(p: argparse.ArgumentParser) -> None:
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


def make_filter(args: argparse.Namespace):
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


def watch_faults(items, faults: list):
    """Pass items through, noting the file-level faults (each becomes a stderr line and exit 2)."""
    for item in items:
        if (fault := file_fault(item)) is not None:
            faults.append(fault)
        yield item


def readable(paths: list[str]) -> bool:
    from dissector.files import unreadable

    for path in paths:
        why = unreadable(path)
        if why is not None:
            print(f"kafkawire: {why}", file=sys.stderr)
            return False
    return True
