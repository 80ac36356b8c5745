"""A deliberately small frame extractor for protocol tests: pcap -> Kafka frames.

It trusts clean loopback captures (no loss): per TCP direction it orders
segments by sequence number, drops repeats, and cuts size-prefixed frames. The
real, robust path is dissector/; this only feeds the registry real bytes, and
stays separate from it so that a dissector bug cannot hide or fake a registry one.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import dpkt

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PCAPS = sorted((SHARED / "pcaps").glob("*.pcap")) if (SHARED / "pcaps").is_dir() else []


def _streams(path: Path, port: int):
    segs = defaultdict(dict)
    with open(path, "rb") as fh:
        reader = dpkt.pcap.Reader(fh)
        link = reader.datalink()
        for _ts, raw in reader:
            if link == dpkt.pcap.DLT_EN10MB:
                ip = dpkt.ethernet.Ethernet(raw).data
            elif link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
                ip = dpkt.loopback.Loopback(raw).data
            else:
                ip = dpkt.sll.SLL(raw).data
            tcp = getattr(ip, "data", None)
            if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data:
                continue
            if port not in (tcp.sport, tcp.dport):
                continue
            segs[(ip.src, tcp.sport, ip.dst, tcp.dport)].setdefault(tcp.seq, bytes(tcp.data))
    for key, by_seq in segs.items():
        data = bytearray()
        start = min(by_seq)
        for seq in sorted(by_seq):
            off = seq - start
            chunk = by_seq[seq]
            if off + len(chunk) > len(data):
                data += chunk[len(data) - off :] if off <= len(data) else b""
        yield key, bytes(data)


def frames(path: Path, port: int = 9092):
    """Yields (connection key, 'request'|'response', frame without size prefix)."""
    for (src, sport, dst, dport), data in _streams(path, port):
        direction = "request" if dport == port else "response"
        conn = (src, sport, dst, dport) if direction == "request" else (dst, dport, src, sport)
        pos = 0
        while pos + 4 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 0 or pos + 4 + size > len(data):
                break
            yield conn, direction, data[pos + 4 : pos + 4 + size]
            pos += 4 + size


def exchanges(path: Path, port: int = 9092):
    """Pairs frames by correlation id: yields (request frame, response frame or None, api_key, api_version)."""
    requests, responses = defaultdict(list), defaultdict(dict)
    for conn, direction, frame in frames(path, port):
        if direction == "request":
            requests[conn].append(frame)
        else:
            responses[conn].setdefault(struct.unpack_from(">i", frame)[0], frame)
    for conn, reqs in requests.items():
        for req in reqs:
            api_key, api_version, corr = struct.unpack_from(">hhi", req)
            yield req, responses[conn].pop(corr, None), api_key, api_version
