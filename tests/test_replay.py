"""kafkawire replay: planning and version rewriting, the comparison's ignore rules, and real replays
against Tansu and Apache Kafka."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

import dissector
from kafkawire.cli import main
from protocol.codec import decode_request
from replay import compare, plan

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BASIC = str(SAMPLES / "kafka-python-basic.pcap")
OLD = str(SAMPLES / "old-protocol.pcap")
# Kafka 4.x's floor for the APIs of the old-protocol capture.
KAFKA4 = {0: (3, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 10: (0, 6), 18: (0, 4), 22: (0, 5)}


def _exchanges(path):
    return list(dissector.dissect([path]))


def test_choose_version_keeps_supported_and_takes_nearest():
    assert plan.choose_version(1, 12, {1: (4, 17)}) == 12
    assert plan.choose_version(1, 1, {1: (4, 17)}) == 4
    assert plan.choose_version(0, 2, {0: (3, 12)}) == 3
    assert plan.choose_version(1, 20, {1: (4, 17)}) == 17
    assert plan.choose_version(1, 4, {}) is None


def test_version_rewrite_reencodes_old_fetch_and_produce():
    conns = plan.plan(_exchanges(OLD), KAFKA4, allow_writes=True)
    steps = [s for c in conns for s in c.steps]
    fetch = [s for s in steps if s.exchange.api_name == "Fetch"]
    produce = [s for s in steps if s.exchange.api_name == "Produce"]
    assert Counter(s.exchange.api_version for s in fetch) == {0: 1, 1: 5, 3: 1}
    assert {s.version for s in fetch} == {4} and all(s.action == "send" for s in fetch)
    v1 = next(s for s in fetch if s.exchange.api_version == 1)
    assert v1.changes == ["v1->v4", "added MaxBytes=2147483647", "added IsolationLevel=0"]
    # the re-encoded frame reads back as v4 with the captured topics and correlation id
    msg = decode_request(v1.frame)
    old = decode_request(v1.exchange.request_raw)
    assert (msg.api_version, msg.correlation_id) == (4, old.correlation_id)
    assert msg.body["Topics"] == old.body["Topics"] and msg.body["IsolationLevel"] == 0
    assert Counter(s.exchange.api_version for s in produce) == {0: 1, 1: 3, 2: 1, 9: 1}
    assert {s.version for s in produce} == {3, 9}
    assert sum(bool(s.changes) for s in produce) == 5
    assert all("added TransactionalId=None" in s.changes for s in produce if s.changes)


def test_unsupported_api_is_skipped_with_reason():
    conns = plan.plan(_exchanges(OLD), {18: (0, 4)}, apis=["Fetch", "ApiVersions"])
    skips = [s for c in conns for s in c.steps if s.action == "skip"]
    assert len(skips) == 7 and {s.reason for s in skips} == {
        f"Fetch v{v}: target does not support this API" for v in (0, 1, 3)
    }


def test_write_guard_filters_and_sasl_skip():
    xs = _exchanges(BASIC)
    ranges = {k: (0, 20) for k in range(100)}
    conns = plan.plan(xs, ranges)
    skipped = Counter(s.exchange.api_name for c in conns for s in c.steps if s.action == "skip")
    assert skipped == {"InitProducerId": 2, "Produce": 2, "CreateTopics": 1, "DeleteTopics": 1, "OffsetCommit": 1}
    assert all(s.reason == "write (use --allow-writes)" for c in conns for s in c.steps if s.action == "skip")
    only = plan.plan(xs, ranges, apis=["metadata"], client_id="kw-*")
    assert sum(len(c.steps) for c in only) == 7
    assert plan.plan(xs, ranges, client_id="nobody") == []
    assert [c.connection for c in plan.plan(xs, ranges, connection=7)] == [7]
    sasl = plan.plan(_exchanges(str(SAMPLES / "sasl-ak.pcap")), ranges, apis=["SaslHandshake", "SaslAuthenticate"])
    steps = [s for c in sasl for s in c.steps]
    assert steps and all(s.action == "skip" and s.reason.startswith("SASL") for s in steps)


def test_diff_ignores_what_legitimately_varies():
    cap = {
        "ThrottleTimeMs": 0,
        "ClusterId": "a",
        "Brokers": [{"NodeId": 1, "Host": "h", "Port": 1}],
        "Topics": [
            {
                "Name": "t",
                "ErrorCode": 0,
                "Partitions": [{"PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 5, "LeaderEpoch": 3}],
            }
        ],
    }
    rep = {
        "ThrottleTimeMs": 9,
        "ClusterId": "b",
        "Brokers": [{"NodeId": 2, "Host": "g", "Port": 2}],
        "Topics": [
            {
                "Name": "t",
                "ErrorCode": 0,
                "Partitions": [
                    {"PartitionIndex": 0, "ErrorCode": 3, "HighWatermark": 7, "LeaderEpoch": 0},
                    {"PartitionIndex": 1, "ErrorCode": 0, "HighWatermark": 0, "LeaderEpoch": 0},
                ],
            }
        ],
    }
    assert compare.diff(cap, rep) == [
        ("Topics[Name=t].Partitions[PartitionIndex=0].ErrorCode", 0, 3),
        ("Topics[Name=t].Partitions[PartitionIndex=1]", "<absent>", "<present>"),
    ]
    strict = compare.diff(cap, rep, strict=True)
    assert ("Topics[Name=t].Partitions[PartitionIndex=0].HighWatermark", 5, 7) in strict and len(strict) == 3
    assert compare.diff({"A": [1, 2]}, {"A": [1]}) == [("A.length", 2, 1)]
    assert compare.diff(cap, cap, strict=True) == []


def test_dry_run_opens_no_socket(monkeypatch, capsys):
    def refuse(*a, **k):
        raise AssertionError("dry run opened a socket")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert main(["replay", BASIC, "--to", "127.0.0.1:9", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("9 connection(s)\n")
    assert "Produce                           0          0     2" in out
    assert "ApiVersions                       9          0     0" in out


def _report(tmp_path, *argv):
    path = tmp_path / "report.json"
    assert (
        main(
            ["replay", *argv, "--report", str(path), "--timeout", "5", *([] if "--speed" in argv else ["--max-speed"])]
        )
        == 0
    )
    return json.loads(path.read_text())


@pytest.mark.broker
def test_replay_kafka_python_against_fresh_tansu(broker, tmp_path, capsys):
    rep = _report(
        tmp_path,
        BASIC,
        "--to",
        broker,
        "--api",
        "ApiVersions,Metadata,FindCoordinator,ListGroups,DescribeGroups,ListOffsets",
    )
    apis = rep["apis"]
    assert {k: (v["sent"], v["answered"], v["skipped"]) for k, v in apis.items()} == {
        "ApiVersions": (9, 9, 0),
        "DescribeGroups": (1, 1, 0),
        "FindCoordinator": (2, 2, 0),
        "ListGroups": (1, 1, 0),
        "ListOffsets": (1, 1, 0),
        "Metadata": (7, 7, 0),
    }
    assert apis["ApiVersions"]["same"] == 9 and not rep["failures"]
    paths = {(d["api"], d["path"]) for d in rep["differences"]}
    # a fresh broker knows no group and, without the writes, no topic the client had created
    assert ("ListGroups", "Groups.length") in paths
    assert ("DescribeGroups", "Groups[GroupId=kw-group].ProtocolType") in paths
    assert "ApiVersions" in capsys.readouterr().out


@pytest.mark.broker
def test_replay_old_protocol_against_apache_kafka_rewrites_versions(apache_kafka, tmp_path):
    from protocol.codec import decode_response, encode_request, with_size
    from replay.sender import _connect, _recv_frame

    topics = ["old-ck-lz4", "old-ck-snappy", "old-kpy-0.10.1", "old-kpy-0.8.2", "old-kpy-0.9", "old-seed"]
    with _connect(apache_kafka.address, 10) as s:  # the capture relied on Tansu's auto-creation
        s.sendall(
            with_size(
                encode_request(
                    19,
                    7,
                    {"CorrelationId": 1, "ClientId": "t"},
                    {
                        "Topics": [
                            {"Name": t, "NumPartitions": 1, "ReplicationFactor": 1, "Assignments": [], "Configs": []}
                            for t in topics
                        ],
                        "timeoutMs": 10000,
                        "validateOnly": False,
                    },
                )
            )
        )
        created = decode_response(_recv_frame(s), 19, 7).body["Topics"]
        assert {t["ErrorCode"] for t in created} <= {0, 36}
        for i in range(100):  # bounded: until every new partition has a leader
            s.sendall(
                with_size(
                    encode_request(
                        3,
                        12,
                        {"CorrelationId": 2 + i, "ClientId": "t"},
                        {
                            "Topics": [{"TopicId": None, "Name": t} for t in topics],
                            "AllowAutoTopicCreation": False,
                            "IncludeTopicAuthorizedOperations": False,
                        },
                    )
                )
            )
            meta = decode_response(_recv_frame(s), 3, 12).body["Topics"]
            if all(
                t["ErrorCode"] == 0 and t["Partitions"] and all(p["LeaderId"] >= 0 for p in t["Partitions"])
                for t in meta
            ):
                break
            time.sleep(0.1)
        # a leader in Metadata is not yet a partition that takes writes: probe until every topic does
        from protocol.records import Record, build_batch

        batch = build_batch([Record(0, int(time.time() * 1000), b"probe", b"probe")])
        for i in range(100):  # bounded
            s.sendall(
                with_size(
                    encode_request(
                        0,
                        9,
                        {"CorrelationId": 200 + i, "ClientId": "t"},
                        {
                            "TransactionalId": None,
                            "Acks": 1,
                            "TimeoutMs": 5000,
                            "TopicData": [
                                {"Name": t, "PartitionData": [{"Index": 0, "Records": batch}]} for t in topics
                            ],
                        },
                    )
                )
            )
            answer = decode_response(_recv_frame(s), 0, 9).body["Responses"]
            if all(p["ErrorCode"] == 0 for t in answer for p in t["PartitionResponses"]):
                break
            time.sleep(0.1)
    rep = _report(
        tmp_path, OLD, "--to", apache_kafka.address, "--allow-writes", "--api", "ApiVersions,Metadata,Produce,Fetch"
    )
    rewritten = Counter((r["api"], r["captured_version"], r["replayed_version"]) for r in rep["rewrites"])
    assert rewritten[("Fetch", 1, 4)] == 5 and rewritten[("Fetch", 0, 4)] == rewritten[("Fetch", 3, 4)] == 1
    assert rewritten[("Produce", 0, 3)] + rewritten[("Produce", 1, 3)] + rewritten[("Produce", 2, 3)] == 5
    apis = rep["apis"]
    assert apis["Fetch"]["sent"] == 7 and apis["Fetch"]["answered"] == 7
    assert apis["Produce"]["sent"] == 6 and apis["Produce"]["answered"] == 6
    # the message sets re-encoded as v2 batches are accepted at v3 (error 0 on every partition)
    produce = [d for d in rep["differences"] if d["api"] == "Produce"]
    # (Tansu had answered those five with 59; old-seed's v9 produce is the same on both)
    assert sorted((d["captured_version"], d["captured"], d["replayed"]) for d in produce) == [
        (0, 59, 0),
        (1, 59, 0),
        (1, 59, 0),
        (1, 59, 0),
        (2, 59, 0),
    ]
    assert apis["Produce"]["same"] == 1
    assert not rep["failures"]


@pytest.mark.broker
def test_replay_tansu_capture_against_apache_kafka_shows_tansu_departures(apache_kafka, tmp_path):
    rep = _report(
        tmp_path,
        BASIC,
        "--to",
        apache_kafka.address,
        "--allow-writes",
        "--speed",
        "1",
        "--api",
        "ApiVersions,Metadata,CreateTopics,Produce,ListOffsets,Fetch,DeleteTopics",
    )
    apis = rep["apis"]
    assert {k: (v["sent"], v["answered"]) for k, v in apis.items()} == {
        "ApiVersions": (9, 9),
        "CreateTopics": (1, 1),
        "DeleteTopics": (1, 1),
        "Fetch": (1, 1),
        "ListOffsets": (1, 1),
        "Metadata": (7, 7),
        "Produce": (2, 2),
    }
    assert not rep["failures"] and apis["DeleteTopics"]["same"] == 1
    found = {(d["api"], d["path"], json.dumps(d["captured"]), json.dumps(d["replayed"])) for d in rep["differences"]}
    # Tansu still offers Fetch v0-3 (Kafka 4 removed them, KIP-896) and has no ApiKey 23 (OffsetForLeaderEpoch)
    assert apis["ApiVersions"]["different"] == 9
    assert ("ApiVersions", "ApiKeys[ApiKey=1].MinVersion", "0", "4") in found
    assert ("ApiVersions", "ApiKeys[ApiKey=23]", '"<absent>"', '"<present>"') in found
    # Tansu's CreateTopics answer carries no topic configs; Kafka returns them all
    assert ("CreateTopics", "Topics[Name=kpy-plain].Configs.length", "0", "33") in found
    # node ids are ignored (Tansu 111, Kafka 1)
    assert not any("Nodes" in d["path"] or "NodeId" in d["path"] for d in rep["differences"])


def _server(reply: bytes | None):
    """A 127.0.0.1 listener that reads a little and answers `reply` (None: say nothing, i.e. stall)."""
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(5)

    def serve():
        try:
            while True:
                c, _ = srv.accept()
                c.settimeout(5)
                try:
                    c.recv(65536)
                    if reply is not None:
                        c.sendall(reply)
                    c.recv(65536)
                except OSError:
                    pass
                finally:
                    c.close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    return srv, f"127.0.0.1:{srv.getsockname()[1]}"


@pytest.mark.parametrize(
    "reply,error",
    [
        (b"\x00\x00\x00\x05\x00\x00\x00\x01\xff", "undecodable answer"),
        (b"\xff\xff\xff\xff", "bad response size"),
        (None, "timed out"),
    ],
)
def test_faulty_target_gives_report_entries_and_goes_on(reply, error):
    from replay import sender

    conns = plan.plan(_exchanges(BASIC), {18: (0, 4), 3: (0, 12)}, apis=["ApiVersions"])[:2]
    srv, address = _server(reply)
    try:
        answers = sender.replay(conns, address, speed=None, timeout=0.5)
    finally:
        srv.close()
    assert len(answers) == 2 and all(a.response is None and error in a.error for a in answers)
    report = compare.compare(conns, answers)
    assert report["apis"]["ApiVersions"]["answered"] == 0 and len(report["failures"]) == 2


def test_refused_target_is_one_clear_line(capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert main(["replay", BASIC, "--to", f"127.0.0.1:{port}", "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kafkawire replay: cannot ask 127.0.0.1:{port} for its versions") and err.count("\n") == 1


# -- sessions the target hands out: groups, producers, topic ids, SASL (issue 8) ------------------------

SHARED_PCAPS = Path(__file__).resolve().parents[1].parent / "shared" / "pcaps"


def _replay(path, address, *, keep=None, sasl=None, allow_writes=True, timeout=10.0):
    """plan -> sender -> compare through the Python API: (report, answers)."""
    from replay import sender
    from replay.session import Session

    xs = _exchanges(path)
    ranges = sender.api_versions(address, timeout=timeout)
    conns = plan.plan(xs, ranges, allow_writes=allow_writes, sasl=sasl, keep=keep)
    answers = sender.replay(
        conns,
        address,
        speed=None,
        timeout=timeout,
        session=Session(xs),
        ranges=ranges,
        sasl=sasl,
        allow_writes=allow_writes,
    )
    return compare.compare(conns, answers), answers


def _codes(body):
    from replay.sender import error_codes_in

    return set(error_codes_in(body))


def _shared(name):
    path = SHARED_PCAPS / name
    if not path.exists():
        pytest.skip(f"{path} not found (../shared beside the repo)")
    return str(path)


def _delete_topics(address, topics):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": address})  # kept referenced until its futures are done
    futures = admin.delete_topics(list(topics), operation_timeout=10)
    for f in futures.values():
        try:
            f.result(timeout=15)
        except Exception:  # noqa: BLE001 - a topic the replay did not create is fine to miss
            pass


@pytest.mark.broker
def test_replay_rejoins_consumer_group_with_target_member_ids(apache_kafka):
    """kafka-python's group session, captured on Tansu (generation 0), rejoined on Apache Kafka: the
    member id and generation Kafka hands out replace the captured ones in SyncGroup, Heartbeat,
    OffsetCommit and LeaveGroup, which are all answered without UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION."""
    group_apis = {"JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"}
    keep = {"ApiVersions", "Metadata", "CreateTopics", "FindCoordinator", "OffsetFetch", "DeleteTopics"} | group_apis
    report, answers = _replay(_shared("kpy_basic.pcap"), apache_kafka.address, keep=lambda e: e.api_name in keep)
    by_api = {}
    for a in answers:
        by_api.setdefault(a.step.exchange.api_name, []).append(a)
    assert {k: len(v) for k, v in by_api.items() if k in group_apis} == {
        "JoinGroup": 2,
        "SyncGroup": 1,
        "Heartbeat": 4,
        "OffsetCommit": 1,
        "LeaveGroup": 1,
    }
    join1, join2 = by_api["JoinGroup"]
    # both brokers ask for a member id first (KIP-394); the second join carries the one Kafka gave
    assert join1.response["ErrorCode"] == 79 and join2.response["ErrorCode"] == 0
    captured_member = join1.step.exchange.response["MemberId"]
    member, generation = join2.response["MemberId"], join2.response["GenerationId"]
    assert member != captured_member and member.startswith("kpy-consumer-") and generation >= 1
    assert join2.request["MemberId"] == member
    for name in ("SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"):
        for a in by_api[name]:
            assert _codes(a.response) == {0}, (name, a.response)
            sent = decode_request(a.frame).body
            members = ({sent.get("MemberId")} | {m["MemberId"] for m in sent.get("Members") or []}) - {None}
            assert members == {member}
            if name != "LeaveGroup":
                assert sent.get("GenerationId", sent.get("GenerationIdOrMemberEpoch")) == generation
    assert report["apis"]["Heartbeat"] == dict(report["apis"]["Heartbeat"], sent=4, answered=4, same=4, rewritten=4)
    counts = report["rewrite_counts"]
    assert counts["MemberId"] == 9 and counts["GenerationId"] == 5 and counts["GenerationIdOrMemberEpoch"] == 1
    heartbeat = next(w for w in report["rewrites"] if w["api"] == "Heartbeat")
    assert heartbeat["changes"] == [f"GenerationId 0 -> {generation}", f"MemberId {captured_member!r} -> {member!r}"]
    assert not report["failures"]


@pytest.mark.broker
def test_replay_kip848_group_topic_ids_and_fetch_sessions(apache_kafka):
    """The Java client's KIP-848 consumer (ConsumerGroupHeartbeat) and its topic-id requests (Produce v13,
    Fetch v18, OffsetCommit v10), captured on another Kafka: topic ids are mapped through the target's
    Metadata, member epochs and fetch session ids through its answers; every answer is error-free."""
    report, answers = _replay(str(SAMPLES / "java-codecs-ak.pcap"), apache_kafka.address)
    topics = ["jv-none", "jv-gzip", "jv-snappy", "jv-lz4", "jv-zstd"]
    try:
        from protocol.codec import decode_response, encode_request, with_size
        from replay.sender import _connect, _recv_frame

        with _connect(apache_kafka.address, 10) as s:
            s.sendall(
                with_size(
                    encode_request(
                        3,
                        12,
                        {"CorrelationId": 1, "ClientId": "t"},
                        {
                            "Topics": [{"TopicId": None, "Name": t} for t in topics],
                            "AllowAutoTopicCreation": False,
                            "IncludeTopicAuthorizedOperations": False,
                        },
                    )
                )
            )
            target_ids = {t["Name"]: t["TopicId"] for t in decode_response(_recv_frame(s), 3, 12).body["Topics"]}
        captured_ids = {
            v: k for k, v in plan_ids(_exchanges(str(SAMPLES / "java-codecs-ak.pcap"))).items() if v in topics
        }
        assert set(target_ids) == set(topics) and not set(target_ids.values()) & set(captured_ids.values())
        for a in answers:
            name = a.step.exchange.api_name
            if name in ("Produce", "Fetch", "OffsetCommit", "OffsetFetch", "ConsumerGroupHeartbeat"):
                body = decode_request(a.frame).body
                ids = {
                    t.get("TopicId")
                    for field in ("TopicData", "Topics", "TopicPartitions")
                    for t in body.get(field) or []
                    if isinstance(t, dict)
                }
                for g in body.get("Groups") or []:
                    ids |= {t["TopicId"] for t in g["Topics"]}
                assert ids - {None} <= set(target_ids.values()), (name, ids)
                assert _codes(a.response) <= {0}, (name, a.response)
        heartbeats = [a for a in answers if a.step.exchange.api_name == "ConsumerGroupHeartbeat"]
        assert [decode_request(a.frame).body["MemberEpoch"] for a in heartbeats] == [
            0,
            heartbeats[0].response["MemberEpoch"],
            -1,
        ]
        fetches = [a for a in answers if a.step.exchange.api_name == "Fetch"]
        assert fetches[0].response["SessionId"] != 179169602
        assert [decode_request(a.frame).body["SessionId"] for a in fetches] == [0] + [
            fetches[0].response["SessionId"]
        ] * 2
        counts = report["rewrite_counts"]
        assert counts["TopicId"] >= 25 and counts["SessionId"] == 2
        assert counts["Records (producer id, epoch, sequence)"] == 7
        commit = next(a for a in answers if a.step.exchange.api_name == "OffsetCommit")
        assert decode_request(commit.frame).body["GenerationIdOrMemberEpoch"] == heartbeats[0].response["MemberEpoch"]
        assert not report["failures"]
    finally:
        _delete_topics(apache_kafka.address, topics)


def plan_ids(exchanges):
    from replay.session import captured_topic_ids

    return captured_topic_ids(exchanges)


def _captured_records(path):
    """{(topic, partition): [(key, value, headers)]} of every captured Produce, in order."""
    from protocol.records import read_record_set

    out = {}
    for e in _exchanges(path):
        if e.api_name == "Produce" and e.request_raw:
            for t in decode_request(e.request_raw).body["TopicData"]:
                for p in t["PartitionData"]:
                    out.setdefault((t["Name"], p["Index"]), []).extend(
                        (r.key, r.value, [(k, v) for k, v in r.headers])
                        for r in read_record_set(p["Records"]).records()
                    )
    return out


def _consume(address, wanted):
    """What the target holds from offset 0 on, read by confluent-kafka (a real client)."""
    from confluent_kafka import Consumer, TopicPartition

    got = {k: [] for k in wanted}
    c = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": "kw-replay-check",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in wanted])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(len(got[k]) < len(v) for k, v in wanted.items()):
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got[(m.topic(), m.partition())].append((m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])]))
    finally:
        c.close()
    return got


@pytest.mark.broker
@pytest.mark.parametrize(
    "capture,topics",
    [
        ("kpy_basic.pcap", ["kpy-plain", "kpy-gzip"]),
        ("ck_compression.pcap", ["ck-lz4", "ck-snappy", "ck-zstd", "ck-gzip", "ck-idem"]),
    ],
)
def test_replay_idempotent_producers_write_exactly_the_captured_records(apache_kafka, capture, topics):
    """Idempotent producers (kafka-python, librdkafka) replayed with a fresh InitProducerId: producer id,
    epoch and sequences renumbered, batches re-encoded with their CRCs; Apache Kafka accepts every batch
    (no OUT_OF_ORDER_SEQUENCE, DUPLICATE_SEQUENCE or UNKNOWN_PRODUCER_ID) and a real consumer reads back
    exactly the captured records."""
    path = _shared(capture)
    try:
        report, answers = _replay(path, apache_kafka.address, keep=lambda e: e.api_name != "DeleteTopics")
        produce = [a for a in answers if a.step.exchange.api_name == "Produce"]
        refused = [
            (a.step.exchange.connection, a.step.exchange.correlation_id, _codes(a.response), a.error, a.added)
            for a in produce
            if _codes(a.response) != {0}
        ]
        assert produce and not refused
        inits = [a for a in answers if a.step.exchange.api_name == "InitProducerId"]
        learned = {a.step.exchange.response["ProducerId"]: a.response["ProducerId"] for a in inits}
        from protocol.records import read_record_set

        idempotent = 0
        for a in produce:
            for t in decode_request(a.frame).body["TopicData"]:
                for p in t["PartitionData"]:
                    for b in read_record_set(p["Records"]).batches:
                        assert b.crc_ok if hasattr(b, "crc_ok") else True
                        if b.producer_id >= 0:
                            idempotent += 1
                            assert b.producer_id in learned.values() and b.producer_epoch == 0
        assert idempotent == {"kpy_basic.pcap": 4, "ck_compression.pcap": 3}[capture]
        assert report["rewrite_counts"]["Records (producer id, epoch, sequence)"] == idempotent
        wanted = _captured_records(path)
        assert {t for t, _ in wanted} == set(topics)
        assert _consume(apache_kafka.address, wanted) == wanted
        assert sum(map(len, wanted.values())) == {"kpy_basic.pcap": 200, "ck_compression.pcap": 300}[capture]
    finally:
        _delete_topics(apache_kafka.address, topics)


@pytest.mark.broker
@pytest.mark.parametrize("mechanism,user", [("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "alice"), ("PLAIN", "alice")])
def test_replay_logs_in_afresh_with_sasl(apache_kafka_sasl, tmp_path, monkeypatch, capsys, mechanism, user):
    """The captured SASL logins (PLAIN and SCRAM, one with a wrong password) are replaced by a fresh login
    with the command line's credentials: every connection authenticates, no captured token and no password
    reaches the report or the output."""
    from tests.conftest import SASL_USERS
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": apache_kafka_sasl.address})  # referenced until the future is done
    admin.create_topics([NewTopic("sasl-topic", 1, 1)])["sasl-topic"].exception(timeout=15)
    monkeypatch.setenv("KW_SASL_PASSWORD", SASL_USERS[user])
    rep = _report(
        tmp_path,
        str(SAMPLES / "sasl-ak.pcap"),
        "--to",
        apache_kafka_sasl.sasl_address,
        "--allow-writes",
        "--sasl-mechanism",
        mechanism,
        "--sasl-username",
        user,
        "--sasl-password-env",
        "KW_SASL_PASSWORD",
    )
    out = capsys.readouterr().out
    apis = rep["apis"]
    assert (apis["SaslHandshake"]["sent"], apis["SaslHandshake"]["answered"]) == (8, 8)
    assert apis["SaslAuthenticate"]["answered"] >= 8 and not rep["failures"]
    logins = [x for w in rep["rewrites"] for x in w["added"] if x.startswith("SASL login")]
    rounds = 2 if mechanism.startswith("SCRAM") else 1
    assert (
        logins
        == [f"SASL login {mechanism} as {user!r}: handshake error 0, {rounds} authenticate round(s), error 0"] * 8
    )
    # the captured wrong-password login (58) now succeeds; Metadata/Produce/Fetch go through after login
    assert any(
        d["api"] == "SaslAuthenticate" and d["captured"] == 58 and d["replayed"] == 0 for d in rep["differences"]
    )
    assert apis["Produce"]["answered"] == 2 and apis["Fetch"]["answered"] == 1
    text = json.dumps(rep) + out
    assert SASL_USERS[user] not in text and "r=~G2ndv797yr7" not in text
    assert (
        rep["rewrite_counts"]["SASL login"]
        == 8 + apis["SaslAuthenticate"]["sent"] + apis["SaslAuthenticate"]["skipped"]
    )


@pytest.mark.broker
def test_replay_sasl_wrong_password_is_reported(apache_kafka_sasl, tmp_path, monkeypatch):
    monkeypatch.setenv("KW_SASL_PASSWORD", "not-bob-secret")
    rep = _report(
        tmp_path,
        str(SAMPLES / "sasl-ak.pcap"),
        "--to",
        apache_kafka_sasl.sasl_address,
        "--connection",
        "2",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-username",
        "bob",
        "--sasl-password-env",
        "KW_SASL_PASSWORD",
    )
    assert [x for w in rep["rewrites"] for x in w["added"]] == [
        "SASL login SCRAM-SHA-256 as 'bob': handshake error 0, 2 authenticate round(s), error 58"
    ]
    assert ("SaslAuthenticate", 0, 58) in {(d["api"], d["captured"], d["replayed"]) for d in rep["differences"]}
    # the broker closes the connection after a failed login: the Metadata after it is a failure entry
    assert [f["api"] for f in rep["failures"]] == ["Metadata"]


def test_sasl_options_are_checked_in_one_line(capsys, monkeypatch):
    monkeypatch.delenv("KW_NOPE", raising=False)
    assert (
        main(
            [
                "replay",
                BASIC,
                "--to",
                "127.0.0.1:9",
                "--sasl-mechanism",
                "PLAIN",
                "--sasl-username",
                "u",
                "--sasl-password-env",
                "KW_NOPE",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "kafkawire replay: the environment variable --sasl-password-env names is not set (it holds the SASL password)\n"
    )
    assert (
        main(
            [
                "replay",
                BASIC,
                "--to",
                "127.0.0.1:9",
                "--sasl-mechanism",
                "GSSAPI",
                "--sasl-username",
                "u",
                "--sasl-password-env",
                "KW_NOPE",
            ]
        )
        == 2
    )
    assert "use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in capsys.readouterr().err


@pytest.mark.parametrize(
    "typed",
    [
        ["--sasl-password", "hunter2"],
        ["--sasl-password=hunter2"],
        ["--sasl-pass=hunter2"],
        ["--sasl-pass", "hunter2"],
        ["--sasl-passwordx=hunter2"],
        ["--sasl-passwordx", "hunter2"],
        ["--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-env", "hunter2"],
    ],
)
def test_a_password_typed_on_the_command_line_is_never_shown(capsys, monkeypatch, typed):
    """A password typed where no option takes one, or where a variable's name goes: one line or
    argparse's usage and one line, exit status 2, and the password nowhere in what is printed."""
    monkeypatch.delenv("hunter2", raising=False)
    try:
        rc = main(["replay", BASIC, "--to", "127.0.0.1:9", "--dry-run", *typed])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    assert rc == 2
    assert "hunter2" not in out.out + out.err
    assert out.err.strip(), "the user is told why"


def test_scram_client_matches_rfc7677_example():
    """RFC 7677's SCRAM-SHA-256 exchange (user, pencil), our client side byte for byte."""
    import hashlib
    from replay.sasl import Credentials, _scram

    auth = _scram(Credentials("SCRAM-SHA-256", "user", "pencil"), hashlib.sha256, nonce="rOprNGfwEbeRWgbNEkqO")
    assert auth.send(None) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = auth.send(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    with pytest.raises(StopIteration):
        auth.send(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.broker
def test_replay_transactional_producer_follows_target_epochs(apache_kafka):
    """The Java client's transactions (KIP-890: every EndTxn bumps the epoch): producer id and each epoch
    come from the target's InitProducerId and EndTxn answers; AddPartitionsToTxn, Produce, TxnOffsetCommit
    and EndTxn are all accepted; the broker's own WriteTxnMarkers in the capture are not replayed."""
    path = str(SAMPLES / "java-txn-ak.pcap")
    try:
        report, answers = _replay(path, apache_kafka.address)
        by = {}
        for a in answers:
            by.setdefault(a.step.exchange.api_name, []).append(a)
        for name in ("Produce", "EndTxn", "TxnOffsetCommit"):
            assert by[name] and all(_codes(a.response) == {0} for a in by[name]), name
        target_pid = by["InitProducerId"][-1].response["ProducerId"]
        epochs = [a.response["ProducerEpoch"] for a in by["EndTxn"]]
        assert epochs == list(range(epochs[0], epochs[0] + 3))  # one bump per transaction
        sent = [decode_request(a.frame).body for a in by["EndTxn"]]
        assert {b["ProducerId"] for b in sent} == {target_pid}
        # each EndTxn goes out with the epoch the previous EndTxn (or InitProducerId) handed out
        assert [b["ProducerEpoch"] for b in sent][1:] == epochs[:-1]
        # committed, aborted, committed: a read_committed consumer gets the first and third transactions' records
        from protocol.records import read_record_set

        batches = [
            [
                (r.key, r.value, list(r.headers))
                for t in decode_request(e.request_raw).body["TopicData"]
                for p in t["PartitionData"]
                for r in read_record_set(p["Records"]).records()
            ]
            for e in _exchanges(path)
            if e.api_name == "Produce"
        ]
        assert [len(b) for b in batches] == [10, 5, 10]
        assert _consume(apache_kafka.address, {("jv-txn", 0): batches[0] + batches[2]}) == {
            ("jv-txn", 0): batches[0] + batches[2]
        }
        assert {
            s.reason
            for c in plan.plan(_exchanges(path), {k: (0, 20) for k in range(100)}, allow_writes=True)
            for s in c.steps
            if s.exchange.api_name == "WriteTxnMarkers"
        } == {"inter-broker request (a broker's own, not a client's)"}
        assert not report["failures"]
    finally:
        _delete_topics(apache_kafka.address, ["jv-txn"])


@pytest.mark.broker
def test_replay_out_tables_filters_and_quiet(broker, tmp_path, capsys):
    """--topic/--time-from narrow the replay like dissect's filters; --out writes the replayed exchanges
    through landing's writer (the landed columns exactly) plus differences and rewrites tables; --quiet
    prints only the table, the rewrite counts and one totals line."""
    from landing.writer import dataset
    from landing.schemas import EXCHANGES

    out = tmp_path / "tables"
    rep = _report(
        tmp_path,
        BASIC,
        "--to",
        broker,
        "--topic",
        "kpy-*",
        "--allow-writes",
        "--quiet",
        "--time-from",
        "1795298029.8",
        "--out",
        str(out),
    )
    text = capsys.readouterr().out.splitlines()
    assert (
        text[0].startswith("api ")
        and text[-1] == f"{len(rep['differences'])} difference(s), 0 unanswered (details in --report)"
    )
    assert not any(line.startswith(("diff ", "rewrite ")) for line in text)
    sent = {k: v["sent"] for k, v in rep["apis"].items()}
    # only what names a kpy-* topic (the example filter), nothing from the group or ApiVersions
    assert sent == {
        "CreateTopics": 1,
        "DeleteTopics": 1,
        "Fetch": 1,
        "ListOffsets": 1,
        "Metadata": 5,
        "OffsetCommit": 1,
        "OffsetFetch": 1,
        "Produce": 2,
    }
    ex = dataset(out, "exchanges").to_table()
    assert ex.schema.remove(ex.schema.get_field_index("date")).equals(EXCHANGES, check_metadata=False)
    assert ex.num_rows == sum(sent.values())
    rows = ex.select(["api_name", "broker", "topics", "status"]).to_pylist()
    assert {r["broker"] for r in rows} == {broker} and {r["status"] for r in rows} == {"ok"}
    # (a Metadata for all topics names them only in its answer, which the target may give before they exist)
    assert all(set(r["topics"] or ()) <= {"kpy-plain", "kpy-gzip"} for r in rows)
    assert sum(bool(r["topics"]) for r in rows) >= len(rows) - 2
    diffs = dataset(out, "differences").to_table().to_pylist()
    assert len(diffs) == len(rep["differences"]) and len(diffs) > 0
    ids = set(ex.column("exchange_id").to_pylist())
    assert all(d["exchange_id"] in ids for d in diffs)
    first = rep["differences"][0]
    assert (diffs[0]["api_name"], diffs[0]["path"], json.loads(diffs[0]["captured"])) == (
        first["api"],
        first["path"],
        first["captured"],
    )
    rewrites = dataset(out, "rewrites").to_table().to_pylist()
    assert len(rewrites) == sum(len(w["changes"]) + len(w["added"]) for w in rep["rewrites"])
    assert dataset(out, "errors").to_table().num_rows == sum(1 for r in ex.column("error_codes").to_pylist() for _ in r)
    # landing's analyses read the replayed tables as they read landed ones
    from report.analysis import report

    by_api = {
        r["api_name"]: r["count"] for r in report(str(out), bucket="1min", top=5)["latency_by_api"].to_dict("records")
    }
    assert by_api == {k: v for k, v in sent.items()}


def test_replay_dry_run_with_filters(capsys):
    assert (
        main(
            [
                "replay",
                BASIC,
                "--to",
                "127.0.0.1:9",
                "--dry-run",
                "--api",
                "Produce",
                "--allow-writes",
                "--topic",
                "kpy-gzip",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("1 connection(s)\n") and "Produce                           1          0     0" in out
    assert main(["replay", BASIC, "--to", "127.0.0.1:9", "--dry-run", "--time-from", "soon"]) == 2
    assert "not a time: 'soon'" in capsys.readouterr().err


@pytest.mark.broker
def test_replay_retries_join_the_target_asks_a_member_id_for(apache_kafka):
    """kafka-python captured on Kafka while the coordinator was loading (its first JoinGroup answered
    COORDINATOR_LOAD_IN_PROGRESS): the target answers that join MEMBER_ID_REQUIRED instead, so the replay
    joins again with the id given, and the later captured joins rejoin as that one member (no second
    member that would stall the rebalance)."""
    from protocol.codec import decode_response, encode_request, with_size
    from replay.sender import _connect, _recv_frame

    # a loaded group coordinator (the capture's broker was still loading it): join another group until
    # the coordinator answers as a loaded one (MEMBER_ID_REQUIRED); one offsets partition serves every group
    with _connect(apache_kafka.address, 10) as s:
        for i in range(100):  # bounded
            # FindCoordinator creates __consumer_offsets on a fresh broker
            s.sendall(
                with_size(
                    encode_request(
                        10,
                        4,
                        {"CorrelationId": 1000 + i, "ClientId": "t"},
                        {"KeyType": 0, "CoordinatorKeys": ["kw-warm-up"]},
                    )
                )
            )
            _recv_frame(s)
            s.sendall(
                with_size(
                    encode_request(
                        11,
                        7,
                        {"CorrelationId": i, "ClientId": "t"},
                        {
                            "GroupId": "kw-warm-up",
                            "SessionTimeoutMs": 10000,
                            "RebalanceTimeoutMs": 10000,
                            "MemberId": "",
                            "GroupInstanceId": None,
                            "ProtocolType": "consumer",
                            "Protocols": [{"Name": "range", "Metadata": b""}],
                            "Reason": None,
                        },
                    )
                )
            )
            if decode_response(_recv_frame(s), 11, 7).body["ErrorCode"] == 79:
                break
            time.sleep(0.2)
    report, answers = _replay(
        str(SAMPLES / "kafka-python-ak.pcap"),
        apache_kafka.address,
        keep=lambda e: e.api_name not in ("Produce", "InitProducerId"),
    )
    joins = [a for a in answers if a.step.exchange.api_name == "JoinGroup"]
    assert [a.step.exchange.response["ErrorCode"] for a in joins] == [14, 79, 0]
    assert [a.response["ErrorCode"] for a in joins] == [0, 0, 0]
    member = joins[0].response["MemberId"]
    assert any(
        x.startswith(f"JoinGroup v7 again with MemberId {member!r} (answered MEMBER_ID_REQUIRED)")
        for x in joins[0].added
    )
    assert {a.response["MemberId"] for a in joins} == {member}
    assert [decode_request(a.frame).body["MemberId"] for a in joins] == ["", member, member]
    assert max(a.latency_ms for a in joins) < 3000  # no rebalance waiting on a phantom member
    for a in answers:
        if a.step.exchange.api_name in ("SyncGroup", "OffsetCommit", "LeaveGroup"):
            assert _codes(a.response) == {0}, a.response
    assert report["rewrite_counts"]["retried: JoinGroup"] >= 1


@pytest.mark.broker
def test_replay_sends_a_fresh_init_producer_id_when_the_capture_has_none(apache_kafka):
    """Left out of the replay (here by a filter, in a midstream capture by timing), the captured
    InitProducerId is replaced by one of the replay's own before the first idempotent batch."""
    path = _shared("ck_compression.pcap")
    try:
        report, answers = _replay(
            path,
            apache_kafka.address,
            keep=lambda e: (
                e.api_name != "InitProducerId"
                and e.client_id == "ck-producer-idem"
                or e.api_name in ("ApiVersions", "CreateTopics", "Metadata")
            ),
        )
        produce = [a for a in answers if a.step.exchange.api_name == "Produce"]
        assert len(produce) == 3 and all(_codes(a.response) == {0} for a in produce)
        added = [x for a in produce for x in a.added if x.startswith("InitProducerId")]
        assert len(added) == 1 and added[0].startswith("InitProducerId v4 for captured producer 1: error 0, producer ")
        seqs = [read_batches(a.frame)[0] for a in produce]
        pid = seqs[0][0]
        assert pid >= 0 and seqs == [(pid, 0, 0), (pid, 0, 20), (pid, 0, 40)]
        assert report["rewrite_counts"]["request added: InitProducerId"] == 1
    finally:
        _delete_topics(apache_kafka.address, ["ck-lz4", "ck-snappy", "ck-zstd", "ck-gzip", "ck-idem"])


def read_batches(frame):
    from protocol.records import read_record_set

    body = decode_request(frame).body
    return [
        (b.producer_id, b.producer_epoch, b.base_sequence)
        for t in body["TopicData"]
        for p in t["PartitionData"]
        for b in read_record_set(p["Records"]).batches
    ]


@pytest.mark.broker
def test_replay_reconnects_a_bounded_number_of_times(apache_kafka_sasl, tmp_path):
    """Without credentials the captured logins are skipped, and Kafka's SASL listener closes the connection
    at the first request after ApiVersions: that request is a failure entry, the rest of the captured
    connection goes on a new connection (listed), and the replay ends on its own."""
    t0 = time.monotonic()
    rep = _report(
        tmp_path,
        str(SAMPLES / "sasl-ak.pcap"),
        "--to",
        apache_kafka_sasl.sasl_address,
        "--allow-writes",
        "--connection",
        "1",
    )
    assert time.monotonic() - t0 < 30
    assert [(f["api"], f["error"]) for f in rep["failures"]] == [
        ("Metadata", "ReplayError: connection closed by the target"),
        ("Produce", "ReplayError: connection closed by the target"),
    ]
    assert [x for w in rep["rewrites"] for x in w["added"]] == [
        "reconnected (1 of at most 3) after: connection closed by the target"
    ]
    assert {s["api"] for s in rep["skipped"]} == {"SaslHandshake", "SaslAuthenticate"}
    assert rep["apis"]["ApiVersions"]["same"] == 1


@pytest.mark.broker
def test_replay_keeps_made_up_ids_and_takes_unexpected_answers(broker, tmp_path):
    """samples/errors.pcap provokes errors on purpose: its LeaveGroup's 'ghost-member' was never handed out
    by the captured broker, so it is not replaced, and the answers match (UNKNOWN_MEMBER_ID again). A
    Produce the capture has no answer for gets one from Tansu: a difference, not a lost connection."""
    rep = _report(tmp_path, str(SAMPLES / "errors.pcap"), "--to", broker, "--allow-writes")
    assert not any(w["api"] == "LeaveGroup" for w in rep["rewrites"])
    assert rep["apis"]["LeaveGroup"]["same"] == 1 and rep["apis"]["Heartbeat"]["same"] == 1
    assert [(d["api"], d["path"], d["captured"], d["replayed"]) for d in rep["differences"]] == [
        ("Produce", "", "<no captured answer>", "<answered>")
    ]
    assert not rep["failures"]


@pytest.mark.broker
def test_ctrl_c_stops_and_still_writes_the_report(broker, tmp_path):
    """SIGINT in the middle of a slow replay (--speed 0.02: the capture's 5 s become minutes): exit 130, one
    line on stderr, and the report has what was answered so far, the rest listed as not sent."""
    import signal
    import subprocess
    import sys

    report = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafkawire",
            "replay",
            BASIC,
            "--to",
            broker,
            "--speed",
            "0.02",
            "--report",
            str(report),
            "--timeout",
            "5",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        time.sleep(4)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "kafkawire replay: interrupted (Ctrl-C): the report covers what was answered so far"
    )
    rep = json.loads(report.read_text())
    answered = sum(r["answered"] for r in rep["apis"].values())
    interrupted = [s for s in rep["skipped"] if s["reason"] == "interrupted (Ctrl-C)"]
    assert answered >= 1 and interrupted
    # every captured request is accounted for: answered, failed (in flight at Ctrl-C) or skipped
    total = sum(len(c.steps) for c in plan.plan(_exchanges(BASIC), {k: (0, 20) for k in range(100)}))
    assert answered + len(rep["failures"]) + len(rep["skipped"]) == total == 34
    assert out.splitlines()[0].startswith("api ")


def test_plan_orders_dependent_requests_across_connections():
    """What waits for what at --max-speed (kpy_basic): the first JoinGroup for the FindCoordinator that found
    its coordinator on another connection, each SyncGroup/Heartbeat behind the JoinGroup on its own
    connection, each Produce behind its InitProducerId and the CreateTopics, DeleteTopics behind the last
    uses of its topics on the other connections."""
    xs = _exchanges(_shared("kpy_basic.pcap"))
    conns = plan.plan(xs, {k: (0, 20) for k in range(100)}, allow_writes=True)
    steps = {(s.exchange.connection, s.exchange.correlation_id): s for c in conns for s in c.steps}

    def deps(conn, corr):
        return sorted(
            (d.exchange.connection, d.exchange.correlation_id, d.exchange.api_name) for d in steps[(conn, corr)].deps
        )

    assert deps(8, 2) == [(7, 2, "FindCoordinator")]
    assert deps(8, 3) == [(7, 2, "FindCoordinator"), (8, 2, "JoinGroup")]
    assert deps(8, 4) == [(7, 2, "FindCoordinator"), (8, 3, "JoinGroup")]
    assert deps(3, 3) == [(1, 3, "CreateTopics"), (3, 2, "InitProducerId")]
    # (Metadata 7/4 may auto-create the topics, so it counts as creating them)
    assert deps(1, 12) == [
        (1, 3, "CreateTopics"),
        (1, 11, "Metadata"),
        (3, 3, "Produce"),
        (5, 3, "Produce"),
        (7, 4, "Metadata"),
        (7, 13, "ListOffsets"),
        (8, 6, "OffsetCommit"),
    ]
    assert ("group", "kpy-group") in steps[(8, 7)].keys and ("producer", 1) in steps[(3, 3)].keys


def test_unreadable_capture_is_one_clear_line(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.pcap"), "--to", "127.0.0.1:9", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"kafkawire replay: cannot read {tmp_path / 'missing.pcap'}: No such file or directory\n"
    )
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"garbage\n")
    assert main(["replay", str(bad), "--to", "127.0.0.1:9", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kafkawire replay: {bad}: ") and err.count("\n") == 1


def test_the_same_difference_in_many_exchanges_is_one_line():
    from replay.compare import text

    diffs = [
        {
            "connection": c,
            "correlation_id": 1,
            "api": "ApiVersions",
            "path": "ApiKeys[ApiKey=1].MinVersion",
            "captured": 0,
            "replayed": 4,
        }
        for c in range(5)
    ]
    diffs.append(
        {"connection": 7, "correlation_id": 3, "api": "Metadata", "path": "Topics.length", "captured": 2, "replayed": 0}
    )
    lines = text({"apis": {}, "rewrites": [], "failures": [], "differences": diffs})
    assert lines[1:] == [
        "diff ApiVersions ApiKeys[ApiKey=1].MinVersion: 0 -> 4 (in 5 exchanges: conn 0 corr 1, conn 1 corr 1, "
        "conn 2 corr 1, ...)",
        "diff conn 7 corr 3 Metadata Topics.length: 2 -> 0",
    ]


def test_group_members_pair_by_their_own_answers_then_instance_ids_then_position():
    """Three members join one group; the leader's member list comes back from the target in another order
    than captured. Each member's own JoinGroup answer pairs it exactly, whenever it is learned; a static
    member pairs by its GroupInstanceId; only what is left pairs by position."""
    from types import SimpleNamespace

    from replay.session import LEARNS, Session

    def join(conn, cap_id, target_id, cap_members=(), target_members=()):
        ex = SimpleNamespace(
            api_name="JoinGroup",
            connection=conn,
            response={"MemberId": cap_id, "GenerationId": 1, "Members": list(cap_members)},
        )
        return ex, {"GroupId": "g"}, {"MemberId": target_id, "GenerationId": 7, "Members": list(target_members)}

    s = Session()
    captured = [
        {"MemberId": "c-a", "GroupInstanceId": None},
        {"MemberId": "c-b", "GroupInstanceId": "static-1"},
        {"MemberId": "c-c", "GroupInstanceId": None},
    ]
    target = [
        {"MemberId": "t-b", "GroupInstanceId": "static-1"},
        {"MemberId": "t-c", "GroupInstanceId": None},
        {"MemberId": "t-a", "GroupInstanceId": None},
    ]
    s.learn(*join(1, "c-c", "t-c"))  # a follower's own answer first
    s.learn(*join(2, "c-a", "t-a", captured, target))  # then the leader's, with everyone
    assert s.members == {"c-c": "t-c", "c-a": "t-a", "c-b": "t-b"}
    s.learn(*join(3, "c-b", "t-b"))
    assert s.members["c-b"] == "t-b" and s.latest_generation["g"] == 7

    # share groups: member epochs the target hands out replace the captured ones in later heartbeats
    ex = SimpleNamespace(api_name="ShareGroupHeartbeat", connection=4, response={"MemberId": "m", "MemberEpoch": 3})
    s.learn(ex, {"GroupId": "sg"}, {"MemberId": "m", "MemberEpoch": 1})
    assert s.generations[("sg", 3)] == 1 and "ShareGroupHeartbeat" in LEARNS


@pytest.mark.broker
def test_java_fetch_sessions_on_tansu_go_sessionless(broker):
    """The Java client's Fetch v18 (KIP-848 era) replayed on Tansu: re-encoded at Tansu's newest Fetch, v17
    (the new ReplicaDirectoryId defaulted to the zero uuid), and since Tansu opens no fetch session, the
    session's incremental fetch goes as a sessionless one (id 0, epoch -1), answered without errors."""
    rep, answers = _replay(str(SAMPLES / "java-txn-ak.pcap"), broker)
    fetches = [a for a in answers if a.step.exchange.api_name == "Fetch"]
    assert [(a.step.exchange.request["SessionEpoch"], a.step.version) for a in fetches] == [
        (0, 17),
        (1, 17),
        (-1, 17),
    ] * 2
    assert all(a.response is not None and _codes(a.response) <= {0} for a in fetches)
    incremental = [a for a in fetches if a.step.exchange.request["SessionEpoch"] == 1]
    assert all(
        "SessionEpoch 1 -> -1" in a.changes and any(c.endswith("-> 0") and c.startswith("SessionId") for c in a.changes)
        for a in incremental
    )
    assert all(a.response["SessionId"] == 0 for a in fetches)
