"""`dissect --jobs N`: connections sharded over worker processes write what one process writes."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from dissector import DEFAULT_MAX_FRAME_SIZE, dissect
from dissector.output import write
from dissector.shard import dissect_lines

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "pcaps"
CAPTURES = sorted((ROOT / "samples").glob("*.pcap")) + (sorted(SHARED.glob("*.pcap")) if SHARED.is_dir() else [])


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dissector.cli", "dissect", *map(str, args)], cwd=ROOT, capture_output=True, timeout=300
    )


def one_process(cap, fmt) -> bytes:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n")
    write(dissect([cap]), out, fmt)
    out.flush()
    return out.buffer.getvalue()


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_two_workers_write_the_same_lines_in_the_same_order(fmt):
    for cap in CAPTURES:
        two = io.BytesIO()
        assert dissect_lines([cap], two, jobs=2, fmt=fmt, max_frame_size=DEFAULT_MAX_FRAME_SIZE) == []
        one = one_process(cap, fmt)
        assert two.getvalue() == one, cap.name
        assert one.count(b"\n") >= 4


def test_topic_names_learned_by_another_worker_are_filled_in():
    # the Java producer's Metadata (which names the topic ids) and its Produce (which only has
    # the ids) travel on different connections, so they can sit in different workers
    cap = ROOT / "samples" / "java-codecs-ak.pcap"
    out = run(cap, "--format", "jsonl", "--jobs", "3").stdout
    assert out == run(cap, "--format", "jsonl").stdout
    assert b'"TopicName":"jv-gzip"' in out


def test_file_faults_and_bad_jobs(tmp_path):
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    r = run(ROOT / "samples" / "admin.pcap", empty, "--jobs", "2")
    assert r.returncode == 2 and r.stdout.count(b"\n") == 13  # 12 exchanges and the file anomaly
    assert r.stderr.decode().strip() == f"kafkawire: {empty}: empty file (0 bytes), not a capture"
    r = run(ROOT / "samples" / "admin.pcap", "--jobs", "0")
    assert r.returncode == 2 and b"--jobs must be at least 1" in r.stderr


def test_the_plan_weighs_connections_by_frames_not_bytes(tmp_path):
    from dissector.shard import _owners
    from tests.pcapgen import Flow, write_pcap

    chatty = Flow(client=("10.0.0.1", 40001))  # 300 small frames: most of the work
    bulky = Flow(client=("10.0.0.2", 40002))  # 12 frames of 1400 bytes: most of the bytes
    small = [Flow(client=("10.0.0.3", 40003 + i)) for i in range(3)]  # 60 small frames each
    six = Flow(client=("fd00::1", 40010), server=("fd00::2", 9092))  # IPv6: keyed after parsing
    pkts = []
    for f, n, size in [(chatty, 300, 60), (bulky, 12, 1400), *[(f, 60, 60) for f in small], (six, 60, 60)]:
        pkts += f.handshake() + [f.send("c", b"x" * size) for _ in range(n)]
    cap = write_pcap(tmp_path / "mix.pcap", pkts)
    fast, owner = _owners([cap], 2)

    def shard(f):
        return fast[
            bytes(map(int, f.client[0].split(".")))
            + bytes(map(int, f.server[0].split(".")))
            + f.client[1].to_bytes(2, "big")
            + f.server[1].to_bytes(2, "big")
        ]

    # the chatty connection alone outweighs the rest: it gets a shard to itself
    assert {shard(f) for f in [bulky, *small]} == {1 - shard(chatty)}
    assert owner[("fd00::1", 40010, "fd00::2", 9092)] == owner[("fd00::2", 9092, "fd00::1", 40010)] in (0, 1)
    assert len(fast) == 2 * 5 and len(owner) == 2


def test_both_cores_by_default_for_many_packets_not_for_big_ones(tmp_path, monkeypatch):
    import struct

    from dissector import shard

    def pcap(path, n, size):
        rec = struct.pack("<IIII", 1_700_000_000, 0, size, size) + bytes(size)
        path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + rec * n)
        return path

    monkeypatch.setattr(shard.os, "cpu_count", lambda: 2)
    many_small = pcap(tmp_path / "small.pcap", 110_000, 60)  # 8 MB, 110k packets: per-packet work dominates
    few_big = pcap(tmp_path / "big.pcap", 60_000, 1500)  # 91 MB, 60k packets
    assert shard.default_jobs([many_small]) == 2
    assert shard.default_jobs([few_big]) == 1
    assert shard.default_jobs([tmp_path / "missing.pcap"]) == 1
    monkeypatch.setattr(shard.os, "cpu_count", lambda: 1)
    assert shard.default_jobs([many_small]) == 1
