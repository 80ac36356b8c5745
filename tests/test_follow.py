"""Continuous landing (landing/follow.py, `kafkawire land --follow`): a directory a real tcpdump
rotates into (-G 2 -W 5) while real clients talk to a real broker, landed as its files complete;
the tables equal a one-shot land of the files it kept, the files deleted under it are reported.
Also the completion rule and the deleted-file paths on made-up listings (no broker)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from landing.follow import Entry, complete, follow, order_key, scan
from tests.broker import terminate
from tests.test_carry import _bench, rows, tables

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


# ------------------------------------------------------------ the rules, no broker


def test_order_by_first_packet_not_name():
    """tcpdump -C names x.pcap, x.pcap1, ..., x.pcap10 (10 sorts before 2 by name); a -C -W ring
    rewrites x.pcap0 after x.pcap4: capture order is the first packet's time, files without a
    packet yet last (the one tcpdump is writing)."""
    es = [
        Entry("d/x.pcap10", 110.0, 10, 5),
        Entry("d/x.pcap2", 102.0, 10, 3),
        Entry("d/x.pcap", 100.0, 10, 1),
        Entry("d/x.pcap11", None, 24, 9),
    ]
    got = [e.path for e in sorted(es, key=order_key)]
    assert got == ["d/x.pcap", "d/x.pcap2", "d/x.pcap10", "d/x.pcap11"]
    assert [e.path for e in complete(sorted(es, key=order_key))] == got[:-1]
    assert [e.path for e in complete(sorted(es, key=order_key), final=True)] == got


def _rotated(tmp_path) -> list[Path]:
    b = _bench()
    return b.rotate(b.make(1, tmp_path / "set.pcap"), tmp_path / "parts", 6)


def test_follow_lands_completed_files_and_reports_deleted(tmp_path):
    """Files appear one by one (the last one being 'written'); one is deleted while it waits to
    be landed: it is reported, the rest lands, and the tables equal one run over the files kept.
    A restarted follow lands nothing again."""
    parts = _rotated(tmp_path)
    d = tmp_path / "follow"
    d.mkdir()
    lines: list[str] = []
    shown = iter(range(1, len(parts)))
    gone = parts[3]

    def sleep(_):  # one more file per poll; parts[3] deleted as soon as it is complete
        n = next(shown, None)
        if n is not None:
            shutil.copy(parts[n], d / parts[n].name)
        if n == 4:
            (d / gone.name).unlink()

    shutil.copy(parts[0], d / parts[0].name)
    f = follow(d, tmp_path / "lake", report=lines.append, sleep=sleep, poll=0, idle_exit=0.3)
    assert [Path(p).name for p in f.deleted] == [gone.name]
    assert lines == [f"kafkawire: {d / gone.name} was deleted before it was landed (tcpdump -W ring buffer?)"]
    kept = [p for p in parts if p != gone]
    assert [Path(p).name for p in f.landed] == [p.name for p in kept]
    from landing.local import land_local

    land_local([str(p) for p in kept], tmp_path / "one")
    for t in tables(False):
        assert rows(tmp_path / "lake", t) == rows(tmp_path / "one", t), t

    again = follow(d, tmp_path / "lake", report=lines.append, sleep=lambda _: None, poll=0, idle_exit=0)
    assert again.landed == [] and len(again.skipped) == len(kept)


def test_vanished_between_listing_and_landing(tmp_path, monkeypatch):
    """A file deleted after it was listed, before its landing opened it, is reported, not a crash."""
    parts = _rotated(tmp_path)[:3]
    d = tmp_path / "follow"
    d.mkdir()
    for p in parts:
        shutil.copy(p, d / p.name)
    import landing.local

    real = landing.local.land_local

    def land(files, out, **kw):
        if Path(files[0]).name == parts[1].name:
            os.unlink(files[0])
        return real(files, out, **kw)

    monkeypatch.setattr(landing.local, "land_local", land)
    lines: list[str] = []
    f = follow(d, tmp_path / "lake", report=lines.append, sleep=lambda _: None, poll=0, idle_exit=0)
    assert [Path(p).name for p in f.deleted] == [parts[1].name]
    assert [Path(p).name for p in f.landed] == [parts[0].name, parts[2].name]
    assert len(lines) == 1 and "was deleted before it was landed" in lines[0]


def test_not_a_capture_left_alone(tmp_path):
    (tmp_path / "README").write_text("notes")
    shutil.copy(SAMPLES / "kafka-python-basic.pcap", tmp_path / "a.pcap")
    lines: list[str] = []
    assert [Path(e.path).name for e in scan(tmp_path, set(), lines.append)] == ["a.pcap"]
    assert len(lines) == 1 and "is not a capture" in lines[0]


def test_a_file_rewritten_in_place_is_read_again(tmp_path):
    """scan() keeps the first packet times of files seen unchanged; tcpdump -C -W rewrites a file in
    place (same name, same inode), and its new first packet time is what the next scan gives."""
    import dpkt

    def first_ts(path):
        with open(path, "rb") as f:
            return next(iter(dpkt.pcap.Reader(f)))[0]

    a, b = SAMPLES / "kafka-python-basic.pcap", SAMPLES / "admin.pcap"
    assert first_ts(a) != first_ts(b)
    dst = tmp_path / "x.pcap0"
    shutil.copy(a, dst)
    assert [e.start for e in scan(tmp_path)] == [pytest.approx(first_ts(a), abs=1e-6)]
    assert [e.start for e in scan(tmp_path)] == [pytest.approx(first_ts(a), abs=1e-6)]
    with open(dst, "r+b") as f:  # in place, as tcpdump's ring does
        f.truncate(0)
        f.write(b.read_bytes())
    assert [e.start for e in scan(tmp_path)] == [pytest.approx(first_ts(b), abs=1e-6)]


def test_follow_refuses_spark_and_other_options(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "kafkawire", "land", *args], capture_output=True, text=True, timeout=60
        )

    r = run("--follow", str(tmp_path), "--out", str(tmp_path / "lake"), "--engine", "spark")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and 'readStream.format("kafkawire")' in r.stderr
    r = run("--follow", str(SAMPLES / "kafka-python-basic.pcap"), "--out", str(tmp_path / "lake"))
    assert r.returncode == 2 and "one directory" in r.stderr


# ------------------------------------------------------------ real tcpdump, real clients


def workload(bootstrap: str, until, seconds: float = 20.0) -> int:
    """kafka-python: a producer and a consumer group, talking until `until()` (at most `seconds`)."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kw-follow-producer", linger_ms=2)
    consumer = KafkaConsumer(
        "follow",
        bootstrap_servers=bootstrap,
        client_id="kw-follow-consumer",
        group_id="kw-follow",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
    )
    sent = 0
    deadline = time.monotonic() + seconds
    try:
        while not until() and time.monotonic() < deadline:
            for _ in range(5):
                producer.send("follow", key=b"k%d" % (sent % 3), value=b"v" * 100 + str(sent).encode())
                sent += 1
            producer.flush(timeout=5)
            consumer.poll(timeout_ms=100)
    finally:
        producer.close(timeout=5)
        consumer.close()
    return sent


FILES = 5  # tcpdump -W: the rotation's files (one every 2 s)


class Rotating:
    """tcpdump -G 2 -W 5 writing cap-%H%M%S.pcap files into `folder` (it exits after the fifth), with
    a copy of every file made once it is complete (a later one exists, or tcpdump is done), and the
    files of `delete` (their order numbers) deleted right then, as a ring buffer or a cleanup would."""

    def __init__(self, folder: Path, port: int, copies: Path, delete=()):
        self.folder, self.copies, self.delete = folder, copies, set(delete)
        folder.mkdir(parents=True, exist_ok=True)
        copies.mkdir(parents=True, exist_ok=True)
        cmd = ["tcpdump", "-i", "lo", "-U", "-G", "2", "-W", str(FILES), "-w", str(folder / "cap-%H%M%S.pcap")]
        if os.geteuid() == 0:
            cmd[3:3] = ["-Z", "root"]
        self.proc = subprocess.Popen(
            [*cmd, f"tcp port {port}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.seen: list[str] = []  # file names, in the order they appeared
        self.deleted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return self.proc.poll() is not None

    def _watch(self) -> None:
        copied: set = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            finished = self.done()
            for name in sorted(os.listdir(self.folder)):
                if name not in self.seen and not name.startswith("."):  # a stream's state is hidden
                    self.seen.append(name)
            for i, name in enumerate(self.seen):
                if name in copied or (i == len(self.seen) - 1 and not finished):
                    continue
                shutil.copy(self.folder / name, self.copies / name)
                copied.add(name)
                if i in self.delete:
                    os.unlink(self.folder / name)
                    self.deleted.append(name)
            if finished or self._stop.is_set():
                return
            time.sleep(0.01)

    def wait(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            terminate(self.proc)
            self._thread.join(timeout=10)


@pytest.mark.slow
@pytest.mark.broker
def test_land_follow_tcpdump_ring(broker, tmp_path):
    """`land --follow` beside tcpdump -G 2 -W 5 while kafka-python produces and consumes: every
    file lands as it completes; the two deleted as soon as they were complete are reported; the
    tables equal a one-shot `land` of the files follow landed (copies kept as they completed)."""
    port = int(broker.rsplit(":", 1)[1])
    caps, copies, lake = tmp_path / "caps", tmp_path / "copies", tmp_path / "lake"
    rot = Rotating(caps, port, copies, delete=(1, 3))
    time.sleep(0.3)  # the first file's header is on disk
    cmd = [sys.executable, "-m", "kafkawire", "land", "--follow", str(caps), "--out", str(lake)]
    fol = subprocess.Popen(
        [*cmd, "--poll", "0.5", "--until-idle", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        sent = workload(broker, rot.done)
        rot.wait()
        out, err = fol.communicate(timeout=60)
    finally:
        terminate(fol)
    assert sent > 50
    assert fol.returncode == 0, err
    assert len(rot.seen) == FILES, rot.seen
    landed = [Path(m).name for m in re.findall(r"^landed (\S+)$", out, re.M)]
    deleted = [Path(m).name for m in re.findall(r"^kafkawire: (\S+) was deleted before it was landed", err, re.M)]
    # each file is landed or reported deleted (a deleted one follow landed in time is landed)
    assert sorted(landed + deleted) == sorted(rot.seen), (out, err)
    assert set(deleted) <= set(rot.deleted) and deleted, (out, err, rot.deleted)
    assert f"({len(deleted)} deleted before they were landed)" in out

    one = tmp_path / "one"
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "land", *[str(copies / n) for n in landed], "--out", str(one)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert rows(one, "exchanges"), "no exchanges landed"
    for t in tables(False):
        assert rows(lake, t) == rows(one, t), t
