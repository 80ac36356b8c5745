"""Record boundaries found in the middle of a capture file, from a window of its bytes alone.

A local file is cut into byte ranges by walking its record headers from the start
(native/py/src/ranges.rs), which costs a seek per record. An object in a store would cost a round
trip per record that way, so its cut points are found where they fall: the bytes of a window at
each cut (one ranged GET) are searched for the first offset from which a chain of well-formed
records runs to the window's end. Pure functions over bytes; dissector.ranges does the reads.

A false start would need a run of payload bytes that parse as consecutive record headers with
plausible lengths and times for the whole window (a MiB: hundreds of records of ordinary traffic),
which is why a chain that short of the window's end is refused unless the file ends first."""

from __future__ import annotations

import struct

__all__ = ["PCAP_MAGICS", "Head", "head_of", "pcap_boundary", "pcapng_boundary"]

# pcap's magic as read little-endian -> (big-endian file, timestamp fraction per second)
PCAP_MAGICS = {
    0xA1B2C3D4: (False, 1_000_000),
    0xD4C3B2A1: (True, 1_000_000),
    0xA1B23C4D: (False, 1_000_000_000),
    0x4D3CB2A1: (True, 1_000_000_000),
}
_SHB = 0x0A0D0D0A
_IDB = 1
# blocks that may follow in a section without changing how later packets read: packets (simple,
# enhanced, the obsolete one), name resolution, interface statistics, custom blocks
_PLAIN_BLOCKS = {2, 3, 4, 5, 6, 0x00000BAD, 0x40000BAD}
_PACKETS = {2, 3, 6}
_MIN_CHAIN = 4  # records a chain must hold when it reaches the window's end
_MAX_LEN = 1 << 24  # a longer record is no record (pcap's orig_len, a pcapng block)
_SKEW = 86_400 * 366  # how far a record's time may stray from the file's first one, in seconds


class Head:
    """What a capture's first bytes say: its format and, to read a range on its own, the bytes
    that must come before it (pcap: the file header; pcapng: the section header and interface
    descriptions) and where its first record (pcapng: packet block) starts. A pcapng interface
    described after the first packet is seen only if a window holds it (then the file is one
    range); the header walk of a local file has no such limit."""

    def __init__(self, fmt: str, big: bool, preamble: bytes, first: int, snaplen: int = 0, frac: int = 0, t0=None):
        self.fmt, self.big, self.preamble, self.first = fmt, big, preamble, first
        self.snaplen, self.frac, self.t0 = snaplen, frac, t0


def head_of(data: bytes) -> Head | None:
    """The Head of a file from its first bytes (enough to hold its header blocks), or None when
    it cannot be cut from windows: not pcap or pcapng, a pcap variant with other record headers,
    or pcapng whose description blocks outrun `data`."""
    if len(data) < 24:
        return None
    magic = struct.unpack_from("<I", data)[0]
    if magic in PCAP_MAGICS:
        big, frac = PCAP_MAGICS[magic]
        e = ">" if big else "<"
        snaplen = struct.unpack_from(e + "I", data, 16)[0]
        t0 = struct.unpack_from(e + "I", data, 24)[0] if len(data) >= 28 else None
        return Head("pcap", big, data[:24], 24, snaplen=snaplen, frac=frac, t0=t0)
    if magic != _SHB or len(data) < 12:
        return None
    order = data[8:12]
    if order == b"\x4d\x3c\x2b\x1a":
        big = False
    elif order == b"\x1a\x2b\x3c\x4d":
        big = True
    else:
        return None
    e = ">" if big else "<"
    at, preamble = 0, []
    while at + 12 <= len(data):
        kind, n = struct.unpack_from(e + "II", data, at)
        if n < 12 or n % 4 or at + n > len(data):
            return None
        if kind == _SHB and at:
            return None  # a second section before any packet: not cut
        if kind in (_SHB, _IDB):
            preamble.append(data[at : at + n])  # what a range needs before its packets
        elif kind in _PACKETS:
            return Head("pcapng", big, b"".join(preamble), at)
        at += n  # secrets, names, statistics: read by the range that holds them
    return None


def pcap_boundary(window: bytes, head: Head, at_end: bool) -> int | None:
    """The offset in `window` of the first pcap record from which a chain of records runs to the
    window's end (or, with at_end, to the file's end exactly), or None."""
    e = ">" if head.big else "<"
    limit = max(head.snaplen, 262_144)

    def chain(at: int) -> tuple[int, int, bool]:
        count, last = 0, None
        while at + 16 <= len(window):
            sec, frac, incl, orig = struct.unpack_from(e + "IIII", window, at)
            if frac >= head.frac or incl > limit or incl > orig or orig > _MAX_LEN:
                return at, count, False
            if (head.t0 is not None and abs(sec - head.t0) > _SKEW) or (last is not None and sec + 3600 < last):
                return at, count, False
            last = sec
            if at + 16 + incl > len(window):
                return at, count, True  # the window cuts this record: the chain ran to its end
            count += 1
            at += 16 + incl
        return at, count, True

    for start in range(len(window) - 15):
        if _trusted(window, *chain(start), at_end):
            return start
    return None


def pcapng_boundary(window: bytes, head: Head, at_end: bool) -> int | None:
    """As pcap_boundary for pcapng blocks (`window` starting 4-byte aligned in the file, as every
    block is): a block's leading and trailing lengths agree and its type is one that reads alone.
    A section or interface block on the way refuses the window: the ranges after it would need
    another preamble."""
    e = ">" if head.big else "<"

    def chain(at: int) -> tuple[int, int, bool | None]:
        count = 0
        while at + 12 <= len(window):
            kind, n = struct.unpack_from(e + "II", window, at)
            if n < 12 or n % 4 or n > _MAX_LEN:
                return at, count, False
            if at + n > len(window):
                return at, count, True
            if struct.unpack_from(e + "I", window, at + n - 4)[0] != n:
                return at, count, False
            if kind in (_SHB, _IDB):
                return at, count, None
            if kind not in _PLAIN_BLOCKS and not kind & 0x80000000:
                return at, count, False
            count += 1
            at += n
        return at, count, True

    for start in range(0, len(window) - 11, 4):
        at, count, ran = chain(start)
        if ran is None:
            if count >= _MIN_CHAIN:
                return None  # a well-formed chain up to new descriptions: not cut here
            continue
        if _trusted(window, at, count, ran, at_end):
            return start
    return None


def _trusted(window: bytes, at: int, count: int, ran: bool, at_end: bool) -> bool:
    """A chain is trusted when it ran to the window's end with enough records in it, or, in the
    file's last window, ended exactly at the file's last byte."""
    if at_end and at == len(window):
        return count > 0
    return ran and count >= _MIN_CHAIN and not at_end
