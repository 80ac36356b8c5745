"""Build small synthetic captures for tests (scapy for IP/TCP, struct for files).

Typical use::

    flow = Flow()                       # 10.0.0.1:40000 -> 10.0.0.2:9092
    pkts = flow.handshake()
    pkts += [flow.send("c", b"hello"), flow.send("s", b"world")]
    pkts += flow.close()
    write_pcap(tmp_path / "x.pcap", pkts)

`Flow.send` returns one packet and advances that side's sequence number; pass
`seq=` / `advance=False` to build retransmissions, overlaps and holes, and
reorder the list to build reordering.  Packets are scapy IP/IPv6 layers with
`.time` set; `frame()` puts a link header in front for a given link type,
`write_pcap` / `write_pcapng` write them (ns resolution, snaplen cut, gzip).
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

# Link types (tcpdump.org/linktypes.html)
NULL, ETHERNET, RAW, LOOP, SLL, IPV4, IPV6, SLL2 = 0, 1, 101, 108, 113, 228, 229, 276

_TCP_FLAGS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10}


@dataclass
class Flow:
    """One TCP connection between a client ("c") and a server ("s").

    Sequence numbers are tracked per side (32-bit, wrapping); timestamps start
    at `t0` and grow by `dt` per packet built.
    """

    client: tuple[str, int] = ("10.0.0.1", 40000)
    server: tuple[str, int] = ("10.0.0.2", 9092)
    cisn: int = 1000
    sisn: int = 5000
    t0: float = 1_700_000_000.0
    dt: float = 0.001
    seq: dict = field(init=False, default_factory=dict)
    _n: int = field(init=False, default=0)

    def __post_init__(self):
        self.seq = {"c": self.cisn, "s": self.sisn}
        self.ipv6 = ":" in self.client[0]

    def _ends(self, side: str):
        return (self.client, self.server) if side == "c" else (self.server, self.client)

    def packet(
        self,
        side: str,
        payload: bytes = b"",
        *,
        flags: str = "PA",
        seq: int | None = None,
        ack: int | None = None,
        ts: float | None = None,
    ):
        """One segment from `side` with exactly these fields; no sequence bookkeeping."""
        (src, sport), (dst, dport) = self._ends(side)
        other = "s" if side == "c" else "c"
        ip = IPv6(src=src, dst=dst) if self.ipv6 else IP(src=src, dst=dst)
        tcp = TCP(
            sport=sport,
            dport=dport,
            flags=flags,
            seq=(self.seq[side] if seq is None else seq) & 0xFFFFFFFF,
            ack=(self.seq[other] if ack is None else ack) & 0xFFFFFFFF if "A" in flags else 0,
        )
        pkt = ip / tcp / payload if payload else ip / tcp
        pkt = pkt.__class__(bytes(pkt))  # freeze lengths and checksums
        pkt.time = self.t0 + self._n * self.dt if ts is None else ts
        self._n += 1
        return pkt

    def send(self, side: str, payload: bytes = b"", *, flags: str = "PA", seq: int | None = None, advance: bool = True):
        """A segment from `side`; the side's next seq moves past it unless advance=False."""
        pkt = self.packet(side, payload, flags=flags, seq=seq)
        if advance:
            start = self.seq[side] if seq is None else seq
            used = len(payload) + ("S" in flags) + ("F" in flags)
            self.seq[side] = (start + used) & 0xFFFFFFFF
        return pkt

    def skip(self, side: str, n: int) -> None:
        """Advance `side` by n bytes that are never captured (a lost segment)."""
        self.seq[side] = (self.seq[side] + n) & 0xFFFFFFFF

    def handshake(self) -> list:
        return [self.send("c", flags="S"), self.send("s", flags="SA"), self.send("c", flags="A")]

    def close(self) -> list:
        """FIN from the client, FIN+ACK from the server, last ACK."""
        return [self.send("c", flags="FA"), self.send("s", flags="FA"), self.send("c", flags="A")]


def vlan_tags(*tags: tuple[int, int]) -> bytes:
    """802.1Q/QinQ tags as bytes: each (tpid, vid), outermost first; the ethertype follows."""
    return b"".join(struct.pack("!HH", tpid, vid) for tpid, vid in tags)


def frame(
    pkt, linktype: int = ETHERNET, *, vlans: tuple[tuple[int, int], ...] = (), null_big_endian: bool = False
) -> bytes:
    """The bytes of an IP packet behind a link header of `linktype`."""
    ip = bytes(pkt)
    v6 = ip[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if linktype == ETHERNET:
        macs = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01"
        return macs + vlan_tags(*vlans) + struct.pack("!H", etype) + ip
    if linktype == SLL:  # packet type, ARPHRD, addr len, addr[8], protocol
        return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\x00\x00\x00\x00\x01", etype) + ip
    if linktype == SLL2:  # protocol, reserved, ifindex, ARPHRD, pkttype, addr len, addr[8]
        return struct.pack("!HHIHBB8s", etype, 0, 1, 1, 0, 6, b"\x02\x00\x00\x00\x00\x01") + ip
    if linktype == NULL:  # AF in the capturing host's byte order; BSD AF_INET6 is 24/28/30
        return struct.pack(">I" if null_big_endian else "<I", 30 if v6 else 2) + ip
    if linktype == LOOP:  # AF in network byte order
        return struct.pack(">I", 24 if v6 else 2) + ip
    if linktype in (RAW, IPV4, IPV6, 12, 14):
        return ip
    raise ValueError(f"no link header builder for link type {linktype}")


def _records(pkts, linktype: int, vlans=()):
    for p in pkts:
        if isinstance(p, tuple):
            yield p  # (ts, bytes) already framed
        else:
            yield float(p.time), frame(p, linktype, vlans=vlans)


def write_pcap(
    path,
    pkts,
    *,
    linktype: int = ETHERNET,
    nano: bool = False,
    snaplen: int = 262144,
    vlans=(),
    compress: bool = False,
    big_endian: bool = False,
) -> Path:
    """Write a classic pcap.  `pkts`: scapy packets (framed for `linktype`) or
    (ts, frame_bytes) tuples.  Frames longer than `snaplen` are cut, with the
    original length recorded.  compress=True writes gzip."""
    e = ">" if big_endian else "<"
    out = [struct.pack(e + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)]
    div = 1_000_000_000 if nano else 1_000_000
    for ts, data in _records(pkts, linktype, vlans):
        sec = int(ts)
        frac = round((ts - sec) * div)
        cut = data[:snaplen]
        out.append(struct.pack(e + "IIII", sec, frac, len(cut), len(data)) + cut)
    return _write(path, b"".join(out), compress)


def _block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def write_pcapng(
    path,
    interfaces: list[tuple[int, int]],
    records: list[tuple[int, int, bytes]],
    *,
    snaplen: int = 262144,
    compress: bool = False,
) -> Path:
    """Write a pcapng with one section.

    interfaces: (linktype, tsresol) per interface; tsresol is the if_tsresol
    byte (6 = us, 9 = ns, 0x80|n = 2^-n).  records: (interface, ts_units,
    frame_bytes) with ts in that interface's units (an int, so ns stay exact),
    or (interface, scapy_packet): framed for that interface's link type, its
    .time converted to the interface's units.
    """
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for linktype, tsresol in interfaces:
        opts = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
        out.append(_block(1, struct.pack("<HHI", linktype, 0, snaplen) + opts))
    for rec in records:
        if len(rec) == 2:
            iface, pkt = rec
            linktype, tsresol = interfaces[iface]
            div = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10**tsresol
            sec = int(pkt.time)
            rec = (iface, sec * div + round((pkt.time - sec) * div), frame(pkt, linktype))
        iface, units, data = rec
        cut = data[:snaplen]
        out.append(_block(6, struct.pack("<IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(cut), len(data)) + cut))
    return _write(path, b"".join(out), compress)


def _write(path, blob: bytes, compress: bool) -> Path:
    path = Path(path)
    path.write_bytes(gzip.compress(blob) if compress else blob)
    return path


def seed_writers(flow: list) -> dict:
    """Writers of one flow as the mutation tests' seeds, by name: a pcap with a VLAN tag, a
    nanosecond pcap of Linux cooked v2 frames, and a pcapng of two interfaces (Ethernet in ns,
    raw IP in us) taking turns."""
    return {
        "pcap": lambda p: write_pcap(p, flow, vlans=((0x8100, 5),)),
        "pcap-ns-sll2": lambda p: write_pcap(p, flow, linktype=SLL2, nano=True),
        "pcapng": lambda p: write_pcapng(
            p,
            [(ETHERNET, 9), (RAW, 6)],
            [(i % 2, i, frame(x, ETHERNET) if i % 2 == 0 else bytes(x)) for i, x in enumerate(flow)],
        ),
    }


def events_pcap(path, events, *, close_at: float | None = None) -> Path:
    """A pcap of one connection's stream events (tests.oracle.tcp's Open, Data, Gap, Close: what
    tests.test_exchanges.Conv builds), so a conversation written by hand reaches the native core
    through a capture like any other: a handshake when the Open saw one, a segment per Data (cut
    at 60,000 bytes), a lost segment per Gap, FINs at the Close (or at `close_at`)."""
    opened = events[0]
    flow = Flow(client=opened.client or ("10.0.0.1", 40000), server=opened.server or ("10.0.0.2", 9092))
    pkts = []

    def at(pkt, ts):
        pkt.time = ts
        pkts.append(pkt)

    if opened.syn_seen:
        for p in flow.handshake():
            at(p, opened.ts)
    for e in events[1:]:
        side = getattr(e, "sender", None) and ("c" if tuple(e.sender) == tuple(flow.client) else "s")
        if type(e).__name__ == "Data":
            for i in range(0, len(e.data), 60_000):
                at(flow.send(side, e.data[i : i + 60_000]), e.ts)
        elif type(e).__name__ == "Gap":
            flow.skip(side, e.size)
        elif type(e).__name__ == "Close":
            close_at = e.ts
    if close_at is not None:
        for p in flow.close():
            at(p, close_at)
    return write_pcap(path, pkts, nano=True)
