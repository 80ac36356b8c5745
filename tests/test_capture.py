"""The oracle's capture reader (tests/oracle/capture.py, which tests/test_native_tcp.py holds the native
core to): file formats, link types, IP versions, faults."""

from __future__ import annotations

import gzip
import os
import struct
from decimal import Decimal

import pytest
from scapy.layers.inet import IP, TCP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop

from tests.oracle.capture import CaptureAnomaly, Packet, read_packets
from tests.pcapgen import (
    ETHERNET,
    IPV4,
    IPV6,
    LOOP,
    NULL,
    RAW,
    SLL,
    SLL2,
    Flow,
    frame,
    seed_writers,
    write_pcap,
    write_pcapng,
)

# Facts about ../shared/pcaps, computed once with tshark 4.x:
#   tshark -r F -Y tcp | wc -l ; tshark -r F -T fields -e tcp.len (sum, non-zero count)
#   tshark -r F -Y tcp.flags.syn==1 | wc -l ; -Y tcp.flags.reset==1 ; -c1 -e frame.time_epoch
REAL = {
    # file: (tcp packets, payload bytes, packets with payload, SYN, RST, first frame epoch)
    "ck_compression.pcap": (327, 32158, 167, 30, 3, 1795295264.223898),
    "errors.pcap": (234, 11103, 118, 22, 1, 1795295307.418203),
    "kpy_basic.pcap": (199, 31807, 108, 18, 0, 1795295254.677099),
    "midstream.pcap": (61, 7161, 35, 0, 1, 1795295373.307299),
}


def packets(path):
    return list(read_packets([path]))


def only(items, cls):
    return [x for x in items if isinstance(x, cls)]


def basic_flow(**kw) -> list:
    f = Flow(**kw)
    return f.handshake() + [f.send("c", b"hello"), f.send("s", b"world!")] + f.close()


def summary(items):
    return [(p.src, p.sport, p.dst, p.dport, p.flags, p.payload) for p in only(items, Packet)]


FLOW_SUMMARY = [
    ("10.0.0.1", 40000, "10.0.0.2", 9092, 0x02, b""),
    ("10.0.0.2", 9092, "10.0.0.1", 40000, 0x12, b""),
    ("10.0.0.1", 40000, "10.0.0.2", 9092, 0x10, b""),
    ("10.0.0.1", 40000, "10.0.0.2", 9092, 0x18, b"hello"),
    ("10.0.0.2", 9092, "10.0.0.1", 40000, 0x18, b"world!"),
    ("10.0.0.1", 40000, "10.0.0.2", 9092, 0x11, b""),
    ("10.0.0.2", 9092, "10.0.0.1", 40000, 0x11, b""),
    ("10.0.0.1", 40000, "10.0.0.2", 9092, 0x10, b""),
]


# ---------------------------------------------------------------- real captures


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_capture_counts(shared_dir, name):
    count, payload, with_payload, syn, rst, first_ts = REAL[name]
    items = packets(shared_dir / "pcaps" / name)
    pkts = only(items, Packet)
    assert len(items) == len(pkts) == count
    assert [p.index for p in pkts] == list(range(1, count + 1))
    assert sum(len(p.payload) for p in pkts) == payload
    assert sum(1 for p in pkts if p.payload) == with_payload
    assert sum(1 for p in pkts if p.flags & 0x02) == syn
    assert sum(1 for p in pkts if p.flags & 0x04) == rst
    assert pkts[0].ts == pytest.approx(first_ts, abs=1e-6)
    assert all(p.missing == 0 for p in pkts)
    assert {p.src for p in pkts} == {"127.0.0.1"} and all(9092 in (p.sport, p.dport) for p in pkts)


def test_real_first_packet_fields(shared_dir):
    p = packets(shared_dir / "pcaps" / "kpy_basic.pcap")[0]
    assert (p.src, p.sport, p.dst, p.dport, p.seq, p.ack, p.flags, p.payload, p.index) == (
        "127.0.0.1",
        32906,
        "127.0.0.1",
        9092,
        3165657890,
        0,
        0x02,
        b"",
        1,
    )


def test_several_files_merged_by_time(shared_dir):
    names = sorted(REAL)  # alphabetical, not time order
    items = list(read_packets([shared_dir / "pcaps" / n for n in names]))
    assert len(items) == sum(v[0] for v in REAL.values()) == 821
    assert [p.index for p in items] == list(range(1, 822))
    ts = [p.ts for p in items]
    assert ts == sorted(ts)
    # time order of the files: kpy_basic, ck_compression, errors, midstream
    assert items[0].ts == pytest.approx(REAL["kpy_basic.pcap"][5], abs=1e-6)
    assert items[199].ts == pytest.approx(REAL["ck_compression.pcap"][5], abs=1e-6)


# ---------------------------------------------------------------- link types


@pytest.mark.parametrize("linktype", [ETHERNET, SLL, SLL2, NULL, LOOP, RAW, IPV4, 12, 14])
def test_link_types_ipv4(tmp_path, linktype):
    path = write_pcap(tmp_path / "x.pcap", basic_flow(), linktype=linktype)
    assert summary(packets(path)) == FLOW_SUMMARY


def test_null_big_endian_host(tmp_path):
    recs = [(float(p.time), frame(p, NULL, null_big_endian=True)) for p in basic_flow()]
    path = write_pcap(tmp_path / "x.pcap", recs, linktype=NULL)
    assert summary(packets(path)) == FLOW_SUMMARY


@pytest.mark.parametrize("vlans", [((0x8100, 100),), ((0x88A8, 10), (0x8100, 20)), ((0x9100, 7), (0x8100, 8))])
def test_vlan_and_qinq(tmp_path, vlans):
    path = write_pcap(tmp_path / "x.pcap", basic_flow(), vlans=vlans)
    raw = path.read_bytes()
    assert raw[24 + 16 + 12 : 24 + 16 + 14] == struct.pack("!H", vlans[0][0])  # the tag is really there
    assert summary(packets(path)) == FLOW_SUMMARY


@pytest.mark.parametrize("linktype", [ETHERNET, SLL2, NULL, IPV6, RAW])
def test_ipv6(tmp_path, linktype):
    pkts = basic_flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    items = packets(write_pcap(tmp_path / "x.pcap", pkts, linktype=linktype))
    expect = [
        ("fd00::1" if s == "10.0.0.1" else "fd00::2", sp, "fd00::1" if d == "10.0.0.1" else "fd00::2", dp, fl, pl)
        for s, sp, d, dp, fl, pl in FLOW_SUMMARY
    ]
    assert summary(items) == expect


def test_ipv6_extension_headers_skipped(tmp_path):
    pkt = (
        IPv6(src="::1", dst="::2")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / TCP(sport=1, dport=9092, seq=7, flags="PA")
        / b"payload"
    )
    pkt = IPv6(bytes(pkt))
    pkt.time = 1.0
    [p] = packets(write_pcap(tmp_path / "x.pcap", [pkt], linktype=RAW))
    assert (p.src, p.dst, p.seq, p.payload, p.missing) == ("::1", "::2", 7, b"payload", 0)


def test_non_tcp_skipped_and_index_counts_every_frame(tmp_path):
    f = Flow()
    udp = IP(bytes(IP(src="10.0.0.9", dst="10.0.0.8", proto=17) / (b"\x00" * 12)))
    udp.time = f.t0
    recs = [udp, f.send("c", b"a"), (f.t0, b"\xff" * 10), f.send("c", b"b")]  # last-but-one: junk ethernet
    items = packets(write_pcap(tmp_path / "x.pcap", recs))
    assert [(p.payload, p.index) for p in items] == [(b"a", 2), (b"b", 4)]


def test_ethernet_padding_not_payload(tmp_path):
    f = Flow()
    pkt = f.send("c", b"ab")
    padded = frame(pkt) + b"\x00" * 6  # 14 + 42 bytes < 60: NICs pad to the minimum frame
    [p] = packets(write_pcap(tmp_path / "x.pcap", [(1.0, padded)]))
    assert (p.payload, p.missing) == (b"ab", 0)


def test_unknown_linktype_reported_once(tmp_path):
    recs = [(1.0, b"\x00" * 60), (2.0, b"\x00" * 60)]
    items = packets(write_pcap(tmp_path / "x.pcap", recs, linktype=147))
    assert len(items) == 1 and isinstance(items[0], CaptureAnomaly)
    assert (items[0].kind, items[0].index) == ("unknown_linktype", 1)
    assert "147" in items[0].detail


def test_ipv4_fragment_is_anomaly(tmp_path):
    whole = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=9092, flags="PA") / (b"x" * 64)
    frags = [IP(bytes(x)) for x in fragment(whole, fragsize=32)]
    for i, x in enumerate(frags):
        x.time = 10.0 + i
    items = packets(write_pcap(tmp_path / "x.pcap", frags, linktype=RAW))
    assert [(a.kind, a.index, a.ts) for a in items] == [
        ("ipv4_fragment", 1, 10.0),
        ("ipv4_fragment", 2, 11.0),
        ("ipv4_fragment", 3, 12.0),
    ]
    assert "offset 0, more=True" in items[0].detail and "offset 64, more=False" in items[2].detail


# ---------------------------------------------------------------- truncation


def test_snaplen_missing_bytes(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"A" * 100), f.send("c", b"B" * 10)]
    # 14 ethernet + 20 IP + 20 TCP = 54 header bytes; snaplen 94 keeps 40 payload bytes
    items = packets(write_pcap(tmp_path / "x.pcap", pkts, snaplen=94))
    data = [(p.payload, p.missing) for p in items if p.payload or p.missing]
    assert data == [(b"A" * 40, 60), (b"B" * 10, 0)]


def test_snaplen_cutting_tcp_header_is_anomaly(tmp_path):
    f = Flow()
    items = packets(write_pcap(tmp_path / "x.pcap", [f.send("c", b"A" * 100)], snaplen=40))
    assert [(a.kind, a.index) for a in items] == [("truncated_packet", 1)]


# ---------------------------------------------------------------- file formats


def test_nanosecond_pcap(tmp_path):
    pkt = Flow().send("c", b"x")
    recs = [(Decimal("1700000000.123456789"), frame(pkt)), (Decimal("1700000000.999999999"), frame(pkt))]
    path = write_pcap(tmp_path / "x.pcap", recs, nano=True)
    assert path.read_bytes()[:4] == b"\x4d\x3c\xb2\xa1"
    a, b = packets(path)
    assert a.ts == 1700000000.123456789 and b.ts == 1700000000.999999999
    assert b.ts - a.ts == pytest.approx(0.87654321, abs=1e-6)


def test_big_endian_pcap(tmp_path):
    path = write_pcap(tmp_path / "x.pcap", basic_flow(), big_endian=True)
    assert path.read_bytes()[:4] == b"\xa1\xb2\xc3\xd4"
    assert summary(packets(path)) == FLOW_SUMMARY


def test_pcapng_two_interfaces_two_link_types(tmp_path):
    pkts = basic_flow()
    t_ns = 1_700_000_000_000_000_001
    recs = []
    for i, p in enumerate(pkts):
        if i % 2 == 0:  # interface 0: Ethernet, ns resolution
            recs.append((0, t_ns + i * 1000, frame(p, ETHERNET)))
        else:  # interface 1: SLL2, us resolution
            recs.append((1, t_ns // 1000 + i, frame(p, SLL2)))
    path = write_pcapng(tmp_path / "x.pcapng", [(ETHERNET, 9), (SLL2, 6)], recs)
    items = packets(path)
    assert summary(items) == FLOW_SUMMARY
    assert items[0].ts == 1_700_000_000.000000001 and items[1].ts == pytest.approx(1_700_000_000.000001, abs=1e-7)
    assert [p.index for p in items] == list(range(1, 9))


def test_pcapng_power_of_two_resolution(tmp_path):
    pkt = Flow().send("c", b"x")
    path = write_pcapng(tmp_path / "x.pcapng", [(RAW, 0x80 | 10)], [(0, 3 * 1024 + 512, bytes(pkt))])
    [p] = packets(path)
    assert p.ts == 3.5 and p.payload == b"x"


def test_gzip_detected_by_magic_not_name(tmp_path):
    path = write_pcap(tmp_path / "plain-name.pcap", basic_flow(), compress=True)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert summary(packets(path)) == FLOW_SUMMARY
    ng = write_pcapng(tmp_path / "x", [(RAW, 6)], [(0, 1, bytes(basic_flow()[3]))], compress=True)
    assert [p.payload for p in packets(ng)] == [b"hello"]


def test_directory_of_rotated_files_in_time_order(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", bytes([65 + i]) * 3) for i in range(9)] + f.close()
    rot = tmp_path / "rot"
    rot.mkdir()
    # tcpdump -C names: cap, cap1, cap2 ... ; name order cap, cap1, cap10, cap2 differs from time order
    chunks = [pkts[i : i + 3] for i in range(0, len(pkts), 3)]
    names = ["cap", "cap1", "cap2", "cap3", "cap10"][: len(chunks)]
    for name, chunk in zip(names, chunks, strict=True):
        write_pcap(rot / name, chunk)
    (rot / ".hidden").write_bytes(b"ignored")
    items = packets(rot)
    assert [p.payload for p in items if p.payload] == [bytes([65 + i]) * 3 for i in range(9)]
    assert [p.index for p in items] == list(range(1, len(pkts) + 1))
    assert [p.ts for p in items] == sorted(p.ts for p in items)


def test_overlapping_files_interleave(tmp_path):
    f = Flow()
    pkts = [f.send("c", bytes([48 + i])) for i in range(6)]
    write_pcap(tmp_path / "even.pcap", pkts[0::2])
    write_pcap(tmp_path / "odd.pcap", pkts[1::2])
    items = list(read_packets([tmp_path / "odd.pcap", tmp_path / "even.pcap"]))
    assert b"".join(p.payload for p in items) == b"012345"


# ---------------------------------------------------------------- faults


def test_truncated_file_keeps_packets_before(tmp_path):
    path = write_pcap(tmp_path / "x.pcap", basic_flow())
    blob = path.read_bytes()
    path.write_bytes(blob[:-10])  # cut inside the last record
    items = packets(path)
    assert summary(items) == FLOW_SUMMARY[:-1]
    assert isinstance(items[-1], CaptureAnomaly) and items[-1].kind == "truncated_file"
    assert "cut" in items[-1].detail and str(path) in items[-1].detail


def test_corrupt_record_header_stops_file(tmp_path):
    path = write_pcap(tmp_path / "x.pcap", basic_flow())
    blob = bytearray(path.read_bytes())
    third = 24 + 2 * (16 + 54)  # offset of the 3rd record (54-byte frames)
    blob[third + 8 : third + 12] = struct.pack("<I", 0x7FFFFFFF)
    path.write_bytes(bytes(blob))
    items = packets(path)
    assert summary(items) == FLOW_SUMMARY[:2]
    assert (items[-1].kind, items[-1].index) == ("corrupt_file", 2)
    assert f"offset {third}" in items[-1].detail


def test_corrupt_pcapng_block(tmp_path):
    pkts = basic_flow()
    path = write_pcapng(tmp_path / "x.pcapng", [(RAW, 6)], [(0, i, bytes(p)) for i, p in enumerate(pkts)])
    blob = bytearray(path.read_bytes())
    blob[-4:] = b"\x00\x00\x00\x00"  # trailing length of the last block
    path.write_bytes(bytes(blob))
    items = packets(path)
    assert summary(items) == FLOW_SUMMARY[:-1]
    assert items[-1].kind == "corrupt_file" and "trailing length" in items[-1].detail


def test_not_a_capture_and_empty_file(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"hello world, not a pcap")
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    header_only = tmp_path / "header-only.pcap"
    header_only.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    items = list(read_packets([junk, empty, header_only]))
    assert sorted(a.kind for a in items) == ["corrupt_file", "empty_file", "empty_file"]
    assert any("unknown file magic 68656c6c" in a.detail for a in items)
    assert any(str(empty) in a.detail and "0 bytes" in a.detail for a in items)
    assert any(str(header_only) in a.detail and "no packets" in a.detail for a in items)


def test_truncated_gzip(tmp_path):
    f = Flow()
    pkts = [f.send("c", os.urandom(1000)) for _ in range(200)]
    path = write_pcap(tmp_path / "x.pcap.gz", pkts, compress=True)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    items = packets(path)
    got = only(items, Packet)
    assert 0 < len(got) < 200 and [bytes(p.payload) for p in got] == [bytes(p[TCP].payload) for p in pkts[: len(got)]]
    assert items[-1].kind == "truncated_file" and "EOFError" in items[-1].detail


def test_bad_file_among_good_ones(tmp_path, shared_dir):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(gzip.compress(b"\x00" * 100))
    items = list(read_packets([shared_dir / "pcaps" / "midstream.pcap", bad]))
    assert len(only(items, Packet)) == 61
    assert [a.kind for a in only(items, CaptureAnomaly)] == ["corrupt_file"]


# ---------------------------------------------------------------- robustness

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.oracle.tcp import Reassembler  # noqa: E402

_SEEDS = seed_writers(basic_flow())


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(sorted(_SEEDS)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 10**6),
)
def test_mutated_files_never_raise(tmp_path_factory, kind, edits, cut):
    path = _SEEDS[kind](tmp_path_factory.mktemp("fz") / "x")
    blob = bytearray(path.read_bytes())
    for pos, val in edits:
        blob[pos % len(blob)] = val
    path.write_bytes(bytes(blob[: len(blob) - cut % 40]))
    items = list(read_packets([path]))
    assert all(isinstance(x, (Packet, CaptureAnomaly)) for x in items)
    assert sum(isinstance(x, CaptureAnomaly) and x.kind.endswith("_file") for x in items) <= 1
    r = Reassembler(max_buffer_per_direction=1000)
    for x in items:
        if isinstance(x, Packet):
            r.feed(x)
    r.finish()


def test_64k_loopback_segment(tmp_path):
    f = Flow(client=("127.0.0.1", 50000), server=("127.0.0.1", 9092))
    big = bytes(range(256)) * 255 + b"tail"  # 65284 bytes: IPv4 total length 65324
    items = packets(write_pcap(tmp_path / "x.pcap", f.handshake() + [f.send("c", big)]))
    assert (items[-1].payload, items[-1].missing) == (big, 0)


def test_ipv4_total_length_zero_means_captured_length(tmp_path):
    pkt = Flow().send("c", b"segmentation offload")
    raw = bytearray(bytes(pkt))
    raw[2:4] = b"\x00\x00"
    [p] = packets(write_pcap(tmp_path / "x.pcap", [(1.0, bytes(raw))], linktype=RAW))
    assert (p.payload, p.missing) == (b"segmentation offload", 0)


def test_pcapng_from_scapy_packets(tmp_path):
    pkts = basic_flow()
    path = write_pcapng(tmp_path / "x.pcapng", [(SLL, 9), (IPV4, 6)], [(i % 2, p) for i, p in enumerate(pkts)])
    items = packets(path)
    assert summary(items) == FLOW_SUMMARY
    assert [p.ts for p in items] == pytest.approx([float(p.time) for p in pkts], abs=1e-6)


def _ng_block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


_SHB = _ng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
_IDB = _ng_block(1, struct.pack("<HHI", RAW, 0, 0))


@pytest.mark.parametrize(
    "blocks,detail",
    [
        (_IDB + _ng_block(6, b""), "bad block length 12 at offset 48 (too short for block type 6)"),
        (_IDB + _ng_block(2, b"x" * 8), "bad block length 20 at offset 48 (too short for block type 2)"),
        (_ng_block(1, b"\x01\x00"), "bad block length 16 at offset 28 (too short for block type 1)"),
        (_ng_block(3, b""), "bad block length 12 at offset 28 (too short for block type 3)"),
        (
            _ng_block(1, struct.pack("<HHI", RAW, 0, 0) + struct.pack("<HH", 14, 8)),
            "interface block at offset 28: option 14 of 8 bytes runs past the block",
        ),
    ],
    ids=["epb", "pb", "idb", "spb", "idb-option"],
)
def test_pcapng_blocks_too_short_for_their_fields_are_corrupt(tmp_path, blocks, detail):
    # a short block used to be read past its end: garbage from the next block, or struct.error
    # escaping the reader when the file ended there
    path = tmp_path / "short.pcapng"
    path.write_bytes(_SHB + blocks)
    items = list(read_packets([path]))
    assert [(x.kind, x.detail) for x in items] == [("corrupt_file", f"{path}: {detail}")]


def test_an_uncompressed_capture_is_read_without_pythons_opener(monkeypatch, tmp_path):
    """The native core reads a plain pcap/pcapng on local disk itself; anything else (compressed, a
    stream, a URI) still goes through dissector.files.open_capture. Either way the items are alike."""
    from pathlib import Path

    import dissector
    import dissector.files as files

    calls: list = []
    real = files.open_capture
    monkeypatch.setattr(files, "open_capture", lambda p: (calls.append(p), real(p))[1])
    plain = Path(__file__).resolve().parents[1] / "samples" / "errors.pcap"
    gz = tmp_path / "errors.pcap.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    direct = list(dissector.dissect([str(plain)], connections=True))
    assert calls == [] and len(direct) > 10
    opened = list(dissector.dissect([str(gz)], connections=True))
    assert calls == [str(gz)]
    assert opened == direct
