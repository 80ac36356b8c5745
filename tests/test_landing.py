"""Landing: captures -> Parquet tables (local engine), checked against the dissector and by hand."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from dissector import dissect
from tests.oracle.capture import Packet, read_packets
from landing import dataset, land_local
from landing.schemas import DERIVED, SCHEMAS
from tests.test_exchanges import Conv, rq, rs

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
PCAPS = ROOT.parent / "shared" / "pcaps"
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + (sorted(PCAPS.glob("*.pcap")) if PCAPS.is_dir() else [])


def table(out: Path, name: str):
    return dataset(out, name).to_table()


def frame(out: Path, name: str):
    return table(out, name).to_pandas()


def _records_in(x) -> int:
    from protocol import records as rec

    body = x.request if x.api_key == 0 else x.response if x.api_key in (1, 78) else None  # Produce; Fetch, ShareFetch
    n = 0
    if x.status != "ok" or type(body) is not dict:
        return 0

    def walk(o):
        nonlocal n
        if type(o) is list:
            for v in o:
                walk(v)
        elif type(o) is dict:
            for k, v in o.items():
                if k == "Records" and v is not None and not isinstance(v, (dict, list)):
                    n += sum(
                        b.record_count if b.record_count is not None else len(b.records())
                        for b in rec.read_record_set(v).batches
                    )
                else:
                    walk(v)

    walk(body)
    return n


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_tables_hold_what_the_dissector_gives(path, tmp_path):
    items = list(dissect([path], connections=True))
    counts = land_local([str(path)], tmp_path, records=True)
    ex = [x for x in items if x.type == "exchange"]
    assert counts["exchanges"] == len(ex) > 0
    assert counts["errors"] == sum(len(x.error_codes) for x in ex)
    assert counts["anomalies"] == sum(x.type == "anomaly" for x in items)
    assert counts["connections"] == sum(x.type == "connection" for x in items) > 0
    assert counts["records"] == sum(_records_in(x) for x in ex)
    got = frame(tmp_path, "exchanges")
    assert len(got) == len(ex) and got["exchange_id"].is_unique
    assert Counter(got["status"]) == Counter(x.status for x in ex)
    assert Counter(got["api_name"]) == Counter(x.api_name for x in ex)
    assert sorted(c for codes in got["error_codes"] for c in codes) == sorted(c for x in ex for c in x.error_codes)
    assert sorted(got["latency_ms"].dropna()) == pytest.approx(
        sorted(x.latency_ms for x in ex if x.latency_ms is not None)
    )
    errors = frame(tmp_path, "errors")
    assert set(errors["exchange_id"]) <= set(got["exchange_id"])
    conns = frame(tmp_path, "connections")
    assert conns["exchanges"].sum() == len(ex)
    assert set(got["connection_id"]) == set(conns["connection_id"])


def test_kafka_python_sample_by_hand(tmp_path):
    cap = SAMPLES / "kafka-python-basic.pcap"
    counts = land_local([str(cap)], tmp_path, records=True)
    assert counts == {
        "exchanges": 34,
        "errors": 1,
        "records": 120,
        "batches": 4,
        "connections": 9,
        "anomalies": 0,
        "group_generations": 1,
        "group_assignments": 2,
    }
    ex = frame(tmp_path, "exchanges")
    assert set(ex["date"]) == {"2026-11-21"} and (tmp_path / "exchanges" / "date=2026-11-21").is_dir()
    produce = ex[ex.api_name == "Produce"].sort_values("ts")
    assert list(produce["client_id"]) == ["kw-producer-none", "kw-producer-gzip"]
    assert [list(t) for t in produce["topics"]] == [["kpy-plain"], ["kpy-gzip"]]
    assert list(produce["acks"]) == [-1, -1] and list(produce["partition_count"]) == [1, 1]
    assert list(produce["record_count"]) == [30, 30] and [list(c) for c in produce["codecs"]] == [["none"], ["gzip"]]
    plain, gz = produce.to_dict("records")
    assert plain["record_bytes"] == plain["record_bytes_uncompressed"]
    assert gz["record_bytes"] < gz["record_bytes_uncompressed"] == plain["record_bytes_uncompressed"]
    assert json.loads(plain["request_json"])["TopicData"][0]["Name"] == "kpy-plain"
    fetch = ex[(ex.api_name == "Fetch") & (ex.record_count > 0)]
    assert fetch["record_count"].sum() == 60 and set(fetch["max_wait_ms"]) == {500}
    assert set(fetch["isolation_level"]) == {0}
    commit = ex[ex.api_name == "OffsetCommit"].iloc[0]
    assert commit["group_id"] == "kw-group" and sorted(commit["topics"]) == ["kpy-gzip", "kpy-plain"]
    err = frame(tmp_path, "errors").iloc[0]
    assert (err["api_name"], err["path"], err["code"], err["name"], err["retriable"]) == (
        "JoinGroup",
        "ErrorCode",
        79,
        "MEMBER_ID_REQUIRED",
        False,
    )
    rec = frame(tmp_path, "records")
    assert Counter(rec["direction"]) == {"produce": 60, "fetch": 60}
    for direction in ("produce", "fetch"):
        for topic in ("kpy-plain", "kpy-gzip"):
            rows = rec[(rec.direction == direction) & (rec.topic == topic)].sort_values("offset")
            assert list(rows["offset"]) == list(range(30)), (direction, topic)
            assert list(rows["key"])[:5] == [f"key-{i}".encode() for i in range(5)]
            assert rows.iloc[0]["headers"][1] == {"key": "source", "value": b"kafkawire"}
            assert set(rows["crc_ok"]) == {True} and set(rows["value_size"]) == {100}
    assert set(rec[rec.topic == "kpy-gzip"]["codec"]) == {"gzip"}
    # every TCP payload byte of the Kafka connections is accounted for
    conns = frame(tmp_path, "connections")
    ports = {int(e.rsplit(":", 1)[1]) for e in conns["broker"]}
    payload = sum(
        len(p.payload) for p in read_packets([cap]) if type(p) is Packet and (p.sport in ports or p.dport in ports)
    )
    assert conns["bytes_to_broker"].sum() + conns["bytes_to_client"].sum() + conns["gap_bytes"].sum() == payload
    assert conns["frames_to_broker"].sum() == 34 and set(conns["detected_by"]) == {"heuristic"}


def test_no_payloads_keeps_sizes_only(tmp_path):
    land_local([str(SAMPLES / "confluent-codecs.pcap")], tmp_path, records=True, payloads=False)
    rec = frame(tmp_path, "records")
    assert len(rec) == 160 and rec["key"].isna().all() and rec["value"].isna().all()
    assert set(rec["value_size"]) == {200} and set(rec["codec"]) == {"lz4", "snappy", "zstd", "gzip"}
    assert all(h["value"] is None for hs in rec["headers"] for h in hs) and len(rec["headers"].iloc[0]) == 1


def test_topic_ids_resolved_from_a_later_metadata_response(tmp_path):
    tid = uuid.UUID("01a1fff0-66a6-7da2-a75e-8ec71773e299")
    fetch = {
        "ReplicaId": -1,
        "MaxWaitMs": 100,
        "MinBytes": 1,
        "Topics": [{"TopicId": tid, "Partitions": [{"Partition": 0, "FetchOffset": 5, "PartitionMaxBytes": 1 << 20}]}],
    }
    answer = {"Responses": [{"TopicId": tid, "Partitions": [{"PartitionIndex": 0, "ErrorCode": 6}]}]}
    meta = {"Topics": [{"Name": "orders", "TopicId": tid, "Partitions": []}]}
    conv = Conv().c(rq(1, 13, 1, fetch)).s(rs(1, 13, 1, answer)).c(rq(3, 12, 2)).s(rs(3, 12, 2, meta))
    land_local([conv.pcap(tmp_path / "ids.pcap")], tmp_path)
    ex = frame(tmp_path, "exchanges").set_index("correlation_id")
    assert list(ex.loc[1, "topics"]) == ["orders"] and ex.loc[1, "partition_count"] == 1
    assert '"TopicName":"orders"' in ex.loc[1, "request_json"] and '"TopicName":"orders"' in ex.loc[1, "response_json"]
    err = frame(tmp_path, "errors").iloc[0]
    assert (err["topic"], err["partition"], err["name"], err["path"]) == (
        "orders",
        0,
        "NOT_LEADER_OR_FOLLOWER",
        "Responses[0].Partitions[0].ErrorCode",
    )


def test_the_tables():
    # docs/tables.md documents every column (tests/test_readme_examples.py holds it to markdown())
    assert set(SCHEMAS) == {"exchanges", "errors", "records", "batches", "connections", "anomalies"} | set(DERIVED)
    assert DERIVED == ("group_generations", "group_assignments")


def test_land_cli_with_a_corrupt_file_in_the_set(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1garbage")
    out = tmp_path / "tables"
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "land", str(SAMPLES / "admin.pcap"), str(bad), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip().splitlines() == [line for line in r.stderr.strip().splitlines() if str(bad) in line]
        and r.stderr.count("\n") == 1
    )
    assert "landed in" in r.stdout and len(frame(out, "exchanges")) == 12
    an = frame(out, "anomalies")
    assert (
        len(an) == 1 and an.iloc[0]["kind"] in ("truncated_file", "corrupt_file") and str(bad) in an.iloc[0]["detail"]
    )
