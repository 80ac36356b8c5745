"""Apache Kafka 4.3.1 and its Java client in the test bench.

The bundled samples made with them by samples/make_captures.py (plus the
old-protocol sample, made against Tansu because Kafka 4 dropped those
versions), a tshark cross-check of their request counts, and live captures
of the Java client (tests/java/KafkawireWorkload.java) against the session's
Apache Kafka broker and against Tansu.

The sample facts below were read from the files with `dissect` and checked by
hand against what each workload does; tshark 4.0 agrees on every request's
API key and version.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.tshark_fields import request_versions
from tests.broker import first_syn_port
from tests.test_live_capture import _dissect, _produced, _topic, captured

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _exchanges(items) -> list:
    return [x for x in items if x.type == "exchange"]


def _versions(items, api: str) -> Counter:
    return Counter(x.api_version for x in _exchanges(items) if x.api_name == api)


def _errors(items) -> Counter:
    return Counter((x.api_name, e) for x in _exchanges(items) for e in x.error_codes)


def _fetched(items, isolation: int | None = None) -> dict[str, list]:
    """{topic: [batch or legacy message]} from every answered Fetch response,
    optionally only those whose request asked for `isolation`."""
    from protocol.records import read_record_set

    out: dict[str, list] = {}
    for x in _exchanges(items):
        if x.api_name != "Fetch" or x.status != "ok":
            continue
        if isolation is not None and x.request.get("IsolationLevel", 0) != isolation:
            continue
        for t in x.response["Responses"]:
            for p in t["Partitions"]:
                if p["Records"] is not None:
                    out.setdefault(_topic(t), []).extend(read_record_set(p["Records"]).batches)
    return out


def _records(batches) -> list:
    return [r for b in batches for r in b.records()]


def _clean(items, n: int) -> list:
    """The exchanges, after checking there are n, all decoded, no anomalies."""
    assert [x for x in items if x.type == "anomaly"] == []
    ex = _exchanges(items)
    assert Counter(x.status for x in ex) == Counter({"ok": n})
    assert [x for x in ex if x.flags] == []
    return ex


# -- samples: the Java client against Apache Kafka ---------------------------


def test_sample_java_codecs_apache_kafka():
    items = _dissect(SAMPLES / "java-codecs-ak.pcap")
    _clean(items, 47)
    produced, codecs = _produced(items)
    assert codecs == {f"jv-{c}": {c} for c in CODECS}
    for c in CODECS:
        recs = produced[f"jv-{c}"]
        assert [r.key for r in recs] == [f"key-{i % 5}".encode() for i in range(20)]
        assert all(r.headers == [("codec", c.encode())] and len(r.value) == 200 for r in recs)
        assert recs[3].value.startswith(b"message 000003 kafkawire-sample-")
    # idempotent producers: every batch carries a producer id and sequences from 0
    for x in _exchanges(items):
        if x.api_name == "Produce":
            assert x.api_version == 13 and x.request["Acks"] == -1
    inits = [x for x in _exchanges(items) if x.api_name == "InitProducerId" and not x.error_codes]
    assert len(inits) == 5 and len({x.response["ProducerId"] for x in inits}) == 5
    # idempotent producers: every batch carries a producer id, sequences from 0
    fetched = _fetched(items)
    assert {t: {b.codec_name for b in bs} for t, bs in fetched.items()} == {f"jv-{c}": {c} for c in CODECS}
    for bs in fetched.values():
        assert all(b.crc_ok and b.producer_id >= 0 for b in bs)
        seqs = [b.base_sequence for b in bs]
        assert seqs == [sum(b.record_count for b in bs[:i]) for i in range(len(bs))]  # 0, then running
    assert {t: len(_records(bs)) for t, bs in fetched.items()} == {f"jv-{c}": 20 for c in CODECS}
    # the consumer protocol (KIP-848): ConsumerGroupHeartbeat, no JoinGroup/SyncGroup
    assert _versions(items, "ConsumerGroupHeartbeat") == Counter({1: 3})
    assert _versions(items, "JoinGroup") == Counter() and _versions(items, "SyncGroup") == Counter()
    hb = [x for x in _exchanges(items) if x.api_name == "ConsumerGroupHeartbeat"]
    epochs = [x.request["MemberEpoch"] for x in hb]
    assert epochs[0] == 0 and epochs[-1] == -1 and all(e > 0 for e in epochs[1:-1])  # join, heartbeat, leave
    assert hb[0].response["MemberEpoch"] > 0 and hb[-1].response["MemberEpoch"] == -1
    assert hb[0].request["GroupId"] == "jv-group"
    assert sorted(hb[0].request["SubscribedTopicNames"]) == sorted(f"jv-{c}" for c in CODECS)
    assigned = hb[0].response["Assignment"]["TopicPartitions"]
    assert sorted(t["TopicName"] for t in assigned) == sorted(f"jv-{c}" for c in CODECS)
    # first use of the coordinators right after broker start: retriable, then fine
    assert _errors(items) == Counter({("InitProducerId", 14): 1, ("FindCoordinator", 15): 1})
    assert _versions(items, "Fetch") == Counter({18: 3}) and _versions(items, "Metadata") == Counter({13: 7})


def test_sample_java_transactions_apache_kafka():
    from protocol.records import read_record_set

    items = _dissect(SAMPLES / "java-txn-ak.pcap")
    ex = _clean(items, 47)
    by = lambda api: [x for x in ex if x.api_name == api]  # noqa: E731
    assert [x.request["Committed"] for x in by("EndTxn")] == [True, False, True]
    assert all(x.request["TransactionalId"] == "kw-txn" and x.error_codes == [] for x in by("EndTxn"))
    # Kafka 4 with transaction.version 2 (KIP-890): the client sends no
    # AddPartitionsToTxn, the partition leader asks the coordinator itself,
    # and the coordinator writes the markers; both ride the client listener.
    assert {x.client_id for x in by("AddPartitionsToTxn")} == {"AddPartitionsManager-client-1"}
    assert {x.client_id for x in by("WriteTxnMarkers")} == {"broker-1-txn-marker-sender"}
    assert [m["TransactionResult"] for x in by("WriteTxnMarkers") for m in x.request["Markers"]] == [True, False, True]
    txo = by("TxnOffsetCommit")
    assert len(txo) == 1 and txo[0].request["GroupId"] == "kw-txn-group"
    assert txo[0].request["Topics"][0]["Partitions"][0]["CommittedOffset"] == 10
    produced, codecs = _produced(items)
    assert len(produced["jv-txn"]) == 25
    batches = [
        b
        for x in by("Produce")
        for t in x.request["TopicData"]
        for p in t["PartitionData"]
        for b in read_record_set(p["Records"]).batches
    ]
    assert [(b.transactional, b.record_count) for b in batches] == [(True, 10), (True, 5), (True, 10)]
    # the markers are in the fetched data: 3 data batches, 3 control batches
    for isolation in (0, 1):
        got = _fetched(items, isolation)["jv-txn"]
        assert [b.control for b in got] == [False, True] * 3
        markers = [r.control["type"] for b in got if b.control for r in b.records()]
        assert markers == ["COMMIT", "ABORT", "COMMIT"]
        assert len(_records(b for b in got if not b.control)) == 25
    # read_committed gets the aborted range to skip; read_uncommitted does not
    aborted = [
        p["AbortedTransactions"]
        for x in by("Fetch")
        if x.request["IsolationLevel"] == 1
        for t in x.response["Responses"]
        for p in t["Partitions"]
        if p["Records"]
    ]
    pid = batches[0].producer_id
    assert aborted == [[{"ProducerId": pid, "FirstOffset": 11}]]
    assert _errors(items) == Counter(
        {("InitProducerId", 14): 1, ("FindCoordinator", 15): 2, ("AddPartitionsToTxn", 51): 3}
    )  # 51 CONCURRENT_TRANSACTIONS, retried


def test_sample_java_admin_apache_kafka():
    items = _dissect(SAMPLES / "java-admin-ak.pcap")
    ex = _clean(items, 33)
    assert {x.client_id for x in ex} == {"java-admin"}
    versions = Counter((x.api_name, x.api_version) for x in ex)
    for api in (
        ("CreatePartitions", 3),
        ("IncrementalAlterConfigs", 1),
        ("DescribeConfigs", 4),
        ("DescribeCluster", 2),
        ("DescribeTopicPartitions", 0),
        ("ListGroups", 5),
        ("DeleteGroups", 2),
        ("ConsumerGroupDescribe", 1),
        ("DeleteTopics", 6),
        ("CreateTopics", 7),
        ("ListOffsets", 11),
    ):
        assert versions[api] >= 1, api
    create = [x for x in ex if x.api_name == "CreateTopics"]
    assert [[t["Name"] for t in x.request["Topics"]] for x in create] == [["jv-adm-a", "jv-adm-b"], ["jv-adm-a"]]
    assert [x.error_codes for x in create] == [[], [36]]  # TOPIC_ALREADY_EXISTS the second time
    b = create[0].request["Topics"][1]
    assert [(c["Name"], c["Value"]) for c in b["Configs"]] == [("retention.ms", "3600000")]
    alter = next(x for x in ex if x.api_name == "IncrementalAlterConfigs")
    assert alter.request["Resources"][0]["Configs"][0]["Value"] == "7200000"
    errors = _errors(items)
    assert errors[("DeleteGroups", 69)] == 1 and errors[("DescribeGroups", 69)] == 1  # GROUP_ID_NOT_FOUND
    assert errors[("CreateTopics", 36)] == 1
    assert set(errors) <= {
        ("CreateTopics", 36),
        ("DeleteGroups", 69),
        ("DescribeGroups", 69),
        ("ConsumerGroupDescribe", 69),
        ("ConsumerGroupDescribe", 16),
        ("FindCoordinator", 15),
    }


def test_sample_kafka_python_apache_kafka():
    items = _dissect(SAMPLES / "kafka-python-ak.pcap")
    _clean(items, 40)
    produced, codecs = _produced(items)
    assert codecs == {"kpy-plain": {"none"}, "kpy-gzip": {"gzip"}}
    assert {t: len(r) for t, r in produced.items()} == {"kpy-plain": 30, "kpy-gzip": 30}
    assert {t: len(_records(bs)) for t, bs in _fetched(items).items()} == {"kpy-plain": 30, "kpy-gzip": 30}
    # kafka-python 3.0.12 speaks the classic group protocol to Kafka 4 too
    assert [x.error_codes for x in _exchanges(items) if x.api_name == "JoinGroup"] == [[14], [79], []]
    assert _versions(items, "Produce") == Counter({9: 2}) and _versions(items, "Fetch") == Counter({12: 1})
    assert _versions(items, "Metadata") == Counter({13: 9})


# -- sample: old protocol versions (against Tansu) ---------------------------


def test_sample_old_protocol_versions_and_message_sets():
    from protocol.records import read_record_set

    items = _dissect(SAMPLES / "old-protocol.pcap")
    ex = _clean(items, 38)
    assert _versions(items, "Produce") == Counter({0: 1, 1: 3, 2: 1, 9: 1})
    assert _versions(items, "Fetch") == Counter({0: 1, 1: 5, 3: 1})
    assert _versions(items, "Metadata") == Counter({0: 10, 2: 2, 12: 2})
    # the legacy message sets, as each client wrote them; all CRCs check
    sets = {}
    for x in ex:
        if x.api_name == "Produce" and x.api_version < 3:
            (t,) = x.request["TopicData"]
            (p,) = t["PartitionData"]
            rs = read_record_set(p["Records"])
            assert all(m.crc_ok for m in rs.batches)
            recs = list(rs.records())
            assert [r.key for r in recs] == [f"key-{i}".encode() for i in range(10)]
            assert all(r.value.startswith(f"message {i:06d} ".encode()) for i, r in enumerate(recs))
            sets[(x.client_id, x.api_version)] = (len(rs.batches), {(m.magic, m.codec_name) for m in rs.batches})
    assert sets == {
        ("old-kpy-0.8.2", 0): (10, {(0, "none")}),  # one message per entry, no wrapper
        ("old-kpy-0.9", 1): (1, {(0, "gzip")}),  # one gzip wrapper message
        ("old-kpy-0.10.1", 2): (1, {(1, "gzip")}),  # magic 1: timestamps, relative offsets
        ("old-ck-snappy", 1): (1, {(0, "snappy")}),  # librdkafka, xerial-framed snappy
        ("old-ck-lz4", 1): (1, {(0, "lz4")}),  # librdkafka, magic 0 lz4 framing
    }
    # Tansu 0.6 refuses every magic 0/1 Produce with 59 UNKNOWN_PRODUCER_ID
    assert _errors(items) == Counter({("Produce", 59): 5})
    # and answers old Fetch versions with magic-2 batches (no down-conversion)
    for x in ex:
        if x.api_name == "Fetch":
            (t,) = x.response["Responses"]
            assert _topic(t) == "old-seed"
    fetched = [
        b
        for x in ex
        if x.api_name == "Fetch" and x.api_version <= 3
        for t in x.response["Responses"]
        for p in t["Partitions"]
        if p["Records"]
        for b in read_record_set(p["Records"]).batches
    ]
    assert {b.magic for b in fetched} == {2} and len(_records(fetched)) == 50  # 5 readers x 10


# -- tshark agrees on every request ------------------------------------------

NEW_SAMPLES = (
    "java-codecs-ak.pcap",
    "java-txn-ak.pcap",
    "java-admin-ak.pcap",
    "kafka-python-ak.pcap",
    "old-protocol.pcap",
    "sasl-ak.pcap",
    "kafka4-old-ak.pcap",
)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.parametrize("name", NEW_SAMPLES)
def test_new_samples_request_counts_agree_with_tshark(name):
    pcap = SAMPLES / name
    port = first_syn_port(pcap)
    theirs = request_versions(pcap, port)
    ours = Counter((x.api_key, x.api_version) for x in _exchanges(_dissect(pcap)))
    assert sum(ours.values()) > 30 and theirs == ours


# -- the launcher and live captures ------------------------------------------


def test_kafka_broker_refuses_a_port_in_use():
    import socket

    from tests.broker import BrokerError
    from tests.kafka_jvm import KafkaBroker, jars_present

    if not jars_present():
        pytest.skip("Apache Kafka's jars are not cached")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(BrokerError, match="already in use"):
            KafkaBroker(port=s.getsockname()[1]).start()


def test_apache_kafka_advertises_kafka_4_versions(apache_kafka):
    from tests.kafka_jvm import api_versions

    v = api_versions(apache_kafka.address)
    assert v[1][0] == 4  # Fetch v0-3 are gone in Kafka 4 (KIP-896)
    assert v[68] == (0, 1)  # ConsumerGroupHeartbeat: the KIP-848 consumer protocol
    assert v[3][1] >= 13 and v[0][1] >= 12


def _live(address: str, port: int, tmp_path: Path, group_protocol: str, n: int = 5):
    """Java producers (every codec) then a consumer group, under tcpdump:
    (dissected items, the workload's summary lines, topic prefix)."""
    from tests.kafka_jvm import run_workload

    prefix = f"live-{uuid.uuid4().hex[:8]}"
    topics = ",".join(f"{prefix}-{c}" for c in CODECS)
    pcap = tmp_path / "java.pcap"
    with captured(pcap, port):
        out = run_workload(
            "codecs",
            address,
            prefix,
            str(n),
            "--",
            "group",
            address,
            topics,
            f"{prefix}-group",
            str(n * len(CODECS)),
            group_protocol,
            timeout=120,
            log=tmp_path / "java.log",
        )
    return _dissect(pcap, ports=[port]), out.splitlines(), prefix


def _check_live(items, lines, prefix, n=5):
    assert f"consumed group={prefix}-group" in lines[-1] and lines[-1].endswith(f"count={n * len(CODECS)}")
    assert [x for x in items if x.type == "anomaly"] == []
    ex = _exchanges(items)
    # a consumer closing may leave its long-poll Fetch unanswered
    assert {x.status for x in ex} <= {"ok", "unanswered"}
    assert all(x.api_name == "Fetch" for x in ex if x.status == "unanswered")
    produced, codecs = _produced(items)
    assert codecs == {f"{prefix}-{c}": {c} for c in CODECS}
    assert {t: len(r) for t, r in produced.items()} == {f"{prefix}-{c}": n for c in CODECS}
    fetched = _fetched(items)
    assert {t: len(_records(bs)) for t, bs in fetched.items()} == {f"{prefix}-{c}": n for c in CODECS}
    assert all(b.crc_ok for bs in fetched.values() for b in bs)
    return ex


@pytest.mark.broker
def test_java_client_against_apache_kafka_live(apache_kafka, tmp_path):
    items, lines, prefix = _live(apache_kafka.address, apache_kafka.port, tmp_path, "consumer")
    ex = _check_live(items, lines, prefix)
    assert {x.broker for x in ex} == {apache_kafka.address}
    hb = [x for x in ex if x.api_name == "ConsumerGroupHeartbeat"]
    assert len(hb) >= 2 and hb[0].request["GroupId"] == f"{prefix}-group" and hb[-1].request["MemberEpoch"] == -1
    assert not any(x.api_name == "JoinGroup" for x in ex)
    assert {x.api_version for x in ex if x.api_name == "Produce"} == {13}
    # only the retriable answers of coordinators still loading or moving (first use after start)
    assert {e for x in ex for e in x.error_codes} <= {14, 15, 16}


@pytest.mark.broker
def test_java_client_against_tansu_live(broker, java_client, tmp_path):
    port = int(broker.rsplit(":", 1)[1])
    items, lines, prefix = _live(broker, port, tmp_path, "classic")
    ex = _check_live(items, lines, prefix)
    # Tansu offers no ConsumerGroupHeartbeat: the classic protocol, and the
    # versions Tansu tops out at (Produce 11, Fetch 17, Metadata 12)
    assert not any(x.api_name == "ConsumerGroupHeartbeat" for x in ex)
    assert [x.error_codes for x in ex if x.api_name == "JoinGroup"] == [[79], []]
    assert {x.api_version for x in ex if x.api_name == "Produce"} == {11}
    assert {x.api_version for x in ex if x.api_name == "Metadata"} == {12}


# -- sample: successful SASL on Apache Kafka, and its redaction ----------------


def test_sample_sasl_apache_kafka_logins():
    items = _dissect(SAMPLES / "sasl-ak.pcap")
    assert [x for x in items if x.type == "anomaly"] == []
    ex = _exchanges(items)
    # the last login with the wrong password is left pending when its client
    # closes (the broker holds failed-auth answers ~300 ms): one unanswered
    unanswered = [(x.client_id, x.api_name) for x in ex if x.status != "ok"]
    assert unanswered == [("sasl-plain-wrong", "SaslAuthenticate")] and len(ex) == 37
    hs = [x for x in ex if x.api_name == "SaslHandshake"]
    assert Counter((x.client_id, x.request["Mechanism"]) for x in hs) == Counter(
        {
            ("sasl-plain-alice", "PLAIN"): 2,
            ("sasl-scram-sha-256-bob", "SCRAM-SHA-256"): 2,
            ("sasl-scram-consumer", "SCRAM-SHA-256"): 2,
            ("sasl-plain-wrong", "PLAIN"): 2,
        }
    )
    assert all(x.error_codes == [] and "SCRAM-SHA-256" in x.response["Mechanisms"] for x in hs)
    auth = [x for x in ex if x.api_name == "SaslAuthenticate" and x.status == "ok"]
    # PLAIN: one round; SCRAM: client-first/server-first, then client-final/server-final
    assert Counter(x.client_id for x in auth) == Counter(
        {"sasl-plain-alice": 2, "sasl-scram-sha-256-bob": 4, "sasl-scram-consumer": 4, "sasl-plain-wrong": 1}
    )
    assert [x.error_codes for x in auth if x.client_id == "sasl-plain-wrong"] == [[58]]  # SASL_AUTHENTICATION_FAILED
    assert _errors(items) == Counter({("SaslAuthenticate", 58): 1, ("Metadata", 3): 1})  # 3: before auto-create
    produced, _ = _produced(items)
    assert sorted(r.key for r in produced["sasl-topic"]) == sorted(
        f"{u}-{i}".encode() for u in ("alice", "bob") for i in range(5)
    )
    assert len(_records(_fetched(items)["sasl-topic"])) == 10


def test_sample_sasl_apache_kafka_secrets_redacted_in_jsonl_raw():
    import json
    import re
    import sys

    root = SAMPLES.parent

    def run(*extra):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "kafkawire",
                "dissect",
                str(SAMPLES / "sasl-ak.pcap"),
                "--format",
                "jsonl",
                "--raw",
                *extra,
            ],
            cwd=root,
            capture_output=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.decode()

    shown, redacted = run("--show-secrets"), run()
    # SCRAM never sends bob's password, only proofs of it
    assert "bob-secret" not in shown
    # the secrets as they were on the wire: PLAIN passwords, SCRAM proofs (p=) and server signatures (v=)
    secrets = ["alice-secret", "not-alice-secret"]
    for line in shown.splitlines():
        x = json.loads(line)
        if x.get("api_name") == "SaslAuthenticate":
            for side in ("request", "response"):
                auth = (x.get(side) or {}).get("AuthBytes") or ""
                secrets += re.findall(r"(?:^|,)(?:p|v)=([A-Za-z0-9+/=]{20,})", auth)
    assert len(secrets) == 2 + 4 + 4  # four SCRAM logins x (proof, signature)
    assert all(s in shown for s in secrets)
    for s in secrets:
        assert s not in redacted and s.encode().hex() not in redacted, s
    assert redacted.count("<redacted>") == 4 + 8  # PLAIN passwords (alice twice, the wrong one twice), SCRAM
    # the usernames stay
    assert "\\u0000alice\\u0000<redacted>" in redacted and "n=bob," in redacted
