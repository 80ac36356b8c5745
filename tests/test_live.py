"""Live traffic: `dissect -` reading what tcpdump writes to a pipe while real clients talk to a real
broker, `dissect -i IFACE` running a real capture tool, and the ways a live run ends (the stream
closing, Ctrl-C, --duration, a reader that goes away, a stream cut mid-packet), with the
one-line messages when capture cannot start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.broker import tcpdump_stream

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
KAFKAWIRE = [sys.executable, "-m", "kafkawire"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="live capture on lo needs root")


class Lines:
    """A process's stdout lines with the monotonic time each arrived."""

    def __init__(self, proc: subprocess.Popen):
        self.got: list[tuple[float, str]] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            self.got.append((time.monotonic(), line.rstrip("\n")))

    def join(self, timeout: float = 30) -> list[str]:
        self._t.join(timeout)
        return [ln for _, ln in self.got]


def start(*args: str, stdin=None) -> tuple[subprocess.Popen, Lines]:
    """`kafkawire ARGS` running, and its stdout lines as they come."""
    kw = subprocess.Popen([*KAFKAWIRE, *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return kw, Lines(kw)


def produce(address: str, n: int, gap: float, topic: str) -> list[float]:
    """A kafka-python producer sending n records, one every `gap` s; when each was sent."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=address, client_id="live-producer", linger_ms=0)
    sent = []
    try:
        for i in range(n):
            sent.append(time.monotonic())
            p.send(topic, key=b"k%d" % i, value=b"live value %d" % i).get(timeout=15)
            time.sleep(gap)
    finally:
        p.close()
    return sent


def wait_for(pred, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.broker
def test_piped_from_tcpdump_lines_come_while_the_workload_runs(broker, tmp_path):
    """tcpdump -U -w - | tee | kafkawire dissect -: each exchange's line is on our side within a few
    seconds of its request, long before the workload ends, and the lines equal a later reading of the
    same bytes from a file."""
    port = int(broker.rsplit(":", 1)[1])
    cap = tmp_path / "live.pcap"
    dump, tee = tcpdump_stream(port, cap)
    kw, lines = start("dissect", "-", "--port", str(port), stdin=tee.stdout)
    tee.stdout.close()
    try:
        assert wait_for(lambda: cap.exists() and cap.stat().st_size >= 24)  # tcpdump is capturing
        time.sleep(0.5)
        sent = produce(broker, 8, 1.0, "live-pipe")
        first_produce = next((t for t, ln in lines.got if " Produce v" in ln), None)  # noqa: E501 -- the arrival of the first Produce line
        assert first_produce is not None, [ln for _, ln in lines.got]
        assert first_produce - sent[0] < 4.0, first_produce - sent[0]
        assert first_produce < sent[-1]  # long before the workload ended
    finally:
        time.sleep(1)
        dump.terminate()
        dump.wait(timeout=10)
    assert kw.wait(timeout=30) == 0, kw.stderr.read()
    streamed = lines.join()
    produced = [ln for ln in streamed if " Produce v" in ln]
    assert len(produced) == 8
    later = subprocess.run([*KAFKAWIRE, "dissect", str(cap), "--port", str(port)], capture_output=True, text=True)
    assert streamed == later.stdout.splitlines()


@pytest.mark.broker
def test_interface_capture_with_duration_and_count(broker, tmp_path):
    """-i lo runs a real capture tool (dumpcap) on the broker's port: the workload's exchanges come
    out; --duration ends it cleanly; --count stops after N packets."""
    port = int(broker.rsplit(":", 1)[1])
    kw, lines = start("dissect", "-i", "lo", "--port", str(port), "--duration", "6", "--format", "jsonl")
    time.sleep(1.5)
    produce(broker, 3, 0.3, "live-iface")
    assert kw.wait(timeout=30) == 0
    got = lines.join()
    assert sum('"api_name":"Produce"' in ln for ln in got) == 3
    err = kw.stderr.read()
    assert "Traceback" not in err
    r = subprocess.run(
        [*KAFKAWIRE, "dissect", "-i", "lo", "-f", f"tcp port {port}", "--count", "4", "--duration", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        input="",
    )
    # nothing talks to the broker now: --count is not reached, --duration ends it
    assert r.returncode == 0 and "Traceback" not in r.stderr


@pytest.mark.broker
def test_ctrl_c_stops_the_tool_writes_what_was_read_and_exits_130(broker):
    port = int(broker.rsplit(":", 1)[1])
    kw, lines = start("dissect", "-i", "lo", "--port", str(port))
    time.sleep(1.5)
    produce(broker, 2, 0.2, "live-ctrl-c")
    assert wait_for(lambda: sum(" Produce v" in ln for _, ln in lines.got) == 2)
    kw.send_signal(signal.SIGINT)
    assert kw.wait(timeout=20) == 130
    assert sum(" Produce v" in ln for ln in lines.join()) == 2
    err = kw.stderr.read()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", f"dumpcap.*port {port}"], capture_output=True).returncode != 0


@pytest.mark.broker
def test_a_closed_output_pipe_ends_quietly(broker):
    """kafkawire dissect -i lo | head -1: the reader goes away; kafkawire ends without a traceback
    and stops its capture tool."""
    port = int(broker.rsplit(":", 1)[1])
    sh = subprocess.Popen(
        f"{sys.executable} -m kafkawire dissect -i lo --port {port} 2>{os.devnull}.err | head -1",
        shell=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    produce(broker, 3, 0.2, "live-head")
    out, _ = sh.communicate(timeout=30)
    assert sh.returncode == 0 and len(out.splitlines()) == 1
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", f"dumpcap.*port {port}"], capture_output=True).returncode != 0


def test_a_stream_cut_mid_packet(tmp_path):
    """head -c N capture | kafkawire dissect -: every line before the cut, then the usual one-line
    message, exit status 2."""
    cap = SAMPLES / "kafka-python-basic.pcap"
    whole = subprocess.run([*KAFKAWIRE, "dissect", str(cap)], capture_output=True, text=True).stdout.splitlines()
    cut = cap.read_bytes()[: cap.stat().st_size * 2 // 3 + 7]
    r = subprocess.run([*KAFKAWIRE, "dissect", "-"], input=cut, capture_output=True)
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "cut" in err[0] and err[0].startswith("kafkawire: -")
    got = r.stdout.decode().splitlines()
    assert 10 < len(got) < len(whole)
    # the lines before the cut: those of exchanges answered before it, in the same order
    assert [ln for ln in got if "ANOMALY" not in ln and "UNANSWERED" not in ln] == [
        ln for ln in whole if ln in set(got)
    ]


def test_standard_input_reads_like_the_file():
    cap = SAMPLES / "kafka-python-ak.pcap"
    a = subprocess.run([*KAFKAWIRE, "dissect", str(cap), "--format", "jsonl"], capture_output=True).stdout
    b = subprocess.run([*KAFKAWIRE, "dissect", "-", "--format", "jsonl"], input=cap.read_bytes(), capture_output=True)
    assert b.returncode == 0 and b.stdout == a


def test_no_capture_tool_is_one_line(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    env = {**os.environ, "PATH": str(bin_)}
    r = subprocess.run([*KAFKAWIRE, "dissect", "-i", "lo"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "neither is installed" in r.stderr


@pytest.mark.skipif(shutil.which("capsh") is None, reason="capsh is not installed")
def test_no_permission_to_capture_is_one_line():
    """Without CAP_NET_RAW/CAP_NET_ADMIN (capsh drops them from the bounding set) dumpcap cannot open
    the interface: one line saying so and what capture needs."""
    cmd = " ".join([*KAFKAWIRE, "dissect", "-i", "lo"])
    r = subprocess.run(
        ["capsh", "--drop=cap_net_raw,cap_net_admin", "--", "-c", cmd], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot capture on lo" in lines[0] and "CAP_NET_RAW" in lines[0], r.stderr


def test_in_flight_names_the_requests_awaiting_their_answers(tmp_path):
    """A stream that stops for a while in the middle of a rebalance: while it is quiet, dissect()'s
    in_flight callback lists the requests read and not yet answered (the JoinGroups held by the
    coordinator among them), and each of them comes out as an exchange once its answer is read."""
    import dpkt

    import dissector

    blob = (SAMPLES / "rebalance-ak.pcap").read_bytes()
    with open(SAMPLES / "rebalance-ak.pcap", "rb") as f:
        ends = [(ts, f.tell()) for ts, _ in dpkt.pcap.Reader(f)]  # each record's time and end offset
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    whole = [x for x in dissector.dissect(SAMPLES / "rebalance-ak.pcap") if x.type == "exchange"]
    join = max((x for x in whole if x.api_name == "JoinGroup"), key=lambda x: x.latency_ms or 0)
    cut = next(end for ts, end in ends if ts > join.ts + 0.001)  # the JoinGroup read, its answer not yet

    def feed():
        with open(fifo, "wb") as w:
            w.write(blob[:cut])
            w.flush()
            time.sleep(1.5)
            w.write(blob[cut:])

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    snaps: list[list] = []
    items = [x for x in dissector.dissect(str(fifo), in_flight=snaps.append) if x.type == "exchange"]
    t.join(10)
    assert len(items) == len(whole)
    assert snaps and snaps[-1] == []
    waiting = [{(api, cid) for api, cid, _, _ in snap} for snap in snaps]
    assert any(("JoinGroup", join.client_id) in w for w in waiting)
    assert set().union(*waiting) <= {(x.api_name, x.client_id) for x in items}


@pytest.mark.broker
def test_land_follow_an_interface(broker, tmp_path):
    """land --follow -i lo: dumpcap rotates files every second into a folder of kafkawire's own, each
    is landed as it completes and then removed; --duration stops the capture, the last file is landed,
    and the tables hold what the producer sent."""
    from landing.writer import dataset

    port = int(broker.rsplit(":", 1)[1])
    lake = tmp_path / "lake"
    kw = subprocess.Popen(
        [*KAFKAWIRE, "land", "--follow", "-i", "lo", "--port", str(port), "--rotate", "1", "--duration", "5"]
        + ["--poll", "0.3", "--records", "--out", str(lake)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    produce(broker, 6, 0.4, "live-follow")
    out, err = kw.communicate(timeout=60)
    assert kw.returncode == 0, err
    assert out.count("landed ") >= 3 and "Traceback" not in err
    rec = dataset(lake, "records").to_table().to_pandas()  # through the log: appends removed provisional rows
    produced = rec[(rec.topic == "live-follow") & (rec.direction == "produce")]
    assert sorted(produced.value) == sorted(b"live value %d" % i for i in range(6))
    spool = out.split("followed ", 1)[1].split(":", 1)[0]
    assert not os.path.exists(spool)  # its files landed and removed, then the folder
