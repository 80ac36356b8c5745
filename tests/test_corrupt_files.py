"""Corrupt and truncated capture files through every command that reads captures.

A real capture (confluent-codecs.pcap, and the same packets as pcapng) is damaged
the ways files get damaged: cut mid-packet, a record or block length gone bad,
garbage over the header, wrong magic, empty. Each command must say so in one
line naming the file (and the byte offset where there is one), exit 2, and still
write everything decoded before the fault: `dissect`, `land` (local engine here,
the Spark engine in tests/test_spark.py's corrupt-set test and once below) and
`replay --dry-run`.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "confluent-codecs.pcap"
KW = str(Path(sys.executable).with_name("kafkawire"))


def _records(blob: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each pcap record."""
    out, pos = [], 24
    while pos + 16 <= len(blob):
        n = struct.unpack_from("<I", blob, pos + 8)[0]
        out.append((pos, 16 + n))
        pos += 16 + n
    return out


def _pcapng(blob: bytes) -> bytes:
    """The same packets as a pcapng file (one Ethernet interface, microseconds)."""

    def block(btype, body):
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = [block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)), block(1, struct.pack("<HHI", 1, 0, 262144))]
    for pos, _length in _records(blob):
        sec, usec, caplen, orig = struct.unpack_from("<IIII", blob, pos)
        units = sec * 1_000_000 + usec
        out.append(
            block(
                6,
                struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF, caplen, orig)
                + blob[pos + 16 : pos + 16 + caplen],
            )
        )
    return b"".join(out)


def damaged(kind: str) -> tuple[bytes, str]:
    """(file bytes, what the one-line message must contain)."""
    blob = SAMPLE.read_bytes()
    recs = _records(blob)
    pos, n = recs[len(recs) // 2]
    if kind == "cut_mid_packet":
        return blob[: pos + n // 2], f"record at offset {pos} cut"
    if kind == "bad_record_length":
        return blob[: pos + 8] + struct.pack("<I", 0x7FFFFFF0) + blob[pos + 12 :], f"bad record header at offset {pos}"
    if kind == "garbage_header":
        return b"\x13\x37" * 12 + blob[24:], "unknown file magic"
    if kind == "empty":
        return b"", "empty file"
    ng = _pcapng(blob)
    if kind == "pcapng_cut":
        return ng[: len(ng) * 2 // 3], "cut"
    if kind == "pcapng_bad_block_length":
        # the 200th block's length field
        off = 0
        for _ in range(200):
            off += struct.unpack_from("<I", ng, off + 4)[0]
        return ng[: off + 4] + struct.pack("<I", 13) + ng[off + 8 :], f"bad block length 13 at offset {off}"
    raise AssertionError(kind)


KINDS = ["cut_mid_packet", "bad_record_length", "garbage_header", "empty", "pcapng_cut", "pcapng_bad_block_length"]


def _run(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([KW, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def whole():
    """jsonl exchanges of the undamaged capture, keyed by (connection, correlation id, api)."""
    r = subprocess.run([KW, "dissect", SAMPLE, "--format", "jsonl"], capture_output=True, text=True, check=True)
    items = [json.loads(x) for x in r.stdout.splitlines()]
    return {(i["connection"], i["correlation_id"], i["api_name"]): i for i in items if i["type"] == "exchange"}


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_says_where_and_keeps_what_came_before(kind, tmp_path, whole):
    data, said = damaged(kind)
    bad = tmp_path / f"{kind}.cap"
    bad.write_bytes(data)

    r = _run("dissect", bad, "--format", "jsonl", cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and said in lines[0], r.stderr
    got = [json.loads(x) for x in r.stdout.splitlines()]
    ok = [i for i in got if i["type"] == "exchange" and i["status"] == "ok"]
    if kind in ("garbage_header", "empty"):
        assert not ok
    else:
        assert len(ok) >= 10
        for e in ok:  # what was decoded before the fault is what the whole file gives
            assert whole[(e["connection"], e["correlation_id"], e["api_name"])]["response"] == e["response"]

    out = tmp_path / "tables"
    r = _run("land", bad, "--out", out, "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and said in r.stderr and str(bad) in r.stderr
    if ok:
        rows = pq.read_table(out / "exchanges").to_pylist()
        assert {(x["correlation_id"], x["api_name"]) for x in rows if x["status"] == "ok"} == {
            (e["correlation_id"], e["api_name"]) for e in ok
        }

    r = _run("replay", bad, "--to", "127.0.0.1:9", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and said in r.stderr and str(bad) in r.stderr
    if ok:
        assert r.stdout.splitlines()[0].endswith("connection(s)") and "Produce" in r.stdout
    r = _run("replay", bad, "--to", "127.0.0.1:9", cwd=tmp_path)  # live: refuses, sends nothing
    assert r.returncode == 2 and "nothing sent" in r.stderr


@pytest.mark.slow
def test_spark_engine_lands_what_came_before_a_cut(tmp_path, spark, whole):
    from landing.spark import land_spark
    from landing.writer import dataset

    data, said = damaged("cut_mid_packet")
    bad = tmp_path / "cut.pcap"
    bad.write_bytes(data)
    r = _run("dissect", bad, "--format", "jsonl", cwd=tmp_path)
    ok = {
        (i["correlation_id"], i["api_name"])
        for i in map(json.loads, r.stdout.splitlines())
        if i["type"] == "exchange" and i["status"] == "ok"
    }
    out = tmp_path / "tables"
    _, faults = land_spark([bad], out, spark=spark)
    assert len(faults) == 1 and said in faults[0]
    # through the tables' logs (delta-spark's files hold `date` too: no plain Parquet read)
    rows = dataset(out, "exchanges").to_table().to_pylist()
    assert {(x["correlation_id"], x["api_name"]) for x in rows if x["status"] == "ok"} == ok
    anomalies = dataset(out, "anomalies").to_table().to_pylist()
    assert any(said in (a["detail"] or "") for a in anomalies)
