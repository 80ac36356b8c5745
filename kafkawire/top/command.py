"""`kafkawire top`: the I/O around the model: where items come from, the clock, the keys, the screen.

    kafkawire top capture.pcap --speed 20      # a file played at 20x its own pace
    tcpdump -U -w - 'tcp port 9092' | kafkawire top -
    kafkawire top -i eth0 -f 'tcp port 9092'

Sources (`Source`): an iterator of dissected items read by a thread into a bounded queue, and a clock.
A file is played (`Player`): each item is fed to the model when the clock reaches its time (an
exchange's request time), the clock being capture time running `speed` times as fast as the wall
clock from the first item; when the file ends the clock runs on to the last answer and stops there,
and the view stays until `q`. A live source (`-`, `-i`) is fed as items come, the clock being the wall
clock; the dissector reports an exchange once it is answered (with no reordering window here), and
about every 0.25 s the requests it holds unanswered (dissect()'s in_flight), which are "in flight"; a
request never answered shows when its connection closes, as unanswered.

Screen: on a terminal, a rich Live view in the alternate screen, redrawn every `--interval` seconds
of wall time; the model's window (the "last interval" figures) is `--interval` x `--speed` seconds of
capture time, so at any speed the interval figures cover what was played since the last redraw, and
rates are per second of capture time. Keys (read from /dev/tty in cbreak mode, restored on exit and
on Ctrl-C): g grouping (API, client id, broker, topic), s sort, t interval/since start, f freeze the
view (the model keeps counting), q quit. When stdout is not a terminal: one plain-text snapshot per
interval, every row, no keys; a file ends after its last answer with a final snapshot.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from kafkawire.top.model import TopModel
from kafkawire.top.options import GROUPINGS
from kafkawire.top.view import View

__all__ = ["run", "loop", "Player", "Source"]

_QUEUE = 20_000  # items read ahead of the clock: bounds memory, whatever the file's size
_TICK = 0.02  # s: a file's items are fed up to this late, in batches (one turn of the loop per item cost 50% CPU)
_GAUGES_EVERY = 0.5  # s: how often the Prometheus gauges (in flight, rebalancing) are set


def _fail(msg: str, code: int = 2) -> int:
    sys.stderr.write(f"kafkawire top: {msg}\n")
    return code


class Source:
    """Items from an iterable, read by a daemon thread into a bounded buffer, and the clock to feed them by.

    `items` is the iterable or a function making it: the native engine behind dissect() belongs to the
    thread that made it, so a dissect() generator is made, read and closed in the reader thread alone."""

    def __init__(self, items: Iterable | Callable[[], Iterable], clock: Callable[[], float] | None = None):
        self.buffer: deque = deque()  # append and popleft are atomic: no lock per item
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.clock = clock or time.time
        self.ended = False
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(items,), daemon=True, name="top-source")
        self._thread.start()

    def _read(self, items) -> None:
        buffer = self.buffer
        try:
            for item in items() if callable(items) else items:
                while len(buffer) >= _QUEUE:  # bounded: wait for the player (a file read ahead of its clock)
                    if self.stop.wait(0.01):
                        return
                buffer.append(item)
                if self.stop.is_set():
                    return
        except BaseException as e:  # handed to the main thread, which reports it
            self.error = e
        self._done = True

    def close(self, timeout: float = 2.0) -> None:
        """Stop reading and let the reader thread close its items (bounded wait)."""
        self.stop.set()
        self._thread.join(timeout)

    def take(self, budget: int = 50_000) -> list:
        """Items ready now (at most `budget`); sets `ended` once the items have ended and all are taken."""
        done = self._done  # read before draining: an item appended before it was set is then drained
        out = []
        buffer = self.buffer
        try:
            while len(out) < budget:
                out.append(buffer.popleft())
        except IndexError:
            if done:
                self.ended = True
        return out

    def due(self, now: float) -> list:
        return self.take()

    def next_due(self) -> float | None:
        return None


def item_time(item) -> float | None:
    """When a file's item is fed: an exchange at its request, an orphan answer at its answer, an anomaly at
    its time, a connection account as it comes."""
    if item.type == "exchange":
        return item.ts if item.ts is not None else item.response_ts
    if item.type == "anomaly":
        return item.ts
    return None


class Player(Source):
    """A file's items fed at their own pace / `speed`, the clock being capture time."""

    def __init__(
        self,
        items: Iterable | Callable[[], Iterable],
        speed: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.speed = speed
        self.monotonic = monotonic
        self.start: tuple[float, float] | None = None  # (capture time, monotonic) of the first item
        self.held: list = []  # (its time, item) read, not yet due
        self.last = -math.inf  # the latest time seen: where the clock stops at the end
        super().__init__(items, self._clock)

    def _clock(self) -> float:
        if self.start is None:
            return math.nan
        t0, m0 = self.start
        now = t0 + (self.monotonic() - m0) * self.speed
        return min(now, self.last) if self.ended and not self.held else now

    def due(self, now: float) -> list:
        """The items whose time has come by `now` (capture time), in the order read."""
        held = self.held
        if len(held) < _QUEUE:
            got = self.take(_QUEUE - len(held))
            for item in got:
                t = item_time(item)
                if t is not None:
                    if self.start is None:
                        self.start = (t, self.monotonic())
                        now = t
                    last = max(t, getattr(item, "response_ts", None) or t)
                    if last > self.last:
                        self.last = last
                held.append((t, item))
        if math.isnan(now) and self.start is not None:
            now = self._clock()
        i = 0
        for t, _ in held:  # read in request-time order: the first not yet due ends the run
            if t is not None and not t <= now:
                break
            i += 1
        out = [item for _, item in held[:i]]
        del held[:i]
        return out

    def next_due(self) -> float | None:
        """Seconds (wall) until the next held item is due, None when none is held."""
        if not self.held:
            return None
        t = self.held[0][0]
        if t is not None and self.start is not None:
            return max(0.0, (t - self._clock()) / self.speed)
        return 0.0


class _Keys:
    """Single key presses from the terminal (cbreak mode, no echo), without blocking; restored on close."""

    def __init__(self):
        self.fd = None
        self.saved = None
        try:
            import termios
            import tty

            fd = os.open("/dev/tty", os.O_RDONLY | os.O_NONBLOCK)
            self.saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            self.fd = fd
        except (OSError, ImportError):
            if self.fd is not None:
                os.close(self.fd)
            self.fd = None

    def read(self) -> str:
        if self.fd is None:
            return ""
        try:
            return os.read(self.fd, 64).decode("utf-8", "replace")
        except (BlockingIOError, InterruptedError):
            return ""
        except OSError:
            return ""

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early on a key press."""
        if self.fd is None:
            time.sleep(max(0.0, seconds))
            return
        import select

        select.select([self.fd], [], [], max(0.0, seconds))

    def close(self) -> None:
        if self.fd is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            os.close(self.fd)
            self.fd = None


class LiveClock:
    """A live source's clock: capture time, running with the wall clock from the first item's time, and
    never behind the latest time an item has shown (a stream of an old capture jumps to its times)."""

    def __init__(self, wall: Callable[[], float] = time.monotonic):
        self.wall = wall
        self.start: tuple[float, float] | None = None
        self.latest = -math.inf

    def saw(self, item) -> None:
        t = getattr(item, "response_ts", None) or item_time(item)
        if t is None:
            return
        if self.start is None:
            self.start = (t, self.wall())
        if t > self.latest:
            self.latest = t

    def __call__(self) -> float:
        if self.start is None:
            return math.nan
        t0, w0 = self.start
        return max(t0 + (self.wall() - w0), self.latest)


def _capture(args: argparse.Namespace):
    """-i IFACE: (the capture tool, the path dissect() reads it by), or (None, a one-line message)."""
    from dissector import stream

    try:
        return stream.live_capture(args.interface, args.filter or stream.default_filter(args.port))
    except stream.CaptureError as e:
        return None, str(e)


def run(args: argparse.Namespace) -> int:
    if (args.source is None) == (args.interface is None):
        return _fail("give one source: a capture file, - (stdin) or -i IFACE")
    if not (args.speed > 0 and math.isfinite(args.speed)):
        return _fail("--speed must be a positive number")
    if not args.interval > 0:
        return _fail("--interval must be > 0")
    if args.filter and args.interface is None:
        return _fail("-f BPF goes with -i IFACE")
    live = args.interface is not None or args.source == "-"
    if args.once and live and args.duration is None:
        return _fail("--once on a live source needs --duration S")
    import dissector
    from dissector import stream
    from dissector.files import unreadable
    from dissector.items import file_fault
    from dissector.tls import KeyLogError, read_keylogs

    if not live and (why := unreadable(args.source)) is not None:
        return _fail(why)
    keylog_paths = getattr(args, "tls_keylog", None) or []
    try:
        read_keylogs(keylog_paths)  # checked here, read again by the run (clients append to them)
    except KeyLogError as e:
        return _fail(str(e))
    tool = None
    path = args.source
    if args.interface is not None:
        tool, path = _capture(args)
        if tool is None:
            return _fail(path)
    from kafkawire.options import start_prometheus

    try:
        exporter = start_prometheus(getattr(args, "prometheus", None))
    except ValueError as e:
        if tool is not None:
            tool.stop()
        return _fail(str(e))
    faults: list[str] = []
    clock = LiveClock() if live else None

    def watch(items):
        for item in items:
            if (fault := file_fault(item)) is not None:
                faults.append(fault)
            if clock is not None:
                clock.saw(item)
            yield item

    # live: each exchange as it completes (`top` buckets by the items' own times, and wants them at once)
    order = {"order": "arrival"} if live else {}

    model = TopModel(window=args.interval * (1.0 if live else args.speed))
    # live: the requests the dissector holds unanswered are in flight (a file's come from its
    # exchanges ahead of the clock); the reader thread hands the model each snapshot
    pending = {"in_flight": model.pending} if live else {}

    def items():
        return watch(
            dissector.dissect(
                [path], ports=args.port, tls_keylog=keylog_paths or None, by_topic=True, **order, **pending
            )
        )

    source: Source = Source(items, clock) if live else Player(items, args.speed)
    view = View(grouping=args.group, sort=args.sort, mode="total" if args.since_start else "interval")
    state = "live" if live else f"x{args.speed:g}"
    label = "-i " + args.interface if args.interface else ("stdin" if live else os.path.basename(args.source))
    try:
        code = loop(source, model, view, args, state, label, live, exporter=exporter)
    except _OutputClosed:
        code = 0
    finally:
        if tool is not None:
            tool.stop()
            if (said := tool.stats()) and not args.quiet:
                _fail(f"{tool.tool}: {said}", 0)
        if live:
            stream.stop_all()  # the reader thread's stream ends as if closed
        source.close()
    if source.error is not None:
        e = source.error
        if isinstance(e, KeyboardInterrupt):
            raise e
        msg = str(e) if isinstance(e, (KeyLogError, OSError, ValueError)) else f"{type(e).__name__}: {e}"
        return _fail(msg)
    faults = stream.live_faults(faults) if live else faults
    for fault in faults:
        _fail(fault)
    return code if code else (2 if faults else 0)


def loop(
    source: Source,
    model: TopModel,
    view: View,
    args,
    state: str,
    label: str,
    live: bool,
    console=None,
    exporter=None,
) -> int:
    """Feed, tick, draw, read keys, until q, --duration, or (not on a terminal) the end of a file.
    `console`: draw the live view on this rich Console (bench/bench_top.py) rather than the terminal's.
    `exporter`: a kafkawire.metrics.Exporter that counts every item too; then a file's end does not
    end the command (its figures stay served until --duration or Ctrl-C)."""
    tty = console is not None or (sys.stdout.isatty() and not args.once)
    started = time.monotonic()
    deadline = None if args.duration is None else started + args.duration
    next_draw = started
    next_gauges = started
    done_at = None
    keys = _Keys() if tty and console is None else None
    out = None
    frozen = None
    try:
        if tty:
            from rich.console import Console
            from rich.live import Live

            console = console or Console()
            out = Live(console=console, screen=True, auto_refresh=False, transient=False)
            out.start()
        while True:  # bounded: each turn sleeps until an item, a redraw or a key, and q/duration/end exit
            now = source.clock()
            for item in source.due(now):
                model.add(item)
                if exporter is not None:
                    exporter.observe(item)
            now = source.clock()
            if not math.isnan(now):
                model.advance(now)
            if exporter is not None and time.monotonic() >= next_gauges:
                next_gauges = time.monotonic() + _GAUGES_EVERY
                exporter.refresh(model.in_flight(), {r.group_id: r.members for r in model.rebalances.in_progress()})
            finished = source.ended and not getattr(source, "held", None)
            if finished and done_at is None:
                if not live:
                    model.finish()  # the clock runs on to the last answer (Player._clock stops there)
                done_at = time.monotonic()
            wall = time.monotonic()
            if keys is not None:
                for ch in keys.read():
                    if not view.key(ch.lower()):
                        return 0
                    if view.frozen and frozen is None:  # the numbers of every grouping, as they are now
                        frozen = {g: model.snapshot(g) for g in GROUPINGS}
                    elif not view.frozen:
                        frozen = None
                    next_draw = wall  # redraw at once on a key
            if deadline is not None and wall >= deadline:
                if not tty:
                    _plain(view, model, _state(state, source, done_at, view), label)
                return 0
            if not tty and finished and (exporter is None or args.once):
                _plain(view, model, _state(state, source, done_at, view), label)
                return 0
            if wall >= next_draw:
                next_draw = wall + args.interval
                if tty:
                    snap = frozen[view.grouping] if frozen else model.snapshot(view.grouping)
                    size = console.size
                    line = f"{_state(state, source, done_at, view)} {label}"
                    out.update(view.render(snap, size.width, size.height, state=line), refresh=True)
                elif not args.once and model.clock is not None:
                    _plain(view, model, _state(state, source, done_at, view), label)
            wait = next_draw - time.monotonic()
            if (nd := source.next_due()) is not None:
                wait = min(wait, max(nd, _TICK))  # items due within a tick are fed together
            elif not source.ended and live:
                wait = min(wait, 0.05)  # live items come when they come: look often
            elif not source.ended:
                wait = min(wait, 0.01)  # the file is being read
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if keys is not None:
                keys.wait(min(wait, 0.25))
            else:
                time.sleep(max(0.0, min(wait, 0.25)))
    finally:
        source.stop.set()
        if out is not None:
            out.stop()
        if keys is not None:
            keys.close()


def _state(state: str, source: Source, done_at, view: View) -> str:
    if done_at is not None:
        state += " ended"
    elif isinstance(source, Player):
        state += " playing"
    return state


def _plain(view: View, model: TopModel, state: str, label: str) -> None:
    """One plain-text snapshot on stdout (not a terminal): every row, no keys, a blank line after."""
    from rich.console import Console

    import io

    width = int(os.environ.get("COLUMNS", "") or 80)
    text = io.StringIO()  # rendered first: rich's own broken-pipe handling exits with status 1
    console = Console(file=text, width=width, color_system=None, force_terminal=False, highlight=False)
    console.print(view.render(model.snapshot(view.grouping), width, None, state=f"{state} {label}", keys=False))
    try:
        sys.stdout.write(text.getvalue() + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`| head`): end quietly, as a filter does (and the exit flush finds /dev/null)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        raise _OutputClosed from None


class _OutputClosed(Exception):
    """stdout's reader has gone: top stops, exit status 0."""
