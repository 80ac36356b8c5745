"""dissector.tcp: reassembly events for real captures and each TCP pathology."""

from __future__ import annotations

import collections
from itertools import pairwise

import pytest

from tests.oracle.capture import Packet, read_packets
from tests.oracle.tcp import ACK_PROOF, Close, Data, Gap, Open, Reassembler, StreamAnomaly
from tests.pcapgen import Flow, write_pcap

C, S = ("10.0.0.1", 40000), ("10.0.0.2", 9092)

# Unique TCP payload per direction ("sport>dport"), computed once from
# tshark -T fields -e tcp.srcport -e tcp.dstport -e tcp.seq_raw -e tcp.len
# as the union of [seq, seq+len) intervals (retransmissions counted once;
# ck_compression.pcap frame 301 is a 59-byte retransmission, so its TCP payload
# sums to 32158 but its unique bytes to 32099).
UNIQUE = {
    "ck_compression.pcap": {
        "9092>48740": 341,
        "9092>48744": 519,
        "9092>48758": 425,
        "9092>48774": 449,
        "9092>48782": 428,
        "9092>48798": 455,
        "9092>48814": 426,
        "9092>48826": 451,
        "9092>48838": 426,
        "9092>48848": 451,
        "9092>48858": 426,
        "9092>48870": 583,
        "9092>48882": 806,
        "9092>48890": 9717,
        "9092>48900": 2465,
        "48740>9092": 96,
        "48744>9092": 323,
        "48758>9092": 134,
        "48774>9092": 1275,
        "48782>9092": 143,
        "48798>9092": 1655,
        "48814>9092": 137,
        "48826>9092": 928,
        "48838>9092": 137,
        "48848>9092": 1057,
        "48858>9092": 137,
        "48870>9092": 1944,
        "48882>9092": 138,
        "48890>9092": 3591,
        "48900>9092": 2036,
    },
    "errors.pcap": {
        "9092>33140": 341,
        "9092>33148": 700,
        "9092>33162": 501,
        "9092>33178": 373,
        "9092>33182": 501,
        "9092>33198": 1242,
        "9092>50112": 384,
        "9092>50126": 1402,
        "9092>50136": 1390,
        "33140>9092": 73,
        "33148>9092": 341,
        "33162>9092": 79,
        "33178>9092": 327,
        "33182>9092": 79,
        "33198>9092": 1318,
        "50112>9092": 145,
        "50126>9092": 882,
        "50136>9092": 953,
        "50150>9092": 37,
        "50158>9092": 35,
    },
    "kpy_basic.pcap": {
        "9092>32906": 341,
        "9092>32922": 1577,
        "9092>32936": 514,
        "9092>32950": 439,
        "9092>32964": 514,
        "9092>32976": 372,
        "9092>32992": 514,
        "9092>32998": 11967,
        "9092>33012": 1252,
        "32906>9092": 73,
        "32922>9092": 650,
        "32936>9092": 89,
        "32950>9092": 8280,
        "32964>9092": 89,
        "32976>9092": 1686,
        "32992>9092": 79,
        "32998>9092": 1811,
        "33012>9092": 1560,
    },
    "midstream.pcap": {
        "9092>59062": 246,
        "9092>59078": 2769,
        "9092>59090": 258,
        "59062>9092": 2194,
        "59078>9092": 804,
        "59090>9092": 890,
    },
}
# connections, Close reasons, SYN-opened connections (tshark -Y "tcp.flags.syn==1 && tcp.flags.ack==0")
CONNS = {
    "ck_compression.pcap": (15, {"fin": 12, "rst": 3}, 15),
    "errors.pcap": (11, {"fin": 10, "rst": 1}, 11),
    "kpy_basic.pcap": (9, {"fin": 9}, 9),
    "midstream.pcap": (3, {"fin": 2, "rst": 1}, 0),
}


def reassemble(items, **kw) -> list:
    r = Reassembler(**kw)
    out = []
    for p in items:
        if isinstance(p, Packet):
            out += r.feed(p)
    return out + r.finish()


def events(tmp_path, pkts, *, snaplen=262144, merge=True, **kw) -> list[tuple]:
    """Write, read back and reassemble; events as plain tuples.

    Consecutive Data of one direction are joined (merge=True) so tests state
    the byte stream, not how it was cut."""
    path = write_pcap(tmp_path / "t.pcap", pkts, snaplen=snaplen)
    out: list[tuple] = []
    for e in reassemble(read_packets([path]), **kw):
        side = None if isinstance(e, (Open, Close, StreamAnomaly)) else ("s" if e.sender[1] == 9092 else "c")
        if isinstance(e, Data):
            if merge and out and out[-1][:3] == ("data", e.conn, side):
                out[-1] = ("data", e.conn, side, out[-1][3] + e.data)
            else:
                out.append(("data", e.conn, side, e.data))
        elif isinstance(e, Gap):
            out.append(("gap", e.conn, side, e.size))
        elif isinstance(e, Open):
            out.append(("open", e.conn, e.client, e.server, e.syn_seen))
        elif isinstance(e, Close):
            out.append(("close", e.conn, e.reason))
        else:
            out.append(("anomaly", e.conn, e.kind))
    return out


OPEN0 = ("open", 0, C, S, True)


# ---------------------------------------------------------------- real captures


@pytest.mark.parametrize("name", sorted(UNIQUE))
def test_real_bytes_equal_unique_payload(shared_dir, name):
    evs = reassemble(read_packets([shared_dir / "pcaps" / name]))
    got = collections.Counter()
    for e in evs:
        if isinstance(e, Data):
            got[f"{e.sender[1]}>{e.receiver[1]}"] += len(e.data)
    assert dict(got) == UNIQUE[name]
    assert not [e for e in evs if isinstance(e, (Gap, StreamAnomaly))]
    nconn, reasons, with_syn = CONNS[name]
    opens = [e for e in evs if isinstance(e, Open)]
    assert [e.conn for e in opens] == list(range(nconn))
    assert sum(e.syn_seen for e in opens) == with_syn
    assert all(e.server[1] == 9092 for e in opens if e.syn_seen)
    assert collections.Counter(e.reason for e in evs if isinstance(e, Close)) == reasons


def test_real_first_request_bytes(shared_dir):
    evs = reassemble(read_packets([shared_dir / "pcaps" / "midstream.pcap"]))
    first = next(e for e in evs if isinstance(e, Data))
    # mid-stream: the capture starts with a Produce v9 request, correlation id 4
    assert first.data[:12] == bytes.fromhex("000002aa0000000900000004")
    assert first.sender == ("127.0.0.1", 59062)


# ---------------------------------------------------------------- basics


def test_plain_connection_exact_events(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"hello"), f.send("s", b"world!")] + f.close()
    path = write_pcap(tmp_path / "t.pcap", pkts)
    evs = reassemble(read_packets([path]))
    t = [float(p.time) for p in pkts]
    assert evs == [
        Open(0, C, S, t[0], True),
        Data(0, C, S, t[3], b"hello"),
        Data(0, S, C, t[4], b"world!"),
        Close(0, t[6], "fin"),
    ]


def test_midstream_start_takes_first_seq(tmp_path):
    f = Flow(cisn=123456, sisn=654321)
    pkts = [f.send("c", b"abc"), f.send("s", b"xyz"), f.send("c", b"def")]
    assert events(tmp_path, pkts) == [
        ("open", 0, None, None, False),
        ("data", 0, "c", b"abc"),
        ("data", 0, "s", b"xyz"),
        ("data", 0, "c", b"def"),
        ("close", 0, "end_of_capture"),
    ]


def test_syn_ack_seen_first_gives_roles(tmp_path):
    f = Flow()
    f.send("c", flags="S")  # not captured
    pkts = [f.send("s", flags="SA"), f.send("c", flags="A"), f.send("c", b"q")]
    assert events(tmp_path, pkts) == [OPEN0, ("data", 0, "c", b"q"), ("close", 0, "end_of_capture")]


# ---------------------------------------------------------------- pathologies


def test_reordering(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, b, c = f.send("c", b"AAAA"), f.send("c", b"BBBB"), f.send("c", b"CCCC")
    evs = events(tmp_path, hs + [a, c, b] + f.close(), merge=False)
    assert evs == [
        OPEN0,
        ("data", 0, "c", b"AAAA"),
        ("data", 0, "c", b"BBBB"),
        ("data", 0, "c", b"CCCC"),
        ("close", 0, "fin"),
    ]
    # C was held until B arrived, then delivered with its own packet's time
    path = write_pcap(tmp_path / "r.pcap", hs + [a, c, b])
    data = [e for e in reassemble(read_packets([path])) if isinstance(e, Data)]
    assert [(e.ts, e.data) for e in data] == [
        (float(a.time), b"AAAA"),
        (float(b.time), b"BBBB"),
        (float(c.time), b"CCCC"),
    ]


def test_retransmissions_dropped_silently(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, b = f.send("c", b"AAAA"), f.send("c", b"BBBB")
    ab = f.packet("c", b"AAAABBBB", seq=f.cisn + 1)  # repacketized retransmission
    bc = f.packet("c", b"BBBBCC", seq=f.cisn + 5)  # partly old, partly new
    f.skip("c", 2)
    evs = events(tmp_path, hs + [a, a, b, ab, b, bc] + f.close())
    assert evs == [OPEN0, ("data", 0, "c", b"AAAABBBBCC"), ("close", 0, "fin")]


def test_conflicting_overlap_keeps_first_seen(tmp_path):
    f = Flow()
    hs = f.handshake()
    a = f.send("c", b"hello")
    evil = f.packet("c", b"HELLO", seq=f.cisn + 1)  # same seq, other bytes, after delivery
    c = f.packet("c", b"late!", seq=f.cisn + 11)  # out of order ...
    c2 = f.packet("c", b"LATE!", seq=f.cisn + 11)  # ... and contradicted while buffered
    b = f.packet("c", b"world", seq=f.cisn + 6)
    f.skip("c", 10)
    evs = events(tmp_path, hs + [a, evil, c, c2, b] + f.close())
    assert evs == [
        OPEN0,
        ("data", 0, "c", b"hello"),
        ("anomaly", 0, "overlap_conflict"),
        ("anomaly", 0, "overlap_conflict"),
        ("data", 0, "c", b"worldlate!"),
        ("close", 0, "fin"),
    ]
    path = write_pcap(tmp_path / "o.pcap", hs + [a, evil])
    [anom] = [e for e in reassemble(read_packets([path])) if isinstance(e, StreamAnomaly)]
    assert anom.detail == (
        "10.0.0.1:40000 -> 10.0.0.2:9092: 5 byte(s) from seq 1001 differ from the first-seen data; first-seen kept"
    )
    assert anom.ts == float(evil.time)


def test_keepalive_is_not_a_conflict(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"abc")]
    pkts.append(f.packet("c", b"\x00", seq=f.seq["c"] - 1, flags="A"))  # keep-alive probe
    assert events(tmp_path, pkts) == [OPEN0, ("data", 0, "c", b"abc"), ("close", 0, "end_of_capture")]


def test_lost_segment_inside_stream_gap_when_fin_acked(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"1111")]
    f.skip("c", 7)  # lost
    pkts += [f.send("c", b"3333"), f.send("s", b"ok")] + f.close()
    assert events(tmp_path, pkts) == [
        OPEN0,
        ("data", 0, "c", b"1111"),
        ("data", 0, "s", b"ok"),
        ("gap", 0, "c", 7),
        ("data", 0, "c", b"3333"),
        ("close", 0, "fin"),
    ]


def test_lost_last_segment_before_fin(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"1111")]
    f.skip("c", 9)
    pkts += f.close()
    assert events(tmp_path, pkts) == [OPEN0, ("data", 0, "c", b"1111"), ("gap", 0, "c", 9), ("close", 0, "fin")]


def test_loss_flushed_at_end_of_capture(tmp_path):
    f = Flow()
    pkts = f.handshake()
    f.skip("c", 3)  # the first data segment is lost
    pkts += [f.send("c", b"tail")]
    assert events(tmp_path, pkts) == [
        OPEN0,
        ("gap", 0, "c", 3),
        ("data", 0, "c", b"tail"),
        ("close", 0, "end_of_capture"),
    ]


def test_rst_flushes_and_closes(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"aa")]
    f.skip("c", 5)
    pkts += [f.send("c", b"bb"), f.send("s", flags="RA"), f.send("c", b"ignored after close")]
    assert events(tmp_path, pkts) == [
        OPEN0,
        ("data", 0, "c", b"aa"),
        ("gap", 0, "c", 5),
        ("data", 0, "c", b"bb"),
        ("close", 0, "rst"),
        ("open", 1, None, None, False),
        ("data", 1, "c", b"ignored after close"),
        ("close", 1, "end_of_capture"),
    ]


def test_flushed_segments_keep_their_own_times(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"head")]
    f.skip("c", 3)
    c, d = f.send("c", b"CC"), f.send("c", b"DDD")
    pkts += [c, d, f.send("s", b"x", flags="PA")]
    path = write_pcap(tmp_path / "t.pcap", pkts)
    evs = reassemble(read_packets([path]))
    t = [float(p.time) for p in pkts]
    # the Gap takes the time of the bytes after it; end of capture flushes at the last packet's time
    assert evs[1:] == [
        Data(0, C, S, t[3], b"head"),
        Data(0, S, C, t[6], b"x"),
        Gap(0, C, S, t[4], 3),
        Data(0, C, S, t[4], b"CC"),
        Data(0, C, S, t[5], b"DDD"),
        Close(0, t[6], "end_of_capture"),
    ]


def _in_order(pkts):
    """Capture times growing in list order (as a capture of reordered packets has them)."""
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000.0 + i * 0.001
    return pkts


def test_ack_past_hole_declares_loss_after_ack_proof_packets(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"AAAA")]
    f.skip("c", 5)  # on the wire, not captured: the server acknowledges it
    pkts += [f.send("c", b"CC"), f.send("c", b"DDD")]
    pkts += [f.send("s", b"r%d" % i) for i in range(ACK_PROOF)]  # the first acks past the hole
    pkts += [f.send("c", flags="A"), f.send("s", b"later")]  # ACK_PROOF-th packet after it
    evs = events(tmp_path, _in_order(pkts))
    assert evs == [
        OPEN0,
        ("data", 0, "c", b"AAAA"),
        ("data", 0, "s", b"".join(b"r%d" % i for i in range(ACK_PROOF))),
        ("gap", 0, "c", 5),
        ("data", 0, "c", b"CCDDD"),
        ("data", 0, "s", b"later"),
        ("close", 0, "end_of_capture"),
    ]
    # given up while reading the ACK_PROOF-th packet after the ACK; one packet fewer: waits to the end
    assert _gap_found_at(tmp_path, pkts) == len(pkts) - 2
    assert _gap_found_at(tmp_path, pkts[:-2]) == "finish"
    # exact times: each buffered segment keeps its own; the Gap takes that of the bytes after it
    path = write_pcap(tmp_path / "e.pcap", pkts)
    got = [e for e in reassemble(read_packets([path])) if isinstance(e, (Data, Gap)) and e.sender == C]
    t = [float(p.time) for p in pkts]
    assert got == [
        Data(0, C, S, t[3], b"AAAA"),
        Gap(0, C, S, t[4], 5),
        Data(0, C, S, t[4], b"CC"),
        Data(0, C, S, t[5], b"DDD"),
    ]


def _gap_found_at(tmp_path, pkts):
    """Index of the packet whose feed gave the first Gap, or "finish"."""
    r = Reassembler()
    for i, p in enumerate(read_packets([write_pcap(tmp_path / "g.pcap", pkts)])):
        if any(isinstance(e, Gap) for e in r.feed(p)):
            return i
    return "finish" if any(isinstance(e, Gap) for e in r.finish()) else None


LC, LS = ("127.0.0.1", 40000), ("127.0.0.1", 9092)


@pytest.mark.parametrize("order", ["ack_after_hole", "ack_before_hole"])
def test_loopback_ack_before_late_segment_still_reassembles(tmp_path, order):
    f = Flow(client=LC, server=LS)
    hs = f.handshake()
    a, b, c = f.send("c", b"AAAA"), f.send("c", b"BBBB"), f.send("c", b"CCCC")
    ack = f.send("s", flags="A")  # acknowledges all three, captured before B
    mid = [c, ack] if order == "ack_after_hole" else [ack, c]
    others = [f.send("s", b"r%d" % i) for i in range(ACK_PROOF - 3)]  # B shows up within ACK_PROOF packets
    pkts = _in_order(hs + [a] + mid + others + [b] + f.close())
    evs = events(tmp_path, pkts, merge=False)
    assert [e for e in evs if e[0] in ("data", "gap") and e[2] == "c"] == [
        ("data", 0, "c", b"AAAA"),
        ("data", 0, "c", b"BBBB"),
        ("data", 0, "c", b"CCCC"),
    ]
    assert evs[0] == ("open", 0, LC, LS, True) and evs[-1] == ("close", 0, "fin")
    assert len(evs) == 3 + 2 + len(others)


def test_ack_of_part_of_hole_shrinks_it(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"AAAA")]
    f.skip("c", 3)  # lost in the capture, acknowledged below
    acks = [f.send("s", flags="A")] + [f.send("s", b"r") for _ in range(ACK_PROOF)]  # ack up to here only
    b2 = f.send("c", b"bb")  # still to come (retransmitted later)
    c = f.send("c", b"CCCC")
    pkts += [c] + acks + [b2] + f.close()
    evs = events(tmp_path, _in_order(pkts))
    # the 3 acked bytes are declared lost; the 2 unacked ones still come, in order, with what follows
    assert evs == [
        OPEN0,
        ("data", 0, "c", b"AAAA"),
        ("data", 0, "s", b"r" * ACK_PROOF),
        ("gap", 0, "c", 3),
        ("data", 0, "c", b"bbCCCC"),
        ("close", 0, "fin"),
    ]
    assert _gap_found_at(tmp_path, pkts) == len(pkts) - 5


def test_data_behind_a_hole_past_lost_after_declares_gap(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"head")]
    f.skip("c", 100)  # no ACK from the server: a one-way view of the loss
    pkts += [f.send("c", b"x" * 6), f.send("c", b"y" * 6), f.send("c", b"z")]
    assert events(tmp_path, pkts, lost_after=10) == [
        OPEN0,
        ("data", 0, "c", b"head"),
        ("gap", 0, "c", 100),
        ("data", 0, "c", b"xxxxxxyyyyyyz"),
        ("close", 0, "end_of_capture"),
    ]
    # the default (1 MiB) waits for more
    assert events(tmp_path, pkts)[2:4] == [("gap", 0, "c", 100), ("data", 0, "c", b"xxxxxxyyyyyyz")]
    r = Reassembler(max_buffer_per_direction=4, lost_after=1 << 20)
    assert r.max_buffer == 4  # the hard cap still bounds a larger lost_after


def test_buffer_cap_declares_gap(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"head")]
    f.skip("c", 100)
    pkts += [f.send("c", b"x" * 6), f.send("c", b"y" * 6), f.send("c", b"z")]
    # cap 10: the second buffered segment overflows it; the hole is given up
    assert events(tmp_path, pkts, max_buffer_per_direction=10) == [
        OPEN0,
        ("data", 0, "c", b"head"),
        ("gap", 0, "c", 100),
        ("data", 0, "c", b"xxxxxxyyyyyyz"),
        ("close", 0, "end_of_capture"),
    ]


def test_snaplen_truncation(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"A" * 100), f.send("c", b"B" * 5), f.send("s", b"C" * 30)]
    # 54 header bytes + 20 payload bytes captured
    assert events(tmp_path, pkts, snaplen=74) == [
        OPEN0,
        ("data", 0, "c", b"A" * 20),
        ("gap", 0, "c", 80),
        ("data", 0, "c", b"B" * 5),
        ("data", 0, "s", b"C" * 20),
        ("gap", 0, "s", 10),
        ("close", 0, "end_of_capture"),
    ]


def test_snaplen_truncated_segment_out_of_order(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, b, c = f.send("c", b"A" * 10), f.send("c", b"B" * 40), f.send("c", b"C" * 3)
    assert events(tmp_path, hs + [a, c, b], snaplen=74) == [
        OPEN0,
        ("data", 0, "c", b"A" * 10 + b"B" * 20),
        ("gap", 0, "c", 20),
        ("data", 0, "c", b"C" * 3),
        ("close", 0, "end_of_capture"),
    ]


def test_segments_cut_to_their_headers_are_gaps_at_once(tmp_path):
    # snaplen 54: Ethernet + IP + TCP headers only, every payload lost; each is a Gap in its place
    # (the fast path once dropped such a segment, and its bytes came out late as a hole)
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"A" * 100), f.send("c", b"B" * 5), f.send("s", b"C" * 30)]
    assert events(tmp_path, pkts, snaplen=54) == [
        OPEN0,
        ("gap", 0, "c", 100),
        ("gap", 0, "c", 5),
        ("gap", 0, "s", 30),
        ("close", 0, "end_of_capture"),
    ]


def test_sequence_wraparound(tmp_path):
    f = Flow(cisn=0xFFFFFFF8, sisn=0xFFFFFFFE)
    hs = f.handshake()
    a, b, c = f.send("c", b"0123456"), f.send("c", b"789abc"), f.send("c", b"defg")  # b crosses 2^32
    r = f.send("s", b"wrapped")
    assert (hs[0]["TCP"].seq, a["TCP"].seq, b["TCP"].seq, c["TCP"].seq) == (0xFFFFFFF8, 0xFFFFFFF9, 0, 6)
    assert events(tmp_path, hs + [a, c, b, r, b] + f.close()) == [
        OPEN0,
        ("data", 0, "c", b"0123456789abcdefg"),
        ("data", 0, "s", b"wrapped"),
        ("close", 0, "fin"),
    ]


def test_syn_reuse_after_close_and_superseding(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"one")] + f.close()
    g = Flow(cisn=90000, sisn=70000, t0=f.t0 + 1)
    pkts += g.handshake() + [g.send("c", b"two")]
    h = Flow(cisn=123, sisn=456, t0=f.t0 + 2)  # new SYN while conn 1 is open with data
    pkts += [h.send("c", flags="S"), h.send("c", flags="S", seq=123, advance=False)]  # + SYN retransmission
    pkts += [h.send("s", flags="SA"), h.send("c", b"three")]
    assert events(tmp_path, pkts) == [
        OPEN0,
        ("data", 0, "c", b"one"),
        ("close", 0, "fin"),
        ("open", 1, C, S, True),
        ("data", 1, "c", b"two"),
        ("close", 1, "superseded"),
        ("open", 2, C, S, True),
        ("data", 2, "c", b"three"),
        ("close", 2, "end_of_capture"),
    ]


def test_stray_packets_after_close_do_not_reopen(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"x")] + f.close()
    pkts += [f.packet("c", flags="FA", seq=f.seq["c"] - 1), f.packet("s", flags="A"), f.packet("c", flags="R")]
    assert events(tmp_path, pkts) == [OPEN0, ("data", 0, "c", b"x"), ("close", 0, "fin")]


def test_a_retransmission_after_close_does_not_reopen(tmp_path):
    # it ends exactly where the closed connection's bytes ended: nothing new, so no new connection
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"xyz")] + f.close()
    pkts += [f.packet("c", b"xyz", flags="PA", seq=f.seq["c"] - 4)]  # the FIN took one sequence number
    assert events(tmp_path, pkts) == [OPEN0, ("data", 0, "c", b"xyz"), ("close", 0, "fin")]


def test_two_connections_interleaved(tmp_path):
    f, g = Flow(), Flow(client=("10.0.0.1", 40001), cisn=7, sisn=9)
    pkts = f.handshake() + g.handshake()
    pkts += [g.send("c", b"G"), f.send("c", b"F"), g.send("s", b"g"), f.send("s", b"f")]
    for i, p in enumerate(pkts):
        p.time = f.t0 + i * 0.001
    evs = events(tmp_path, pkts)
    assert evs[:2] == [OPEN0, ("open", 1, ("10.0.0.1", 40001), S, True)]
    assert [e for e in evs if e[0] == "data"] == [
        ("data", 1, "c", b"G"),
        ("data", 0, "c", b"F"),
        ("data", 1, "s", b"g"),
        ("data", 0, "s", b"f"),
    ]
    assert evs[-2:] == [("close", 0, "end_of_capture"), ("close", 1, "end_of_capture")]


def test_ipv6_vlan_path_end_to_end(tmp_path):
    f = Flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    pkts = f.handshake() + [f.send("c", b"v6 data")] + f.close()
    path = write_pcap(tmp_path / "v.pcap", pkts, vlans=((0x88A8, 1), (0x8100, 2)))
    evs = reassemble(read_packets([path]))
    assert [type(e).__name__ for e in evs] == ["Open", "Data", "Close"]
    assert (evs[1].sender, evs[1].data, evs[2].reason) == (("fd00::1", 40000), b"v6 data", "fin")


# ---------------------------------------------------------------- properties

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _pkt(i, seq, flags, payload=b"", side="c"):
    src, dst = (C, S) if side == "c" else (S, C)
    return Packet(float(i), src[0], src[1], dst[0], dst[1], seq & 0xFFFFFFFF, 0, flags, payload, 0, i)


@st.composite
def segmented_stream(draw):
    data = draw(st.binary(min_size=1, max_size=400))
    isn = draw(st.sampled_from([0, 1000, 0xFFFFFF00, 0xFFFFFFFF - 3]) | st.integers(0, 0xFFFFFFFF))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=12)) if len(data) > 1 else []))
    bounds = list(pairwise([0, *cuts, len(data)]))
    segs = [(a, data[a:b]) for a, b in bounds]
    # retransmissions: copies of ranges (repacketized), identical bytes
    for _ in range(draw(st.integers(0, 4))):
        a = draw(st.integers(0, len(data) - 1))
        b = draw(st.integers(a + 1, len(data)))
        segs.append((a, data[a:b]))
    order = draw(st.permutations(range(len(segs))))
    return data, isn, [segs[i] for i in order]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segmented_stream())
def test_any_segmentation_order_and_duplication_gives_the_stream(case):
    data, isn, segs = case
    pkts = [_pkt(0, isn, 0x02)]
    pkts += [_pkt(i + 1, isn + 1 + off, 0x18, chunk) for i, (off, chunk) in enumerate(segs)]
    pkts.append(_pkt(len(pkts), isn + 1 + len(data), 0x11))
    evs = reassemble(pkts)
    assert b"".join(e.data for e in evs if isinstance(e, Data)) == data
    assert [type(e).__name__ for e in evs if not isinstance(e, Data)] == ["Open", "Close"]


@settings(max_examples=200, deadline=None)
@given(segmented_stream(), st.data())
def test_lost_segment_gives_exact_gap(case, draw):
    data, isn, segs = case
    uniq = sorted({(off, len(c)) for off, c in segs if (off, c) == (off, data[off : off + len(c)])})
    # lose every copy of the bytes at one offset range: keep only segments that avoid it
    lo, size = draw.draw(st.sampled_from(uniq))
    kept = [(off, c) for off, c in segs if off + len(c) <= lo or off >= lo + size]
    pkts = [_pkt(0, isn, 0x02)] + [_pkt(i + 1, isn + 1 + off, 0x18, c) for i, (off, c) in enumerate(kept)]
    evs = [e for e in reassemble(pkts) if isinstance(e, (Data, Gap))]
    covered = set()
    for off, c in kept:
        covered.update(range(off, off + len(c)))
    # expected: the stream up to the last covered byte, holes as gaps (the lost tail is unknown)
    end = max(covered) + 1 if covered else 0
    expect, i = [], 0
    while i < end:
        j = i
        if i in covered:
            while j < end and j in covered:
                j += 1
            expect.append(("d", data[i:j]))
        else:
            while j < end and j not in covered:
                j += 1
            expect.append(("g", j - i))
        i = j
    got = []
    for e in evs:
        if isinstance(e, Data):
            if got and got[-1][0] == "d":
                got[-1] = ("d", got[-1][1] + e.data)
            else:
                got.append(("d", e.data))
        else:
            got.append(("g", e.size))
    assert got == expect
