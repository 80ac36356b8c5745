"""The Python pipeline's capture reader, frozen as a test oracle (see tests/oracle/__init__.py).

Capture files -> TCP packets.

pcap (us/ns, swapped, Kuznetzov), pcapng (any number of interfaces, each with
its own link type and if_tsresol), gzip/bz2/xz wrappers detected by magic,
several files merged by time, directories of rotated files.

The file readers are our own rather than dpkt's: dpkt.pcapng only honours the
first interface block and neither reader reports where a file goes bad.  The
per-packet path unpacks link/IP/TCP headers with struct on the raw bytes, no
object trees.
"""

from __future__ import annotations

import bz2
import gzip
import heapq
import lzma
import os
import zlib
from dataclasses import dataclass
from socket import AF_INET6, inet_ntop
from struct import Struct
from typing import IO
from collections.abc import Iterable, Iterator

from dissector.anomalies import FILE_FAULTS, AnomalyKind

__all__ = [
    "Packet",
    "CaptureAnomaly",
    "read_packets",
    "packets_of",
    "LINKTYPES",
    "FILE_FAULTS",
    "FILE_ERRORS",
    "file_fault",
]

# FILE_FAULTS (dissector.anomalies): the anomalies that say a file itself is bad (not a packet in it):
# each command turns one into a one-line error naming the file, and exit status 2, after writing what
# came before it.
# What reading a damaged file raises besides OSError, EOFError and ValueError: the decompressors' errors.
FILE_ERRORS = (zlib.error, lzma.LZMAError)


def file_fault(item) -> str | None:
    """The detail of a dissected item that is such a fault (an anomaly of no connection), else None."""
    if item.type == "anomaly" and item.connection is None and item.kind in FILE_FAULTS:
        return item.detail
    return None


@dataclass(slots=True)
class Packet:
    ts: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    missing: int
    index: int


@dataclass(slots=True)
class CaptureAnomaly:
    ts: float
    kind: str
    detail: str
    index: int


# Link types we can take apart (values from tcpdump.org/linktypes.html).
LINKTYPES = {
    0: "NULL",
    1: "ETHERNET",
    12: "RAW",
    14: "RAW (OpenBSD)",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}
_RAW_IP = frozenset((0, 12, 14, 101, 108, 228, 229))  # IP version nibble says v4/v6

_CHUNK = 1 << 20
_CHUNK_MAX = 4 << 20
_MAX_RECORD = 1 << 28  # a record bigger than this is corruption, not a packet

_u16 = Struct("!H").unpack_from
_ip4 = Struct("!BxHxxHxB").unpack_from  # vihl, total len, frag, proto
_tcp = Struct("!HHIIBB").unpack_from  # ports, seq, ack, offset, flags
_IPV6_EXT = frozenset((0, 43, 60, 135, 139, 140))  # hop-by-hop, routing, dstopts, mobility, HIP, shim6

_ip_cache: dict[bytes, str] = {}


def _ip4_text(b: bytes) -> str:
    s = _ip_cache.get(b)
    if s is None:
        if len(_ip_cache) > 65536:  # bounded: a scan with many addresses must not grow memory
            _ip_cache.clear()
        s = _ip_cache[b] = "{}.{}.{}.{}".format(*b)
    return s


def _ip6_text(b: bytes) -> str:
    s = _ip_cache.get(b)
    if s is None:
        if len(_ip_cache) > 65536:
            _ip_cache.clear()
        s = _ip_cache[b] = inet_ntop(AF_INET6, b)
    return s


# ---------------------------------------------------------------- file readers
# Each reader yields (ts, order, linktype, frame) tuples; order is the file's
# rank so heapq never compares frames.  A fault ends the file with
# (ts, order, -1, (kind, detail)).


class _Fault(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _open(path: str) -> IO[bytes]:
    f = open(path, "rb")
    head = f.read(6)
    f.seek(0)
    if head[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    if head[:3] == b"BZh":
        return bz2.BZ2File(f)  # type: ignore[return-value]
    if head == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(f)  # type: ignore[return-value]
    return f


_PCAP_MAGIC = {  # magic as read little-endian -> (endian, ts divisor, record header size)
    0xA1B2C3D4: ("<", 1_000_000, 16),
    0xD4C3B2A1: (">", 1_000_000, 16),
    0xA1B23C4D: ("<", 1_000_000_000, 16),
    0x4D3CB2A1: (">", 1_000_000_000, 16),
    0xA1B2CD34: ("<", 1_000_000, 24),
    0x34CDB2A1: (">", 1_000_000, 24),
}
_PCAPNG_SHB = 0x0A0D0D0A
# bytes a block needs for the fields read from it: IDB, obsolete PB, SPB, EPB (header and trailer included)
_MIN_BLOCK = {1: 20, 2: 32, 3: 16, 6: 32}


def _file_records(path: str, order: int) -> Iterator[tuple]:
    ts = 0.0
    try:
        with _open(path) as f:
            head = f.read(4)
            if not head:
                raise _Fault(AnomalyKind.EMPTY_FILE, f"{path}: empty file (0 bytes), not a capture")
            if len(head) < 4:
                raise _Fault(AnomalyKind.TRUNCATED_FILE, f"{path}: {len(head)} bytes, not a capture")
            magic = int.from_bytes(head, "little")
            if magic in _PCAP_MAGIC:
                reader = _pcap(f, path, order, head, *_PCAP_MAGIC[magic])
            elif magic == _PCAPNG_SHB:
                reader = _pcapng(f, path, order, head)
            else:
                raise _Fault(AnomalyKind.CORRUPT_FILE, f"{path}: unknown file magic {head.hex()}")
            n = 0
            for rec in reader:
                ts = rec[0]
                n += 1
                yield rec
            if not n:
                raise _Fault(AnomalyKind.EMPTY_FILE, f"{path}: a capture with no packets")
    except _Fault as e:
        yield (ts, order, -1, (e.kind, e.detail))
    except (OSError, EOFError, *FILE_ERRORS, ValueError) as e:
        kind = AnomalyKind.TRUNCATED_FILE if isinstance(e, EOFError) else AnomalyKind.CORRUPT_FILE
        yield (ts, order, -1, (kind, f"{path}: {type(e).__name__}: {e}"))


def _units(f: IO[bytes], buf: bytes, offset: int, hlen: int, length, path: str, what: str):
    """Yield (buf, pos, end, file_offset) per length-prefixed unit (record, block).

    `offset` is the file offset of buf[0]. `length(buf, pos, offset)` reads a unit's full size from its `hlen`-byte
    header (raising _Fault on nonsense).  Reads are partial (read1), so a cut
    gzip stream still gives everything before the cut.
    """
    read = f.read1  # type: ignore[attr-defined]
    pos = 0
    while True:
        need = hlen if len(buf) - pos < hlen else length(buf, pos, offset)
        if len(buf) - pos < need:
            # read1(n) allocates n bytes before it reads: a header claiming a 200 MiB record in a
            # 40-byte file must not cost 200 MiB, so a big record comes in steps of at most _CHUNK_MAX
            more = read(min(max(_CHUNK, need - (len(buf) - pos)), _CHUNK_MAX))
            if not more:
                if len(buf) > pos:
                    raise _Fault(
                        AnomalyKind.TRUNCATED_FILE,
                        f"{path}: {what} at offset {offset + pos} cut ({len(buf) - pos} of {need} bytes)",
                    )
                return
            buf = buf[pos:] + more
            offset += pos
            pos = 0
            continue
        yield buf, pos, pos + need, offset
        pos += need


def _pcap(f: IO[bytes], path: str, order: int, head: bytes, endian: str, div: int, hlen: int):
    rest = f.read(20)
    if len(rest) < 20:
        raise _Fault(AnomalyKind.TRUNCATED_FILE, f"{path}: pcap header cut after {4 + len(rest)} bytes")
    linktype = Struct(endian + "I").unpack_from(rest, 16)[0] & 0xFFFF  # upper bits carry FCS info
    rec = Struct(endian + "III").unpack_from

    def length(buf, pos, offset):
        _sec, frac, caplen = rec(buf, pos)
        if caplen > _MAX_RECORD or frac >= div:
            raise _Fault(
                AnomalyKind.CORRUPT_FILE,
                f"{path}: bad record header at offset {offset + pos} (caplen {caplen}, fraction {frac})",
            )
        return hlen + caplen

    for buf, pos, end, _ in _units(f, b"", 24, hlen, length, path, "record"):
        sec, frac, _ = rec(buf, pos)
        yield (sec + frac / div, order, linktype, buf[pos + hlen : end])


def _pcapng(f: IO[bytes], path: str, order: int, head: bytes):
    """Blocks: SHB (sections may change byte order), IDB, EPB, SPB, obsolete PB."""
    if head != b"\x0a\x0d\x0d\x0a":
        raise _Fault(AnomalyKind.CORRUPT_FILE, f"{path}: not a pcapng section header")
    ifaces: list[tuple[int, int, float, int]] = []  # linktype, divisor, tsoffset, snaplen
    endian = "<"
    u32 = Struct("<I").unpack_from
    epb = Struct("<IIII").unpack_from
    ts = 0.0

    def length(buf, pos, offset):
        nonlocal endian, u32, epb
        if buf[pos : pos + 4] == b"\x0a\x0d\x0d\x0a":  # SHB: byte order of this section
            bom = buf[pos + 8 : pos + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                raise _Fault(
                    AnomalyKind.CORRUPT_FILE, f"{path}: bad byte-order magic {bom.hex()} at offset {offset + pos}"
                )
            u32 = Struct(endian + "I").unpack_from
            epb = Struct(endian + "IIII").unpack_from
        blen = u32(buf, pos + 4)[0]
        if blen < 12 or blen % 4 or blen > _MAX_RECORD:
            raise _Fault(AnomalyKind.CORRUPT_FILE, f"{path}: bad block length {blen} at offset {offset + pos}")
        return blen

    for buf, pos, end, offset in _units(f, head, 0, 12, length, path, "block"):
        btype = u32(buf, pos)[0]
        blen = end - pos
        if btype == _PCAPNG_SHB:
            ifaces = []
        if u32(buf, end - 4)[0] != blen:
            raise _Fault(AnomalyKind.CORRUPT_FILE, f"{path}: block at offset {offset + pos}: trailing length mismatch")
        if blen < _MIN_BLOCK.get(btype, 12):
            raise _Fault(
                AnomalyKind.CORRUPT_FILE,
                f"{path}: bad block length {blen} at offset {offset + pos} (too short for block type {btype})",
            )
        if btype == 6 or btype == 2:  # EPB, obsolete PB
            if btype == 6:
                iface, hi, lo, caplen = epb(buf, pos + 8)
            else:
                iface, _drops, hi, lo, caplen = Struct(endian + "HHIII").unpack_from(buf, pos + 8)
            if iface >= len(ifaces):
                raise _Fault(
                    AnomalyKind.CORRUPT_FILE,
                    f"{path}: packet for undeclared interface {iface} at offset {offset + pos}",
                )
            if 28 + caplen > blen:
                raise _Fault(AnomalyKind.CORRUPT_FILE, f"{path}: packet at offset {offset + pos} overruns its block")
            linktype, div, tsoff, _ = ifaces[iface]
            units = (hi << 32) | lo
            ts = units // div + (units % div) / div + tsoff
            yield (ts, order, linktype, buf[pos + 28 : pos + 28 + caplen])
        elif btype == 3:  # SPB: interface 0, no timestamp; the previous one is the best guess
            if not ifaces:
                raise _Fault(
                    AnomalyKind.CORRUPT_FILE, f"{path}: simple packet before any interface at offset {offset + pos}"
                )
            linktype, _, _, snaplen = ifaces[0]
            orig = u32(buf, pos + 8)[0]
            caplen = min(orig, snaplen or orig, blen - 16)
            yield (ts, order, linktype, buf[pos + 12 : pos + 12 + caplen])
        elif btype == 1:  # IDB
            linktype, snaplen = Struct(endian + "HxxI").unpack_from(buf, pos + 8)
            div, tsoff = 1_000_000, 0.0
            opos = pos + 16
            while opos + 4 <= end - 4:
                code, olen = Struct(endian + "HH").unpack_from(buf, opos)
                if code == 0:
                    break
                if opos + 4 + olen > end - 4:
                    raise _Fault(
                        AnomalyKind.CORRUPT_FILE,
                        f"{path}: interface block at offset {offset + pos}: "
                        f"option {code} of {olen} bytes runs past the block",
                    )
                val = buf[opos + 4 : opos + 4 + olen]
                if code == 9 and olen >= 1:  # if_tsresol: MSB set -> power of 2, else power of 10
                    r = val[0]
                    div = 2 ** (r & 0x7F) if r & 0x80 else 10**r
                elif code == 14 and olen == 8:  # if_tsoffset, seconds
                    tsoff = float(Struct(endian + "q").unpack(val)[0])
                opos += 4 + olen + (-olen % 4)
            ifaces.append((linktype, div, tsoff, snaplen))


# ---------------------------------------------------------------- file sets


def _capture_files(paths: Iterable[str | os.PathLike]) -> list[str]:
    out = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                full = os.path.join(p, name)
                if not name.startswith(".") and os.path.isfile(full):
                    out.append(full)
        else:
            out.append(p)
    return out


def _start_ts(path: str) -> float:
    """A file's first timestamp (its first record, even a fault), for ordering the merge."""
    it = _file_records(path, 0)
    try:
        first = next(it, None)
    finally:
        it.close()
    return float("inf") if first is None else first[0]


def _merged(files: list[str]) -> Iterator[tuple]:
    """Merge files by time, opening each only when the merge reaches its start.

    A directory of 1000 rotated files then holds one or two open at a time,
    while overlapping captures (two interfaces, two hosts) interleave exactly.
    """
    if len(files) == 1:
        yield from _file_records(files[0], 0)
        return
    pending = sorted((_start_ts(path), order) for order, path in enumerate(files))
    pending.reverse()  # pop() gives the earliest
    heap: list = []
    while pending or heap:
        while pending and (not heap or pending[-1][0] <= heap[0][0][0]):
            ts, order = pending.pop()
            it = _file_records(files[order], order)
            rec = next(it, None)
            if rec is not None:
                heapq.heappush(heap, (rec, it))
        if not heap:
            continue
        rec, it = heap[0]
        yield rec
        nxt = next(it, None)
        if nxt is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, it))


# ---------------------------------------------------------------- packets


def read_packets(paths: Iterable[str | os.PathLike], skip=None) -> Iterator[Packet | CaptureAnomaly]:
    """Yield the TCP packets of the captures at `paths` in time order.

    `index` counts every frame of the run (TCP or not) from 1, like tshark's
    frame number when there is a single file.  Non-TCP frames are skipped;
    IPv4/IPv6 fragments, unknown link types, cut headers and bad files come
    out as CaptureAnomaly.  A bad file stops at the fault; what came before
    it has been yielded already.
    """
    files = _capture_files([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    return packets_of(_merged(files), skip=skip)


def packets_of(records: Iterable[tuple], index: int = 0, skip=None) -> Iterator[Packet | CaptureAnomaly]:
    """(ts, order, linktype, frame) records -> TCP packets; `index` frames come before the first record
    (so a byte range of a file, dissector.ranges, numbers its frames like the whole file).
    skip(linktype, frame, index) -> True drops a frame before it is parsed (a worker of dissector.shard
    passing over another worker's connections costs a dict lookup, not a Packet)."""
    warned: set[int] = set()
    ip4, ip6 = _ip4_text, _ip6_text
    for ts, _order, linktype, frame in records:
        if linktype < 0:
            yield CaptureAnomaly(ts, frame[0], frame[1], index)
            continue
        index += 1
        if skip is not None and skip(linktype, frame, index):
            continue
        # Link layer -> offset of the IP header (or -1 when not IP).
        if linktype == 1:
            off = 14
            if len(frame) < 14:
                continue
            etype = (frame[12] << 8) | frame[13]
            while etype == 0x8100 or etype == 0x88A8 or etype == 0x9100:
                if len(frame) < off + 4:
                    break
                etype = (frame[off + 2] << 8) | frame[off + 3]
                off += 4
            if etype != 0x0800 and etype != 0x86DD:
                continue
        elif linktype in _RAW_IP:
            off = 4 if linktype == 0 or linktype == 108 else 0
        elif linktype == 113:
            off = 16
            if len(frame) < 16 or _u16(frame, 14)[0] not in (0x0800, 0x86DD):
                continue
        elif linktype == 276:
            off = 20
            if len(frame) < 20 or _u16(frame, 0)[0] not in (0x0800, 0x86DD):
                continue
        else:
            if linktype not in warned:
                warned.add(linktype)
                yield CaptureAnomaly(
                    ts,
                    AnomalyKind.UNKNOWN_LINKTYPE,
                    f"link type {linktype} is not supported; its frames are skipped (first at frame {index})",
                    index,
                )
            continue
        if len(frame) <= off:
            continue
        ver = frame[off] >> 4
        if ver == 4:
            if len(frame) < off + 20:
                continue
            vihl, total, frag, proto = _ip4(frame, off)
            if proto != 6:
                continue
            if frag & 0x3FFF:  # MF set or non-zero offset
                yield CaptureAnomaly(
                    ts,
                    "ipv4_fragment",
                    f"frame {index}: IPv4 fragment "
                    f"(offset {(frag & 0x1FFF) * 8}, more={bool(frag & 0x2000)}) not reassembled",
                    index,
                )
                continue
            src = ip4(frame[off + 12 : off + 16])
            dst = ip4(frame[off + 16 : off + 20])
            toff = off + ((vihl & 15) << 2)
            ip_end = off + total if total else len(frame)  # 0: TSO send path, length unknown
        elif ver == 6:
            if len(frame) < off + 40:
                continue
            plen = _u16(frame, off + 4)[0]
            nh = frame[off + 6]
            src = ip6(frame[off + 8 : off + 24])
            dst = ip6(frame[off + 24 : off + 40])
            toff = off + 40
            ip_end = toff + plen if plen else len(frame)  # 0: jumbogram, trust the capture
            while nh != 6:
                if nh in _IPV6_EXT and len(frame) >= toff + 2:
                    nh, toff = frame[toff], toff + 8 + (frame[toff + 1] << 3)
                elif nh == 51 and len(frame) >= toff + 2:  # AH counts 4-byte units
                    nh, toff = frame[toff], toff + ((frame[toff + 1] + 2) << 2)
                elif nh == 44 and len(frame) >= toff + 8:
                    if _u16(frame, toff + 2)[0] & 0xFFF9:
                        yield CaptureAnomaly(
                            ts, "ipv6_fragment", f"frame {index}: IPv6 fragment not reassembled", index
                        )
                        break
                    nh, toff = frame[toff], toff + 8
                else:
                    break
            if nh != 6:
                continue
        else:
            continue
        if len(frame) < toff + 20:
            yield CaptureAnomaly(
                ts,
                AnomalyKind.TRUNCATED_PACKET,
                f"frame {index}: TCP header cut by snaplen ({len(frame) - toff} bytes captured)",
                index,
            )
            continue
        sport, dport, seq, ack, doff, flags = _tcp(frame, toff)
        poff = toff + ((doff >> 4) << 2)
        cap_end = len(frame)
        if ip_end <= cap_end:
            # Ethernet pads short frames; the IP length says where payload ends.
            payload = frame[poff:ip_end] if poff < ip_end else b""
            missing = 0
        else:
            payload = frame[poff:] if poff < cap_end else b""
            missing = ip_end - max(poff, cap_end)
        yield Packet(ts, src, sport, dst, dport, seq, ack, flags, payload, missing, index)
