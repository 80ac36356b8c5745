"""The real captures in ../shared/pcaps give the exchanges their workloads made.

The expectations are literal facts, computed once with `dissect` and checked
against tshark (`-o tcp.reassemble_out_of_order:TRUE -T fields -e kafka.api_key
-e kafka.api_version -e kafka.correlation_id`): the request counts per api
key/version agree for all four captures (test_request_counts_agree_with_tshark
re-runs that check when tshark is installed).
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dissector import dissect
from tests.tshark_fields import request_versions

PCAPS = Path(__file__).resolve().parents[1].parent / "shared" / "pcaps"
pytestmark = pytest.mark.skipif(not PCAPS.is_dir(), reason="../shared/pcaps not present")

EXPECTED = {
    "ck_compression.pcap": dict(
        versions={
            (0, 10): 11,
            (1, 16): 6,
            (2, 7): 14,
            (3, 12): 11,
            (8, 9): 1,
            (9, 9): 2,
            (10, 2): 3,
            (11, 5): 2,
            (12, 3): 4,
            (13, 1): 1,
            (14, 3): 1,
            (18, 3): 15,
            (19, 4): 1,
            (22, 4): 1,
            (71, 0): 10,
        },
        statuses={"ok": 83},
        errors={79: 1},
        correlation_ids={
            "ck-admin": [1, 1, 2, 2, 3, 4, 5],
            "ck-consumer": [
                1,
                1,
                1,
                2,
                2,
                2,
                3,
                3,
                3,
                4,
                4,
                5,
                5,
                6,
                6,
                7,
                7,
                8,
                8,
                9,
                9,
                10,
                10,
                11,
                11,
                12,
                12,
                13,
                13,
                14,
                14,
                15,
                16,
                17,
                18,
                19,
                20,
                21,
                22,
                23,
                24,
                25,
                26,
            ],
            "ck-producer-gzip": [1, 1, 2, 2, 3, 4],
            "ck-producer-idem": [1, 1, 2, 2, 3, 4, 5, 6, 7],
            "ck-producer-lz4": [1, 1, 2, 2, 3, 4],
            "ck-producer-snappy": [1, 1, 2, 2, 3, 4],
            "ck-producer-zstd": [1, 1, 2, 2, 3, 4],
        },
    ),
    "errors.pcap": dict(
        versions={
            (0, 9): 3,
            (1, 4): 1,
            (1, 12): 14,
            (2, 7): 1,
            (3, 1): 1,
            (3, 12): 18,
            (3, 13): 1,
            (8, 8): 1,
            (12, 4): 1,
            (14, 5): 1,
            (18, 3): 2,
            (18, 4): 6,
            (18, 99): 1,
            (19, 7): 4,
            (20, 6): 1,
            (22, 4): 1,
            (35, 1): 1,
            (71, 0): 1,
            (1000, 0): 1,
        },
        statuses={"ok": 58, "unanswered": 2},
        errors={3: 14, 25: 2, 27: 1, 36: 1},
        anomalies=["version_mismatch"],
        correlation_ids={
            "err-admin": [1, 1, 2, 2, 3, 4, 5, 6, 7],
            "err-ck-producer": [1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
            "err-consumer": [1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
            "err-producer": [1, 1, 2, 2, 3],
            "err-raw": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
            "err-raw-bogus-key": [1],
            "err-raw-unknown-api": [1],
        },
    ),
    "kpy_basic.pcap": dict(
        versions={
            (0, 9): 2,
            (1, 12): 5,
            (2, 9): 5,
            (3, 12): 10,
            (8, 8): 1,
            (9, 8): 6,
            (10, 6): 2,
            (11, 7): 2,
            (12, 4): 4,
            (13, 5): 1,
            (14, 5): 1,
            (15, 5): 1,
            (16, 5): 1,
            (18, 4): 9,
            (19, 7): 1,
            (20, 6): 1,
            (22, 4): 2,
        },
        statuses={"ok": 54},
        errors={79: 1},
        correlation_ids={
            "kpy-admin": [1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            "kpy-consumer": [
                1,
                1,
                1,
                2,
                2,
                2,
                3,
                3,
                4,
                4,
                5,
                5,
                6,
                6,
                7,
                7,
                8,
                8,
                9,
                9,
                10,
                10,
                11,
                11,
                12,
                12,
                13,
                13,
                14,
                15,
            ],
            "kpy-producer-gzip": [1, 1, 2, 2, 3],
            "kpy-producer-none": [1, 1, 2, 2, 3],
        },
    ),
    "midstream.pcap": dict(
        versions={(0, 9): 3, (1, 12): 6, (8, 8): 3, (12, 4): 4, (13, 5): 1, (None, None): 1},
        statuses={"ok": 17, "orphan_response": 1},
        errors={},
        correlation_ids={
            None: [7],
            "mid-consumer": [7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14],
            "mid-producer": [4, 5, 6],
        },
    ),
}

_cache: dict[str, list] = {}


def items(name: str) -> list:
    if name not in _cache:
        _cache[name] = list(dissect(PCAPS / name))
    return _cache[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_gives_its_workload(name):
    exp = EXPECTED[name]
    got = items(name)
    exchanges = [x for x in got if x.type == "exchange"]
    assert [x.kind for x in got if x.type == "anomaly"] == exp.get("anomalies", [])
    assert dict(Counter((x.api_key, x.api_version) for x in exchanges)) == exp["versions"]
    assert dict(Counter(x.status for x in exchanges)) == exp["statuses"]
    assert dict(Counter(c for x in exchanges for c in x.error_codes)) == exp["errors"]
    corr = defaultdict(list)
    for x in exchanges:
        corr[x.client_id].append(x.correlation_id)
    assert {k: sorted(v) for k, v in corr.items()} == exp["correlation_ids"]
    for x in exchanges:
        if x.status == "ok":
            assert x.request is not None and "_decode_error" not in x.request
            assert x.latency_ms is not None and x.latency_ms >= 0 or x.response is None


def test_errors_pcap_details():
    ex = [x for x in items("errors.pcap") if x.type == "exchange"]
    unanswered = sorted(
        (x.api_key, x.api_version, x.correlation_id, x.client_id) for x in ex if x.status == "unanswered"
    )
    assert unanswered == [(35, 1, 1, "err-raw-unknown-api"), (1000, 0, 1, "err-raw-bogus-key")]
    by = {(x.client_id, x.correlation_id): x for x in ex}
    assert by[("err-admin", 4)].api_name == "CreateTopics" and by[("err-admin", 4)].error_codes == [36]
    assert by[("err-admin", 7)].api_name == "DeleteTopics" and by[("err-admin", 7)].error_codes == [3]
    assert (by[("err-raw", 9)].api_name, by[("err-raw", 9)].error_codes) == ("Heartbeat", [25])
    assert (by[("err-raw", 10)].api_name, by[("err-raw", 10)].error_codes) == ("SyncGroup", [27])
    assert (by[("err-raw", 11)].api_name, by[("err-raw", 11)].error_codes) == ("OffsetCommit", [25])
    # ApiVersions v99: the broker answers with an older body, decoded by the fallback
    assert by[("err-raw", 12)].status == "ok" and by[("err-raw", 12)].response["ErrorCode"] == 0
    # Tansu answers Metadata v13 (which it does not support) with a v12 body: decoded as v12 and flagged
    meta13 = by[("err-raw", 13)]
    assert (meta13.status, meta13.api_version, meta13.response_version) == ("ok", 13, 12)
    assert meta13.flags == ("version_mismatch",) and "ErrorCode" not in meta13.response
    assert meta13.response["Brokers"][0]["Port"] == 9092
    mismatch = [x for x in items("errors.pcap") if x.type == "anomaly" and x.kind == "version_mismatch"]
    assert len(mismatch) == 1 and "Metadata v13 response correlation id 13" in mismatch[0].detail
    assert "decodes only as v12" in mismatch[0].detail
    assert [x.api_name for x in ex if x.status == "undecodable"] == []
    assert [x.error_codes for x in ex if x.client_id == "err-ck-producer" and x.api_key == 3] == [[3]] * 12


def test_midstream_orphan_and_no_garbage():
    got = items("midstream.pcap")
    orphans = [x for x in got if x.type == "exchange" and x.status == "orphan_response"]
    assert len(orphans) == 1
    o = orphans[0]
    assert o.correlation_id == 7 and o.request is None and o.api_key is None
    assert o.client == "127.0.0.1:59078" and o.broker == "127.0.0.1:9092"
    assert len(o.response["_raw_body"]) == o.response_size - 4
    first = [x for x in got if x.type == "exchange" and x.client == "127.0.0.1:59078" and x.status == "ok"]
    assert [(x.api_name, x.correlation_id) for x in first][:2] == [("Fetch", 8), ("Fetch", 9)]


def test_topic_names_and_records_summaries():
    ex = [x for x in items("kpy_basic.pcap") if x.type == "exchange"]
    produce = [x for x in ex if x.api_name == "Produce"]
    assert [t["Name"] for x in produce for t in x.request["TopicData"]] == ["kpy-plain", "kpy-gzip"]
    from tests.oracle.output import to_json

    j = to_json(produce[0])
    summary = j["request"]["TopicData"][0]["PartitionData"][0]["Records"]
    assert summary["batches"] >= 1 and summary["crc_ok"] is True and summary["codecs"] == ["none"]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_request_counts_agree_with_tshark(name):
    theirs = request_versions(PCAPS / name)
    ours = {k: n for k, n in EXPECTED[name]["versions"].items() if k != (None, None)}
    assert dict(theirs) == ours


def test_fetch_topic_ids_resolved_from_metadata():
    fetches = [x for x in items("ck_compression.pcap") if x.type == "exchange" and x.api_name == "Fetch"]
    assert [x.correlation_id for x in fetches] == [17, 18, 19, 20, 23, 26]
    first = fetches[0].request["Topics"][0]
    assert (str(first["TopicId"]), first["TopicName"]) == ("01a1ffef-bde2-7742-b650-2b4813597cde", "ck-zstd")
    names = {t["TopicName"] for x in fetches for side in (x.request["Topics"], x.response["Responses"]) for t in side}
    assert names == {"ck-zstd", "ck-snappy", "ck-lz4", "ck-idem", "ck-gzip"}
