"""The analyses: hand-computed figures on a small synthetic capture, and pandas == Spark SQL on real ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from landing import land_local
from report import analysis
from tests.test_exchanges import Conv, rq, rs

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


def _after(conv: Conv, ms: float) -> Conv:
    conv.t += ms / 1000.0 - 0.001  # the next event adds 1 ms itself
    return conv


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Three Metadata exchanges answered after 1, 2 and 10 ms (the last with error 3), a JoinGroup
    of group g, and a Fetch at offset 5 answered with high watermark 12."""
    conv = Conv()
    for corr, ms, err in ((1, 1, 0), (2, 2, 0), (3, 10, 3)):
        conv.c(rq(3, 12, corr, {"Topics": [{"Name": "t"}]}, client_id="app"))
        _after(conv, ms).s(rs(3, 12, corr, {"Topics": [{"Name": "t", "ErrorCode": err}]}))
    conv.c(
        rq(
            11,
            7,
            4,
            {"GroupId": "g", "SessionTimeoutMs": 10000, "MemberId": "", "ProtocolType": "consumer", "Protocols": []},
            client_id="app",
        )
    )
    conv.s(rs(11, 7, 4, {"MemberId": "m", "Members": []}))
    fetch = {
        "ReplicaId": -1,
        "MaxWaitMs": 500,
        "MinBytes": 1,
        "Topics": [{"Topic": "t", "Partitions": [{"Partition": 0, "FetchOffset": 5, "PartitionMaxBytes": 1 << 20}]}],
    }
    conv.c(rq(1, 12, 5, fetch, client_id="app"))
    conv.s(rs(1, 12, 5, {"Responses": [{"Topic": "t", "Partitions": [{"PartitionIndex": 0, "HighWatermark": 12}]}]}))
    out = tmp_path_factory.mktemp("small")
    land_local([conv.pcap(out / "small.pcap")], out / "tables")
    return out / "tables"


def test_latency_percentiles_by_hand(small):
    lat = analysis.latency(small).set_index(["api_name", "api_version"])
    row = lat.loc[("Metadata", 12)]
    # numpy's linear percentiles of [1, 2, 10]: rank (n-1)q = 1.8 -> 2 + 0.8 * 8
    assert (row["count"], row["p50"], row["p90"], row["p99"], row["max"]) == pytest.approx((3, 2.0, 8.4, 9.84, 10.0))
    by_client = analysis.latency(small, ["client_id"])
    assert by_client.set_index("client_id").loc["app", "count"] == 5
    slow = analysis.slowest(small, 2)
    assert list(slow["latency_ms"]) == pytest.approx([10.0, 2.0]) and list(slow["correlation_id"]) == [3, 2]


def test_errors_lag_and_versions_by_hand(small):
    er = analysis.errors(small)
    assert er.to_dict("records") == [
        {"api_name": "Metadata", "code": 3, "name": "UNKNOWN_TOPIC_OR_PARTITION", "retriable": True, "count": 1}
    ]
    assert analysis.errors(small, ["topic"]).to_dict("records") == [{"topic": "t", "count": 1}]
    lag = analysis.consumer_lag(small)
    assert lag[["group_id", "topic", "partition", "fetch_offset", "high_watermark", "lag"]].to_dict("records") == [
        {"group_id": "g", "topic": "t", "partition": 0, "fetch_offset": 5, "high_watermark": 12, "lag": 7}
    ]
    vm = analysis.version_matrix(small).set_index("api_name")
    assert vm.loc["Metadata", "versions"] == [12] and vm.loc["Metadata", "exchanges"] == 3
    assert not vm["removed_in_kafka4"].any() and vm["undecodable"].sum() == 0


def test_old_versions_are_marked_removed_in_kafka4(tmp_path):
    conv = Conv().c(rq(3, 0, 1, {"Topics": []})).s(rs(3, 0, 1, {"Brokers": [], "Topics": []}))
    conv.c(rq(0, 2, 2, {"Acks": 1, "TimeoutMs": 100, "TopicData": []})).s(rs(0, 2, 2, {"Responses": []}))
    land_local([conv.pcap(tmp_path / "old.pcap")], tmp_path / "t")
    vm = analysis.version_matrix(tmp_path / "t").set_index("api_name")
    assert bool(vm.loc["Produce", "removed_in_kafka4"]) and not bool(vm.loc["Metadata", "removed_in_kafka4"])


def test_produce_to_fetch_on_a_real_capture(tmp_path):
    land_local([str(SAMPLES / "kafka-python-basic.pcap")], tmp_path, records=True)
    p2f = analysis.produce_to_fetch(tmp_path)
    assert len(p2f) == 60 and set(p2f["topic"]) == {"kpy-plain", "kpy-gzip"}
    assert (p2f["delay_ms"] > 0).all() and (p2f["fetched"] > p2f["produced"]).all()
    rep = analysis.report(tmp_path)
    assert rep["produce_to_fetch"].set_index("topic").loc["kpy-plain", "records"] == 30


def test_report_cli_text_and_json(tmp_path):
    cap = SAMPLES / "kafka-python-basic.pcap"
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "report", str(cap), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    by_api = {(x["api_name"], x["api_version"]): x for x in rep["latency_by_api"]}
    assert by_api[("Produce", 9)]["count"] == 2 and by_api[("JoinGroup", 7)]["max"] == pytest.approx(5009.698)
    assert rep["errors_by_api"] == [
        {"api_name": "JoinGroup", "code": 79, "name": "MEMBER_ID_REQUIRED", "retriable": False, "count": 1}
    ]
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "report", str(cap)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "== latency by api (16 rows)" in r.stdout and "MEMBER_ID_REQUIRED" in r.stdout


@pytest.mark.parametrize("html", [False, True])
def test_report_refuses_a_bad_bucket_in_one_line(tmp_path, html):
    argv = ["report", str(SAMPLES / "kafka-python-basic.pcap"), "--bucket", "notafreq"]
    argv += ["--html", str(tmp_path / "r.html")] if html else []
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stdout == "" and not (tmp_path / "r.html").exists()
    assert r.stderr.splitlines() == ["kafkawire: --bucket 'notafreq' is not a time bucket (1s, 1min, 5min, 1h, ...)"]


# -- the same numbers from Spark SQL --------------------------------------------------------


def _same(spark_df, pandas_df, keys):
    got = spark_df.toPandas()
    want = pandas_df.copy()
    assert list(got.columns) == list(want.columns)
    got = got.sort_values(keys, kind="stable").reset_index(drop=True)
    want = want.sort_values(keys, kind="stable").reset_index(drop=True)
    assert len(got) == len(want) > 0
    for c in got.columns:
        g, w = got[c].tolist(), want[c].tolist()
        if c in ("versions",):
            g = [list(x) for x in g]
            w = [list(x) for x in w]
        if pd.api.types.is_float_dtype(want[c]):
            assert g == pytest.approx(w, rel=1e-9, abs=1e-9, nan_ok=True), c
        elif pd.api.types.is_datetime64_any_dtype(want[c]):
            assert [
                pd.Timestamp(x).tz_convert("UTC") if pd.Timestamp(x).tzinfo else pd.Timestamp(x).tz_localize("UTC")
                for x in g
            ] == [pd.Timestamp(x) for x in w], c
        else:
            assert [None if pd.isna(x) else x for x in g] == [None if pd.isna(x) else x for x in w], c


@pytest.mark.slow  # eleven Spark SQL queries: about 20 s
def test_spark_sql_gives_the_pandas_figures(spark, tmp_path):
    from report import spark_analysis as sa

    caps = [SAMPLES / "kafka-python-basic.pcap", SAMPLES / "confluent-codecs.pcap", SAMPLES / "errors.pcap"]
    caps.append(SAMPLES / "rebalance-ak.pcap")  # a group that rebalances: partitions move
    land_local([str(c) for c in caps], tmp_path, records=True)
    out = str(tmp_path)
    _same(sa.latency(spark, out), analysis.latency(out), ["api_name", "api_version"])
    _same(
        sa.latency(spark, out, ["client_id", "api_name"]),
        analysis.latency(out, ["client_id", "api_name"]),
        ["client_id", "api_name"],
    )
    _same(sa.latency_over_time(spark, out, "1s"), analysis.latency_over_time(out, "1s"), ["bucket", "api_name"])
    _same(sa.errors(spark, out), analysis.errors(out), ["api_name", "code"])
    _same(sa.slowest(spark, out, 10), analysis.slowest(out, 10), ["latency_ms", "exchange_id"])
    _same(sa.version_matrix(spark, out), analysis.version_matrix(out), ["client_id", "api_key"])
    _same(sa.broker_versions(spark, out), analysis.broker_versions(out), ["broker", "api_key"])
    _same(sa.consumer_lag(spark, out), analysis.consumer_lag(out), ["ts", "exchange_id", "topic", "partition"])
    _same(sa.produce_to_fetch(spark, out), analysis.produce_to_fetch(out), ["topic", "partition", "offset"])
    reb = analysis.rebalances(out)
    assert len(reb) == 5 and set(reb["group_id"]) == {"kw-group", "ck-group", "rb-group"}
    _same(sa.rebalances(spark, out), reb, ["began", "group_id", "generation"])
    _same(sa.partitions_moved(spark, out), analysis.partitions_moved(out), ["ts", "group_id", "topic", "partition"])
