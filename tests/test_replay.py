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
from dissector.cli import main
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
        f"Fetch v{v}: target does not support this API" for v in (0, 1, 3)}


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
    cap = {"ThrottleTimeMs": 0, "ClusterId": "a", "Brokers": [{"NodeId": 1, "Host": "h", "Port": 1}],
           "Topics": [{"Name": "t", "ErrorCode": 0, "Partitions": [
               {"PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 5, "LeaderEpoch": 3}]}]}
    rep = {"ThrottleTimeMs": 9, "ClusterId": "b", "Brokers": [{"NodeId": 2, "Host": "g", "Port": 2}],
           "Topics": [{"Name": "t", "ErrorCode": 0, "Partitions": [
               {"PartitionIndex": 0, "ErrorCode": 3, "HighWatermark": 7, "LeaderEpoch": 0},
               {"PartitionIndex": 1, "ErrorCode": 0, "HighWatermark": 0, "LeaderEpoch": 0}]}]}
    assert compare.diff(cap, rep) == [
        ("Topics[Name=t].Partitions[PartitionIndex=0].ErrorCode", 0, 3),
        ("Topics[Name=t].Partitions[PartitionIndex=1]", "<absent>", "<present>")]
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
    assert main(["replay", *argv, "--report", str(path), "--timeout", "5", *([] if "--speed" in argv else ["--max-speed"])]) == 0
    return json.loads(path.read_text())


@pytest.mark.broker
def test_replay_kafka_python_against_fresh_tansu(broker, tmp_path, capsys):
    rep = _report(tmp_path, BASIC, "--to", broker,
                  "--api", "ApiVersions,Metadata,FindCoordinator,ListGroups,DescribeGroups,ListOffsets")
    apis = rep["apis"]
    assert {k: (v["sent"], v["answered"], v["skipped"]) for k, v in apis.items()} == {
        "ApiVersions": (9, 9, 0), "DescribeGroups": (1, 1, 0), "FindCoordinator": (2, 2, 0),
        "ListGroups": (1, 1, 0), "ListOffsets": (1, 1, 0), "Metadata": (7, 7, 0)}
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
    with _connect(apache_kafka.address, 10) as s:   # the capture relied on Tansu's auto-creation
        s.sendall(with_size(encode_request(19, 7, {"CorrelationId": 1, "ClientId": "t"}, {
            "Topics": [{"Name": t, "NumPartitions": 1, "ReplicationFactor": 1, "Assignments": [], "Configs": []}
                       for t in topics], "timeoutMs": 10000, "validateOnly": False})))
        created = decode_response(_recv_frame(s), 19, 7).body["Topics"]
        assert {t["ErrorCode"] for t in created} <= {0, 36}
        for i in range(100):    # bounded: until every new partition has a leader
            s.sendall(with_size(encode_request(3, 12, {"CorrelationId": 2 + i, "ClientId": "t"}, {
                "Topics": [{"TopicId": None, "Name": t} for t in topics], "AllowAutoTopicCreation": False,
                "IncludeTopicAuthorizedOperations": False})))
            meta = decode_response(_recv_frame(s), 3, 12).body["Topics"]
            if all(t["ErrorCode"] == 0 and t["Partitions"] and all(p["LeaderId"] >= 0 for p in t["Partitions"])
                   for t in meta):
                break
            time.sleep(0.1)
        # a leader in Metadata is not yet a partition that takes writes: probe until every topic does
        from protocol.records import Record, build_batch
        batch = build_batch([Record(0, int(time.time() * 1000), b"probe", b"probe")])
        for i in range(100):    # bounded
            s.sendall(with_size(encode_request(0, 9, {"CorrelationId": 200 + i, "ClientId": "t"}, {
                "TransactionalId": None, "Acks": 1, "TimeoutMs": 5000,
                "TopicData": [{"Name": t, "PartitionData": [{"Index": 0, "Records": batch}]} for t in topics]})))
            answer = decode_response(_recv_frame(s), 0, 9).body["Responses"]
            if all(p["ErrorCode"] == 0 for t in answer for p in t["PartitionResponses"]):
                break
            time.sleep(0.1)
    rep = _report(tmp_path, OLD, "--to", apache_kafka.address, "--allow-writes",
                  "--api", "ApiVersions,Metadata,Produce,Fetch")
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
        (0, 59, 0), (1, 59, 0), (1, 59, 0), (1, 59, 0), (2, 59, 0)]
    assert apis["Produce"]["same"] == 1
    assert not rep["failures"]


@pytest.mark.broker
def test_replay_tansu_capture_against_apache_kafka_shows_tansu_departures(apache_kafka, tmp_path):
    rep = _report(tmp_path, BASIC, "--to", apache_kafka.address, "--allow-writes", "--speed", "1",
                  "--api", "ApiVersions,Metadata,CreateTopics,Produce,ListOffsets,Fetch,DeleteTopics")
    apis = rep["apis"]
    assert {k: (v["sent"], v["answered"]) for k, v in apis.items()} == {
        "ApiVersions": (9, 9), "CreateTopics": (1, 1), "DeleteTopics": (1, 1), "Fetch": (1, 1),
        "ListOffsets": (1, 1), "Metadata": (7, 7), "Produce": (2, 2)}
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


@pytest.mark.parametrize("reply,error", [(b"\x00\x00\x00\x05\x00\x00\x00\x01\xff", "undecodable answer"),
                                         (b"\xff\xff\xff\xff", "bad response size"),
                                         (None, "timed out")])
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
