"""Nothing silently dropped: every byte of every Kafka connection is in a frame, a gap or a skip.

The `connections` rows (dissect(connections=True), landed as the `connections` table)
account for each direction: bytes_to_X == frame_bytes_to_X + skipped_bytes_to_X, and
the bytes lost in holes are gap_bytes_to_X. Here the captured TCP payload is counted
independently with dpkt (unique bytes per direction, so retransmitted copies count once)
for every bundled sample, for ../shared/pcaps, and for samples with segments cut out
(holes inside frames and between them); the splitter's own bookkeeping is also checked
on random streams with hypothesis.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissector import dissect
from tests.oracle.frames import Frame, FrameSplitter

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted((ROOT.parent / "shared" / "pcaps").glob("*.pcap*"))


def _ip_of(link: int, buf: bytes):
    if link == dpkt.pcap.DLT_EN10MB:
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data if isinstance(eth.data, (dpkt.ip.IP, dpkt.ip6.IP6)) else None
    if link == 113:  # Linux SLL
        return dpkt.sll.SLL(buf).data
    if link == 276:  # Linux SLL2
        return dpkt.sll2.SLL2(buf).data
    if link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
        return dpkt.loopback.Loopback(buf).data
    if link in (dpkt.pcap.DLT_RAW, 101, 228, 229, 12, 14):
        return dpkt.ip.IP(buf) if buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
    raise AssertionError(f"link type {link} not handled by the test")


def _endpoint(ip, port: int) -> str:
    return (
        f"{socket.inet_ntop(socket.AF_INET, ip)}:{port}"
        if len(ip) == 4
        else f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"
    )


def unique_payload(path: Path) -> dict[tuple[str, str], int]:
    """(sender, receiver) -> TCP payload bytes captured in that direction, each sequence
    number counted once (the union of the segments' ranges)."""
    ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
    first: dict[tuple[str, str], int] = {}
    with open(path, "rb") as f:
        reader = dpkt.pcap.UniversalReader(f)
        link = reader.datalink()
        for _, buf in reader:
            ip = _ip_of(link, buf)
            if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            if not tcp.data:
                continue
            key = (_endpoint(ip.src, tcp.sport), _endpoint(ip.dst, tcp.dport))
            base = first.setdefault(key, tcp.seq)
            start = (tcp.seq - base + (1 << 31)) % (1 << 32) - (1 << 31)  # unwrapped against the first segment
            ranges.setdefault(key, []).append((start, start + len(tcp.data)))
    out = {}
    for key, rs in ranges.items():
        total, end = 0, None
        for a, b in sorted(rs):
            if end is None or a >= end:
                total += b - a
                end = b
            elif b > end:
                total += b - end
                end = b
        out[key] = total
    return out


def connections(paths) -> tuple[list, list]:
    items = list(dissect(paths, connections=True))
    return [x for x in items if x.type == "connection"], [x for x in items if x.type == "anomaly"]


def check(conns, anomalies, payload: dict) -> None:
    for k in conns:
        for to, sender, receiver in (("broker", k.client, k.broker), ("client", k.broker, k.client)):
            got = getattr(k, f"bytes_to_{to}")
            framed, skipped = getattr(k, f"frame_bytes_to_{to}"), getattr(k, f"skipped_bytes_to_{to}")
            assert framed + skipped == got, (k.connection, to, framed, skipped, got)
            assert got == payload.get((sender, receiver), 0), (k.connection, to, got, payload.get((sender, receiver)))
            if skipped:  # every skipped run is named by an anomaly of the connection
                assert any(a.connection == k.connection for a in anomalies), (k.connection, to)
        assert k.gap_bytes_to_broker + k.gap_bytes_to_client == k.gap_bytes


@pytest.mark.parametrize("path", SAMPLES + SHARED, ids=lambda p: p.name)
def test_every_payload_byte_is_in_a_frame_or_a_skip(path):
    conns, anomalies = connections([path])
    payload = unique_payload(path)
    assert conns
    check(conns, anomalies, payload)
    # the Kafka connections are all the payload-carrying TCP connections of these captures
    seen = {(k.client, k.broker) for k in conns} | {(k.broker, k.client) for k in conns}
    assert set(payload) <= seen
    if path.parent.name == "samples" and path.name != "midstream.pcap":
        assert sum(k.skipped_bytes_to_broker + k.skipped_bytes_to_client for k in conns) == 0


@pytest.mark.slow  # a Spark landing (the engines' tables are compared whole in the default run: test_spark.py)
def test_the_connections_table_of_both_engines_carries_the_accounting(spark, tmp_path):
    from landing.local import land_local
    from landing.spark import land_spark
    from landing.writer import dataset

    path = ROOT / "samples" / "java-codecs-ak.pcap"
    payload = unique_payload(path)
    land_local([str(path)], tmp_path / "local")
    land_spark([str(path)], str(tmp_path / "spark"), spark=spark)
    for engine in ("local", "spark"):
        # a Delta table's files may hold its partition column too (delta-spark 4.4 writes it): read
        # through its log, as the docs ask of every reader
        rows = dataset(tmp_path / engine, "connections").to_table().to_pylist()
        assert len(rows) == 15, engine
        for r in rows:
            for to, pair in (("broker", (r["client"], r["broker"])), ("client", (r["broker"], r["client"]))):
                assert r[f"frame_bytes_to_{to}"] + r[f"skipped_bytes_to_{to}"] == r[f"bytes_to_{to}"] == payload[pair]
                assert r[f"skipped_bytes_to_{to}"] == r[f"gap_bytes_to_{to}"] == 0


def _drop(src: Path, dst: Path, pick) -> list[int]:
    """Copy a capture without the data segments `pick(index, payload_len)` chooses; their lengths."""
    dropped = []
    with open(src, "rb") as f, open(dst, "wb") as o:
        reader = dpkt.pcap.Reader(f)
        w = dpkt.pcap.Writer(o, linktype=reader.datalink(), snaplen=65535)
        i = 0
        for ts, buf in reader:
            ip = _ip_of(reader.datalink(), buf)
            if ip is not None and isinstance(ip.data, dpkt.tcp.TCP) and ip.data.data:
                i += 1
                if pick(i, len(ip.data.data)):
                    dropped.append(len(ip.data.data))
                    continue
            w.writepkt(buf, ts)
    return dropped


@pytest.mark.parametrize(
    "name,seed",
    [("java-codecs-ak.pcap", 1), ("kafka-python-basic.pcap", 2), ("confluent-codecs.pcap", 3), ("secrets-ak.pcap", 4)],
)
def test_holes_are_gaps_and_what_they_damage_is_skipped(tmp_path, name, seed):
    rng = random.Random(seed)
    cut = tmp_path / name
    # about one data segment in seven: holes inside frames and between them (64 KB loopback segments
    # carry several frames; tcpdump on lo also captured some segments twice, so a copy may survive)
    assert _drop(ROOT / "samples" / name, cut, lambda i, n: i > 4 and rng.random() < 0.15)
    conns, anomalies = connections([cut])
    whole, left = unique_payload(ROOT / "samples" / name), unique_payload(cut)
    check(conns, anomalies, left)
    for k in conns:  # what the holes took, per direction, is each row's gap bytes
        assert k.gap_bytes_to_broker == whole[(k.client, k.broker)] - left.get((k.client, k.broker), 0)
        assert k.gap_bytes_to_client == whole[(k.broker, k.client)] - left.get((k.broker, k.client), 0)
    assert sum(k.gap_bytes for k in conns) > 0
    assert sum(k.skipped_bytes_to_broker + k.skipped_bytes_to_client for k in conns) > 0
    assert {a.kind for a in anomalies} & {"gap_in_frame", "resync"}
    # a connection whose first request fell in a hole cannot be told from non-Kafka traffic: it is
    # not dissected, but named by an anomaly, so its bytes are not dropped silently
    missing = {frozenset(pair) for pair in whole} - {frozenset((k.client, k.broker)) for k in conns}
    assert len([a for a in anomalies if a.kind == "unrecognised_connection"]) == len(missing)


# -- the splitter's own bookkeeping --------------------------------------------------------

_piece = st.one_of(
    st.binary(max_size=40).map(lambda b: ("frame", len(b).to_bytes(4, "big") + b)),
    st.binary(min_size=1, max_size=12).map(lambda b: ("junk", b)),
    st.integers(0, 30).map(lambda n: ("gap", n)),
    st.just(("bad", (-5).to_bytes(4, "big", signed=True))),
)


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(_piece, max_size=30),
    cuts=st.lists(st.integers(1, 17), min_size=1, max_size=8),
    hunting=st.booleans(),
)
def test_splitter_accounts_for_every_byte_fed(pieces, cuts, hunting):
    sp = FrameSplitter(min_frame_size=0, max_frame_size=64, hunting=hunting)
    fed = framed = 0
    out = []
    k = 0
    for kind, v in pieces:
        if kind == "gap":
            out += sp.gap(v, 0.0)
            continue
        pos = 0
        while pos < len(v):  # fed in uneven chunks, as TCP segments cut a stream
            n = cuts[k % len(cuts)]
            k += 1
            out += sp.feed(v[pos : pos + n], 0.0)
            fed += len(v[pos : pos + n])
            pos += n
    out += sp.finish(1.0)
    framed = sum(4 + len(f.data) for f in out if isinstance(f, Frame))
    assert framed + sp.dropped == fed and sp.buffered == 0


def test_a_second_gap_past_a_damaged_frames_end_does_not_eat_the_next_frame():
    sp = FrameSplitter(min_frame_size=0, max_frame_size=64)
    assert sp.feed((20).to_bytes(4, "big") + b"x" * 5, 0.0) == []
    assert [a.kind for a in sp.gap(5, 0.0)] == ["gap_in_frame"]  # 10 bytes of that frame still to skip ...
    assert sp.gap(50, 0.0) == []  # ... but the frame ended inside this hole
    out = sp.feed((3).to_bytes(4, "big") + b"abc", 1.0)
    assert [f.data for f in out if isinstance(f, Frame)] == [b"abc"]
    assert sp.dropped == 9 and sp.buffered == 0
