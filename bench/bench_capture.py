"""Throughput of dissector.capture.read_packets (+ tcp.Reassembler) vs tshark.

    python bench/bench_capture.py [CAPTURE ...] [--make MB] [--repeat N]

Without a capture, writes a synthetic one to a temp dir: 200 connections of
1500-byte-MTU Ethernet/IPv4 segments (1448-byte payloads), 1% reordered and
1% retransmitted, about --make MB.  Prints packets/s and MB/s (of capture
file) for: our reader alone, reader + Reassembler, a dpkt object-tree reader
(the alternative we measured against), and `tshark -r FILE -T fields -e
frame.number`, with ratios to tshark, all in this run.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dissector.capture import Packet, read_packets  # noqa: E402
from dissector.tcp import Reassembler  # noqa: E402


def make_capture(path: Path, megabytes: float, seed: int = 1) -> int:
    """Synthetic Ethernet pcap: interleaved connections, MSS 1448, some reorder/retransmit."""
    rnd = random.Random(seed)
    conns = 200
    seqs = [rnd.getrandbits(32) for _ in range(conns)]
    payload = bytes(range(256)) * 6
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    size, n, ts = 24, 0, 1_700_000_000.0
    held = None
    while size < megabytes * 1e6:
        c = rnd.randrange(conns)
        plen = 1448 if rnd.random() < 0.9 else rnd.randrange(1, 1448)
        tcp = struct.pack("!HHIIBBHHH", 40000 + c, 9092, seqs[c], 1, 0x50, 0x18, 65535, 0, 0)
        ip = struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            40 + plen,
            0,
            0x4000,
            64,
            6,
            0,
            bytes((10, 0, c >> 8, c & 255)),
            bytes((10, 1, 0, 1)),
        )
        frame = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + tcp + payload[:plen]
        seqs[c] = (seqs[c] + plen) & 0xFFFFFFFF
        frames = [frame]
        r = rnd.random()
        if r < 0.01:
            frames.append(frame)  # retransmission
        elif r < 0.02 and held is None:
            held, frames = frame, []  # sent after the next frame: reordering
        elif held is not None:
            frames.append(held)
            held = None
        for fr in frames:
            ts += 0.00001
            sec = int(ts)
            out.append(struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(fr), len(fr)) + fr)
            size += 16 + len(fr)
            n += 1
    path.write_bytes(b"".join(out))
    return n


def run_ours(path: str, reassemble: bool) -> tuple[int, float]:
    t = time.perf_counter()
    n = 0
    if reassemble:
        r = Reassembler()
        feed = r.feed
        for p in read_packets([path]):
            if type(p) is Packet:
                feed(p)
            n += 1
        r.finish()
    else:
        for _ in read_packets([path]):
            n += 1
    return n, time.perf_counter() - t


def run_dpkt(path: str) -> tuple[int, float]:
    """The same fields through dpkt's object trees (pcap only)."""
    import dpkt

    t = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) and isinstance(ip.data, dpkt.tcp.TCP):
                tcp = ip.data
                _ = (ts, ip.src, tcp.sport, ip.dst, tcp.dport, tcp.seq, tcp.ack, tcp.flags, bytes(tcp.data))
                n += 1
    return n, time.perf_counter() - t


def run_tshark(path: str) -> tuple[int, float] | None:
    if not shutil.which("tshark"):
        return None
    t = time.perf_counter()
    out = subprocess.run(
        ["tshark", "-r", path, "-T", "fields", "-e", "frame.number"], capture_output=True, check=True
    ).stdout
    return out.count(b"\n"), time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--make", type=float, default=100.0, help="MB of synthetic capture when none is given")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = ap.parse_args()
    tmp = None
    paths = args.captures
    if not paths:
        tmp = tempfile.mkdtemp(prefix="kw-bench-")
        p = Path(tmp) / "synthetic.pcap"
        n = make_capture(p, args.make)
        print(f"synthetic capture {p}: {n} frames, {p.stat().st_size / 1e6:.1f} MB")
        paths = [str(p)]
    try:
        for path in paths:
            mb = os.path.getsize(path) / 1e6
            print(f"\n{path} ({mb:.1f} MB)")
            rows = {}
            for name, fn in [
                ("read_packets", partial(run_ours, path, False)),
                ("read_packets+Reassembler", partial(run_ours, path, True)),
                ("dpkt objects (reader only)", partial(run_dpkt, path)),
                ("tshark -T fields -e frame.number", partial(run_tshark, path)),
            ]:
                best = None
                for _ in range(args.repeat):
                    res = fn()
                    if res is None:
                        break
                    best = res if best is None or res[1] < best[1] else best
                if best is None:
                    print(f"  {name:34s} skipped")
                    continue
                n, secs = best
                rows[name] = secs
                print(f"  {name:34s} {n:9d} pkts {secs:7.3f} s {n / secs:11,.0f} pkt/s {mb / secs:8.1f} MB/s")
            base = rows.get("tshark -T fields -e frame.number")
            if base:
                for name, secs in rows.items():
                    if not name.startswith("tshark"):
                        print(f"  ratio {name} vs tshark: {base / secs:.2f}x")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
