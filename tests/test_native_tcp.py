"""dissector._native's capture.rs and tcp.rs against their Python twins (capture.py, tcp.py).

The differential oracle: for the same input both must give exactly the same packets,
anomalies (kinds and detail strings), reassembly events, counters and timestamps (float
bits), including when Python raises; and they must touch the files the same way (the same
open / read / read1 / close calls in the same order, so memory and laziness match too).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_native = pytest.importorskip("dissector._native")

from tests.oracle import capture  # noqa: E402
from tests.oracle.capture import CaptureAnomaly, Packet, _capture_files, read_packets  # noqa: E402
from tests.oracle.tcp import ACK_PROOF, Close, Data, Gap, Open, Reassembler, StreamAnomaly  # noqa: E402
from tests.pcapgen import (  # noqa: E402
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
    write_pcap,
    write_pcapng,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "pcaps"
REAL = sorted(ROOT.glob("samples/*.pcap")) + sorted(SHARED.glob("*.pcap"))
REAL_OPEN = capture._open
DEFAULTS = (16 << 20, 1 << 20, 256 << 20)
SMALL = (1000, 500, 3000)  # per direction, lost_after, total: _force and _shed run on real traffic
TINY = (64, 50, 100)


# ---------------------------------------------------------------- both sides as tuples


def _raised(e: BaseException) -> tuple:
    return ("raised", type(e).__name__, str(e))


def py_rec(x) -> tuple:
    if isinstance(x, CaptureAnomaly):
        return ("anomaly", x.ts, x.kind, x.detail, x.index)
    return (x.ts, x.src, x.sport, x.dst, x.dport, x.seq, x.ack, x.flags, bytes(x.payload), x.missing, x.index)


def _native_list(items: list) -> list:
    if items and items[-1][0] == "raised":
        items[-1] = _raised(items[-1][1])
    return items


class _Opener:
    """capture._open for Python's reader (patched in) or native's, optionally logging every call."""

    def __init__(self, log: list | None):
        self.log = log

    def __call__(self, path):
        if self.log is None:
            return REAL_OPEN(path)
        self.log.append((path, "open"))
        return _LogFile(REAL_OPEN(path), self.log, path)


class _LogFile:
    def __init__(self, f, log, path):
        self._f, self._log, self._path = f, log, path

    def read(self, n):
        r = self._f.read(n)
        self._log.append((self._path, "read", n, len(r)))
        return r

    def read1(self, n):
        r = self._f.read1(n)
        self._log.append((self._path, "read1", n, len(r)))
        return r

    def __enter__(self):
        self._log.append((self._path, "enter"))
        self._f.__enter__()
        return self

    def __exit__(self, *exc):
        self._log.append((self._path, "exit"))
        return self._f.__exit__(*exc)


def _files(paths) -> list[str]:
    return _capture_files([str(p) for p in paths])


def py_packets(paths, log=None) -> list:
    out = []
    saved = capture._open
    capture._open = _Opener(log)
    try:
        for x in read_packets(_files(paths)):
            out.append(py_rec(x))
    except Exception as e:  # noqa: BLE001 - what escapes is compared
        out.append(_raised(e))
    finally:
        capture._open = saved
    return out


def native_packets(paths, log=None) -> list:
    return _native_list(list(_native.read_packets_tuples(_files(paths), _Opener(log), capture.FILE_ERRORS)))


def py_event(e) -> tuple:
    if isinstance(e, Data):
        return ("data", e.conn, e.sender, e.receiver, e.ts, bytes(e.data))
    if isinstance(e, Gap):
        return ("gap", e.conn, e.sender, e.receiver, e.ts, e.size)
    if isinstance(e, Open):
        return ("open", e.conn, e.client, e.server, e.ts, e.syn_seen)
    if isinstance(e, Close):
        return ("close", e.conn, e.ts, e.reason, e.retransmissions, e.out_of_order)
    assert isinstance(e, StreamAnomaly)
    return ("stream_anomaly", e.conn, e.ts, e.kind, e.detail)


def py_reassemble(items, budgets=DEFAULTS, held=False) -> list:
    r = Reassembler(*budgets)
    out = []
    try:
        for x in items:
            if isinstance(x, CaptureAnomaly):
                out.append(py_rec(x))
                continue
            out += [py_event(e) for e in r.feed(x)]
            if held:
                out.append(("held", r.oldest_held()))
    except Exception as e:  # noqa: BLE001
        out.append(_raised(e))
        return out
    return out + [py_event(e) for e in r.finish()]


def py_events(paths, budgets=DEFAULTS, held=False) -> list:
    saved = capture._open
    capture._open = _Opener(None)
    try:
        return py_reassemble(read_packets(_files(paths)), budgets, held)
    finally:
        capture._open = saved


def native_events(paths, budgets=DEFAULTS, held=False) -> list:
    return _native_list(list(_native.tcp_events(_files(paths), _Opener(None), capture.FILE_ERRORS, *budgets, held)))


def bits(items: list) -> list:
    """Floats as their exact bits (== would let 0.0 stand for -0.0)."""
    return [tuple(struct.pack("<d", v) if type(v) is float else v for v in x) for x in items]


def check(paths, budgets=(DEFAULTS,), log=True) -> list:
    """Packets (and the file calls that read them), then events under each budget, equal on both sides."""
    plog, nlog = ([], []) if log else (None, None)
    want = py_packets(paths, plog)
    got = native_packets(paths, nlog)
    assert bits(got) == bits(want)
    assert nlog == plog
    for b in budgets:
        assert bits(native_events(paths, b, held=True)) == bits(py_events(paths, b, held=True))
    return want


def check_pkts(pkts: list, budgets=(DEFAULTS, SMALL, TINY)) -> None:
    """Packet tuples straight into both reassemblers."""
    py = [Packet(*p) for p in pkts]
    for b in budgets:
        want = py_reassemble(py, b, held=True)
        got = list(_native.tcp_events_packets(pkts, *b, True))
        assert bits(got) == bits(want)


# ---------------------------------------------------------------- real captures


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_capture(path):
    items = check([path], (DEFAULTS, SMALL, TINY))
    assert items and all(len(x) == 11 for x in items)


def test_real_captures_merged():
    assert len(check(REAL, (DEFAULTS, SMALL))) == sum(len(py_packets([p])) for p in REAL)


def test_shared_captures_merged():
    if not SHARED.is_dir():
        pytest.skip("../shared not found")
    check(sorted(SHARED.glob("*.pcap"))[::-1])


# ---------------------------------------------------------------- capture.py's cases (tests/test_capture.py)


def basic_flow(**kw) -> list:
    f = Flow(**kw)
    return f.handshake() + [f.send("c", b"hello"), f.send("s", b"world!")] + f.close()


@pytest.mark.parametrize("linktype", [ETHERNET, SLL, SLL2, NULL, LOOP, RAW, IPV4, 12, 14])
def test_link_types(tmp_path, linktype):
    check([write_pcap(tmp_path / "x.pcap", basic_flow(), linktype=linktype)])
    v6 = basic_flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    if linktype not in (IPV4,):
        check([write_pcap(tmp_path / "y.pcap", v6, linktype=linktype)])


def test_link_type_ipv6_and_null_big_endian(tmp_path):
    v6 = basic_flow(client=("fd00::1", 40000), server=("::ffff:10.1.2.3", 9092))
    check([write_pcap(tmp_path / "x.pcap", v6, linktype=IPV6)])
    recs = [(float(p.time), frame(p, NULL, null_big_endian=True)) for p in basic_flow()]
    check([write_pcap(tmp_path / "n.pcap", recs, linktype=NULL)])


@pytest.mark.parametrize(
    "vlans", [((0x8100, 100),), ((0x88A8, 10), (0x8100, 20)), ((0x9100, 7), (0x8100, 8)), ((0x8100, 1),) * 5]
)
def test_vlans(tmp_path, vlans):
    check([write_pcap(tmp_path / "x.pcap", basic_flow(), vlans=vlans)])
    v6 = basic_flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    check([write_pcap(tmp_path / "y.pcap", v6, vlans=vlans)])


def test_ipv6_extension_headers_ah_and_fragments(tmp_path):
    from scapy.layers.inet import TCP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting
    from scapy.layers.ipsec import AH

    tcp = TCP(sport=1, dport=9092, seq=7, flags="PA") / b"payload"
    pkts = [
        IPv6(src="::1", dst="::2") / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / tcp,
        IPv6(src="::1", dst="::2") / IPv6ExtHdrRouting() / tcp,
        IPv6(src="::1", dst="::2") / AH(nh=6, payloadlen=4, icv=b"\x00" * 12) / tcp,
        IPv6(src="::1", dst="::2") / IPv6ExtHdrFragment(m=0, offset=0) / tcp,  # atomic fragment: read
        IPv6(src="::1", dst="::2") / IPv6ExtHdrFragment(m=1, offset=0) / tcp,  # a real one: anomaly
        IPv6(src="::1", dst="::2", nh=59) / b"no next header",
    ]
    recs = [(1.0 + i, bytes(p)) for i, p in enumerate(pkts)]
    items = check([write_pcap(tmp_path / "x.pcap", recs, linktype=RAW)])
    assert [x[0] == "anomaly" for x in items] == [False, False, False, False, True]


def test_non_tcp_padding_total_zero_and_64k(tmp_path):
    from scapy.layers.inet import IP

    f = Flow()
    udp = IP(bytes(IP(src="10.0.0.9", dst="10.0.0.8", proto=17) / (b"\x00" * 12)))
    udp.time = f.t0
    pkt = f.send("c", b"ab")
    raw = bytearray(bytes(f.send("c", b"segmentation offload")))
    raw[2:4] = b"\x00\x00"
    big = Flow(client=("127.0.0.1", 50000), server=("127.0.0.1", 9092))
    recs = [
        udp,
        f.send("c", b"a"),
        (f.t0, b"\xff" * 10),
        (1.0, frame(pkt) + b"\x00" * 6),
        (2.0, frame(IP(bytes(raw)))),
        (3.0, b"\x00" * 13),
    ]
    check([write_pcap(tmp_path / "x.pcap", recs)])
    check([write_pcap(tmp_path / "b.pcap", big.handshake() + [big.send("c", bytes(range(256)) * 255 + b"tail")])])


def test_unknown_linktypes_once_each(tmp_path):
    recs = [(1.0, b"\x00" * 60), (2.0, b"\x00" * 60)]
    a = write_pcap(tmp_path / "a.pcap", recs, linktype=147)
    b = write_pcap(tmp_path / "b.pcap", [(1.5, b"\x00" * 60)], linktype=148)
    c = write_pcap(tmp_path / "c.pcap", [(1.7, b"\x00" * 60)], linktype=147)
    items = check([a, b, c])
    assert [x[2] for x in items] == ["unknown_linktype"] * 2


def test_ipv4_fragments(tmp_path):
    from scapy.layers.inet import IP, TCP, fragment

    whole = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=9092, flags="PA") / (b"x" * 64)
    frags = [IP(bytes(x)) for x in fragment(whole, fragsize=32)]
    for i, x in enumerate(frags):
        x.time = 10.0 + i
    check([write_pcap(tmp_path / "x.pcap", frags, linktype=RAW)])


@pytest.mark.parametrize("snaplen", [40, 54, 60, 74, 94, 100])
def test_snaplen_cuts(tmp_path, snaplen):
    f = Flow()
    pkts = f.handshake() + [f.send("c", b"A" * 100), f.send("c", b"B" * 10), f.send("s", b"C" * 30)] + f.close()
    check([write_pcap(tmp_path / "x.pcap", pkts, snaplen=snaplen)], (DEFAULTS, TINY))


def test_negative_missing(tmp_path):
    """A TCP data offset past a short IP length: Python's `missing` goes negative, and tcp.py uses it."""
    f = Flow()
    pkts = f.handshake()
    seg = bytearray(bytes(f.send("c", b"X" * 30)))
    seg[2:4] = struct.pack("!H", 45)  # IP total 45 > the 40 captured below
    seg[32] = 0xF0  # data offset 60
    recs = [(p.time, frame(p)) for p in pkts] + [(5.0, frame(type(pkts[0])(bytes(seg)))[:54])]
    recs.append((6.0, recs[-1][1][:47] + bytes([0x11]) + recs[-1][1][48:]))  # the same with FIN|ACK
    items = check([write_pcap(tmp_path / "x.pcap", recs)], (DEFAULTS, TINY))
    assert items[-1][-2] < 0


@pytest.mark.parametrize("nano,big_endian", [(False, False), (True, False), (False, True), (True, True)])
def test_pcap_variants(tmp_path, nano, big_endian):
    from decimal import Decimal

    pkt = Flow().send("c", b"x")
    recs = [
        (Decimal("1700000000.123456789"), frame(pkt)),
        (Decimal("1700000000.999999"), frame(pkt)),
        (Decimal("4294967295.5"), frame(pkt)),
    ]
    check([write_pcap(tmp_path / "x.pcap", recs + basic_flow(), nano=nano, big_endian=big_endian)])


@pytest.mark.parametrize("magic", [0xA1B2CD34, 0x34CDB2A1])
def test_kuznetzov_pcap(tmp_path, magic):
    e = "<" if magic == 0xA1B2CD34 else ">"
    out = [struct.pack(e + "IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, ETHERNET)]
    for p in basic_flow():
        data = frame(p)
        sec = int(p.time)
        out.append(struct.pack(e + "IIII", sec, round((p.time - sec) * 1e6), len(data), len(data)) + b"\x00" * 8 + data)
    path = tmp_path / "k.pcap"
    path.write_bytes(b"".join(out))
    assert len(check([path])) == 8


def test_pcapng_interfaces_and_resolutions(tmp_path):
    pkts = basic_flow()
    t_ns = 1_700_000_000_000_000_001
    recs = [
        (0, t_ns + i * 1000, frame(p, ETHERNET)) if i % 2 == 0 else (1, t_ns // 1000 + i, frame(p, SLL2))
        for i, p in enumerate(pkts)
    ]
    check([write_pcapng(tmp_path / "a.pcapng", [(ETHERNET, 9), (SLL2, 6)], recs)])
    pkt = Flow().send("c", b"x")
    check([write_pcapng(tmp_path / "b.pcapng", [(RAW, 0x80 | 10)], [(0, 3 * 1024 + 512, bytes(pkt))])])
    check([write_pcapng(tmp_path / "c.pcapng", [(SLL, 9), (IPV4, 6)], [(i % 2, p) for i, p in enumerate(pkts)])])
    huge = [
        (0x80 | 127, 2**64 - 1),
        (127, 2**64 - 1),
        (30, 12345678901234567890),
        (19, 2**64 - 1),
        (22, 2**60 + 1),
        (23, 2**53 + 1),
        (0, 2**64 - 1),
        (0x80, 2**64 - 1),
        (0x80 | 63, 2**64 - 1),
        (0x80 | 64, 2**63 + 5),
    ]
    for i, (res, units) in enumerate(huge):
        check([write_pcapng(tmp_path / f"h{i}.pcapng", [(RAW, res)], [(0, units, bytes(pkt))])], ())


def test_compressed(tmp_path):
    blob = write_pcap(tmp_path / "x.pcap", basic_flow()).read_bytes()
    for name, comp in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        path = tmp_path / f"x.{name}"
        path.write_bytes(comp(blob))
        check([path])
        path.write_bytes(comp(blob)[:-7])  # cut: EOFError, or the tail's record cut
        check([path])
    ng = write_pcapng(tmp_path / "n", [(RAW, 6)], [(0, 1, bytes(basic_flow()[3]))], compress=True)
    check([ng])


def test_rotated_directory_and_overlapping_files(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send("c", bytes([65 + i]) * 3) for i in range(9)] + f.close()
    rot = tmp_path / "rot"
    rot.mkdir()
    for name, chunk in zip(
        ["cap", "cap1", "cap2", "cap3", "cap10"], [pkts[i : i + 3] for i in range(0, len(pkts), 3)], strict=False
    ):
        write_pcap(rot / name, chunk)
    (rot / ".hidden").write_bytes(b"ignored")
    (rot / "bad").write_bytes(b"\x00" * 10)
    (rot / "empty").write_bytes(b"")
    check([rot])
    g = Flow()
    more = [g.send("c", bytes([48 + i])) for i in range(6)]
    even = write_pcap(tmp_path / "even.pcap", more[0::2])
    odd = write_pcap(tmp_path / "odd.pcap", more[1::2])
    same = write_pcap(tmp_path / "same.pcap", more[1::2])  # equal times: file order breaks ties
    check([odd, even, same, tmp_path / "missing.pcap"])
    # a file whose start ties with a later record of one already open is opened before that record
    # goes out, and its lower order puts it first
    a = write_pcap(tmp_path / "a.pcap", [(1.0, frame(more[0])), (2.0, frame(more[1])), (3.0, frame(more[2]))])
    b = write_pcap(tmp_path / "b.pcap", [(2.0, frame(more[3])), (3.0, frame(more[4]))])
    items = check([b, a])
    assert [x[8] for x in items] == [b"0", b"3", b"1", b"4", b"2"]


def test_faults(tmp_path):
    blob = write_pcap(tmp_path / "x.pcap", basic_flow()).read_bytes()
    cases = {
        "cut": blob[:-10],
        "cut_header": blob[:20],
        "three": blob[:3],
        "empty": b"",
        "header_only": blob[:24],
        "bad_caplen": blob[: 24 + 8] + struct.pack("<I", 0x7FFFFFFF) + blob[24 + 12 :],
        "bad_frac": blob[: 24 + 4] + struct.pack("<I", 1_000_000) + blob[24 + 8 :],
        "junk": b"hello world, not a pcap",
        "gz_junk": b"\x1f\x8b" + b"\x00" * 30,
        "gz_bad": gzip.compress(blob)[:10] + b"\xff" * 40,
        "bz_junk": b"BZh9" + b"\x00" * 30,
        "xz_junk": b"\xfd7zXZ\x00" + b"\x00" * 30,
        "gz_trailing_junk": gzip.compress(blob) + b"junk after the stream",
        "gz_empty": gzip.compress(b""),
        "gz_crc": gzip.compress(blob)[:-8] + b"\x00" * 8,
    }
    paths = []
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        paths.append(p)
        check([p])
    check(paths)
    (tmp_path / "adir").mkdir()
    check([tmp_path / "nope.pcap"])
    assert _native.read_packets_tuples([str(tmp_path / "adir")], REAL_OPEN, capture.FILE_ERRORS)[0][2] == "corrupt_file"
    check([tmp_path / "adir" / "x"])


def _ng_block(btype, body, e="<", blen=None, trailer=None):
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return (
        struct.pack(e + "II", btype, n if blen is None else blen)
        + body
        + struct.pack(e + "I", n if trailer is None else trailer)
    )


def _shb(e="<"):
    return _ng_block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)


def _idb(e="<", linktype=RAW, snaplen=0, tsresol=None, tsoffset=None, raw_opts=b""):
    opts = raw_opts
    if tsresol is not None:
        opts += struct.pack(e + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        opts += struct.pack(e + "HHq", 14, 8, tsoffset)
    end = struct.pack(e + "HH", 0, 0) if opts else b""
    return _ng_block(1, struct.pack(e + "HHI", linktype, 0, snaplen) + opts + end, e)


def _epb(data, units=0, iface=0, e="<", caplen=None):
    return _ng_block(
        6,
        struct.pack(
            e + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(data) if caplen is None else caplen, len(data)
        )
        + data,
        e,
    )


def _spb(data, orig=None, e="<"):
    return _ng_block(3, struct.pack(e + "I", len(data) if orig is None else orig) + data, e)


def _pb(data, units=0, iface=0, e="<"):
    return _ng_block(
        2, struct.pack(e + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data)) + data, e
    )


def test_pcapng_blocks_and_faults(tmp_path):
    pk = [bytes(p) for p in basic_flow()]
    cases = {
        "sections": _shb()
        + _idb(tsresol=9)
        + _epb(pk[0], 10**18)
        + _shb(">")
        + _idb(">", tsoffset=-5)
        + _epb(pk[1], 5, e=">")
        + _spb(pk[2], e=">")
        + _pb(pk[3], 7, e=">")
        + _ng_block(5, b"isb", ">")
        + _shb()
        + _epb(pk[4]),  # interface 0 gone with the new section
        "spb_first": _shb() + _spb(pk[0]),
        "spb_snaplen": _shb()
        + _idb(snaplen=30)
        + _epb(pk[0], 3)
        + _spb(pk[3])
        + _spb(pk[3], orig=10)
        + _ng_block(3, b"", "<"),
        "undeclared": _shb() + _idb() + _epb(pk[0], iface=1),
        "overrun": _shb() + _idb() + _epb(pk[0], caplen=len(pk[0]) + 5),
        "trailer": _shb() + _idb() + _epb(pk[0]) + _ng_block(6, b"x" * 20, trailer=8),
        "bad_bom": _shb()[:8] + b"\x01\x02\x03\x04" + _shb()[12:],
        "bad_len": _shb() + _idb() + _ng_block(6, b"x" * 20, blen=13),
        "len_small": _shb() + _ng_block(6, b"", blen=8),
        "len_huge": _shb() + _ng_block(6, b"", blen=(1 << 28) + 4),
        "cut_block": (_shb() + _idb() + _epb(pk[0]))[:-9],
        "cut_head": (_shb() + _idb())[:30],
        "magic_only": _shb()[:4],
        "no_packets": _shb() + _idb(),
        "opts_past_block": _shb() + _idb(raw_opts=struct.pack("<HH", 9, 40)) + _epb(pk[0], 99),
        "opt_pad": _shb() + _idb(raw_opts=struct.pack("<HH", 2, 3) + b"abc\x00", tsresol=0x83) + _epb(pk[0], 99),
        # blocks too short for their fields, options past their block: corrupt_file faults
        "short_epb_mid": _shb() + _idb() + _ng_block(6, b"", "<") + _epb(pk[0]),
        "short_epb_end": _shb() + _idb() + _ng_block(6, b"", "<"),
        "short_pb_end": _shb() + _idb() + _ng_block(2, b"", "<"),
        "short_idb_end": _shb() + _ng_block(1, b"", "<"),
        "short_idb_mid": _shb() + _ng_block(1, b"", "<") + _epb(pk[0]),
        "tsoffset_cut": _shb() + _ng_block(1, struct.pack("<HHI", RAW, 0, 0) + struct.pack("<HH", 14, 8), "<"),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        items = check([p], (DEFAULTS,))
        if name.startswith("short_") or name in ("tsoffset_cut", "opts_past_block"):
            assert items[-1][0] == "anomaly" and items[-1][2] == "corrupt_file", (name, items[-1])
            assert "too short for block type" in items[-1][3] or "runs past the block" in items[-1][3], items[-1]
    p = tmp_path / "gz"
    p.write_bytes(gzip.compress(cases["sections"]))
    check([p])


def test_big_records(tmp_path):
    """Records past _CHUNK and _CHUNK_MAX: read in several read1 steps (the log compares their sizes)."""
    from scapy.layers.inet import IP, TCP

    head = bytearray(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=9092, flags="PA")))
    head[2:4] = b"\x00\x00"  # total 0: the captured length
    recs = [(1.0, bytes(head) + os.urandom(n)) for n in (10, (1 << 20) + 3, (9 << 20) + 1, 100)]
    path = write_pcap(tmp_path / "big.pcap", recs, linktype=RAW, snaplen=1 << 28)
    check([path])
    gz = tmp_path / "big.gz"
    gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    check([gz])
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(path.read_bytes()[: (6 << 20)])
    check([cut])


def test_huge_record_claim_allocates_nothing(tmp_path):
    """A 40-byte file whose record header claims 200 MiB: neither reader allocates it (native under an
    address-space limit that a 200 MiB allocation would break)."""
    path = tmp_path / "claim.pcap"
    path.write_bytes(
        struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 1, 0, 200 << 20, 200 << 20)
    )
    log: list = []
    assert (
        bits(native_packets([path], log))
        == bits(py_packets([path]))
        == bits(
            [("anomaly", 0.0, "truncated_file", f"{path}: record at offset 24 cut (16 of {(200 << 20) + 16} bytes)", 0)]
        )
    )
    assert [x[1:] for x in log if x[1] == "read1"] == [("read1", 1 << 20, 16), ("read1", 4 << 20, 0)]
    code = f"""
import resource
from dissector import _native
from tests.oracle import capture
def vm():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
limit = vm() + (64 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(_native.read_packets_tuples([{str(path)!r}] * 3, capture._open, capture.FILE_ERRORS)[0][2])
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "truncated_file", r.stderr


def test_opener_exceptions(tmp_path):
    """OSError and friends from the opener become faults; anything else escapes, as in Python."""
    good = write_pcap(tmp_path / "g.pcap", basic_flow())

    def opener_raising(exc):
        def opener(path):
            if path.endswith("bad"):
                raise exc
            return REAL_OPEN(path)

        return opener

    class Exiting(_LogFile):
        """A file whose `with` exit raises, or swallows the exception in flight."""

        def __init__(self, f, how):
            super().__init__(f, [], "")
            self.how = how

        def __exit__(self, *exc):
            self._f.__exit__(*exc)
            if self.how == "suppress":
                return True
            raise self.how

    def opener_exiting(how):
        return lambda path: Exiting(REAL_OPEN(path), how)

    cut = tmp_path / "cut.pcap"
    cut.write_bytes(good.read_bytes()[:-5])
    files = _files([good, tmp_path / "bad"])
    cases = [
        (files, opener_raising(exc))
        for exc in (
            PermissionError(13, "Permission denied", "x"),
            EOFError("short"),
            ValueError("v"),
            __import__("zlib").error("z"),
            lzma.LZMAError("l"),
            RuntimeError("boom"),
            KeyError("k"),
        )
    ]
    cases += [
        (_files([p]), opener_exiting(how))
        for p in (good, cut)
        for how in ("suppress", OSError("close failed"), EOFError("eof at close"), RuntimeError("no"))
    ]
    for files, opener in cases:
        want = []
        saved = capture._open
        capture._open = opener
        try:
            for x in read_packets(files):
                want.append(py_rec(x))
        except Exception as e:  # noqa: BLE001
            want.append(_raised(e))
        finally:
            capture._open = saved
        got = _native_list(list(_native.read_packets_tuples(files, opener, capture.FILE_ERRORS)))
        assert bits(got) == bits(want)


# ---------------------------------------------------------------- tcp.py's cases (tests/test_tcp.py)


def _in_order(pkts):
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000.0 + i * 0.001
    return pkts


def _tcp_cases() -> dict:
    C = {}
    f = Flow()
    hs = f.handshake()
    a, b, c = f.send("c", b"AAAA"), f.send("c", b"BBBB"), f.send("c", b"CCCC")
    C["reordering"] = hs + [a, c, b] + f.close()

    f = Flow()
    hs = f.handshake()
    a, b = f.send("c", b"AAAA"), f.send("c", b"BBBB")
    ab = f.packet("c", b"AAAABBBB", seq=f.cisn + 1)
    bc = f.packet("c", b"BBBBCC", seq=f.cisn + 5)
    f.skip("c", 2)
    C["retransmissions"] = hs + [a, a, b, ab, b, bc] + f.close()

    f = Flow()
    hs = f.handshake()
    a = f.send("c", b"hello")
    evil = f.packet("c", b"HELLO", seq=f.cisn + 1)
    c = f.packet("c", b"late!", seq=f.cisn + 11)
    c2 = f.packet("c", b"LATE!", seq=f.cisn + 11)
    b = f.packet("c", b"world", seq=f.cisn + 6)
    f.skip("c", 10)
    C["conflicts"] = hs + [a, evil, c, c2, b] + f.close()

    f = Flow()  # retransmissions differing from the delivered bytes at the edges of delivered segments
    pkts = f.handshake() + [f.send("c", b"AAAA"), f.send("c", b"BBBB"), f.send("c", b"CCCC")]
    pkts += [
        f.packet("c", b"ZBBBBCCCC", seq=f.cisn + 4),
        f.packet("c", b"AAAZ", seq=f.cisn + 2),
        f.packet("c", b"CCCZ", seq=f.cisn + 10),
        f.packet("c", b"BZ", seq=f.cisn + 8),
        f.packet("c", b"ZZZZZZZZZZZZZZ", seq=f.cisn),
    ]
    C["conflict_edges"] = pkts

    f = Flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    pkts = f.handshake() + [f.send("c", b"abc")]
    pkts.append(f.packet("c", b"\x00", seq=f.seq["c"] - 1, flags="A"))
    pkts.append(f.packet("c", b"\x01", seq=f.seq["c"] - 1, flags="A"))
    pkts.append(f.packet("c", b"zz", seq=f.seq["c"] - 1, flags="A"))
    C["keepalive_v6"] = pkts

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"1111")]
    f.skip("c", 7)
    C["lost_fin_acked"] = pkts + [f.send("c", b"3333"), f.send("s", b"ok")] + f.close()

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"1111")]
    f.skip("c", 9)
    C["lost_last"] = pkts + f.close()

    f = Flow()
    pkts = f.handshake()
    f.skip("c", 3)
    C["loss_at_end"] = pkts + [f.send("c", b"tail")]

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"aa")]
    f.skip("c", 5)
    C["rst"] = pkts + [
        f.send("c", b"bb"),
        f.send("s", flags="RA"),
        f.send("c", b"ignored after close"),
        f.send("c", flags="R"),
        f.send("s", b"more"),
    ]

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"head")]
    f.skip("c", 3)
    C["flush_times"] = pkts + [f.send("c", b"CC"), f.send("c", b"DDD"), f.send("s", b"x", flags="PA")]

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"AAAA")]
    f.skip("c", 5)
    pkts += [f.send("c", b"CC"), f.send("c", b"DDD")]
    pkts += [f.send("s", b"r%d" % i) for i in range(ACK_PROOF)]
    pkts += [f.send("c", flags="A"), f.send("s", b"later")]
    C["ack_proof"] = _in_order(pkts)
    C["ack_proof_short"] = _in_order(pkts[:-2])

    for order in ("after", "before"):
        f = Flow(client=("127.0.0.1", 40000), server=("127.0.0.1", 9092))
        hs = f.handshake()
        a, b, c = f.send("c", b"AAAA"), f.send("c", b"BBBB"), f.send("c", b"CCCC")
        ack = f.send("s", flags="A")
        mid = [c, ack] if order == "after" else [ack, c]
        others = [f.send("s", b"r%d" % i) for i in range(ACK_PROOF - 3)]
        C["loopback_" + order] = _in_order(hs + [a] + mid + others + [b] + f.close())

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"AAAA")]
    f.skip("c", 3)
    acks = [f.send("s", flags="A")] + [f.send("s", b"r") for _ in range(ACK_PROOF)]
    b2 = f.send("c", b"bb")
    c = f.send("c", b"CCCC")
    C["partial_ack"] = _in_order(pkts + [c] + acks + [b2] + f.close())

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"head")]
    f.skip("c", 100)
    C["lost_after"] = pkts + [f.send("c", b"x" * 6), f.send("c", b"y" * 6), f.send("c", b"z")]

    f = Flow(cisn=0xFFFFFFF8, sisn=0xFFFFFFFE)
    hs = f.handshake()
    a, b, c = f.send("c", b"0123456"), f.send("c", b"789abc"), f.send("c", b"defg")
    r = f.send("s", b"wrapped")
    C["wraparound"] = hs + [a, c, b, r, b] + f.close()

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"one")] + f.close()
    g = Flow(cisn=90000, sisn=70000, t0=f.t0 + 1)
    pkts += g.handshake() + [g.send("c", b"two")]
    h = Flow(cisn=123, sisn=456, t0=f.t0 + 2)
    pkts += [h.send("c", flags="S"), h.send("c", flags="S", seq=123, advance=False)]
    pkts += [h.send("s", flags="SA"), h.send("c", b"three")]
    C["syn_reuse"] = pkts

    f = Flow()
    pkts = f.handshake() + [f.send("c", b"x")] + f.close()
    pkts += [
        f.packet("c", flags="FA", seq=f.seq["c"] - 1),
        f.packet("s", flags="A"),
        f.packet("c", flags="R"),
        f.packet("c", b"old", seq=f.seq["c"] - 3),
        f.packet("c", b"new"),
    ]
    C["stray_after_close"] = pkts

    f, g = Flow(), Flow(client=("10.0.0.1", 40001), cisn=7, sisn=9)
    pkts = f.handshake() + g.handshake()
    pkts += [g.send("c", b"G"), f.send("c", b"F"), g.send("s", b"g"), f.send("s", b"f")]
    C["two_connections"] = _in_order(pkts)

    f = Flow(cisn=123456, sisn=654321)
    C["midstream"] = [f.send("c", b"abc"), f.send("s", b"xyz"), f.send("c", b"def")]

    f = Flow()
    f.send("c", flags="S")
    C["syn_ack_first"] = [f.send("s", flags="SA"), f.send("c", flags="A"), f.send("c", b"q")]

    f = Flow(client=("10.0.0.5", 7777), server=("10.0.0.5", 7777))  # a self-connection: one 4-tuple
    C["self_loop"] = [
        f.send("c", b"one"),
        f.send("c", b"two"),
        f.send("s", b"x", seq=f.seq["s"] + 5),
        f.send("c", b"late", seq=f.seq["c"] + 9),
    ] + f.close()
    return C


TCP_CASES = _tcp_cases()


@pytest.mark.parametrize("name", sorted(TCP_CASES))
@pytest.mark.parametrize("snaplen", [262144, 74])
def test_tcp_pathologies(tmp_path, name, snaplen):
    path = write_pcap(tmp_path / "t.pcap", TCP_CASES[name], snaplen=snaplen)
    check(
        [path], (DEFAULTS, (10, 1 << 20, 256 << 20), (1 << 20, 10, 256 << 20), (16 << 20, 1 << 20, 5), TINY), log=False
    )


def test_ipv6_vlan_end_to_end(tmp_path):
    f = Flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    pkts = f.handshake() + [f.send("c", b"v6 data")] + f.close()
    check([write_pcap(tmp_path / "v.pcap", pkts, vlans=((0x88A8, 1), (0x8100, 2)))])


# ---------------------------------------------------------------- the corrupt files (tests/test_corrupt_files.py)


@pytest.mark.parametrize(
    "kind", ["cut_mid_packet", "bad_record_length", "garbage_header", "empty", "pcapng_cut", "pcapng_bad_block_length"]
)
def test_corrupt_files(tmp_path, kind):
    from tests.test_corrupt_files import damaged

    data, said = damaged(kind)
    path = tmp_path / f"{kind}.cap"
    path.write_bytes(data)
    items = check([path], (DEFAULTS, SMALL))
    assert said in items[-1][3]


# ---------------------------------------------------------------- hypothesis: damaged files


def _seeds(tmp: Path) -> dict:
    flow = basic_flow() + basic_flow(client=("fd00::1", 40001), server=("fd00::2", 9092))
    out = {
        "pcap": write_pcap(tmp / "s1", flow, vlans=((0x8100, 5),)).read_bytes(),
        "pcap-ns-sll2-be": write_pcap(tmp / "s2", flow, linktype=SLL2, nano=True, big_endian=True).read_bytes(),
        "pcapng": write_pcapng(
            tmp / "s3",
            [(ETHERNET, 9), (RAW, 0x80 | 20)],
            [(i % 2, i * 10**9, frame(x, ETHERNET) if i % 2 == 0 else bytes(x)) for i, x in enumerate(flow)],
        ).read_bytes(),
        "midstream": (ROOT / "samples" / "midstream.pcap").read_bytes(),
    }
    out["pcap-gz"] = gzip.compress(out["pcap"])
    return out


with __import__("tempfile").TemporaryDirectory(prefix="kw-native-tcp-") as _d:
    SEEDS = _seeds(Path(_d))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(SEEDS)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 10**6),
    budgets=st.sampled_from([DEFAULTS, SMALL, TINY]),
)
def test_damaged_files(tmp_path, kind, edits, cut, budgets):
    blob = bytearray(SEEDS[kind])
    for pos, val in edits:
        blob[pos % len(blob)] = val
    path = tmp_path / "x"
    path.write_bytes(bytes(blob[: len(blob) - cut % 60]))
    check([path], (budgets,))


_FRAMES = [bytes(p) for p in basic_flow()] + [frame(p) for p in basic_flow(client=("fd00::1", 1), server=("::2", 2))]


@st.composite
def pcapng_files(draw):
    out = []
    e = "<"
    for _ in range(draw(st.integers(1, 12))):
        k = draw(st.sampled_from(["shb", "idb", "epb", "epb", "epb", "spb", "pb", "other", "short"]))
        if k == "shb":
            e = draw(st.sampled_from("<>"))
            out.append(_shb(e))
        elif k == "idb":
            out.append(
                _idb(
                    e,
                    draw(st.sampled_from([RAW, ETHERNET, 147])),
                    draw(st.sampled_from([0, 20, 65535])),
                    draw(st.none() | st.integers(0, 255)),
                    draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
                )
            )
        elif k in ("epb", "pb"):
            data = draw(st.sampled_from(_FRAMES))
            units = draw(st.integers(0, 2**64 - 1) | st.integers(0, 10**12))
            iface = draw(st.integers(0, 2))
            out.append(_epb(data, units, iface, e) if k == "epb" else _pb(data, units, iface, e))
        elif k == "spb":
            out.append(_spb(draw(st.sampled_from(_FRAMES)), draw(st.none() | st.integers(0, 200)), e))
        elif k == "other":
            out.append(_ng_block(draw(st.sampled_from([4, 5, 0xBAD])), draw(st.binary(max_size=12)), e))
        else:
            out.append(_ng_block(draw(st.sampled_from([1, 2, 6])), b"", e))
    blob = b"".join(out)
    return blob[: len(blob) - draw(st.integers(0, 30))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=pcapng_files(), prefix=st.booleans())
def test_generated_pcapng(tmp_path, blob, prefix):
    path = tmp_path / "x.pcapng"
    path.write_bytes((_shb() if prefix else b"") + blob)
    check([path], (TINY,))


def _shift(blob: bytes, shift: int) -> bytes:
    """A pcap with every record `shift` seconds later."""
    e = "<" if blob[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = bytearray(blob)
    pos = 24
    while pos + 16 <= len(out):
        sec, _, caplen = struct.unpack_from(e + "III", out, pos)
        struct.pack_into(e + "I", out, pos, sec + shift)
        pos += 16 + caplen
    return bytes(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from(sorted(SEEDS)), st.integers(0, 3), st.integers(-1, 400)), min_size=2, max_size=4)
)
def test_merged_sets(tmp_path, files):
    """Several files (shifted in time, some cut) merged: the same interleaving, opens and reads."""
    import shutil

    d = tmp_path / "set"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for i, (kind, shift, cut) in enumerate(files):
        blob = _shift(SEEDS[kind], shift) if kind in ("pcap", "pcap-ns-sll2-be", "midstream") else SEEDS[kind]
        (d / f"f{i}").write_bytes(blob if cut < 0 else blob[: len(blob) - cut])
    check([d], (SMALL,))


# ---------------------------------------------------------------- hypothesis: address text, segment streams

_v6 = st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0x1234]) | st.integers(0, 0xFFFF), min_size=8, max_size=8)


@settings(max_examples=500, deadline=None)
@given(_v6 | st.just([0] * 5 + [0xFFFF, 0x0A00, 1]) | st.just([0] * 6 + [0x0102, 0x0304]))
def test_ipv6_text_is_inet_ntop(words):
    b = struct.pack("!8H", *words)
    assert _native.ip6_text_of(b) == socket.inet_ntop(socket.AF_INET6, b)


@st.composite
def segment_streams(draw):
    """tests/fuzz/targets.py's `tcp` target as packet tuples: one connection's segments reordered,
    duplicated, dropped, overlapping (also with other bytes) and snaplen-cut, ACKs from the receiver,
    FIN/RST/SYN, a second connection and now and then a self-connection."""
    seed = draw(st.binary(min_size=2, max_size=2))
    stream = bytes((i * 31 + seed[0] + (i >> 8) * seed[1]) & 0xFF for i in range(4096))
    isn = draw(st.sampled_from([1000, 0xFFFFFF00, 0xFFFFFFFF - 3]) | st.integers(0, 0xFFFFFFFF))
    C, S, C2 = ("10.0.0.1", 40000), ("10.0.0.2", 9092), ("10.0.0.1", 40001)
    loop = ("10.0.0.9", 5555)
    pkts = []
    if draw(st.booleans()):
        pkts.append((0.0, *C, *S, isn, 0, 0x02, b"", 0, 1))
    n = draw(st.integers(1, 40))
    for i in range(n):
        off = draw(st.integers(0, 3000))
        ln = draw(st.sampled_from([0, 1, 5, 100, 700]) | st.integers(0, 1600))
        payload = stream[off : off + ln]
        if draw(st.integers(0, 9)) == 0:  # other bytes than first sent there: a conflict
            payload = bytes(x ^ 0x5A for x in payload)
        missing = 0
        cut = draw(st.integers(0, 20))
        if cut == 0:
            keep = draw(st.integers(0, len(payload)))
            missing, payload = len(payload) - keep, payload[:keep]
        elif cut == 1:
            missing = -draw(st.integers(1, 60))
        fl = 0x10 | draw(st.sampled_from([0, 0, 0, 0, 8, 1, 4, 2, 9]))
        who = draw(st.integers(0, 12))
        ts = float(i + 1) + draw(st.sampled_from([0.0, 0.5, -2.0]))
        if who <= 2:  # the receiver acknowledging up to an offset
            ack = (isn + 1 + draw(st.integers(0, 3200))) & 0xFFFFFFFF
            pkts.append(
                (
                    ts,
                    *S,
                    *C,
                    777,
                    ack,
                    draw(st.sampled_from([0x10, 0x10, 0x11, 0x18])),
                    stream[: draw(st.integers(0, 3))],
                    0,
                    i + 2,
                )
            )
        elif who == 3:
            pkts.append((ts, *C2, *S, (isn + 7 + off) & 0xFFFFFFFF, 1, fl, payload, missing, i + 2))
        elif who == 4:
            pkts.append(
                (ts, *S, *C2, (99 + off) & 0xFFFFFFFF, (isn + 7 + off) & 0xFFFFFFFF, fl, payload, missing, i + 2)
            )
        elif who == 5:
            pkts.append(
                (ts, *loop, *loop, (isn + off) & 0xFFFFFFFF, (isn + off) & 0xFFFFFFFF, fl, payload, missing, i + 2)
            )
        else:
            pkts.append((ts, *C, *S, (isn + 1 + off) & 0xFFFFFFFF, 1, fl, payload, missing, i + 2))
    return pkts


@settings(max_examples=300, deadline=None)
@given(segment_streams())
def test_segment_streams(pkts):
    check_pkts(pkts, (DEFAULTS, (300, 2048, 256 << 20), (16 << 20, 64, 256 << 20), (16 << 20, 1 << 20, 200), TINY))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 400), st.integers(0, 60), st.integers(0, 3)),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([(16 << 20, 1 << 20, 200), (16 << 20, 1 << 20, 1000), (100, 1 << 20, 300)]),
)
def test_many_connections_shed(segs, budgets):
    """Out-of-order data over several connections past max_buffer_total: _shed's order over them."""
    stream = bytes(range(256)) * 4
    pkts = []
    for i, (c, off, ln, kind) in enumerate(segs):
        src, dst = ("10.0.0.1", 40000 + c), ("10.0.0.2", 9092)
        if kind == 3:
            pkts.append((float(i), *dst, *src, 5, (1000 + off) & 0xFFFFFFFF, 0x10, b"", 0, i + 1))
        else:
            pkts.append((float(i), *src, *dst, 1000 + off, 1, 0x18 if kind else 0x19, stream[off : off + ln], 0, i + 1))
    check_pkts(pkts, (budgets,))


def test_closed_memory_bound():
    """More than _CLOSED_MEMORY closed 4-tuples: the oldest are forgotten (and stray packets reopen them)."""
    pkts = []
    for i in range(4200):
        c = (f"10.0.{i >> 8}.{i & 255}", 40000)
        s = ("10.0.0.2", 9092)
        pkts += [
            (float(i), *c, *s, 10, 0, 0x02, b"", 0, 0),
            (float(i), *c, *s, 11, 0, 0x18, b"x", 0, 0),
            (float(i), *c, *s, 12, 0, 0x04, b"", 0, 0),
        ]
    for i in (0, 10, 150, 4199, 4198):
        c = (f"10.0.{i >> 8}.{i & 255}", 40000)
        pkts.append((5000.0, *c, "10.0.0.2", 9092, 12, 0, 0x10, b"", 0, 0))  # forgotten: opens; else not
        pkts.append((5000.0, *c, "10.0.0.2", 9092, 11 if i != 4198 else 10, 0, 0x18, b"x", 0, 0))
    check_pkts(pkts, (DEFAULTS,))
