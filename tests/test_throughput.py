"""Throughput per topic, partition and client, and batching and compression per producer, from the
`batches` table (record batch headers, without --records): held to what the clients themselves
did (samples/kafka4-old-ak.json: each produced 6 records and read them back), to tshark's own
reading of the record batches, and to the exchanges table's record columns (which the Python
row oracle holds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from landing.local import land_local
from report import analysis
from tests.broker import first_syn_port
from tests.tshark_fields import kafka_fields

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
OLD = SAMPLES / "kafka4-old-ak.pcap"


@pytest.fixture(scope="module")
def landed(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name in ("kafka4-old-ak", "confluent-codecs", "java-txn-ak", "old-protocol"):
        out[name] = tmp_path_factory.mktemp(name) / "lake"
        land_local([str(SAMPLES / f"{name}.pcap")], out[name])
    return out


def test_each_topic_carries_what_its_producer_wrote_and_its_consumer_read(landed):
    runs = json.loads(OLD.with_suffix(".json").read_text())["runs"]
    by_topic = {r["topic"]: r for r in analysis.throughput(landed["kafka4-old-ak"]).to_dict("records")}
    topics = {
        "kpy147-auto": "k4-kpy147-auto",
        "kpy147-0.9": "k4-kpy147-0.9",
        "kpy147-0.10.1": "k4-kpy147-0.10.1",
        "java-2.0.1": "k4-java",
        "aiokafka-0.12-0.10.1": "k4-aiokafka",
        "kcat-2.0.2": "k4-kcat",
        "kpy-modern": "k4-modern",
        "rdkafka-0.9": "k4-rdkafka",
    }
    for run in runs:
        row = by_topic[topics[run["client_id"]]]
        assert row["produced_records"] == run["produced"] == 6
        assert row["fetched_records"] >= len(run["consumed"]) == 6
        assert row["produced_bytes"] > 0 and row["produced_bytes_per_s"] > 0
    clients = {
        r["client_id"]: r for r in analysis.throughput(landed["kafka4-old-ak"], ["client_id"]).to_dict("records")
    }
    assert clients["java-2.0.1"]["produced_records"] == 6 and clients["java-2.0.1"]["fetched_records"] == 0
    assert clients["java-2.0.1-consumer"]["fetched_records"] == 6
    # the Java client 2.0.1 sends one record a batch (linger 5 ms, each send waited for); kcat batches them
    batching = {r["client_id"]: r for r in analysis.batching(landed["kafka4-old-ak"]).to_dict("records")}
    assert (batching["java-2.0.1"]["batches"], batching["java-2.0.1"]["records_per_batch_max"]) == (6, 1)
    assert (batching["kcat-2.0.2"]["batches"], batching["kcat-2.0.2"]["records_per_batch_p50"]) == (1, 6)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_record_batches_as_tshark_reads_them(landed):
    """Every magic-2 batch of the exchanges tshark 4.0 can decode (it knows no Produce v9 or
    Fetch v12, which today's kafka-python sends): records (last offset delta + 1) and codec, per
    direction, as a multiset."""
    from tests import tshark_coverage

    theirs: Counter = Counter()
    rows = kafka_fields(
        OLD,
        "kafka.api_key",
        "kafka.batch_last_offset_delta",
        "kafka.batch_codec",
        port=first_syn_port(OLD),
        display="kafka.batch_last_offset_delta",
    )
    for key, deltas, codecs in rows:
        for delta, codec in zip(deltas.split(","), codecs.split(","), strict=True):
            theirs[("produce" if key == "0" else "fetch", int(delta) + 1, int(codec))] += 1
    unknown = {tuple(p) for p in tshark_coverage.measure()["unsupported"]}
    lake = landed["kafka4-old-ak"]
    versions = {
        r["exchange_id"]: (r["api_key"], r["api_version"])
        for r in analysis.Tables(lake).get("exchanges", ["exchange_id", "api_key", "api_version"]).to_dict("records")
    }
    b = analysis.Tables(lake).get("batches")
    codes = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    ours = Counter(
        (r["direction"], r["records"], codes[r["codec"]])
        for r in b.to_dict("records")
        if r["magic"] == 2 and versions[r["exchange_id"]] not in unknown
    )
    assert sum(theirs.values()) >= 16 and ours == theirs


@pytest.mark.parametrize("name", ["kafka4-old-ak", "confluent-codecs", "java-txn-ak", "old-protocol"])
def test_batches_sum_to_the_exchanges_record_columns(landed, name):
    t = analysis.Tables(landed[name])
    ex = t.get("exchanges", ["exchange_id", "record_count", "record_bytes_uncompressed"])
    ex = ex[ex["record_count"].notna()].set_index("exchange_id")
    b = t.get("batches").groupby("exchange_id")[["records", "uncompressed_bytes"]].sum()
    assert len(b) and set(b.index) <= set(ex.index)
    for eid, row in b.iterrows():
        assert (row["records"], row["uncompressed_bytes"]) == (
            ex.loc[eid, "record_count"],
            ex.loc[eid, "record_bytes_uncompressed"],
        ), eid


def test_compression_per_producer_and_codec(landed):
    """confluent-codecs.pcap: one librdkafka producer per codec, 20 records each, compressible
    values: each codec's batches shrink them; an uncompressed batch's ratio is 1."""
    rows = {r["topic"]: r for r in analysis.batching(landed["confluent-codecs"]).to_dict("records")}
    for codec in ("gzip", "lz4", "snappy", "zstd"):
        r = rows[f"ck-{codec}"]
        assert r["codecs"] == codec and r["records"] == 20 and r["compression_ratio"] > 1.0
        assert r["uncompressed_bytes"] > r["bytes"]
    legacy = analysis.batching(landed["old-protocol"])
    plain = legacy[legacy["codecs"] == "none"]
    assert len(plain) and (plain["compression_ratio"] == 1.0).all()


def test_the_report_has_the_sections():
    out = subprocess.run(
        [sys.executable, "-m", "kafkawire", "report", str(SAMPLES / "confluent-codecs.pcap"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert {r["topic"] for r in rep["throughput_by_topic"]} >= {"ck-gzip", "ck-lz4", "ck-snappy", "ck-zstd"}
    assert len(rep["batching"]) == 4 and rep["throughput_by_client"]
