"""Real captures end to end: live (broker + client + tcpdump) and the bundled
samples/*.pcap that samples/make_captures.py made the same way."""

from __future__ import annotations

import contextlib

import os
import socket
import struct
import time

import pytest

from collections import Counter
from itertools import pairwise
from pathlib import Path

from tests.broker import CaptureError, Tcpdump, first_syn_port, read_frame

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

TOPIC = "live-topic"
N = 12


@pytest.mark.broker
def test_broker_answers_api_versions_as_the_registry_encodes_it(broker):
    """Our encoder's ApiVersions v3 request is accepted, and our decoder reads the answer."""
    protocol = pytest.importorskip("protocol")
    host, port = broker.rsplit(":", 1)
    req = protocol.encode_request(
        18,
        3,
        {"CorrelationId": 7, "ClientId": "kw-test"},
        {"ClientSoftwareName": "kafkawire", "ClientSoftwareVersion": "0.1"},
    )
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(protocol.with_size(req))
        resp = protocol.decode_response(read_frame(s, time.monotonic() + 10), 18, 3)
    assert resp.correlation_id == 7
    assert resp.body["ErrorCode"] == 0
    keys = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in resp.body["ApiKeys"]}
    # Tansu 0.6 (see ../shared/README.md): Produce 0-11, Fetch 0-17, Metadata 0-12, ApiVersions 0-4
    assert keys[0] == (0, 11) and keys[1] == (0, 17) and keys[3] == (0, 12) and keys[18] == (0, 4)


@pytest.mark.broker
def test_broker_factory_runs_two_brokers_and_stop_frees_the_port(broker_factory):
    from tests.broker import port_open

    a, b = broker_factory(), broker_factory()
    assert a.port != b.port and port_open(a.port) and port_open(b.port)
    pid = a.proc.pid
    a.stop()
    assert not port_open(a.port) and port_open(b.port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not left as a zombie


def _workload(bootstrap: str) -> int:
    """kafka-python: N gzip messages with keys and headers, read back without a
    group (a group join costs ~5 s on Tansu)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id="live-producer", compression_type="gzip", linger_ms=20
    )
    for i in range(N):
        producer.send(
            TOPIC,
            partition=0,
            key=f"k{i}".encode(),
            value=f"value-{i}".encode() * 10,
            headers=[("h1", b"x"), ("idx", str(i).encode())],
        )
    producer.flush(timeout=10)
    producer.close(timeout=10)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="live-consumer",
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.assign([TopicPartition(TOPIC, 0)])
    seen = 0
    deadline = time.monotonic() + 15
    while seen < N and time.monotonic() < deadline:
        seen += sum(len(v) for v in consumer.poll(timeout_ms=300).values())
    consumer.close()
    return seen


@contextlib.contextmanager
def captured(pcap: Path, port: int):
    """tcpdump on lo for `tcp port PORT` around the block (the test skips where tcpdump cannot capture)."""
    dump = Tcpdump(pcap, port, linger=1.0)
    try:
        dump.start()
    except CaptureError as e:
        pytest.skip(f"tcpdump cannot capture on lo here: {e}")
    try:
        yield pcap
    finally:
        dump.stop()


@pytest.fixture
def live_capture(broker, tmp_path):
    """(pcap path, broker port, messages consumed) for the workload above."""
    port = int(broker.rsplit(":", 1)[1])
    pcap = tmp_path / "live.pcap"
    with captured(pcap, port):
        seen = _workload(broker)
    return pcap, port, seen


@pytest.mark.broker
def test_capture_carries_kafka_traffic_on_the_broker_port(live_capture):
    dpkt = pytest.importorskip("dpkt")
    pcap, port, seen = live_capture
    assert seen == N
    to_broker = from_broker = syns = 0
    with open(pcap, "rb") as f:
        for _ts, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            assert isinstance(tcp, dpkt.tcp.TCP)
            assert port in (tcp.sport, tcp.dport)
            syns += bool(tcp.flags & dpkt.tcp.TH_SYN and not tcp.flags & dpkt.tcp.TH_ACK)
            if tcp.dport == port:
                to_broker += len(tcp.data)
            else:
                from_broker += len(tcp.data)
    assert syns >= 2  # producer and consumer connect (bootstrap + leader connections)
    assert to_broker > 0 and from_broker > 0


@pytest.mark.broker
def test_dissector_finds_the_workload_in_the_live_capture(live_capture):
    dissector = pytest.importorskip("dissector")
    if not hasattr(dissector, "dissect"):
        pytest.skip("dissector.dissect has not landed yet")
    from protocol.records import read_record_set

    pcap, port, _ = live_capture
    items = list(dissector.dissect([pcap], ports=[port]))
    exchanges = [x for x in items if x.type == "exchange"]
    anomalies = [x for x in items if x.type == "anomaly"]
    assert anomalies == []
    assert {x.status for x in exchanges} <= {"ok", "unanswered"}
    names = {x.api_name for x in exchanges}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch"} <= names
    assert all(x.broker == f"127.0.0.1:{port}" for x in exchanges)

    produced = []
    for x in exchanges:
        if x.api_name != "Produce":
            continue
        assert x.client_id == "live-producer" and x.status == "ok" and x.error_codes == []
        for t in x.request["TopicData"]:
            assert t["Name"] == TOPIC
            for p in t["PartitionData"]:
                rs = read_record_set(p["Records"])
                assert all(b.codec_name == "gzip" and b.crc_ok for b in rs.batches)
                produced.extend(rs.records())
    assert [r.key for r in produced] == [f"k{i}".encode() for i in range(N)]
    assert [r.value for r in produced] == [f"value-{i}".encode() * 10 for i in range(N)]
    assert [[k for k, _ in r.headers] for r in produced] == [["h1", "idx"]] * N

    fetched = 0
    for x in exchanges:
        if x.api_name == "Fetch" and x.status == "ok":
            assert x.client_id == "live-consumer"
            for t in x.response["Responses"]:
                for p in t["Partitions"]:
                    if p["Records"] is not None:
                        fetched += sum(1 for _ in read_record_set(p["Records"]).records())
    assert fetched == N


# -- the bundled samples ------------------------------------------------------


def _dissect(pcap: Path, ports=None) -> list:
    dissector = pytest.importorskip("dissector")
    if not hasattr(dissector, "dissect"):
        pytest.skip("dissector.dissect has not landed yet")
    if ports is None:
        port = first_syn_port(pcap)
        ports = [port] if port else []
    return list(dissector.dissect([pcap], ports=ports))


def _topic(t: dict) -> str:
    """A topic struct's name: `Name` (`Topic` in old Fetch responses), or the
    dissector's `TopicName` beside a TopicId (Produce v13+, Fetch v13+)."""
    return t.get("Name") or t.get("Topic") or t.get("TopicName")


def _produced(exchanges, topic_prefix=""):
    """{topic: [records]} from every Produce request, with each batch's codec."""
    from protocol.records import read_record_set

    out: dict[str, list] = {}
    codecs: dict[str, set] = {}
    for x in exchanges:
        if x.type == "exchange" and x.api_name == "Produce" and x.request:
            for t in x.request["TopicData"]:
                for p in t["PartitionData"]:
                    rs = read_record_set(p["Records"])
                    assert all(b.crc_ok for b in rs.batches)
                    codecs.setdefault(_topic(t), set()).update(b.codec_name for b in rs.batches)
                    out.setdefault(_topic(t), []).extend(rs.records())
    return out, codecs


def test_sample_kafka_python_basic():
    items = _dissect(SAMPLES / "kafka-python-basic.pcap")
    assert [x for x in items if x.type == "anomaly"] == []
    assert {x.status for x in items} == {"ok"}
    produced, codecs = _produced(items)
    assert codecs == {"kpy-plain": {"none"}, "kpy-gzip": {"gzip"}}
    for topic in ("kpy-plain", "kpy-gzip"):
        recs = produced[topic]
        assert len(recs) == 30
        assert [r.key for r in recs] == [f"key-{i % 5}".encode() for i in range(30)]
        assert all([k for k, _ in r.headers] == ["trace", "source"] for r in recs)
        assert recs[7].headers[0][1] == b"t7" and recs[7].value.startswith(b"message 000007 ")
    names = Counter(x.api_name for x in items)
    for api in (
        "CreateTopics",
        "DeleteTopics",
        "JoinGroup",
        "SyncGroup",
        "OffsetCommit",
        "LeaveGroup",
        "ListGroups",
        "DescribeGroups",
        "Fetch",
    ):
        assert names[api] >= 1, api
    assert [x.error_codes for x in items if x.api_name == "JoinGroup"] == [[79], []]


def test_sample_confluent_codecs():
    items = _dissect(SAMPLES / "confluent-codecs.pcap")
    produced, codecs = _produced(items)
    assert codecs == {f"ck-{c}": {c} for c in ("lz4", "snappy", "zstd", "gzip")}
    for c in ("lz4", "snappy", "zstd", "gzip"):
        assert len(produced[f"ck-{c}"]) == 20
        assert all(r.headers == [("codec", c.encode())] and len(r.value) == 200 for r in produced[f"ck-{c}"])
    inits = [x for x in items if x.api_name == "InitProducerId"]
    assert len(inits) == 4 and all(x.response["ProducerId"] >= 0 for x in inits)


def test_sample_aiokafka():
    items = _dissect(SAMPLES / "aiokafka.pcap")
    produced, codecs = _produced(items)
    assert codecs == {"aio-topic": {"gzip"}}
    assert sorted(r.key for r in produced["aio-topic"]) == sorted(f"key-{i % 3}".encode() for i in range(30))
    assert {x.client_id for x in items if x.type == "exchange"} >= {"aio-producer", "aio-consumer"}


def test_sample_errors_has_its_error_codes_orphan_and_unanswered():
    items = _dissect(SAMPLES / "errors.pcap")
    errors = Counter(e for x in items if x.type == "exchange" for e in x.error_codes)
    assert errors == Counter({36: 1, 3: 2, 25: 2, 27: 1, 79: 1})
    by_status = Counter(x.status for x in items if x.type == "exchange")
    assert by_status == Counter({"ok": 15, "unanswered": 1, "orphan_response": 1})
    unanswered = [x for x in items if x.status == "unanswered"]
    assert [(x.api_key, x.correlation_id) for x in unanswered] == [(999, 16)]
    # Tansu answers the acks=0 Produce that Kafka would not: an orphan response
    assert [x.correlation_id for x in items if x.status == "orphan_response"] == [14]
    av = next(x for x in items if x.api_name == "ApiVersions")
    assert av.api_version == 99 and av.error_codes == []


def test_sample_sasl_rejected():
    items = _dissect(SAMPLES / "sasl-rejected.pcap")
    hs = [x for x in items if x.api_name == "SaslHandshake"]
    assert {x.client_id for x in hs} == {"sasl-plain", "sasl-scram-sha-256"}
    assert all(x.error_codes == [33] and x.api_version == 1 for x in hs)
    assert {x.request["Mechanism"] for x in hs} == {"PLAIN", "SCRAM-SHA-256"}


def test_sample_midstream_starts_with_an_orphan_response():
    items = _dissect(SAMPLES / "midstream.pcap")
    exchanges = [x for x in items if x.type == "exchange"]
    got = sorted((x.client_id or "", x.api_name, x.correlation_id, x.status) for x in exchanges)
    assert [g for g in got if g[0] == "mid-producer"] == [
        ("mid-producer", "Produce", 5, "ok"),
        ("mid-producer", "Produce", 6, "ok"),
    ]
    broker = next(x.broker for x in exchanges if x.api_name == "Produce")
    assert [(x.correlation_id, x.broker) for x in exchanges if x.status == "orphan_response"] == [(5, broker)]
    fetch = [x for x in exchanges if x.api_name == "Fetch"]
    assert [(x.client_id, x.correlation_id, x.status) for x in fetch] == [("mid-consumer", 6, "ok")]
    assert [x for x in items if x.type == "anomaly"] == []


def test_sample_on_port_29092_is_found_without_a_port():
    items = _dissect(SAMPLES / "port-29092.pcap", ports=[])
    exchanges = [x for x in items if x.type == "exchange"]
    assert len(exchanges) == 34
    assert {x.broker for x in exchanges} == {"127.0.0.1:29092"}
    assert sum(len(v) for v in _produced(items)[0].values()) == 60


def _load_make_captures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_captures", SAMPLES / "make_captures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_resegment_to_mtu_1500_keeps_every_exchange(tmp_path):
    dpkt = pytest.importorskip("dpkt")
    mc = _load_make_captures()
    src, dst = SAMPLES / "kafka-python-basic.pcap", tmp_path / "seg.pcap"
    n_in, n_out = mc.resegment(src, dst, mss=1448)
    assert n_out > n_in
    with open(dst, "rb") as f:
        pkts = list(dpkt.pcap.Reader(f))
    assert len(pkts) == n_out
    assert all(b >= a for a, b in pairwise(t for t, _ in pkts))
    for _ts, buf in pkts:
        assert len(buf) <= 14 + 20 + 32 + 1448
        ip = dpkt.ethernet.Ethernet(buf).data
        raw = bytes(ip)
        assert mc._csum(raw[:20]) == 0  # a header with a correct checksum sums to zero
        seg = raw[20:]
        pseudo = ip.src + ip.dst + struct.pack(">BBH", 0, 6, len(seg))
        assert mc._csum(pseudo + seg) == 0
        assert len(ip.data.data) <= 1448

    def key(x):
        return (x.type, x.api_name, x.api_version, x.correlation_id, x.status, tuple(x.error_codes))

    before, after = _dissect(src), _dissect(dst)
    assert len(before) == 34
    assert sorted(map(key, before)) == sorted(map(key, after))
    assert [r.value for r in _produced(after)[0]["kpy-gzip"]] == [r.value for r in _produced(before)[0]["kpy-gzip"]]
