"""Live captures: a pcap or pcapng stream on standard input or in a pipe, and a capture tool
(dumpcap, else tcpdump) writing one from a network interface, as tshark runs dumpcap.

The native reader reads a stream through `PipeStream`: `read1` waits for bytes at most `IDLE`
seconds and then answers None (nothing yet), so the engine can let out what its order window holds
while the link is quiet, and `stop()` (Ctrl-C, --duration) ends the stream as if it had closed, so
everything read before it is dissected and written.
"""

from __future__ import annotations

import os
import select
import stat
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "STDIN",
    "IDLE",
    "PipeStream",
    "is_stream",
    "CaptureTool",
    "CaptureError",
    "default_filter",
    "stop_all",
    "live_faults",
    "live_capture",
    "named",
    "open_stream",
]

STDIN = "-"
# how long a read waits before the engine hears that nothing came (seconds)
IDLE = 0.2

_open: list[PipeStream] = []


def is_stream(path: str) -> bool:
    """`-` (standard input), a FIFO or a character device: read as it comes, never seeked."""
    if path == STDIN or path in _named:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


class PipeStream:
    """A capture stream read from a file descriptor: read(n) gives n bytes (less only at the end),
    read1(n) what is there, or None after IDLE seconds with nothing; stop() makes it end."""

    def __init__(self, fd: int, close: bool = False, prefix: bytes = b""):
        self.fd = fd
        self._close = close
        self._prefix = prefix  # bytes already read from fd (a capture tool's first write)
        self._stopped = threading.Event()
        self.eof = False
        _open.append(self)

    def stop(self) -> None:
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _ready(self) -> bool:
        r, _, _ = select.select([self.fd], [], [], IDLE)
        return bool(r)

    def read1(self, n: int = 1 << 20) -> bytes | None:
        if self._prefix:
            out, self._prefix = self._prefix[:n], self._prefix[n:]
            return out
        if self.eof or self.stopped:
            return b""
        if not self._ready():
            return b"" if self.stopped else None
        data = os.read(self.fd, max(1, n))
        self.eof = not data
        return data

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            more = self.read1(1 << 16 if n < 0 else n - len(out))
            if more is None:
                continue  # a header not yet whole: wait on (stop() ends the wait)
            if not more:
                break
            out += more
        return bytes(out)

    def close(self) -> None:
        if self in _open:
            _open.remove(self)
        if self._close:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def __enter__(self) -> PipeStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def live_capture(iface: str, bpf: str, count: int | None = None) -> tuple[CaptureTool, str]:
    """A capture tool started on `iface` (CaptureError in one line when it cannot), and the path
    dissect() reads its stream by."""
    tool = CaptureTool(iface, bpf, count=count)
    pipe = tool.start()
    return tool, named(f"<{tool.tool} -i {iface}>", pipe)


def live_faults(faults: list[str]) -> list[str]:
    """A live capture's file faults: one that saw no packet is no fault (a quiet link), as for tshark."""
    return [f for f in faults if not f.endswith(": a capture with no packets")]


def stop_all() -> None:
    """End every stream being read (Ctrl-C): what was read is still dissected and written."""
    for s in list(_open):
        s.stop()


# live captures by the name their items' messages give them ("<dumpcap -i lo>"), for open_stream
_named: dict[str, PipeStream] = {}


def named(name: str, stream: PipeStream) -> str:
    """Make `stream` readable as the capture `name` (what dissect() and the engine are given)."""
    _named[name] = stream
    return name


def open_stream(path: str) -> PipeStream:
    """The stream a capture path names: a live capture's, standard input, or a FIFO/device."""
    if path in _named:
        return _named.pop(path)
    if path == STDIN:
        return PipeStream(0)
    return PipeStream(os.open(path, os.O_RDONLY), close=True)


def is_live(path: str) -> bool:
    return path in _named or is_stream(path)


class CaptureError(RuntimeError):
    """A live capture that cannot start (its message is one line)."""


def default_filter(ports: Iterable[int]) -> str:
    """The capture filter for the Kafka ports: 9092 and those given."""
    ps = sorted({9092, *ports})
    return " or ".join(f"tcp port {p}" for p in ps)


class CaptureTool:
    """dumpcap (else tcpdump) capturing on `iface` with the filter `bpf`, writing a capture stream
    to a pipe that kafkawire reads; `count` packets at most. start() raises CaptureError in one
    line when neither tool is installed or capture is not permitted."""

    def __init__(self, iface: str, bpf: str, count: int | None = None, tool: str | None = None):
        self.iface, self.bpf, self.count = iface, bpf, count
        self.tool = tool
        self.proc: subprocess.Popen | None = None
        self._err = b""

    def command(self, into: tuple[str, float] | None = None) -> list[str]:
        """The tool's command line: writing one capture stream to stdout, or with into=(directory,
        seconds) a new file in the directory every `seconds` (dumpcap -b duration, tcpdump -G)."""
        import shutil  # (here, not at import: every capture file opened imports this module)

        tool = self.tool or next((t for t in ("dumpcap", "tcpdump") if shutil.which(t)), None)
        if tool is None:
            raise CaptureError(
                "live capture needs dumpcap (Wireshark's) or tcpdump, and neither is installed "
                "(apt-get install tshark or tcpdump); or pipe a capture in: tcpdump -U -w - | kafkawire dissect -"
            )
        self.tool = os.path.basename(tool)
        every = str(max(1, round(into[1]))) if into else ""
        count = ["-c", str(self.count)] if self.count else []
        if self.tool == "dumpcap":
            out = ["-b", f"duration:{every}", "-w", os.path.join(into[0], "live.pcapng")] if into else ["-w", "-"]
            return [tool, "-q", *count, "-i", self.iface, "-f", self.bpf, *out]
        # Debian's tcpdump drops to a user that may not write here; --immediate-mode: each packet as
        # it comes, not when the kernel's buffer times out (up to 1 s)
        user = ["-Z", "root"] if os.geteuid() == 0 else []
        out = ["-G", every, "-w", os.path.join(into[0], "live-%Y%m%d-%H%M%S.pcap")] if into else ["-w", "-"]
        return [tool, *user, *count, "-i", self.iface, "-U", "--immediate-mode", "-s", "0", *out, self.bpf]

    def _launch(self, cmd: list[str], stdout: bool) -> threading.Thread:
        """Run the tool (its own session: a terminal's Ctrl-C is ours to pass on), its stdout a pipe
        (stdout=True) or nothing, its stderr kept by the thread returned."""
        import subprocess

        out = subprocess.PIPE if stdout else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as e:
            raise CaptureError(f"cannot run {self.tool}: {e.strerror or e}") from None
        drain = threading.Thread(target=self._drain, daemon=True)
        drain.start()
        return drain

    def start(self) -> PipeStream:
        drain = self._launch(self.command(), stdout=True)
        # a tool that can capture writes its file header at once; one that cannot says why and exits
        fd = self.proc.stdout.fileno()
        r, _, _ = select.select([fd], [], [], 10.0)
        first = os.read(fd, 1 << 16) if r else b""
        if not first:
            self.stop()
            drain.join(timeout=2)
            raise CaptureError(self._why())
        return PipeStream(fd, prefix=first)

    def rotate(self, directory: str, seconds: float) -> None:
        """Capture into files in `directory`, a new one every `seconds`, for a follower that lands
        each once it is complete. Raises CaptureError in one line when capture cannot start."""
        drain = self._launch(self.command((directory, seconds)), stdout=False)
        # a tool that can capture makes its first file at once; one that cannot says why and exits
        for _ in range(100):
            if self.proc.poll() is not None or any(not n.startswith(".") for n in os.listdir(directory)):
                break
            time.sleep(0.05)
        if self.proc.poll() is not None and self.proc.returncode != 0:
            drain.join(timeout=2)
            raise CaptureError(self._why())

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._err = (self._err + line)[-4096:]

    def _why(self) -> str:
        text = self._err.decode(errors="replace").strip().splitlines()
        said = next((ln.strip() for ln in text if "ermission" in ln or "rror" in ln or "denied" in ln), None)
        said = said or (text[-1].strip() if text else f"exit status {self.proc.returncode if self.proc else '?'}")
        hint = ""
        if "ermission" in said or "denied" in said or "not permitted" in said:
            hint = " (capture needs root, or CAP_NET_RAW and CAP_NET_ADMIN on the capture tool)"
        return f"cannot capture on {self.iface} with {self.tool}: {said}{hint}"

    def stop(self) -> None:
        """Ask the tool to finish (it flushes and closes the pipe, which ends the stream)."""
        import subprocess

        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(timeout=5)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.proc.kill()

    def stats(self) -> str:
        """What the tool said at the end (its packet and drop counts), one line, or ''."""
        lines = [ln.strip() for ln in self._err.decode(errors="replace").splitlines() if ln.strip()]
        return "; ".join(ln for ln in lines if "packet" in ln.lower())
