"""Make Kafka captures with real brokers (Tansu, Apache Kafka) and real clients.

    python samples/make_captures.py WORKLOAD [--out FILE] [--port N] [--mtu1500 | --netns NAME] [--broker tansu|kafka]
      (WORKLOAD: kafka-python, confluent, aiokafka, admin, errors, sasl, midstream, old-protocol,
       java-codecs, java-txn, java-admin, sasl-ak, secrets-ak, envelope-ak, rebalance-ak,
       rebalance-kip848-ak, kraft3-ak, tls-kafka-python-ak, tls-java-ak, tls-confluent-ak,
       tls-keyupdate-ak)
    python samples/make_captures.py all [--only FILE...]   # rewrite the bundled samples/*.pcap
    python samples/make_captures.py bench [--messages 300000] [--mtu1500 | --netns NAME]   # into bench/out/
    python samples/make_captures.py bench-small [--seconds 100] [--mtu1500 | --netns NAME]
    python samples/make_captures.py resegment IN.pcap OUT.pcap [--mss 1448]
    python samples/make_captures.py tls-check FILE.pcap [--keys FILE.keys]   # tshark: TLS connections decrypted

Each workload runs as: start the broker (Tansu, or Apache Kafka from its jars
via tests/kafka_jvm.py for the java-* workloads and --broker kafka) on
127.0.0.1:PORT, start tcpdump on lo for
`tcp port PORT`, wait until tcpdump has written the pcap header, run the
workload, wait 2 s, SIGTERM tcpdump. Needs root (or CAP_NET_RAW) for tcpdump.
kraft3-ak runs against a 3-node KRaft cluster (KafkaCluster) and captures all
6 of its ports. The tls-* workloads run against Apache Kafka with TLS listeners
(KafkaBroker(tls=True): one per forced TLS version and cipher suite, SASL_SSL and
PLAINTEXT, all captured) and write the NSS key log beside the capture (FILE.keys:
the Python clients' SSLContext.keylog_filename, the extract-tls-secrets agent in the
Java client's JVM, or for confluent-kafka, which cannot log keys, in the broker's
JVM), a witness FILE.json, and for tls-kafka-python-ak also FILE-dsb.pcapng (the
key log in a Decryption Secrets Block, editcap --inject-secrets).

Loopback captures carry up to 64 KB TCP segments. --netns NAME (root,
ethtool) runs everything in a network namespace whose lo has MTU 1500 and
TSO/GSO/GRO off, so tcpdump sees real 1500-byte-MTU segments; `resegment` (or
--mtu1500) instead rewrites a loopback capture into MSS-sized segments with
consistent sequence numbers, plus delayed ACKs from the peer.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import logging
import multiprocessing
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker import Broker, Tcpdump, pcap_facts  # noqa: E402

SAMPLES = ROOT / "samples"
log = logging.getLogger("make_captures")


def payload(i: int, size: int = 100) -> bytes:
    """A deterministic, mildly compressible message value."""
    head = f"message {i:06d} ".encode()
    return (head + b"kafkawire-sample-" * (size // 17 + 1))[:size]


# --------------------------------------------------------------- workloads
# Each takes the bootstrap address "127.0.0.1:PORT" and talks to the broker.


def wl_kafka_python(bootstrap: str, messages: int = 30) -> None:
    """kafka-python: admin create, producer uncompressed + gzip with keys and
    headers, a consumer group reading both topics and committing, group
    listing, delete."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kw-admin")
    admin.create_topics(
        {
            "kpy-plain": {"num_partitions": 1, "replication_factor": 1},
            "kpy-gzip": {"num_partitions": 1, "replication_factor": 1},
        }
    )
    for topic, codec in (("kpy-plain", None), ("kpy-gzip", "gzip")):
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"kw-producer-{codec or 'none'}",
            compression_type=codec,
            linger_ms=5,
            acks="all",
        )
        for i in range(messages):
            producer.send(
                topic,
                key=f"key-{i % 5}".encode(),
                value=payload(i),
                headers=[("trace", f"t{i}".encode()), ("source", b"kafkawire")],
            )
        producer.flush(timeout=10)
        producer.close(timeout=10)
    consumer = KafkaConsumer(
        "kpy-plain",
        "kpy-gzip",
        bootstrap_servers=bootstrap,
        client_id="kw-consumer",
        group_id="kw-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        session_timeout_ms=10000,
    )
    seen = 0
    deadline = time.monotonic() + 20
    while seen < 2 * messages and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=500).values():
            seen += len(recs)
    consumer.commit()
    consumer.close()
    log.info("kafka-python consumed %d/%d", seen, 2 * messages)
    _try(admin.list_groups)
    _try(admin.describe_groups, ["kw-group"])
    _try(admin.delete_topics, ["kpy-plain", "kpy-gzip"])
    admin.close()


CODECS = ("lz4", "snappy", "zstd", "gzip")


def wl_confluent(bootstrap: str, messages: int = 20) -> None:
    """confluent-kafka (librdkafka): one topic per codec, idempotent producer,
    a consumer group reading every topic."""
    from confluent_kafka import Consumer, Producer

    for codec in CODECS:
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"ck-producer-{codec}",
                "compression.type": codec,
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        for i in range(messages):
            p.produce(
                f"ck-{codec}", key=f"key-{i % 4}".encode(), value=payload(i, 200), headers=[("codec", codec.encode())]
            )
        if p.flush(15) != 0:
            raise RuntimeError(f"confluent producer ({codec}) left messages unsent")
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "ck-consumer",
            "group.id": "ck-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    c.subscribe([f"ck-{codec}" for codec in CODECS])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < len(CODECS) * messages and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    c.commit(asynchronous=False)
    c.close()
    log.info("confluent consumed %d/%d", seen, len(CODECS) * messages)


def wl_aiokafka(bootstrap: str, messages: int = 30) -> None:
    """aiokafka: producer (gzip) and a consumer group with manual commit."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id="aio-producer", compression_type="gzip", linger_ms=5
        )
        await producer.start()
        try:
            for i in range(messages):
                await producer.send(
                    "aio-topic", key=f"key-{i % 3}".encode(), value=payload(i), headers=[("lib", b"aiokafka")]
                )
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio-topic",
            bootstrap_servers=bootstrap,
            client_id="aio-consumer",
            group_id="aio-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
        )
        await consumer.start()
        seen = 0
        try:
            deadline = time.monotonic() + 20
            while seen < messages and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen += sum(len(v) for v in batches.values())
            await consumer.commit()
        finally:
            await consumer.stop()
        return seen

    log.info("aiokafka consumed %d/%d", asyncio.run(run()), messages)


def wl_admin(bootstrap: str) -> None:
    """kafka-python admin operations: CreateTopics, CreatePartitions,
    DescribeConfigs, Metadata, DescribeCluster, ListGroups, DeleteTopics."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kw-admin")
    admin.create_topics(
        {
            "adm-a": {"num_partitions": 3, "replication_factor": 1},
            "adm-b": {"num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "3600000"}},
        }
    )
    _try(admin.list_topics)
    _try(admin.describe_topics, ["adm-a", "adm-b"])
    cluster = _try(admin.describe_cluster) or {}
    broker_id = str(cluster.get("controller_id", 0))
    _try(admin.describe_configs, [ConfigResource(ConfigResourceType.TOPIC, "adm-a")])
    _try(admin.describe_configs, [ConfigResource(ConfigResourceType.BROKER, broker_id)])
    _try(admin.create_partitions, {"adm-b": 2})
    _try(admin.list_groups)
    _try(admin.delete_topics, ["adm-a", "adm-b"])
    admin.close()


def _try(fn, *args):
    """Admin calls the broker may not support still leave their request in
    the capture; the workload goes on."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - any client-side error is fine here
        log.info("%s: %s: %s", fn.__name__, type(e).__name__, e)
        return None


# Hand-built frames: the error workload must send exactly the request that
# provokes each error, which the client libraries refuse to do. They are not
# built with protocol.encode_request on purpose: this capture tests the decoder,
# and bytes made by our own encoder would let an encoder/decoder bug cancel out
# (ApiVersions v99 and API key 999 are outside the registry anyway).


def _s(v: str | None) -> bytes:
    if v is None:
        return struct.pack(">h", -1)
    b = v.encode()
    return struct.pack(">h", len(b)) + b


def _arr(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


class RawClient:
    """One connection sending non-flexible requests (request header v1)."""

    def __init__(self, bootstrap: str, client_id: str = "kw-errors"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.client_id = client_id
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: bytes, expect_response: bool = True) -> bytes | None:
        return self.send_raw(api_key, version, _s(self.client_id) + body, expect_response)

    def send_raw(self, api_key: int, version: int, rest: bytes, expect_response: bool = True) -> bytes | None:
        """`rest` is everything after the correlation id (client id, tags, body)."""
        self.correlation_id += 1
        frame = struct.pack(">hhi", api_key, version, self.correlation_id) + rest
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        if not expect_response:
            return None
        return self._read()

    def _read(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def wl_errors(bootstrap: str) -> None:
    """Requests that make Tansu answer with error codes, an acks=0 Produce
    (no response by design) and an unknown API key (never answered)."""
    c = RawClient(bootstrap)
    # ApiVersions v99 (request header v2, compact body): Tansu answers with a
    # v3 body and error 0 where Kafka would answer a v0 body with error 35.
    c.send_raw(18, 99, _s(c.client_id) + b"\x00" + b"\x0akafkawire" + b"\x060.1.0" + b"\x00")
    topic = lambda name, parts=1, rf=1: _s(name) + struct.pack(">ih", parts, rf) + _arr([]) + _arr([])  # noqa: E731
    # CreateTopics v2: create, then create again -> 36 TOPIC_ALREADY_EXISTS
    c.send(19, 2, _arr([topic("err-topic")]) + struct.pack(">i?", 5000, False))
    c.send(19, 2, _arr([topic("err-topic")]) + struct.pack(">i?", 5000, False))
    # CreateTopics v2: an illegal name (17) and replication factor 3 on one broker (38)
    c.send(19, 2, _arr([topic("bad topic name!"), topic("err-rf3", 1, 3)]) + struct.pack(">i?", 5000, False))
    # DeleteTopics v1 of a missing topic -> 3 UNKNOWN_TOPIC_OR_PARTITION
    c.send(20, 1, _arr([_s("no-such-topic")]) + struct.pack(">i", 5000))
    # Metadata v4 without auto-creation for a missing topic -> 3
    c.send(3, 4, _arr([_s("missing-topic")]) + struct.pack(">?", False))
    # ListOffsets v1 on a missing topic -> 3
    c.send(2, 1, struct.pack(">i", -1) + _arr([_s("missing-topic") + _arr([struct.pack(">iq", 0, -1)])]))
    # Heartbeat v0 / SyncGroup v0 / OffsetCommit v2 for a member the group
    # does not know -> 25 UNKNOWN_MEMBER_ID (or 16/22, whatever the broker says)
    c.send(10, 1, _s("err-group") + struct.pack(">b", 0))  # FindCoordinator v1, key type group
    c.send(12, 0, _s("err-group") + struct.pack(">i", 1) + _s("ghost-member"))
    c.send(14, 0, _s("err-group") + struct.pack(">i", 1) + _s("ghost-member") + _arr([]))
    c.send(
        8,
        2,
        _s("err-group")
        + struct.pack(">i", 7)
        + _s("ghost-member")
        + struct.pack(">q", -1)
        + _arr([_s("err-topic") + _arr([struct.pack(">iq", 0, 1) + _s(None)])]),
    )
    # JoinGroup v4 with an empty member id -> 79 MEMBER_ID_REQUIRED
    proto = _s("range") + struct.pack(">i", 0)
    c.send(11, 4, _s("err-group") + struct.pack(">ii", 10000, 10000) + _s("") + _s("consumer") + _arr([proto]))
    # LeaveGroup v0 unknown member
    c.send(13, 0, _s("err-group") + _s("ghost-member"))
    # Produce v3 acks=0: Kafka sends no response (Tansu 0.6 answers anyway)
    batch = _record_batch(b"fire-and-forget")
    c.send(
        0,
        3,
        _s(None)
        + struct.pack(">hi", 0, 5000)
        + _arr([_s("err-topic") + _arr([struct.pack(">i", 0) + struct.pack(">i", len(batch)) + batch])]),
        expect_response=False,
    )
    # DeleteTopics v1 of the real topic, so the last answered request is known
    c.send(20, 1, _arr([_s("err-topic")]) + struct.pack(">i", 5000))
    # Unknown API key 999: Tansu closes the connection, no response
    c.send(999, 0, b"", expect_response=False)
    time.sleep(0.5)
    c.close()


def _record_batch(value: bytes) -> bytes:
    """One uncompressed magic-2 batch with a single record."""
    from protocol.records import Record, build_batch

    return build_batch([Record(timestamp=int(time.time() * 1000), value=value)])


def wl_bench(bootstrap: str, messages: int = 300_000, size: int = 200) -> None:
    """Bulk traffic for the dissect benchmark: confluent-kafka producers
    (uncompressed and lz4) and consumers of the same topics."""
    from confluent_kafka import Consumer, Producer

    topics = {"bench-plain": "none", "bench-lz4": "lz4"}
    for topic, codec in topics.items():
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"bench-producer-{codec}",
                "compression.type": codec,
                "linger.ms": 5,
                "batch.size": 16384,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        for i in range(messages // len(topics)):
            while True:
                try:
                    p.produce(topic, key=f"k{i % 64}".encode(), value=payload(i, size))
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10000 == 0:
                p.poll(0)
        if p.flush(120) != 0:
            raise RuntimeError("bench producer left messages unsent")
    # Smaller fetches than librdkafka's defaults: more Fetch exchanges, as a
    # consumer that keeps up with its producers sees.
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "bench-consumer",
            "group.id": "bench-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "session.timeout.ms": 10000,
            "max.partition.fetch.bytes": 65536,
            "fetch.max.bytes": 1048576,
            "message.max.bytes": 1048576,
        }
    )
    c.subscribe(list(topics))
    seen = 0
    deadline = time.monotonic() + 300
    while seen < messages and time.monotonic() < deadline:
        for msg in c.consume(10000, 0.5):
            if msg.error() is None:
                seen += 1
    c.close()
    log.info("bench consumed %d/%d", seen, messages)


# The small-message bench profile. Each producer: (client id, topic, messages
# per second, linger.ms, codec, acks, idempotent, keyed, headers, value sizes).
# Most traffic is uncompressed; rates are Poisson so linger 0 still sees some
# batching when two messages arrive close together, as real services do.
SMALL_TOPICS = {"orders": 6, "events": 3, "metrics": 3, "audit": 2}
SMALL_PRODUCERS = [
    ("ck-orders", "orders", 200, 0, "none", "all", True, True, True, (100, 1000)),
    ("ck-events", "events", 200, 2, "none", "1", False, False, False, (100, 400)),
    ("ck-metrics", "metrics", 120, 5, "lz4", "1", False, True, False, (200, 1000)),
    ("ck-audit", "audit", 50, 1, "zstd", "all", True, True, True, (300, 1000)),
]
SMALL_KPY_PRODUCER = ("kpy-producer", ("events", "orders"), 150, 3, None, 1, (100, 800))
SMALL_GROUPS = ("ck-readers", "kpy-readers")


def wl_bench_small(bootstrap: str, seconds: float = 100.0, scale: float = 1.0) -> None:
    """Realistic small-message traffic for the dissect benchmark: 4
    confluent-kafka producers and a kafka-python producer (linger 0-5 ms,
    100-1000 byte records), two consumer groups reading concurrently with
    small fetches, and an admin monitor polling metadata every 100 ms."""
    import random
    import threading

    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-setup")
    admin.create_topics([NewTopic(t, n, 1) for t, n in SMALL_TOPICS.items()])
    admin.close()

    stop = threading.Event()
    counts: dict[str, int] = {}
    errors: list[str] = []

    def paced(name: str, rate: float, seed: int):
        """Yield (i, rng) at Poisson arrivals of `rate`/s until stop is set."""
        rng, i = random.Random(seed), 0
        due = time.monotonic()
        while not stop.is_set():
            due += rng.expovariate(rate * scale)
            pause = due - time.monotonic()
            if pause > 0:
                stop.wait(pause)
            yield i, rng
            i += 1
        counts[name] = i

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - reported after the run, the others go on
                errors.append(f"{fn.__name__}{args[:1]}: {type(e).__name__}: {e}")

        return run

    @guarded
    def ck_producer(spec, seed):
        cid, topic, rate, linger, codec, acks, idem, keyed, headers, (lo, hi) = spec
        # In-flight 5 as the Java client: librdkafka's default (1000000) lets a
        # non-idempotent producer pipeline seconds of requests into a busy broker.
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": cid,
                "linger.ms": linger,
                "batch.size": 16384,
                "compression.type": codec,
                "acks": acks,
                "enable.idempotence": idem,
                "max.in.flight.requests.per.connection": 5,
            }
        )
        for i, rng in paced(cid, rate, seed):
            kw = {}
            if keyed:
                kw["key"] = f"{cid}-{rng.randrange(500)}".encode()
            if headers:
                kw["headers"] = [("trace-id", f"{seed:02d}{i:010d}".encode()), ("origin", cid.encode())]
            while True:
                try:
                    p.produce(topic, value=payload(i, rng.randint(lo, hi)), **kw)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(15)

    @guarded
    def kpy_producer(spec, seed):
        cid, topics, rate, linger, codec, acks, (lo, hi) = spec
        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=cid,
            linger_ms=linger,
            batch_size=4096,
            compression_type=codec,
            acks=acks,
        )
        for i, rng in paced(cid, rate, seed):
            p.send(
                topics[i % len(topics)],
                key=f"kpy-{rng.randrange(100)}".encode() if i % 2 else None,
                value=payload(i, rng.randint(lo, hi)),
                headers=[("lib", b"kafka-python")] if i % 3 == 0 else None,
            )
        p.flush(timeout=15)
        p.close(timeout=10)

    @guarded
    def ck_consumer(member):
        # Small fetches: at most 16 KB per partition and 64 KB per request. The
        # short wait stands in for a broker that answers as soon as data
        # arrives (Tansu waits out max wait), as a consumer that keeps up sees.
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"ck-reader-{member}",
                "group.id": SMALL_GROUPS[0],
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "session.timeout.ms": 10000,
                "fetch.wait.max.ms": 20,
                "max.partition.fetch.bytes": 16384,
                "fetch.max.bytes": 65536,
                "message.max.bytes": 65536,
            }
        )
        c.subscribe(list(SMALL_TOPICS))
        seen = 0
        while not stop.is_set():
            seen += sum(1 for m in c.consume(500, 0.2) if m.error() is None)
        c.close()
        counts[f"ck-reader-{member}"] = seen

    @guarded
    def kpy_consumer():
        # Only the uncompressed topics: kafka-python needs extra packages for lz4 and zstd.
        c = KafkaConsumer(
            "orders",
            "events",
            bootstrap_servers=bootstrap,
            client_id="kpy-reader",
            group_id=SMALL_GROUPS[1],
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=1000,
            session_timeout_ms=10000,
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=16384,
            fetch_max_bytes=65536,
        )
        seen = 0
        while not stop.is_set():
            seen += sum(len(v) for v in c.poll(timeout_ms=200).values())
        c.close()
        counts["kpy-reader"] = seen

    # The monitor gets a process of its own: in here, behind the GIL with the
    # pure-Python clients, it managed 2-3 polls a second instead of 10.
    mp = multiprocessing.get_context("spawn")
    mon_stop, mon_polls = mp.Event(), mp.Value("i", 0)
    mon = mp.Process(target=small_monitor, args=(bootstrap, mon_stop, mon_polls), name="bench-monitor")
    mon.start()
    threads = [threading.Thread(target=ck_consumer, args=(m,)) for m in (1, 2)]
    threads.append(threading.Thread(target=kpy_consumer))
    threads += [threading.Thread(target=ck_producer, args=(spec, n)) for n, spec in enumerate(SMALL_PRODUCERS)]
    threads.append(threading.Thread(target=kpy_producer, args=(SMALL_KPY_PRODUCER, 99)))
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    mon_stop.set()
    for t in threads:
        t.join(timeout=60)
    mon.join(timeout=30)
    if mon.is_alive():
        mon.kill()
        mon.join(timeout=10)
    if mon.exitcode != 0:
        errors.append(f"monitor exited with {mon.exitcode}")
    counts["monitor polls"] = mon_polls.value
    stuck = [t.name for t in threads if t.is_alive()]
    log.info("bench-small: %s", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if errors or stuck:
        raise RuntimeError(f"bench-small: {len(errors)} client error(s) {errors[:3]}, still running: {stuck}")


def small_monitor(bootstrap: str, stop, polls) -> None:
    """What a lag dashboard does, every 100 ms: topic metadata, end offsets,
    group state (Metadata, ListOffsets, DescribeGroups)."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-monitor")
    tps = {TopicPartition(t, p): OffsetSpec.LATEST for t, n in SMALL_TOPICS.items() for p in range(n)}
    while not stop.wait(0.1):
        for call, arg in (
            (adm.describe_topics, list(SMALL_TOPICS)),
            (adm.list_partition_offsets, tps),
            (adm.describe_groups, list(SMALL_GROUPS)),
        ):
            try:
                call(arg)
            except Exception:  # noqa: BLE001, S112 - a group not formed yet, say; the request is captured anyway
                continue
        polls.value += 1
    adm.close()


def wl_sasl(bootstrap: str) -> None:
    """SASL as far as Tansu 0.6 goes: confluent-kafka asks for PLAIN, then
    SCRAM-SHA-256; the broker (without --authentication) answers SaslHandshake
    v1 with 33 UNSUPPORTED_SASL_MECHANISM, listing only the mechanism asked
    for, and the client gives up. With --authentication, users must be made
    by `tansu user create`, which an authenticating broker refuses."""
    from confluent_kafka import Producer

    for mech in ("PLAIN", "SCRAM-SHA-256"):
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"sasl-{mech.lower()}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mech,
                "sasl.username": "alice",
                "sasl.password": "alice-secret",
                "reconnect.backoff.ms": 400,
                "reconnect.backoff.max.ms": 400,
                "logger": logging.getLogger("librdkafka"),
            }
        )
        p.produce("sasl-topic", b"never delivered")
        left = p.flush(1.0)
        log.info("sasl %s: %d message(s) undelivered, as expected", mech, left)


def wl_midstream(bootstrap: str, start_capture=lambda: None, messages: int = 10) -> None:
    """Capture starts after the clients connected: kafka-python producer and a
    consumer (assigned partition, long-polling Fetch in flight) send their
    first messages, then tcpdump starts, then more traffic. The capture has no
    SYNs, no ApiVersions, and begins with responses to requests it lacks."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="mid-producer", linger_ms=5)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="mid-consumer",
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=300,
    )
    consumer.assign([TopicPartition("mid-topic", 0)])

    def produce_and_read(first: int) -> int:
        for i in range(first, first + messages):
            producer.send("mid-topic", partition=0, key=f"key-{i}".encode(), value=payload(i))
        producer.flush(timeout=10)
        seen, deadline = 0, time.monotonic() + 10
        while seen < messages and time.monotonic() < deadline:
            seen += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        return seen

    before = produce_and_read(0)
    consumer.poll(timeout_ms=100)  # leaves a long-polling Fetch outstanding
    start_capture()
    after = produce_and_read(messages) + produce_and_read(2 * messages)
    producer.close(timeout=10)
    consumer.close()
    log.info("midstream consumed %d before and %d after the capture started", before, after)


# Old protocol: Kafka 4 removed Produce v0-2 and Fetch v0-3, so these run
# against Tansu (Produce 0-11, Fetch 0-17). Tansu 0.6 answers every magic 0/1
# Produce with 59 UNKNOWN_PRODUCER_ID, so the legacy message sets are in the
# requests only; the fetchers read magic-2 batches a modern producer wrote
# (Tansu does not down-convert).
OLD_KPY = ((0, 8, 2), (0, 9), (0, 10, 1))  # Produce v0/v1/v2, Fetch v0/v1/v3, magic 0/0/1
OLD_CK = (("0.9.0", "snappy"), ("0.9.0", "lz4"))  # librdkafka without ApiVersions: Produce v1, magic 0


def wl_old_protocol(bootstrap: str, messages: int = 10) -> None:
    """Old-protocol clients against Tansu: kafka-python pinned to api_version
    0.8.2/0.9/0.10.1 and librdkafka with broker.version.fallback 0.9.0."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkTopicPartition
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    # magic-2 records for the old fetchers to read
    modern = KafkaProducer(bootstrap_servers=bootstrap, client_id="old-seed", linger_ms=5)
    for i in range(messages):
        modern.send("old-seed", partition=0, key=f"key-{i}".encode(), value=payload(i, 60))
    modern.flush(timeout=10)
    modern.close(timeout=10)
    for ver in OLD_KPY:
        name = ".".join(map(str, ver))
        codec = None if ver == (0, 8, 2) else "gzip"
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"old-kpy-{name}",
            api_version=ver,
            compression_type=codec,
            linger_ms=5,
            retries=0,
        )
        futures = [
            producer.send(f"old-kpy-{name}", partition=0, key=f"key-{i}".encode(), value=payload(i, 60))
            for i in range(messages)
        ]
        producer.flush(timeout=10)
        producer.close(timeout=10)
        failed = sum(1 for f in futures if f.failed())
        # Fetch from offset 0 without ListOffsets: Tansu's ListOffsets v0
        # answer lacks its offsets array and kafka-python gives up on it.
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id=f"old-kpy-consumer-{name}",
            api_version=ver,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        tp = TopicPartition("old-seed", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen, deadline = 0, time.monotonic() + 10
        while seen < messages and time.monotonic() < deadline:
            seen += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        consumer.close()
        log.info(
            "kafka-python api_version %s: %d/%d produce failures, read %d/%d", name, failed, messages, seen, messages
        )
    for fallback, codec in OLD_CK:
        conf = {
            "bootstrap.servers": bootstrap,
            "api.version.request": False,
            "broker.version.fallback": fallback,
            "logger": logging.getLogger("librdkafka"),
        }
        p = Producer(
            {
                **conf,
                "client.id": f"old-ck-{codec}",
                "compression.type": codec,
                "linger.ms": 5,
                "message.send.max.retries": 0,
            }
        )
        for i in range(messages):
            p.produce(f"old-ck-{codec}", partition=0, key=f"key-{i}".encode(), value=payload(i, 60))
        p.flush(10)
        c = Consumer(
            {
                **conf,
                "client.id": f"old-ck-consumer-{codec}",
                "group.id": f"old-ck-{codec}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        c.assign([CkTopicPartition("old-seed", 0, 0)])
        seen, deadline = 0, time.monotonic() + 10
        while seen < messages and time.monotonic() < deadline:
            m = c.poll(0.2)
            seen += m is not None and m.error() is None
        c.close()
        log.info("librdkafka fallback %s %s: read %d/%d", fallback, codec, seen, messages)


# Kafka 4 readiness (kafka4-old-ak.pcap): clients that send API versions Kafka 4 removed,
# against Apache Kafka 3.9 (KAFKAWIRE_KAFKA_VERSION=3.9.1), which still answers them all, beside
# one that sends none. kafka-python 1.4.7 is that release from PyPI, run from its wheel.
OLD_RELEASE = "kafka-python==1.4.7"
_OLD_KPY_SCRIPT = """
import json, sys, time
import kafka
from kafka import KafkaConsumer, KafkaProducer
bootstrap, name, pinned, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
ver = tuple(int(x) for x in pinned.split(".")) if pinned != "auto" else None
p = KafkaProducer(bootstrap_servers=bootstrap, client_id=name, api_version=ver, linger_ms=5)
fs = [p.send(topic, key=b"k%d" % i, value=b"%s-%d" % (name.encode(), i)) for i in range(n)]
p.flush(timeout=20)
produced = sum(1 for f in fs if f.succeeded())
p.close(timeout=10)
c = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=name + "-consumer", api_version=ver,
                  group_id=name + "-group", auto_offset_reset="earliest", consumer_timeout_ms=8000)
got = sorted(m.value.decode() for m in c)
c.close()
print(json.dumps({"client_id": name, "kafka_python": kafka.__version__, "api_version": pinned,
                  "produced": produced, "consumed": got}))
"""


# aiokafka 0.12.0 (its cp311 wheel from PyPI), told the broker is 0.10.1: Produce v2, Fetch v3,
# ListOffsets v1 and the group APIs' oldest versions; 0.13 and later ignore api_version
OLD_AIOKAFKA = "aiokafka==0.12.0"
_OLD_AIOKAFKA_SCRIPT = """
import asyncio, json, sys
import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
bootstrap, name, pinned, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

async def main():
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=name, api_version=pinned, linger_ms=5)
    await p.start()
    try:
        produced = 0
        for i in range(n):
            await p.send_and_wait(topic, key=b"k%d" % i, value=b"%s-%d" % (name.encode(), i))
            produced += 1
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=name + "-consumer", api_version=pinned,
                         group_id=name + "-group", auto_offset_reset="earliest")
    await c.start()
    got = []
    try:
        for _ in range(30):  # bounded: 30 polls of a second
            for msgs in (await c.getmany(timeout_ms=1000)).values():
                got.extend(m.value.decode() for m in msgs)
            if len(got) >= n:
                break
    finally:
        await c.stop()
    print(json.dumps({"client_id": name, "aiokafka": aiokafka.__version__, "api_version": pinned,
                      "produced": produced, "consumed": sorted(got)}))

asyncio.run(main())
"""


def _old_wheel(release: str, package: str) -> Path:
    """A release's wheel from PyPI, unpacked into a cache folder (its path, for PYTHONPATH)."""
    import zipfile

    home = Path.home() / ".cache" / "kafkawire" / release.replace("==", "-")
    if not (home / package / "__init__.py").is_file():
        dl = home.with_name(home.name + ".dl")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dl), release],
            check=True,
            timeout=300,
        )
        (wheel,) = dl.glob("*.whl")
        zipfile.ZipFile(wheel).extractall(home)
    return home


OLD_JAVA = ("org.apache.kafka:kafka-clients:2.0.1", "org.slf4j:slf4j-api:1.7.25", "org.lz4:lz4-java:1.4.1")
OLD_JAVA += ("org.xerial.snappy:snappy-java:1.1.7.1",)  # kafka-clients 2.0.1's runtime dependencies


def _old_java_client() -> str:
    """tests/java/OldJavaClient.java compiled against kafka-clients 2.0.1 (its jars from Maven
    Central into a cache folder): the classpath to run it with."""
    home = Path.home() / ".cache" / "kafkawire" / "kafka-clients-2.0.1"
    libs, classes = home / "libs", home / "classes"
    for artifact in OLD_JAVA:
        jar = libs / ("-".join(artifact.split(":")[1:]) + ".jar")
        if not jar.is_file():
            subprocess.run(
                ["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={libs}"],
                check=True,
                timeout=600,
            )
    src = ROOT / "tests" / "java" / "OldJavaClient.java"
    built = classes / "OldJavaClient.class"
    if not built.is_file() or built.stat().st_mtime < src.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", f"{libs}/*", "-d", str(classes), str(src)], check=True, timeout=300)
    return f"{classes}:{libs}/*"


def _kcat_run(bootstrap: str, messages: int) -> dict:
    """Debian's kcat (librdkafka 2.0.2, the 2.0 line): produce `messages` lines, read them back in
    a balanced consumer group."""
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    lib = version.split("librdkafka ", 1)[1].split()[0] if "librdkafka " in version else None
    values = "".join(f"kcat-{i}\n" for i in range(messages))
    cmd = ["kcat", "-b", bootstrap, "-X", "client.id=kcat-2.0.2"]
    sent = subprocess.run([*cmd, "-P", "-t", "k4-kcat"], input=values, capture_output=True, text=True, timeout=60)
    got = subprocess.run(
        ["kcat", "-b", bootstrap, "-X", "client.id=kcat-2.0.2-consumer", "-X", "auto.offset.reset=earliest"]
        + ["-G", "kcat-2.0.2-group", "-e", "-q", "k4-kcat"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if sent.returncode or got.returncode:
        raise RuntimeError(f"kcat failed: {sent.stderr[-1000:]} {got.stderr[-1000:]}")
    return {"client_id": "kcat-2.0.2", "librdkafka": lib, "produced": messages, "consumed": sorted(got.stdout.split())}


def wl_kafka4_old_ak(bootstrap: str, witness: Path | None = None, messages: int = 6) -> None:
    """Against Apache Kafka 3.9: kafka-python 1.4.7 as it comes (it asks the broker which
    versions to use) and pinned to api_version 0.9 and 0.10.1 (Produce v1/v2, Fetch v1/v3, ...),
    librdkafka told the broker is 0.9.0 (no ApiVersions: Produce v1, Fetch v1), the Java client
    2.0.1 (Maven Central's kafka-clients), aiokafka 0.12.0 told the broker is 0.10.1, Debian's
    kcat (librdkafka 2.0.2) and today's
    kafka-python. Each produces, then reads back
    in a group; the witness has what each client id produced and read."""
    import json

    from confluent_kafka import Consumer, Producer

    def witness_of(what: str, argv: list[str], timeout: float, path: Path | None = None) -> dict:
        """Run an old client; its last line of output is its witness (JSON)."""
        env = {**os.environ, "PYTHONPATH": str(path)} if path is not None else None
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{what} failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    old = _old_wheel(OLD_RELEASE, "kafka")
    runs = [
        witness_of(
            f"kafka-python 1.4.7 ({name})",
            [sys.executable, "-c", _OLD_KPY_SCRIPT, bootstrap, name, pinned, f"k4-{name}", str(messages)],
            120,
            old,
        )
        for name, pinned in (("kpy147-auto", "auto"), ("kpy147-0.9", "0.9"), ("kpy147-0.10.1", "0.10.1"))
    ]
    java = ["java", "-cp", _old_java_client(), "OldJavaClient", bootstrap, "java-2.0.1", "k4-java", str(messages)]
    runs.append(witness_of("kafka-clients 2.0.1", java, 180))
    aio = [sys.executable, "-c", _OLD_AIOKAFKA_SCRIPT, bootstrap, "aiokafka-0.12-0.10.1", "0.10.1", "k4-aiokafka"]
    runs.append(witness_of("aiokafka 0.12.0", [*aio, str(messages)], 180, _old_wheel(OLD_AIOKAFKA, "aiokafka")))
    runs.append(_kcat_run(bootstrap, messages))
    from kafka import KafkaConsumer, KafkaProducer
    import kafka

    p = KafkaProducer(bootstrap_servers=bootstrap, client_id="kpy-modern", linger_ms=5)
    for i in range(messages):
        p.send("k4-modern", key=b"k%d" % i, value=b"kpy-modern-%d" % i)
    p.flush(timeout=20)
    p.close(timeout=10)
    c = KafkaConsumer(
        "k4-modern",
        bootstrap_servers=bootstrap,
        client_id="kpy-modern-consumer",
        group_id="kpy-modern-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
    )
    got = sorted(m.value.decode() for m in c)
    c.close()
    runs.append({"client_id": "kpy-modern", "kafka_python": kafka.__version__, "produced": messages, "consumed": got})
    conf = {"bootstrap.servers": bootstrap, "api.version.request": False, "broker.version.fallback": "0.9.0"}
    prod = Producer({**conf, "client.id": "rdkafka-0.9", "linger.ms": 5})
    for i in range(messages):
        prod.produce("k4-rdkafka", key=b"k%d" % i, value=b"rdkafka-0.9-%d" % i)
    left = prod.flush(20)
    cons = Consumer(
        {**conf, "client.id": "rdkafka-0.9-consumer", "group.id": "rdkafka-0.9-group", "auto.offset.reset": "earliest"}
    )
    cons.subscribe(["k4-rdkafka"])
    read, deadline = [], time.monotonic() + 20
    while len(read) < messages and time.monotonic() < deadline:
        m = cons.poll(0.2)
        if m is not None and m.error() is None:
            read.append(m.value().decode())
    cons.close()
    import confluent_kafka

    runs.append(
        {
            "client_id": "rdkafka-0.9",
            "librdkafka": confluent_kafka.libversion()[0],
            "broker.version.fallback": "0.9.0",
            "produced": messages - left,
            "consumed": sorted(read),
        }
    )
    for r in runs:
        log.info("%s: produced %s, read back %d", r["client_id"], r["produced"], len(r["consumed"]))
    if witness is not None:
        from tests.kafka_jvm import KAFKA_VERSION

        witness.write_text(json.dumps({"broker": f"Apache Kafka {KAFKA_VERSION}", "runs": runs}, indent=1) + "\n")


# Apache Kafka's SASL_PLAINTEXT listener takes these (PLAIN and SCRAM-SHA-256).
SASL_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def wl_sasl_ak(bootstrap: str, messages: int = 5) -> None:
    """Successful SASL logins on Apache Kafka's SASL_PLAINTEXT listener:
    confluent-kafka producers with PLAIN (alice) and SCRAM-SHA-256 (bob), a
    kafka-python SCRAM-SHA-256 consumer reading both, and one PLAIN login
    with a wrong password (SaslAuthenticate error 58)."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    sasl = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT"}
    for mech, user in (("PLAIN", "alice"), ("SCRAM-SHA-256", "bob")):
        p = Producer(
            {
                **sasl,
                "client.id": f"sasl-{mech.lower()}-{user}",
                "sasl.mechanism": mech,
                "sasl.username": user,
                "sasl.password": SASL_USERS[user],
                "linger.ms": 5,
            }
        )
        for i in range(messages):
            p.produce("sasl-topic", partition=0, key=f"{user}-{i}".encode(), value=payload(i, 80))
        if p.flush(15) != 0:
            raise RuntimeError(f"SASL {mech} producer left messages unsent")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="sasl-scram-consumer",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="bob",
        sasl_plain_password=SASL_USERS["bob"],
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.assign([TopicPartition("sasl-topic", 0)])
    seen, deadline = 0, time.monotonic() + 15
    while seen < 2 * messages and time.monotonic() < deadline:
        seen += sum(len(v) for v in consumer.poll(timeout_ms=300).values())
    consumer.close()
    log.info("sasl: read %d/%d", seen, 2 * messages)
    # one wrong password; retries are spaced so the capture holds only a few
    p = Producer(
        {
            **sasl,
            "client.id": "sasl-plain-wrong",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "not-alice-secret",
            "reconnect.backoff.ms": 10000,
            "reconnect.backoff.max.ms": 10000,
            "logger": logging.getLogger("librdkafka"),
        }
    )
    p.produce("sasl-topic", b"never delivered")
    p.flush(1.0)


# The SASL listener with OAUTHBEARER too (Kafka's unsecured JWS validator, the default
# without a callback handler: for tests only) and delegation tokens on.
SECRETS_PROPERTIES = """\
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,OAUTHBEARER
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=\
org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
delegation.token.secret.key=kafkawire-delegation-token-secret-key
"""


def wl_secrets_ak(bootstrap: str, witness: Path | None = None) -> None:
    """Every secret kafkawire redacts, from the Java client on Apache Kafka's SASL_PLAINTEXT
    listener: SCRAM-SHA-256 admin (bob) creating, describing, renewing and expiring a
    delegation token and setting SCRAM credentials for carol (AlterUserScramCredentials);
    an OAUTHBEARER producer (unsecured JWS, sub=alice) writing 3 records with PII-like
    keys, values and headers; a PLAIN consumer (alice) reading them. The secrets the client
    knows go to `witness` (JSON) for the tests."""
    import json

    out = _java_out("secrets", bootstrap, "secrets-topic", "bob", SASL_USERS["bob"])
    known = {"password": SASL_USERS["bob"]}  # bob's, for PLAIN and SCRAM
    for line in out.splitlines():
        if line.startswith("secret "):
            k, v = line[len("secret ") :].split("=", 1)
            known[k] = v
    known["bearer_token_v0"] = _sasl_v0_logins(bootstrap, "alice", SASL_USERS["alice"])
    known["password_v0"] = SASL_USERS["alice"]
    if witness is not None:
        witness.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")


def _sasl_v0_logins(bootstrap: str, user: str, password: str) -> str:
    """SaslHandshake v0 logins, whose tokens travel as raw size-prefixed frames (no SaslAuthenticate):
    PLAIN, then OAUTHBEARER with an unsecured JWS (alg none) made here; each checked by a Metadata
    request the broker only answers once logged in. Returns the bearer token."""
    import base64
    import json

    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

    now = int(time.time())
    jws = b64({"alg": "none"}) + "." + b64({"sub": user, "iat": now, "exp": now + 3600}) + "."
    tokens = (
        ("PLAIN", f"\0{user}\0{password}".encode()),
        ("OAUTHBEARER", f"n,,\x01auth=Bearer {jws}\x01\x01".encode()),
    )
    for mech, token in tokens:
        c = RawClient(bootstrap, client_id=f"secrets-v0-{mech.lower()}")
        try:
            answer = c.send(17, 0, _s(mech))
            if answer[4:6] != b"\0\0":
                raise RuntimeError(f"SaslHandshake v0 {mech}: error {struct.unpack('>h', answer[4:6])[0]}")
            c.sock.sendall(struct.pack(">i", len(token)) + token)
            c._read()  # the broker's (empty) token on success; it closes the connection on failure
            c.send(3, 1, _arr([]))  # Metadata v1, all topics
            log.info("SaslHandshake v0 %s: logged in", mech)
        finally:
            c.close()
    return jws


def _java_out(*args: str) -> str:
    from tests.kafka_jvm import run_workload

    out = run_workload(*args, timeout=180)
    for line in out.splitlines():
        log.info("java: %s", line)
    return out


# Java client (tests/java/KafkawireWorkload.java, Apache Kafka's jars).
def _java(*args: str) -> None:
    from tests.kafka_jvm import run_workload

    for line in run_workload(*args, timeout=180).splitlines():
        log.info("java: %s", line)


JAVA_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def wl_java_codecs(bootstrap: str, messages: int = 20, proto: str = "consumer") -> None:
    """Java client: an idempotent producer per codec (none, gzip, snappy, lz4,
    zstd) into jv-<codec>, then a consumer group reading them all, with the
    consumer protocol (KIP-848) when the broker offers ConsumerGroupHeartbeat."""
    _java(
        "codecs",
        bootstrap,
        "jv",
        str(messages),
        "--",
        "group",
        bootstrap,
        ",".join(f"jv-{c}" for c in JAVA_CODECS),
        "jv-group",
        str(messages * len(JAVA_CODECS)),
        proto,
    )


def wl_java_txn(bootstrap: str, messages: int = 10) -> None:
    """Java client: transactional producer (commit with offsets, abort,
    commit) and read_committed / read_uncommitted readers."""
    _java("txn", bootstrap, "jv-txn", str(messages))


def wl_java_admin(bootstrap: str) -> None:
    """Java Admin client: topics, configs, partitions, groups, features."""
    _java("admin", bootstrap, "jv-adm")


def wl_envelope_ak(bootstrap: str) -> None:
    """Admin requests a broker forwards to its controller in Envelopes (captured on both ports):
    confluent-kafka admin `kw-envelope`: CreateTopics (`env-a`, 2 partitions), IncrementalAlterConfigs
    (retention.ms), AlterUserScramCredentials (carol, a secret to redact inside the Envelope),
    CreatePartitions (to 3), DeleteTopics."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kw-envelope"})

    def wait(futures) -> None:
        for f in futures.values():
            f.result(timeout=30)

    wait(admin.create_topics([NewTopic("env-a", 2, 1)]))
    entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    wait(admin.incremental_alter_configs([ConfigResource("topic", "env-a", incremental_configs=[entry])]))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    wait(admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-secret")]))
    wait(admin.create_partitions([NewPartitions("env-a", 3)]))
    wait(admin.delete_topics(["env-a"]))


def wl_rebalance_ak(bootstrap: str, witness: Path | None = None) -> None:
    """A classic consumer group rebalancing, as its kafka-python members saw it: `rb-a` joins
    `rb-group` on `rb-topic` (4 partitions, range assignor) and gets all 4; `rb-b` joins, both
    rejoin and get 2 each; `rb-a` leaves (LeaveGroup) and `rb-b` gets all 4 again; `rb-b` leaves.
    What each member's assignment() said after each step goes to `witness` (JSON), for the tests."""
    import json

    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="rb-admin")
    admin.create_topics([NewTopic("rb-topic", num_partitions=4, replication_factor=1)])
    admin.close()

    def member(name: str) -> KafkaConsumer:
        return KafkaConsumer(
            "rb-topic",
            bootstrap_servers=bootstrap,
            client_id=name,
            group_id="rb-group",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=30000,
        )

    def owned(c: KafkaConsumer) -> list[int]:
        return sorted(tp.partition for tp in c.assignment())

    def settle(want: dict, seconds: float = 60.0) -> dict:
        """Poll every member until each owns the wanted number of partitions."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for c in want:
                c.poll(timeout_ms=100)
            if all(len(owned(c)) == n for c, n in want.items()):
                return {c.config["client_id"]: owned(c) for c in want}
        raise RuntimeError(f"group did not settle: {[(c.config['client_id'], owned(c)) for c in want]}")

    steps = []
    a = member("rb-a")
    steps.append({"step": "rb-a joined", **settle({a: 4})})
    b = member("rb-b")
    steps.append({"step": "rb-b joined", **settle({a: 2, b: 2})})
    a.close()
    steps.append({"step": "rb-a left", **settle({b: 4})})
    b.close()
    log.info("rebalances: %s", steps)
    if witness is not None:
        witness.write_text(json.dumps(steps, indent=1) + "\n")


def wl_rebalance_kip848_ak(bootstrap: str, witness: Path | None = None) -> None:
    """A KIP-848 group rebalancing (Java client, group.protocol=consumer): `kip-a` joins `kip-group`
    on `kip-topic` (4 partitions) and gets all 4; `kip-b` joins and each gets 2; `kip-a` leaves and
    `kip-b` gets all 4. What each member's assignment() said after each step goes to `witness`."""
    import json

    steps: dict = {}
    for line in _java_out("rebalance", bootstrap, "kip-topic", "kip-group").splitlines():
        if line.startswith("owned "):
            _, step, name, member, parts = (line.split(" ") + [""])[:5]
            steps.setdefault(step.replace("_", " "), {})[name] = [int(p) for p in parts.split(",") if p]
    log.info("KIP-848 rebalances: %s", steps)
    if witness is not None:
        witness.write_text(json.dumps([{"step": k, **v} for k, v in steps.items()], indent=1) + "\n")


# What DumpLogSegments' decoders print after a record's `headerKeys: [...]`: `key: K payload: P`
# (offsets, transaction log), `payload: P` (cluster metadata), or a control record's
# `LeaderChange: {...}` / `endTxnMarker: COMMIT coordinatorEpoch: 0`.
DUMP_DECODERS = {
    "__cluster_metadata": "--cluster-metadata-decoder",
    "__consumer_offsets": "--offsets-decoder",
    "__transaction_state": "--transaction-log-decoder",
    "__share_group_state": "--share-group-state-decoder",
}


def _json_or_text(text: str):
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_dump(text: str) -> list[dict]:
    """The records of DumpLogSegments --print-data-log output: each one's offset, its batch's
    flags (control, transactional, producer id) and its decoded key and payload, parsed as
    JSON where they are JSON and kept as printed otherwise."""
    import json
    import re

    records, batch = [], {}
    head = re.compile(r"^\| offset: (\d+) .*? headerKeys: \[[^\]]*\] ?(.*)$")
    for line in text.splitlines():
        if line.startswith("baseOffset: "):
            f = dict(re.findall(r"(\w+): (\S+)", line))
            batch = {
                "control": f.get("isControl") == "true",
                "transactional": f.get("isTransactional") == "true",
                "producer_id": int(f.get("producerId", -1)),
            }
            continue
        m = head.match(line)
        if not m:
            continue
        offset, rest = int(m.group(1)), m.group(2)
        rec = {"offset": offset, **batch}
        if rest.startswith("key: "):
            # the key is JSON (or a plain word); find where it ends by decoding it
            body = rest[len("key: ") :]
            try:
                key, end = json.JSONDecoder().raw_decode(body)
                after = body[end:]
            except ValueError:
                key_text, _, after = body.partition(" ")
                key, after = key_text, " " + after
            rec["key"] = key
            after = after.lstrip()
            rec["payload"] = _json_or_text(after[len("payload: ") :]) if after.startswith("payload: ") else after
        elif rest.startswith("payload: "):
            rec["key"] = None
            rec["payload"] = _json_or_text(rest[len("payload: ") :])
        else:
            # a control record: `Type: {json}` or `endTxnMarker: ABORT coordinatorEpoch: 0`
            kind, _, value = rest.partition(": ")
            rec["key"] = kind
            rec["payload"] = _json_or_text(value)
        records.append(rec)
    return records


def dump_log(partition_dir: Path, decoder: str, timeout: float = 90.0) -> str:
    """Kafka's DumpLogSegments (read-only) on every segment of one partition's log dir."""
    import subprocess

    from tests.kafka_jvm import java_command

    files = sorted(partition_dir.glob("*.log"))
    if not files:
        raise RuntimeError(f"no log segment in {partition_dir}")
    cmd = java_command(
        "org.apache.kafka.tools.DumpLogSegments", decoder, "--print-data-log", "--files", ",".join(map(str, files))
    )
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"DumpLogSegments {decoder} {partition_dir} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def wl_kraft3_ak(bootstrap: str, cluster=None, stop_capture=lambda: None, witness: Path | None = None) -> None:
    """A 3-node KRaft cluster (each node broker and controller, all 6 ports captured) doing
    client work: confluent-kafka admin `kr-admin` creates `kr-orders` (3 partitions) and
    `kr-audit` (1), replication factor 3, and SCRAM-SHA-256 credentials for `kr-user`; producer `kr-producer` (acks=all) writes 20 records to
    each kr-orders partition and 5 to kr-audit; consumer group `kr-group` (classic, `kr-consumer`)
    reads kr-orders and commits offsets explicitly (10 per partition, then the end offsets);
    transactional producer `kr-txn` commits 3 records to kr-audit with offsets for
    `kr-txn-group`, then aborts 2 with other offsets; share group `kr-share` (the Java client's
    KafkaShareConsumer, members `sh-a` and `sh-b`) reads kr-orders' 60 records between them;
    streams group `kr-streams` (a Kafka Streams app, group.protocol=streams) upper-cases them into
    `kr-upper`.
    Meanwhile the nodes replicate __consumer_offsets, __transaction_state and
    __share_group_state to each other (Fetch on the client ports) and the
    controllers fetch __cluster_metadata from their leader (Fetch on the controller ports). After
    the capture, Kafka's DumpLogSegments decodes those three logs from the leaders' log dirs into
    `witness` (JSON) beside what the clients did."""
    import base64
    import json
    import uuid

    from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    if cluster is None:
        raise SystemExit("kraft3-ak runs against a 3-node cluster: --broker kafka-cluster")
    topics = {"kr-orders": 3, "kr-audit": 1}
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kr-admin"})
    for f in admin.create_topics([NewTopic(t, n, 3) for t, n in topics.items()]).values():
        f.result(timeout=30)
    described = {}
    for name, f in admin.describe_topics(TopicCollection(list(topics))).items():
        d = f.result(timeout=30)
        raw = struct.pack(">qq", d.topic_id.get_most_significant_bits(), d.topic_id.get_least_significant_bits())
        described[name] = {
            # as Kafka prints a Uuid (URL-safe base64, no padding), and as a UUID
            "id": base64.urlsafe_b64encode(raw).rstrip(b"=").decode(),
            "uuid": str(uuid.UUID(bytes=raw)),
            "client_str": str(d.topic_id),  # librdkafka: standard base64
            "partitions": len(d.partitions),
            "replicas": sorted({len(p.replicas) for p in d.partitions}),
        }

    # a SCRAM user: the metadata log then holds a UserScramCredentialRecord, whose salt and keys
    # every output redacts
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for f in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("kr-user", info, b"kr-secret-password")]
    ).values():
        f.result(timeout=30)

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kr-producer", "acks": "all", "linger.ms": 5})
    per_partition = 20
    for part in range(topics["kr-orders"]):
        for i in range(per_partition):
            producer.produce("kr-orders", partition=part, key=f"order-{part}-{i}".encode(), value=payload(i, 80))
    for i in range(5):
        producer.produce("kr-audit", partition=0, key=f"audit-{i}".encode(), value=payload(i, 60))
    if producer.flush(30) != 0:
        raise RuntimeError("kr-producer left messages unsent")

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "kr-consumer",
            "group.id": "kr-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    consumer.subscribe(["kr-orders"])
    want = per_partition * topics["kr-orders"]
    seen, deadline = 0, time.monotonic() + 30
    while seen < want and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.5):
            seen += m.error() is None
    if seen < want:
        raise RuntimeError(f"kr-consumer read {seen}/{want}")
    commits = []
    for offset in (per_partition // 2, per_partition):  # a partial commit, then the end offsets
        tps = [TopicPartition("kr-orders", p, offset) for p in range(topics["kr-orders"])]
        consumer.commit(offsets=tps, asynchronous=False)
        commits.append({"group": "kr-group", "topic": "kr-orders", "offsets": {p: offset for p in range(3)}})
    got = consumer.committed([TopicPartition("kr-orders", p) for p in range(topics["kr-orders"])], timeout=15)
    committed = {"kr-group": {"kr-orders": {tp.partition: tp.offset for tp in got}}}
    consumer.close()

    txn_group = Consumer({"bootstrap.servers": bootstrap, "client.id": "kr-txn-consumer", "group.id": "kr-txn-group"})
    txp = Producer({"bootstrap.servers": bootstrap, "client.id": "kr-txn-producer", "transactional.id": "kr-txn"})
    txp.init_transactions(30)
    transactions = []
    for outcome, n, offset in (("commit", 3, 3), ("abort", 2, 5)):
        txp.begin_transaction()
        for i in range(n):
            txp.produce("kr-audit", partition=0, key=f"txn-{outcome}-{i}".encode(), value=payload(i, 60))
        txp.send_offsets_to_transaction(
            [TopicPartition("kr-audit", 0, offset)], txn_group.consumer_group_metadata(), 30
        )
        (txp.commit_transaction if outcome == "commit" else txp.abort_transaction)(30)
        transactions.append(
            {
                "transactional_id": "kr-txn",
                "outcome": outcome,
                "topic": "kr-audit",
                "records": n,
                "offsets": {"kr-txn-group": {"kr-audit": {0: offset}}},
            }
        )
    got = txn_group.committed([TopicPartition("kr-audit", 0)], timeout=15)
    committed["kr-txn-group"] = {"kr-audit": {tp.partition: tp.offset for tp in got}}
    txn_group.close()
    log.info("kraft3: %d read, committed %s, transactions %s", seen, committed, [t["outcome"] for t in transactions])

    # A share group (KIP-932, the Java client): two members share kr-orders' 60 records between
    # them, so __share_group_state holds the group's state and __consumer_offsets its records.
    shared = {}
    for line in _java_out("share", bootstrap, "kr-orders", "kr-share", str(want)).splitlines():
        if line.startswith("shared "):
            _, name, n = line.split()
            shared[name] = int(n)
    log.info("kraft3: share group kr-share read %s", shared)

    # A streams group (KIP-1071): a Kafka Streams app upper-casing kr-orders into kr-upper.
    streamed, tasks = 0, []
    for line in _java_out("streams", bootstrap, "kr-orders", "kr-upper", str(want)).splitlines():
        if line.startswith("streamed "):
            streamed = int(line.split()[1])
        elif line.startswith("tasks "):
            tasks = line.split()[1].split(",")
    log.info("kraft3: streams app kr-streams wrote %d records to kr-upper", streamed)

    # Followers fetch __consumer_offsets and __transaction_state, controllers the metadata log.
    time.sleep(3)
    stop_capture()

    # Where to read each log (after the capture: this Metadata request is not in it): the
    # leader of each internal partition, and the KRaft leader for __cluster_metadata.
    meta = admin.list_topics(timeout=15)
    nodes = {}
    for topic in ("__consumer_offsets", "__transaction_state", "__share_group_state"):
        nodes[topic] = meta.topics[topic].partitions[0].leader
    state = json.loads((cluster.log_dirs[0] / "__cluster_metadata-0" / "quorum-state").read_text())
    nodes["__cluster_metadata"] = state["leaderId"]
    dump = {}
    for topic, decoder in DUMP_DECODERS.items():
        text = dump_log(cluster.log_dirs[nodes[topic] - 1] / f"{topic}-0", decoder)
        dump[topic] = parse_dump(text)
    counts = {t: len(r) for t, r in dump.items()}
    log.info("kraft3: DumpLogSegments records %s (from nodes %s)", counts, nodes)
    out = {
        "bootstrap_ports": cluster.ports,
        "controller_ports": cluster.controller_ports,
        "nodes": {
            n: {"port": p, "controller_port": c}
            for n, p, c in zip(cluster.node_ids, cluster.ports, cluster.controller_ports, strict=True)
        },
        "topics": described,
        "produced": {"kr-orders": {p: per_partition for p in range(topics["kr-orders"])}, "kr-audit": {0: 5}},
        "commits": commits,
        "committed": committed,
        "transactions": transactions,
        "share": {"group": "kr-share", "topic": "kr-orders", "received": shared},
        "streams": {
            "group": "kr-streams",
            "source": "kr-orders",
            "sink": "kr-upper",
            "written": streamed,
            "active_tasks": tasks,
        },
        "dump_nodes": nodes,
        "dump": dump,
    }
    text = json.dumps(out, indent=1) + "\n"
    if len(text) > 500_000:
        noop = '"NO_OP_RECORD"'
        kept = [r for r in dump["__cluster_metadata"] if noop not in json.dumps(r)]
        out["note"] = f"{len(dump['__cluster_metadata']) - len(kept)} NoOpRecords of __cluster_metadata left out"
        dump["__cluster_metadata"] = kept
        text = json.dumps(out, indent=1) + "\n"
    if witness is not None:
        witness.write_text(text)


# ------------------------------------------------------------------ TLS
# Apache Kafka with TLS listeners (KafkaBroker(tls=True)): one SSL listener per forced
# (TLS version, cipher suite) of tests.kafka_jvm.TLS_LISTENERS, plus SASL_SSL (TLS 1.3,
# SASL_USERS) and the PLAINTEXT listener. The clients' TLS secrets go to an NSS key
# log (`<capture>.keys`), so the capture can be decrypted; what they did goes to the
# witness (`<capture>.json`).

TLS_RECORDS = 5
TLS_SASL = ("SCRAM-SHA-256", "alice")  # the SASL_SSL listener's login


def _tls_topic(prefix: str, listener: str) -> str:
    return f"{prefix}-{listener.lower().replace('_', '-')}"


def _tls_listeners(broker) -> dict:
    """{listener name: its witness entry}, PLAINTEXT first."""
    out = {
        "PLAINTEXT": {"port": broker.port, "security_protocol": "PLAINTEXT", "tls_version": None, "cipher_suite": None}
    }
    for name, (port, version, suite) in broker.tls_listeners.items():
        out[name] = {
            "port": port,
            "security_protocol": "SASL_SSL" if name == "SASL_SSL" else "SSL",
            "tls_version": version,
            "cipher_suite": suite,
        }
    return out


def _tls_records(name: str, n: int = TLS_RECORDS) -> list[tuple[str, str]]:
    """The (key, value) pairs a client writes over listener `name`: small, distinct per listener."""
    return [(f"{name.lower()}-key-{i}", f"{name.lower()} value {i} kafkawire-tls") for i in range(n)]


def _create_tls_topics(bootstrap: str, topics: list[str]) -> dict:
    """Create the topics over the PLAINTEXT listener before tcpdump starts (no
    auto-create retries in the capture). Returns no extra keyword arguments."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tls-setup")
    try:
        admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics])
    finally:
        admin.close()
    return {}


def _tls_witness(broker, keylog: Path, client: str, runs: list[dict], **extra) -> dict:
    from tests.kafka_jvm import KAFKA_VERSION

    return {
        "broker": f"Apache Kafka {KAFKA_VERSION}",
        "client": client,
        "keylog": keylog.name,
        "certificate": "self-signed RSA 2048, CN=localhost, SAN dns:localhost, ip:127.0.0.1 (keytool)",
        "listeners": _tls_listeners(broker),
        **extra,
        "runs": runs,
    }


def _tls_run(client: str, listener: str, entry: dict, topic: str, prefix: str, sasl, produced, consumed) -> dict:
    """One run of a TLS witness: who, over which listener (its port, version and suite), what was
    produced and what was consumed back."""
    return {
        "client": client,
        "listener": listener,
        **entry,
        "topic": topic,
        "partition": 0,
        "producer_client_id": f"{prefix}-producer",
        "consumer_client_id": f"{prefix}-consumer",
        "sasl": sasl,
        "produced": produced,
        "consumed": consumed,
    }


def _kpy_tls_run(broker, listener: str, ctx, prefix: str = "kpy") -> dict:
    """kafka-python: a producer writing TLS_RECORDS records to partition 0 of the listener's
    topic, then a consumer (no group) reading them back, both over `listener`."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    port = broker.port if listener == "PLAINTEXT" else broker.tls_listeners[listener][0]
    bootstrap = f"127.0.0.1:{port}"
    topic = _tls_topic(prefix, listener)
    name = f"{prefix}-{listener.lower().replace('_', '-')}"
    common: dict = {"bootstrap_servers": bootstrap}
    sasl = None
    if listener == "PLAINTEXT":
        common["security_protocol"] = "PLAINTEXT"
    elif listener == "SASL_SSL":
        mech, user = TLS_SASL
        sasl = {"mechanism": mech, "user": user}
        common.update(
            security_protocol="SASL_SSL",
            ssl_context=ctx,
            sasl_mechanism=mech,
            sasl_plain_username=user,
            sasl_plain_password=SASL_USERS[user],
        )
    else:
        common.update(security_protocol="SSL", ssl_context=ctx)
    records = _tls_records(listener)
    producer = KafkaProducer(client_id=f"{name}-producer", acks="all", linger_ms=5, **common)
    for key, value in records:
        producer.send(topic, key=key.encode(), value=value.encode(), partition=0)
    producer.flush(timeout=15)
    producer.close(timeout=10)
    consumer = KafkaConsumer(
        client_id=f"{name}-consumer", group_id=None, auto_offset_reset="earliest", enable_auto_commit=False, **common
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    consumed: list[dict] = []
    deadline = time.monotonic() + 20
    while len(consumed) < len(records) and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=300).values():
            consumed += [{"offset": r.offset, "key": r.key.decode(), "value": r.value.decode()} for r in recs]
    consumer.close()
    if len(consumed) != len(records):
        raise RuntimeError(f"kafka-python over {listener}: read {len(consumed)} of {len(records)}")
    entry = _tls_listeners(broker)[listener]
    log.info("kafka-python over %s (%s %s): %d records", listener, entry["tls_version"], entry["cipher_suite"], 5)
    produced = [{"key": k, "value": v} for k, v in records]
    return _tls_run("kafka-python", listener, entry, topic, name, sasl, produced, consumed)


def _aio_tls_run(broker, listener: str, ctx, prefix: str = "aio") -> dict:
    """aiokafka: the same over one TLS listener, with the same SSLContext (one key log)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    port = broker.tls_listeners[listener][0]
    bootstrap = f"127.0.0.1:{port}"
    topic = _tls_topic(prefix, listener)
    name = f"{prefix}-{listener.lower().replace('_', '-')}"
    records = _tls_records(listener)

    async def run() -> list[dict]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"{name}-producer",
            security_protocol="SSL",
            ssl_context=ctx,
            acks="all",
            linger_ms=5,
        )
        await producer.start()
        try:
            for key, value in records:
                await producer.send(topic, key=key.encode(), value=value.encode(), partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id=f"{name}-consumer",
            security_protocol="SSL",
            ssl_context=ctx,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        consumed: list[dict] = []
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + 20
            while len(consumed) < len(records) and time.monotonic() < deadline:
                for recs in (await consumer.getmany(timeout_ms=300)).values():
                    consumed += [{"offset": r.offset, "key": r.key.decode(), "value": r.value.decode()} for r in recs]
        finally:
            await consumer.stop()
        return consumed

    consumed = asyncio.run(run())
    if len(consumed) != len(records):
        raise RuntimeError(f"aiokafka over {listener}: read {len(consumed)} of {len(records)}")
    produced = [{"key": k, "value": v} for k, v in records]
    return _tls_run("aiokafka", listener, _tls_listeners(broker)[listener], topic, name, None, produced, consumed)


# the aiokafka run of tls-kafka-python-ak
AIO_TLS_LISTENER = "TLS13_CHACHA20"


def wl_tls_kafka_python_ak(
    bootstrap: str, tls_broker=None, keylog: Path | None = None, witness: Path | None = None
) -> None:
    """kafka-python over every TLS listener of Apache Kafka (TLS 1.3 and 1.2, three suites each),
    SASL_SSL (SCRAM-SHA-256) and PLAINTEXT: a producer and a consumer each, 5 records; aiokafka
    over one TLS listener. The clients' SSLContext writes the NSS key log (keylog_filename)."""
    import json
    import ssl

    broker = tls_broker
    keylog = keylog or Path(f"{bootstrap.replace(':', '-')}.keys")
    keylog.unlink(missing_ok=True)
    ctx = ssl.create_default_context(cafile=str(broker.tls_pem))
    ctx.keylog_filename = str(keylog)
    runs = [_kpy_tls_run(broker, name, ctx) for name in ("PLAINTEXT", *broker.tls_listeners)]
    runs.append(_aio_tls_run(broker, AIO_TLS_LISTENER, ctx))
    if witness is not None:
        from importlib.metadata import version

        client = (
            f"kafka-python {version('kafka-python')}, aiokafka {version('aiokafka')} "
            f"(Python {sys.version.split()[0]} ssl, {ssl.OPENSSL_VERSION})"
        )
        text = _tls_witness(broker, keylog, client, runs, keylog_writer="ssl.SSLContext.keylog_filename (client)")
        witness.write_text(json.dumps(text, indent=1) + "\n")


def wl_tls_java_ak(bootstrap: str, tls_broker=None, keylog: Path | None = None, witness: Path | None = None) -> None:
    """The Java client over every TLS listener and SASL_SSL (SCRAM-SHA-256): a producer and a
    consumer each, 5 records. The key log comes from the extract-tls-secrets agent in its JVM."""
    import json

    from tests.kafka_jvm import TLS_AGENT, run_workload, tls_keylog_args

    broker = tls_broker
    keylog = keylog or Path(f"{bootstrap.replace(':', '-')}.keys")
    keylog.unlink(missing_ok=True)
    args: list[str] = []
    for name in broker.tls_listeners:
        if args:
            args.append("--")
        prefix = f"jv-{name.lower().replace('_', '-')}"
        args += ["tls", broker.tls_address(name), _tls_topic("jv", name), str(TLS_RECORDS), prefix, str(broker.tls_pem)]
        if name == "SASL_SSL":
            args += [TLS_SASL[0], TLS_SASL[1], SASL_USERS[TLS_SASL[1]]]
    out = run_workload(*args, timeout=240, jvm_args=tls_keylog_args(keylog.resolve()))
    consumed: dict[str, list[dict]] = {}
    for line in out.splitlines():
        log.info("java: %s", line)
        if line.startswith("tls-record "):
            _, client, topic, offset, key, value = line.split(" ", 5)
            consumed.setdefault(topic, []).append({"offset": int(offset), "key": key, "value": value})
    runs = []
    listeners = _tls_listeners(broker)
    for name in broker.tls_listeners:
        prefix = f"jv-{name.lower().replace('_', '-')}"
        topic = _tls_topic("jv", name)
        sasl = {"mechanism": TLS_SASL[0], "user": TLS_SASL[1]} if name == "SASL_SSL" else None
        produced = [{"key": f"{prefix}-key-{i}", "value": f"{prefix} value {i}"} for i in range(TLS_RECORDS)]
        runs.append(_tls_run("java", name, listeners[name], topic, prefix, sasl, produced, consumed.get(topic, [])))
    if witness is not None:
        agent = ":".join(TLS_AGENT)
        text = _tls_witness(broker, keylog, "Java kafka-clients (JSSE)", runs, keylog_writer=f"{agent} (client JVM)")
        witness.write_text(json.dumps(text, indent=1) + "\n")


# the listeners of tls-confluent-ak
CK_TLS_LISTENERS = ("TLS13_AES128", "TLS12_AES256")


def wl_tls_confluent_ak(
    bootstrap: str, tls_broker=None, keylog: Path | None = None, witness: Path | None = None
) -> None:
    """confluent-kafka (librdkafka, which cannot write a key log) over one TLS 1.3 and one TLS 1.2
    listener: a producer and a consumer each, 5 records. The key log is the broker's: its JVM
    runs the extract-tls-secrets agent, and capture() keeps the lines written during the capture."""
    import json

    import confluent_kafka
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = tls_broker
    listeners = _tls_listeners(broker)
    runs = []
    for name in CK_TLS_LISTENERS:
        prefix = f"ck-{name.lower().replace('_', '-')}"
        topic = _tls_topic("ck", name)
        conf = {
            "bootstrap.servers": broker.tls_address(name),
            "security.protocol": "SSL",
            "ssl.ca.location": str(broker.tls_pem),
        }
        records = _tls_records(name)
        p = Producer({**conf, "client.id": f"{prefix}-producer", "acks": "all", "linger.ms": 5})
        for key, value in records:
            p.produce(topic, key=key.encode(), value=value.encode(), partition=0)
        if p.flush(15) != 0:
            raise RuntimeError(f"confluent producer over {name} left messages unsent")
        c = Consumer(
            {**conf, "client.id": f"{prefix}-consumer", "group.id": f"{prefix}-unused", "enable.auto.commit": False}
        )
        c.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        consumed: list[dict] = []
        deadline = time.monotonic() + 20
        while len(consumed) < len(records) and time.monotonic() < deadline:
            msg = c.poll(0.3)
            if msg is not None and msg.error() is None:
                consumed.append({"offset": msg.offset(), "key": msg.key().decode(), "value": msg.value().decode()})
        c.close()
        if len(consumed) != len(records):
            raise RuntimeError(f"confluent-kafka over {name}: read {len(consumed)} of {len(records)}")
        produced = [{"key": k, "value": v} for k, v in records]
        runs.append(_tls_run("confluent-kafka", name, listeners[name], topic, prefix, None, produced, consumed))
    if witness is not None:
        from tests.kafka_jvm import TLS_AGENT

        text = _tls_witness(
            broker,
            keylog or Path("broker.keys"),
            f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
            runs,
            keylog_writer=f"{':'.join(TLS_AGENT)} (broker JVM)",
        )
        witness.write_text(json.dumps(text, indent=1) + "\n")


# tls-keyupdate-ak: the Java client over the TLS 1.3 listeners, its JVM and the broker's with
# small jdk.tls.keyLimits, so JSSE sends a KeyUpdate whenever a key has protected KU_KEY_LIMIT
# bytes (the key log holds only the *_TRAFFIC_SECRET_0 lines: the updated secrets are derived).
KU_TLS_LISTENERS = ("TLS13_AES128", "TLS13_AES256", "TLS13_CHACHA20")
KU_RECORDS, KU_VALUE_SIZE = 140, 512
KU_KEY_LIMIT = "2^14"
KU_KEY_LIMITS = f"AES/GCM/NoPadding KeyUpdate {KU_KEY_LIMIT}, ChaCha20-Poly1305 KeyUpdate {KU_KEY_LIMIT}"


def _keyupdate_jvm_args() -> tuple[str, ...]:
    """JVM arguments that set jdk.tls.keyLimits to KU_KEY_LIMITS (a java.security file)."""
    import tempfile

    f = Path(tempfile.gettempdir()) / "kafkawire-tls-keyupdate.security"
    f.write_text(f"jdk.tls.keyLimits={KU_KEY_LIMITS}\n")
    return (f"-Djava.security.properties={f}",)


def wl_tls_keyupdate_ak(
    bootstrap: str, tls_broker=None, keylog: Path | None = None, witness: Path | None = None
) -> None:
    """The Java client over the TLS 1.3 listeners with KeyUpdates (jdk.tls.keyLimits 16 KiB in
    its JVM and the broker's): a producer and a consumer each, 140 records of 512 bytes."""
    import hashlib
    import json

    from tests.kafka_jvm import TLS_AGENT, run_workload, tls_keylog_args

    broker = tls_broker
    keylog = keylog or Path(f"{bootstrap.replace(':', '-')}.keys")
    keylog.unlink(missing_ok=True)
    args: list[str] = []
    for name in KU_TLS_LISTENERS:
        if args:
            args.append("--")
        prefix = f"ku-{name.lower().replace('_', '-')}"
        args += ["tls", broker.tls_address(name), _tls_topic("ku", name), str(KU_RECORDS), prefix, str(broker.tls_pem)]
    jvm_args = (
        *tls_keylog_args(keylog.resolve()),
        *_keyupdate_jvm_args(),
        f"-Dkafkawire.tls.valueSize={KU_VALUE_SIZE}",
    )
    out = run_workload(*args, timeout=240, jvm_args=jvm_args)

    def sha(v: bytes) -> str:
        return hashlib.sha256(v).hexdigest()

    consumed: dict[str, list[dict]] = {}
    for line in out.splitlines():
        if line.startswith("tls-record "):
            _, client, topic, offset, key, value = line.split(" ", 5)
            value = value.encode()
            consumed.setdefault(topic, []).append(
                {"offset": int(offset), "key": key, "value_size": len(value), "value_sha256": sha(value)}
            )
        else:
            log.info("java: %s", line)
    runs = []
    listeners = _tls_listeners(broker)
    for name in KU_TLS_LISTENERS:
        prefix = f"ku-{name.lower().replace('_', '-')}"
        topic = _tls_topic("ku", name)
        produced = [
            {"key": f"{prefix}-key-{i}", "value_size": KU_VALUE_SIZE, "value_sha256": sha(payload(i, KU_VALUE_SIZE))}
            for i in range(KU_RECORDS)
        ]
        got = [{k: r[k] for k in ("key", "value_size", "value_sha256")} for r in consumed.get(topic, [])]
        if got != produced:
            raise RuntimeError(f"tls-keyupdate over {name}: read back {len(got)} records, not the {KU_RECORDS} written")
        runs.append(_tls_run("java", name, listeners[name], topic, prefix, None, produced, consumed.get(topic, [])))
    if witness is not None:
        agent = ":".join(TLS_AGENT)
        text = _tls_witness(
            broker,
            keylog,
            "Java kafka-clients (JSSE)",
            runs,
            keylog_writer=f"{agent} (client JVM)",
            jdk_tls_key_limits=f"{KU_KEY_LIMITS} (client and broker JVMs)",
            note=(
                f"values are {KU_VALUE_SIZE} bytes, payload(i, {KU_VALUE_SIZE}) of make_captures.py "
                "('message %06d ' then 'kafkawire-sample-' repeated): produced and consumed give their "
                "size and sha256, not the value. key_updates (filled in after the capture) is tshark's "
                "count of KeyUpdate handshake messages per TCP connection 'CLIENT_PORT->BROKER_PORT', "
                "per direction"
            ),
        )
        witness.write_text(json.dumps(text, indent=1) + "\n")


def tls_key_updates(pcap: Path, keys: Path, ports: list[int], timeout: float = 120.0) -> dict:
    """tshark's count of TLS 1.3 KeyUpdate messages (handshake type 24) per TCP connection
    to one of `ports` (decoded as TLS carrying Kafka): {"CLIENT_PORT->BROKER_PORT":
    {"client_to_broker": n, "broker_to_client": n, "update_requested": {direction: n},
    "client_id": the Kafka client id, "kafka_frames": frames with a Kafka message,
    "kafka_frames_after_first_key_update": those after the connection's first KeyUpdate}},
    connections without a KeyUpdate left out."""
    import subprocess

    decode = []
    for port in ports:
        decode += ["-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},kafka"]
    fields = ["frame.number", "tcp.srcport", "tcp.dstport", "tls.handshake.type"]
    fields += ["tls.handshake.key_update.request_update", "kafka.client_id", "kafka.correlation_id"]
    cmd = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keys}", *decode]
    cmd += ["-Y", "tls.handshake.type == 24 or kafka", "-T", "fields", "-E", "occurrence=a"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout
    conns: dict[str, dict] = {}
    for line in out.splitlines():
        frame, sport, dport, types, requested, client_id, correlation = (line.split("\t") + [""] * 7)[:7]
        broker_side = int(sport) in ports
        client, server = (dport, sport) if broker_side else (sport, dport)
        c = conns.setdefault(
            f"{client}->{server}",
            {
                "client_to_broker": 0,
                "broker_to_client": 0,
                "update_requested": {"client_to_broker": 0, "broker_to_client": 0},
                "client_id": None,
                "kafka_frames": 0,
                "kafka_frames_after_first_key_update": 0,
                "_first": None,
            },
        )
        direction = "broker_to_client" if broker_side else "client_to_broker"
        n = types.split(",").count("24")
        if n:
            c[direction] += n
            c["update_requested"][direction] += requested.split(",").count("1")
            if c["_first"] is None:
                c["_first"] = int(frame)
        if client_id and c["client_id"] is None:
            c["client_id"] = client_id.split(",")[0]
        if correlation:  # a Kafka message in this frame
            c["kafka_frames"] += 1
            if c["_first"] is not None and int(frame) > c["_first"]:
                c["kafka_frames_after_first_key_update"] += 1
    for c in conns.values():
        del c["_first"]
    return {k: c for k, c in sorted(conns.items()) if c["client_to_broker"] or c["broker_to_client"]}


def tls_check(pcap: Path, keys: Path, ports: list[int], timeout: float = 120.0) -> dict:
    """What tshark makes of a TLS capture with its key log, the given ports decoded as TLS
    carrying Kafka: {"connections": TCP streams with a ClientHello, "decrypted": those whose
    Finished tshark could decrypt, "kafka": those with a Kafka message decoded}."""
    import subprocess

    decode = []
    for port in ports:
        decode += ["-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},kafka"]

    def streams(display_filter: str) -> set[int]:
        cmd = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keys}", *decode]
        cmd += ["-Y", display_filter, "-T", "fields", "-e", "tcp.stream"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout
        return {int(x) for x in out.split()}

    hello = streams("tls.handshake.type == 1")
    return {
        "connections": len(hello),
        "decrypted": len(hello & streams("tls.handshake.type == 20")),
        "kafka": len(hello & streams("kafka")),
    }


def inject_secrets(pcap: Path, keys: Path, out: Path) -> Path:
    """A pcapng with the key log in a Decryption Secrets Block (editcap --inject-secrets)."""
    import subprocess

    subprocess.run(["editcap", "--inject-secrets", f"tls,{keys}", str(pcap), str(out)], check=True, capture_output=True)
    return out


WORKLOADS = {
    "kafka-python": wl_kafka_python,
    "confluent": wl_confluent,
    "aiokafka": wl_aiokafka,
    "admin": wl_admin,
    "errors": wl_errors,
    "sasl": wl_sasl,
    "midstream": wl_midstream,
    "bench": wl_bench,
    "bench-small": wl_bench_small,
    "old-protocol": wl_old_protocol,
    "java-codecs": wl_java_codecs,
    "java-txn": wl_java_txn,
    "java-admin": wl_java_admin,
    "sasl-ak": wl_sasl_ak,
    "secrets-ak": wl_secrets_ak,
    "envelope-ak": wl_envelope_ak,
    "rebalance-ak": wl_rebalance_ak,
    "rebalance-kip848-ak": wl_rebalance_kip848_ak,
    "kraft3-ak": wl_kraft3_ak,
    "kafka4-old-ak": wl_kafka4_old_ak,
    "tls-kafka-python-ak": wl_tls_kafka_python_ak,
    "tls-java-ak": wl_tls_java_ak,
    "tls-confluent-ak": wl_tls_confluent_ak,
    "tls-keyupdate-ak": wl_tls_keyupdate_ak,
}


def _group_protocol(bootstrap: str) -> dict:
    from tests.kafka_jvm import api_versions

    return {"proto": "consumer" if 68 in api_versions(bootstrap) else "classic"}


def _tls_names() -> list[str]:
    from tests.kafka_jvm import SASL_SSL_LISTENER, TLS_LISTENERS

    return [*TLS_LISTENERS, SASL_SSL_LISTENER[0]]


# Asked of the broker before tcpdump starts, so the probe is not in the capture:
# workload -> fn(bootstrap) -> extra keyword arguments.
SETUP = {
    "java-codecs": _group_protocol,
    "tls-kafka-python-ak": lambda a: _create_tls_topics(
        a, [_tls_topic("kpy", n) for n in ("PLAINTEXT", *_tls_names())] + [_tls_topic("aio", AIO_TLS_LISTENER)]
    ),
    "tls-java-ak": lambda a: _create_tls_topics(a, [_tls_topic("jv", n) for n in _tls_names()]),
    "tls-confluent-ak": lambda a: _create_tls_topics(a, [_tls_topic("ck", n) for n in CK_TLS_LISTENERS]),
    "tls-keyupdate-ak": lambda a: _create_tls_topics(a, [_tls_topic("ku", n) for n in KU_TLS_LISTENERS]),
}

# The broker a workload runs against unless --broker says otherwise.
DEFAULT_BROKER = {
    "java-codecs": "kafka",
    "java-txn": "kafka",
    "java-admin": "kafka",
    "sasl-ak": "kafka-sasl",
    "secrets-ak": "kafka-secrets",
    "envelope-ak": "kafka-controller",
    "rebalance-ak": "kafka",
    "rebalance-kip848-ak": "kafka",
    "kraft3-ak": "kafka-cluster",
    "kafka4-old-ak": "kafka-3.9",
    "tls-kafka-python-ak": "kafka-tls",
    "tls-java-ak": "kafka-tls",
    "tls-confluent-ak": "kafka-tls-brokerkeys",
    "tls-keyupdate-ak": "kafka-tls-keyupdate",
}
TLS_KINDS = ("kafka-tls", "kafka-tls-brokerkeys", "kafka-tls-keyupdate")

# The bundled samples: (file name, workload, fixed port or None, broker)
BUNDLED = [
    ("kafka-python-basic.pcap", "kafka-python", None, "tansu"),
    ("confluent-codecs.pcap", "confluent", None, "tansu"),
    ("aiokafka.pcap", "aiokafka", None, "tansu"),
    ("admin.pcap", "admin", None, "tansu"),
    ("errors.pcap", "errors", None, "tansu"),
    ("sasl-rejected.pcap", "sasl", None, "tansu"),
    ("midstream.pcap", "midstream", None, "tansu"),
    ("port-29092.pcap", "kafka-python", 29092, "tansu"),
    ("old-protocol.pcap", "old-protocol", None, "tansu"),
    ("java-codecs-ak.pcap", "java-codecs", None, "kafka"),
    ("java-txn-ak.pcap", "java-txn", None, "kafka"),
    ("java-admin-ak.pcap", "java-admin", None, "kafka"),
    ("kafka-python-ak.pcap", "kafka-python", None, "kafka"),
    ("sasl-ak.pcap", "sasl-ak", None, "kafka-sasl"),
    ("secrets-ak.pcap", "secrets-ak", None, "kafka-secrets"),
    ("envelope-ak.pcap", "envelope-ak", None, "kafka-controller"),
    ("rebalance-ak.pcap", "rebalance-ak", None, "kafka"),
    ("rebalance-kip848-ak.pcap", "rebalance-kip848-ak", None, "kafka"),
    ("kraft3-ak.pcap", "kraft3-ak", None, "kafka-cluster"),
    ("kafka4-old-ak.pcap", "kafka4-old-ak", None, "kafka-3.9"),
    ("tls/tls-kafka-python-ak.pcap", "tls-kafka-python-ak", None, "kafka-tls"),
    ("tls/tls-java-ak.pcap", "tls-java-ak", None, "kafka-tls"),
    ("tls/tls-confluent-ak.pcap", "tls-confluent-ak", None, "kafka-tls-brokerkeys"),
    ("tls/tls-keyupdate-ak.pcap", "tls-keyupdate-ak", None, "kafka-tls-keyupdate"),
]


def start_broker(kind: str, port: int | None = None, broker_keylog: Path | None = None):
    """A broker to start (context manager): Tansu, or Apache Kafka from its
    jars; kafka-sasl adds a SASL_PLAINTEXT listener with SASL_USERS, kafka-secrets
    OAUTHBEARER and delegation tokens on it too; kafka-controller is plain Apache Kafka whose
    controller port is captured too; kafka-cluster is a 3-node KRaft cluster (KafkaCluster, no
    fixed port), every node's client and controller ports captured; kafka-tls has the TLS
    listeners (KafkaBroker(tls=True): one per forced TLS version and suite, and SASL_SSL with
    SASL_USERS), kafka-tls-brokerkeys too, its JVM writing its TLS key log to `broker_keylog`,
    kafka-tls-keyupdate too, its JVM with jdk.tls.keyLimits KU_KEY_LIMITS (KeyUpdates)."""
    if kind in TLS_KINDS:
        from tests.kafka_jvm import KafkaBroker, tls_keylog_args

        jvm_args = ()
        if kind == "kafka-tls-brokerkeys":
            jvm_args = tls_keylog_args(broker_keylog)
        elif kind == "kafka-tls-keyupdate":
            jvm_args = _keyupdate_jvm_args()
        return KafkaBroker(port=port, sasl_users=SASL_USERS, tls=True, jvm_args=jvm_args)
    if kind == "kafka-cluster":
        from tests.kafka_jvm import KafkaCluster

        if port is not None:
            raise SystemExit("--port does not apply to kafka-cluster (its 6 ports are picked free)")
        return KafkaCluster()
    if kind == "kafka-3.9":
        from tests.kafka_jvm import KAFKA_VERSION, KafkaBroker

        if not KAFKA_VERSION.startswith("3."):
            raise SystemExit("kafka4-old-ak.pcap needs Apache Kafka 3.9: run with KAFKAWIRE_KAFKA_VERSION=3.9.1")
        return KafkaBroker(port=port)
    if kind in ("kafka", "kafka-sasl", "kafka-secrets", "kafka-controller"):
        from tests.kafka_jvm import KafkaBroker

        return KafkaBroker(
            port=port,
            sasl_users=SASL_USERS if kind in ("kafka-sasl", "kafka-secrets") else None,
            extra_properties=SECRETS_PROPERTIES if kind == "kafka-secrets" else "",
        )
    return Broker(port=port)


def capture(workload: str, out: Path, port: int | None = None, broker: str | None = None, **kwargs) -> Path:
    """Run one workload against a fresh broker while tcpdump records it (the
    client port only: Apache Kafka's controller port stays out, except for
    kafka-controller; for kafka-sasl the SASL_PLAINTEXT port; for kafka-cluster every node's
    client and controller ports; for kafka-tls* the PLAINTEXT and every TLS listener's port,
    with the key log in OUT.keys, the witness in OUT.json, tshark's check of the key log
    logged, and for tls-kafka-python-ak OUT-dsb.pcapng: the key log in a Decryption Secrets
    Block)."""
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    kind = broker or DEFAULT_BROKER.get(workload, "tansu")
    tmp = Path(tempfile.mkdtemp(prefix="kafkawire-capture-"))
    broker_keylog = tmp / "broker.keys" if kind == "kafka-tls-brokerkeys" else None
    try:
        return _capture(workload, out, port, kind, broker_keylog, **kwargs)
    finally:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


def _capture(workload: str, out: Path, port: int | None, kind: str, broker_keylog: Path | None, **kwargs) -> Path:
    keylog_at = 0
    with start_broker(kind, port, broker_keylog=broker_keylog) as broker:
        if kind in ("kafka-sasl", "kafka-secrets"):
            address, client_port = broker.sasl_address, broker.sasl_port
        elif kind == "kafka-cluster":
            address, client_port = broker.bootstrap, tuple(broker.ports)
        else:
            address, client_port = broker.address, broker.port
        log.info("%s on %s, capturing %s into %s", kind, address, workload, out)
        if workload in SETUP:
            kwargs.update(SETUP[workload](address))
        if workload in (
            "secrets-ak",
            "rebalance-ak",
            "rebalance-kip848-ak",
            "kraft3-ak",
            "kafka4-old-ak",
        ):  # what the clients knew, beside the capture
            kwargs.setdefault("witness", out.with_suffix(".json"))
        if kind in TLS_KINDS:
            # the TLS clients' key log and what they did, beside the capture
            kwargs.update(tls_broker=broker, keylog=out.with_suffix(".keys"), witness=out.with_suffix(".json"))
            if broker_keylog is not None:  # only the broker's secrets of connections made from now on
                keylog_at = broker_keylog.stat().st_size if broker_keylog.exists() else 0
        if kind == "kafka-controller":
            ports = (client_port, broker.controller_port)
        elif kind in TLS_KINDS:
            ports = (client_port, *(p for p, _v, _s in broker.tls_listeners.values()))
        elif kind == "kafka-cluster":
            ports = (*broker.ports, *broker.controller_ports)
        else:
            ports = client_port
        dump = Tcpdump(out, ports, buffer_kib=kwargs.pop("buffer_kib", None))
        try:
            if workload == "midstream":  # the workload starts tcpdump itself
                WORKLOADS[workload](address, start_capture=dump.start, **kwargs)
            elif workload == "kraft3-ak":  # stops tcpdump itself, then reads the nodes' logs
                dump.start()
                WORKLOADS[workload](
                    address, cluster=broker if kind == "kafka-cluster" else None, stop_capture=dump.stop, **kwargs
                )
            else:
                dump.start()
                WORKLOADS[workload](address, **kwargs)
        finally:
            dump.stop()
        if dump.stats:
            log.info("tcpdump: %s", dump.stats)
        if broker_keylog is not None:
            with open(broker_keylog, "rb") as f:
                f.seek(keylog_at)
                out.with_suffix(".keys").write_bytes(f.read())
        if kind in TLS_KINDS:
            keys = out.with_suffix(".keys")
            tls_ports = [p for p, _v, _s in broker.tls_listeners.values()]
            log.info("tshark with %s: %s", keys.name, tls_check(out, keys, tls_ports))
            if workload == "tls-keyupdate-ak":  # tshark's KeyUpdate count per connection, into the witness
                import json

                witness = out.with_suffix(".json")
                text = json.loads(witness.read_text())
                text["key_updates"] = tls_key_updates(out, keys, tls_ports)
                log.info("tshark KeyUpdates: %s", text["key_updates"])
                witness.write_text(json.dumps(text, indent=1) + "\n")
            if workload == "tls-kafka-python-ak":
                dsb = inject_secrets(out, keys, out.with_name(out.stem + "-dsb.pcapng"))
                log.info("%s: the capture with its key log in a Decryption Secrets Block", dsb.name)
    return out


# ------------------------------------------------------------ resegmenting


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    s = sum(array.array("H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return socket.htons(~s & 0xFFFF)


def resegment(src: Path, dst: Path, mss: int = 1448, acks: bool = True) -> tuple[int, int]:
    """Rewrite a loopback capture as a 1500-byte-MTU network would carry it.

    Every IPv4/TCP segment longer than `mss` is split into mss-sized segments
    with consecutive sequence numbers (PSH only on the last one), fresh IP ids
    and correct IP and TCP checksums, 1 us apart. With `acks`, the receiver
    sends a pure ACK after every second full segment, as delayed ACK does.
    Output is Ethernet (DLT_EN10MB); loopback Ethernet frames keep their
    zero MACs. Returns (packets in, packets out).
    """
    import dpkt

    n_in = n_out = 0
    # last (seq_next, ack, window) seen per direction, for synthesised ACKs
    state: dict[tuple, list[int]] = {}
    # Pieces go out 1 us apart and never before the previous packet, so the
    # output stays in time order even when the input packets are closer. Kept in whole
    # microseconds: a float stepped by 1e-6 drifts, and dpkt rounds a time a hair under a
    # whole second to a fraction of 1000000 us, which is no valid pcap record.
    last_us = -1

    def stamp(ts: float) -> float:
        nonlocal last_us
        last_us = max(round(ts * 1_000_000), last_us + 1)
        return last_us / 1_000_000

    with open(src, "rb") as fi, open(dst, "wb") as fo:
        reader = dpkt.pcap.UniversalReader(fi)
        linktype = reader.datalink()
        writer = dpkt.pcap.Writer(fo, snaplen=65535, linktype=dpkt.pcap.DLT_EN10MB, nano=False)
        for ts, buf in reader:
            n_in += 1
            if linktype == dpkt.pcap.DLT_EN10MB:
                eth_hdr, ip_bytes = buf[:14], buf[14:]
                if eth_hdr[12:14] != b"\x08\x00":
                    last_ts = stamp(ts)
                    writer.writepkt(buf, last_ts)
                    n_out += 1
                    continue
            elif linktype in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
                eth_hdr, ip_bytes = b"\x00" * 12 + b"\x08\x00", buf[4:]
            elif linktype in (dpkt.pcap.DLT_RAW, 228):
                eth_hdr, ip_bytes = b"\x00" * 12 + b"\x08\x00", buf
            else:
                raise SystemExit(f"resegment: unsupported link type {linktype}")
            if len(ip_bytes) < 20 or ip_bytes[0] >> 4 != 4 or ip_bytes[9] != 6:
                last_ts = stamp(ts)
                writer.writepkt(eth_hdr + ip_bytes, last_ts)
                n_out += 1
                continue
            ihl = (ip_bytes[0] & 0xF) * 4
            total = struct.unpack(">H", ip_bytes[2:4])[0]
            ip_hdr = bytearray(ip_bytes[:ihl])
            tcp = ip_bytes[ihl:total]
            thl = (tcp[12] >> 4) * 4
            tcp_hdr = bytearray(tcp[:thl])
            data = tcp[thl:]
            src_ip, dst_ip = bytes(ip_hdr[12:16]), bytes(ip_hdr[16:20])
            sport, dport, seq, ack = struct.unpack(">HHII", tcp_hdr[:12])
            flags = tcp_hdr[13]
            window = struct.unpack(">H", tcp_hdr[14:16])[0]
            flow, rev = (src_ip, sport, dst_ip, dport), (dst_ip, dport, src_ip, sport)
            chunks = [data[i : i + mss] for i in range(0, len(data), mss)] or [b""]
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1
                h = bytearray(tcp_hdr)
                struct.pack_into(">I", h, 4, (seq + k * mss) & 0xFFFFFFFF)
                h[13] = flags if last else flags & ~0x09  # PSH and FIN only on the last piece
                h[16:18] = b"\x00\x00"
                pseudo = src_ip + dst_ip + struct.pack(">BBH", 0, 6, len(h) + len(chunk))
                struct.pack_into(">H", h, 16, _csum(pseudo + bytes(h) + chunk))
                last_ts = stamp(ts)
                writer.writepkt(eth_hdr + _ip(ip_hdr, len(h) + len(chunk), n_out) + bytes(h) + chunk, last_ts)
                n_out += 1
                # The receiver ACKs every second full segment it gets.
                if acks and not last and k % 2 == 1 and rev in state:
                    rseq, rwin = state[rev]
                    a = bytearray(tcp_hdr[:20])
                    a[0:4] = struct.pack(">HH", dport, sport)
                    struct.pack_into(">II", a, 4, rseq, (seq + (k + 1) * mss) & 0xFFFFFFFF)
                    a[12], a[13] = 5 << 4, 0x10
                    struct.pack_into(">H", a, 14, rwin)
                    a[16:20] = b"\x00\x00\x00\x00"
                    a_pseudo = dst_ip + src_ip + struct.pack(">BBH", 0, 6, 20)
                    struct.pack_into(">H", a, 16, _csum(a_pseudo + bytes(a)))
                    rip = bytearray(ip_hdr[:20])
                    rip[0] = 0x45
                    rip[12:16], rip[16:20] = dst_ip, src_ip
                    last_ts = stamp(last_ts)
                    writer.writepkt(
                        eth_hdr[6:12] + eth_hdr[0:6] + eth_hdr[12:14] + _ip(rip, 20, n_out) + bytes(a), last_ts
                    )
                    n_out += 1
            state[flow] = [(seq + len(data) + (1 if flags & 0x03 else 0)) & 0xFFFFFFFF, window]
        writer.close()
    return n_in, n_out


def _ip(hdr: bytearray, payload_len: int, ident: int) -> bytes:
    h = bytearray(hdr)
    struct.pack_into(">HH", h, 2, len(h) + payload_len, ident & 0xFFFF)
    h[10:12] = b"\x00\x00"
    struct.pack_into(">H", h, 10, _csum(bytes(h)))
    return bytes(h)


# ------------------------------------------------------- network namespace


def in_netns(name: str, child_argv: list[str]) -> int:
    """Run this script with `child_argv` inside a fresh network namespace whose
    `lo` has MTU 1500 and TSO/GSO/GRO off, so tcpdump sees the segments a
    1500-byte-MTU network carries (at most 1514 bytes per frame) instead of
    loopback's 64 KB super-packets. The namespace is deleted afterwards."""
    import shutil
    import subprocess

    if os.geteuid() != 0:
        raise SystemExit("--netns needs root (ip netns add, ethtool -K)")
    missing = [tool for tool in ("ip", "ethtool") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"--netns needs {' and '.join(missing)}: apt-get install -y ethtool iproute2")
    if subprocess.run(["ip", "netns", "pids", name], capture_output=True).returncode == 0:
        raise SystemExit(f"network namespace {name} already exists: `ip netns del {name}` or pick another --netns")

    def sh(*cmd: str) -> str:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout

    sh("ip", "netns", "add", name)
    try:
        ns = ("ip", "netns", "exec", name)
        sh(*ns, "ip", "link", "set", "lo", "mtu", "1500", "up")
        sh(*ns, "ethtool", "-K", "lo", "tso", "off", "gso", "off", "gro", "off")
        features = dict(
            line.strip().split(": ", 1) for line in sh(*ns, "ethtool", "-k", "lo").splitlines() if ": " in line
        )
        still_on = [
            f
            for f in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload")
            if not features.get(f, "").startswith("off")
        ]
        if still_on:
            raise SystemExit(f"ethtool could not turn off {', '.join(still_on)} on {name}'s lo")
        log.info("netns %s: lo mtu 1500, tso/gso/gro off", name)
        # No timeout: the workload bounds its own waits (broker start, tcpdump, clients).
        return subprocess.run([*ns, sys.executable, str(Path(__file__).resolve()), *child_argv]).returncode
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


def _without(argv: list[str], flag: str) -> list[str]:
    """argv minus `flag VALUE` / `flag=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


# --------------------------------------------------------------------- CLI

# Default output of the bench workloads: (plain loopback, inside --netns)
BENCH_OUT = {"bench": ("loopback.pcap", "large-1500.pcap"), "bench-small": ("small.pcap", "small-1500.pcap")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in WORKLOADS:
        p = sub.add_parser(name, help=WORKLOADS[name].__doc__.split("\n")[0])
        p.add_argument("--out", type=Path, help="pcap to write (default: samples/NAME.pcap or bench/out/)")
        p.add_argument("--port", type=int, help="broker port (default: a free one)")
        mtu = p.add_mutually_exclusive_group()
        mtu.add_argument("--mtu1500", action="store_true", help="also write OUT-1500.pcap resegmented at MSS 1448")
        mtu.add_argument(
            "--netns",
            metavar="NAME",
            help="run broker, clients and tcpdump in a new network namespace NAME whose lo has "
            "MTU 1500 and TSO/GSO/GRO off (root; deleted afterwards)",
        )
        p.add_argument(
            "--broker",
            choices=(
                "tansu",
                "kafka",
                "kafka-sasl",
                "kafka-secrets",
                "kafka-controller",
                "kafka-cluster",
                "kafka-3.9",
                *TLS_KINDS,
            ),
            help=f"broker to run (default: {DEFAULT_BROKER.get(name, 'tansu')})",
        )
        if name == "bench":
            p.add_argument("--messages", type=int, default=300_000)
            p.add_argument("--size", type=int, default=200, help="value size in bytes")
        if name == "bench-small":
            p.add_argument("--seconds", type=float, default=100.0, help="how long the clients run")
            p.add_argument("--scale", type=float, default=1.0, help="multiply every producer's message rate")
    a = sub.add_parser("all", help="rewrite the bundled samples/*.pcap")
    a.add_argument("--only", nargs="+", metavar="FILE", help="only these bundled files (e.g. old-protocol.pcap)")
    t = sub.add_parser("tls-check", help="count a TLS capture's connections tshark decrypts with its key log")
    t.add_argument("pcap", type=Path)
    t.add_argument("--keys", type=Path, help="key log (default: PCAP with suffix .keys)")
    t.add_argument("--witness", type=Path, help="JSON naming the TLS listeners' ports (default: PCAP with .json)")
    r = sub.add_parser("resegment", help="split a loopback capture into 1500-byte-MTU segments")
    r.add_argument("src", type=Path)
    r.add_argument("dst", type=Path)
    r.add_argument("--mss", type=int, default=1448)
    r.add_argument("--no-acks", action="store_true", help="do not synthesise the receiver's ACKs")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.cmd in ("all", "bench", "bench-small") else logging.WARNING,
        format="%(asctime)s %(message)s",
    )
    logging.getLogger("kafka").setLevel(logging.ERROR)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    logging.getLogger("librdkafka").setLevel(logging.CRITICAL)  # the sasl workload fails on purpose

    if args.cmd == "tls-check":
        import json

        witness = json.loads((args.witness or args.pcap.with_suffix(".json")).read_text())
        ports = {name: w["port"] for name, w in witness["listeners"].items() if w["tls_version"]}
        keys = args.keys or args.pcap.with_suffix(".keys")
        print(f"{args.pcap}: {tls_check(args.pcap, keys, list(ports.values()))} (key log {keys})")
        return 0
    if args.cmd == "resegment":
        n_in, n_out = resegment(args.src, args.dst, args.mss, acks=not args.no_acks)
        print(f"{args.src}: {n_in} packets -> {args.dst}: {n_out} packets")
        return 0
    if args.cmd == "all":
        for fname, workload, port, kind in BUNDLED:
            if args.only and fname not in args.only:
                continue
            out = capture(workload, SAMPLES / fname, port=port, broker=kind)
            print(f"{out.relative_to(ROOT)}: {out.stat().st_size} bytes")
        return 0
    if args.out:
        out = args.out.resolve()
    elif args.cmd in BENCH_OUT:
        out = ROOT / "bench" / "out" / BENCH_OUT[args.cmd][bool(args.netns)]
    else:
        out = SAMPLES / f"{args.cmd}.pcap"
    if args.netns:
        status = in_netns(args.netns, [*_without(_without(argv, "--netns"), "--out"), "--out", str(out)])
        if status == 0:
            packets, largest, _ = pcap_facts(out)
            print(f"{out}: {packets} packets, largest {largest} bytes")
            if largest > 1514:
                print(f"warning: {out} has packets above 1514 bytes: an offload was still on", file=sys.stderr)
        return status
    kwargs = {}
    if args.cmd == "bench":
        kwargs = {"messages": args.messages, "size": args.size, "buffer_kib": 262144}
    elif args.cmd == "bench-small":
        kwargs = {"seconds": args.seconds, "scale": args.scale, "buffer_kib": 262144}
    capture(args.cmd, out, port=args.port, broker=args.broker, **kwargs)
    print(f"{out}: {out.stat().st_size} bytes")
    if args.mtu1500:
        seg = out.with_name(out.stem + "-1500.pcap")
        n_in, n_out = resegment(out, seg)
        print(f"{seg}: {seg.stat().st_size} bytes, {n_in} -> {n_out} packets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
