"""The real broker, a real client and a real tcpdump capture, end to end."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.broker import CaptureError, Tcpdump

pytestmark = pytest.mark.broker

TOPIC = "live-topic"
N = 12


def _read_frame(sock: socket.socket) -> bytes:
    buf = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
            return buf[4:4 + struct.unpack(">i", buf[:4])[0]]
    raise AssertionError(f"no complete response frame from the broker ({len(buf)} bytes)")


def test_broker_answers_api_versions_as_the_registry_encodes_it(broker):
    """Our encoder's ApiVersions v3 request is accepted, and our decoder reads the answer."""
    protocol = pytest.importorskip("protocol")
    host, port = broker.rsplit(":", 1)
    req = protocol.encode_request(18, 3, {"CorrelationId": 7, "ClientId": "kw-test"},
                                  {"ClientSoftwareName": "kafkawire", "ClientSoftwareVersion": "0.1"})
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(protocol.with_size(req))
        resp = protocol.decode_response(_read_frame(s), 18, 3)
    assert resp.correlation_id == 7
    assert resp.body["ErrorCode"] == 0
    keys = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in resp.body["ApiKeys"]}
    # Tansu 0.6 (see ../shared/README.md): Produce 0-11, Fetch 0-17, Metadata 0-12, ApiVersions 0-4
    assert keys[0] == (0, 11) and keys[1] == (0, 17) and keys[3] == (0, 12) and keys[18] == (0, 4)


def _workload(bootstrap: str) -> int:
    """kafka-python: N gzip messages with keys and headers, read back without a
    group (a group join costs ~5 s on Tansu)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="live-producer",
                             compression_type="gzip", linger_ms=20)
    for i in range(N):
        producer.send(TOPIC, partition=0, key=f"k{i}".encode(), value=f"value-{i}".encode() * 10,
                      headers=[("h1", b"x"), ("idx", str(i).encode())])
    producer.flush(timeout=10)
    producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="live-consumer", group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(TOPIC, 0)])
    seen = 0
    deadline = time.monotonic() + 15
    while seen < N and time.monotonic() < deadline:
        seen += sum(len(v) for v in consumer.poll(timeout_ms=300).values())
    consumer.close()
    return seen


@pytest.fixture
def live_capture(broker, tmp_path):
    """(pcap path, broker port, messages consumed) for the workload above."""
    port = int(broker.rsplit(":", 1)[1])
    pcap = tmp_path / "live.pcap"
    dump = Tcpdump(pcap, port, linger=1.0)
    try:
        dump.start()
    except CaptureError as e:
        pytest.skip(f"tcpdump cannot capture on lo here: {e}")
    try:
        seen = _workload(broker)
    finally:
        dump.stop()
    return pcap, port, seen


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
