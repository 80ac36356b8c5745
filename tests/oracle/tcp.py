"""TCP packets -> per-direction byte-stream events.

Each direction keeps `nxt`, the next expected sequence number unwrapped to an
unbounded int (so 32-bit wrap-around and streams over 4 GiB need no special
case), and a sorted out-of-order buffer of non-overlapping pieces.  A piece is
bytes (data) or an int (that many bytes known lost: the snaplen-cut tail of a
segment).  First-seen bytes win on overlap, as in most reassemblers; the
delivered tail is remembered (by reference, ~64 KiB) so a retransmission that
disagrees with data already delivered is reported too.

Each buffered piece keeps the time of the packet that brought it, and is
delivered as its own Data event with that time, so latencies measured on the
byte stream stay true when a hole holds data back.

When is a hole given up (Gap of its size, then the data after it)?
- The other direction acknowledges bytes past its start, and `ACK_PROOF`
  more packets of that connection have been captured since that first such
  ACK without the bytes showing up.  An ACK past what we saw means the
  receiver got bytes the capture missed (a capture drop), so no
  retransmission will come.  On loopback the ACK is often captured a little
  before the data it acknowledges, so one ACK alone is not proof; counting
  from the ACK (not from the opening of the hole) also covers a segment lost
  on the wire whose retransmission is captured just after its ACK.  The ACK
  is trusted only up to where it points: a hole partly acked shrinks.
- More than `lost_after` bytes (default 1 MiB) wait behind it: a sender
  retransmits a hole within about a round trip, and the data sent past the
  hole meanwhile is one window, rarely above 1 MiB (10 Gbit/s x 0.8 ms).
  This covers one-way captures and lost ACKs.  A byte count, not a segment
  count: a Kafka client pipelines few requests, while a window holds many
  small segments.
- `max_buffer_per_direction` stays the hard memory bound; FIN acknowledged,
  RST and end of capture flush as before.
- Out-of-order data over all connections is held to `max_buffer_total`
  (default 256 MiB): past it the directions holding the most give up their
  holes first, so thousands of connections with holes cost at most that.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from dissector.anomalies import AnomalyKind
from tests.oracle.capture import Packet

__all__ = ["Data", "Gap", "Open", "Close", "StreamAnomaly", "Reassembler"]

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
_M32 = 0xFFFFFFFF
_KEEP_DELIVERED = 64 << 10  # kept for overlap checks; up to twice that between trims
_CLOSED_MEMORY = 4096  # closed 4-tuples remembered so stray ACKs/retransmissions don't reopen them
ACK_PROOF = 8  # packets of a connection after an ACK past a hole before the hole is declared lost
MAX_BUFFER_PER_DIRECTION = 16 << 20
LOST_AFTER = 1 << 20
MAX_BUFFER_TOTAL = 256 << 20


@dataclass(slots=True)
class Data:
    conn: int
    sender: tuple
    receiver: tuple
    ts: float
    data: bytes


@dataclass(slots=True)
class Gap:
    conn: int
    sender: tuple
    receiver: tuple
    ts: float
    size: int


@dataclass(slots=True)
class Open:
    conn: int
    client: tuple | None
    server: tuple | None
    ts: float
    syn_seen: bool


@dataclass(slots=True)
class Close:
    conn: int
    ts: float
    reason: str
    # accounting, not identity: counted off the fast path, so in-order traffic pays nothing
    retransmissions: int = field(default=0, compare=False)  # segments that repeated bytes already delivered
    out_of_order: int = field(default=0, compare=False)  # segments that arrived ahead of a hole


@dataclass(slots=True)
class StreamAnomaly:
    conn: int
    ts: float
    kind: str
    detail: str


class _Half:
    """One direction of a connection."""

    __slots__ = (
        "conn",
        "sender",
        "receiver",
        "nxt",
        "isn",
        "starts",
        "pieces",
        "stamps",
        "buffered",
        "recent",
        "recent_len",
        "fin",
        "done",
        "data_seen",
        "peer",
        "acked",
        "acked_at",
    )

    def __init__(self, conn: _Conn, sender: tuple, receiver: tuple):
        self.conn = conn
        self.sender = sender
        self.receiver = receiver
        self.nxt: int | None = None  # unwrapped next expected seq
        self.isn: int | None = None  # seq of this side's SYN
        self.starts: list[int] = []  # out-of-order buffer, sorted starts ...
        self.pieces: list = []  # ... and their bytes / lost-byte counts ...
        self.stamps: list = []  # ... and the ts of the packet that brought each
        self.buffered = 0
        self.recent: deque = deque()  # (start, bytes) most recently delivered
        self.recent_len = 0
        self.fin: int | None = None  # unwrapped seq of FIN
        self.done = False  # everything up to FIN delivered, or flushed
        self.data_seen = False
        self.peer: _Half = None  # type: ignore[assignment]
        self.acked: int | None = None  # highest unwrapped ACK from the peer past nxt ...
        self.acked_at = 0  # ... first seen at this packet count of the connection

    def unwrap(self, seq: int) -> int:
        nxt = self.nxt
        return nxt + ((seq - nxt + 0x80000000) & _M32) - 0x80000000


class _Conn:
    __slots__ = ("id", "halves", "n", "retrans", "ooo")

    def __init__(self, cid: int):
        self.id = cid
        self.halves: dict[tuple, _Half] = {}
        self.n = 1  # packets seen
        self.retrans = 0
        self.ooo = 0


class Reassembler:
    """Feed Packets in capture order; get Data/Gap/Open/Close/StreamAnomaly events.

    Memory: one entry per open connection, out-of-order data up to
    min(`max_buffer_per_direction`, `lost_after`) per direction (past it the
    oldest hole is declared a Gap), ~64 KiB of delivered data per direction
    kept by reference for overlap checks, and the last few thousand closed
    4-tuples.
    """

    def __init__(
        self,
        max_buffer_per_direction: int = MAX_BUFFER_PER_DIRECTION,
        lost_after: int = LOST_AFTER,
        max_buffer_total: int = MAX_BUFFER_TOTAL,
    ):
        self.max_buffer = min(max_buffer_per_direction, lost_after)
        self.max_buffer_total = max_buffer_total  # out-of-order data over all connections
        self._buffered = 0
        self._halves: dict[tuple, _Half] = {}  # (src, sport, dst, dport) -> _Half
        self._conns: dict[int, _Conn] = {}
        self._closed: OrderedDict[tuple, tuple] = OrderedDict()  # key -> (nxt of that direction)
        self._next_id = 0
        self._last_ts = 0.0

    # ------------------------------------------------------------ public
    def feed(self, pkt: Packet) -> list:
        ts = self._last_ts = pkt.ts
        key = (pkt.src, pkt.sport, pkt.dst, pkt.dport)
        flags = pkt.flags
        half = self._halves.get(key)
        if half is not None:
            half.conn.n += 1
        if (
            half is not None
            and not flags & 0x07
            and half.fin is None
            and not half.starts
            and not (peer := half.peer).starts
            and peer.fin is None
            and not (flags & ACK and peer.nxt is not None and 0 < (pkt.ack - peer.nxt) & _M32 < 0x80000000)
        ):
            # Fast path: established, no SYN/FIN/RST, no hole either way (holes age
            # by packets), the peer not acknowledged past what we saw of it.
            payload = pkt.payload
            if not payload and not pkt.missing:
                return []
            nxt = half.nxt
            if nxt is not None and (pkt.seq - nxt) & _M32 == 0 and not pkt.missing:
                half.nxt = nxt + len(payload)
                half.data_seen = True
                half.recent.append((nxt, payload))
                half.recent_len += len(payload)
                if half.recent_len > 2 * _KEEP_DELIVERED:
                    self._trim(half)
                return [Data(half.conn.id, half.sender, half.receiver, ts, payload)]
        out: list = []
        if half is None:
            if not self._admit(key, pkt):
                return out
            half = self._open(key, pkt, out)
        elif flags & SYN and self._supersedes(half, pkt):
            self._close(half.conn, ts, "superseded", out)
            half = self._open(key, pkt, out)
        seq = pkt.seq
        if half.nxt is None:
            half.nxt = seq + 1 if flags & SYN else seq
        if flags & SYN:
            if half.isn is None:
                half.isn = seq
            seq = (seq + 1) & _M32
        payload = pkt.payload
        n = len(payload)
        missing = pkt.missing
        if n or missing:
            half.data_seen = True
            start = half.unwrap(seq)
            if start == half.nxt and not half.starts and not missing:
                # In-order fast path.
                half.nxt = start + n
                self._remember(half, start, payload)
                out.append(Data(half.conn.id, half.sender, half.receiver, ts, payload))
            else:
                self._insert(half, start, payload, missing, ts, out)
                self._drain(half, out)
                if half.buffered > self.max_buffer:
                    self._force(half, out)
                if self._buffered > self.max_buffer_total:
                    self._shed(out)
        if flags & FIN and half.fin is None:
            half.fin = half.unwrap(seq) + n + missing
        if flags & RST:
            self._close(half.conn, ts, "rst", out)
            return out
        if half.fin is not None and not half.done:
            self._check_fin(half)
        peer = half.peer
        if flags & ACK and peer.nxt is not None:
            self._acked(peer, pkt.ack, ts, out)
        elif peer.starts:
            self._acked(peer, None, ts, out)
        if half.starts:
            self._acked(half, None, ts, out)
        if flags & ACK and peer.fin is not None and not peer.done and peer.nxt is not None:
            # The receiver acknowledged the peer's FIN: nothing before it will be
            # sent again, so holes there can no longer be filled.
            if ((pkt.ack - (peer.fin + 1)) & _M32) < 0x80000000:
                self._flush(peer, ts, out)
                peer.done = True
        if half.done and peer.done:
            self._close(half.conn, ts, "fin", out)
        return out

    def oldest_held(self) -> float | None:
        """Time of the oldest data waiting behind a hole (it will come out with that time), or None."""
        oldest = None
        for conn in self._conns.values():
            for half in conn.halves.values():
                if half.stamps:
                    t = min(half.stamps)
                    if oldest is None or t < oldest:
                        oldest = t
        return oldest

    def finish(self) -> list:
        """End of capture: deliver buffered data (with Gaps for holes) and close all."""
        out: list = []
        for conn in list(self._conns.values()):
            self._close(conn, self._last_ts, "end_of_capture", out)
        self._closed.clear()
        return out

    # ------------------------------------------------------------ connections
    def _admit(self, key: tuple, pkt: Packet) -> bool:
        """Packets of a recently closed 4-tuple only reopen it with a SYN or new data."""
        old = self._closed.get(key)
        if pkt.flags & SYN:
            return True
        if old is None:
            return not (pkt.flags & RST and not pkt.payload)  # a lone RST opens nothing
        end = (pkt.seq + len(pkt.payload) + pkt.missing) & _M32
        return bool(pkt.payload or pkt.missing) and 0 < (end - old) & _M32 < 0x80000000  # it ends past what was seen

    def _supersedes(self, half: _Half, pkt: Packet) -> bool:
        """A SYN on a live 4-tuple: retransmitted SYN, or a new connection?"""
        return half.nxt is not None and pkt.seq != half.isn

    def _open(self, key: tuple, pkt: Packet, out: list) -> _Half:
        src, sport, dst, dport = key
        self._closed.pop(key, None)
        self._closed.pop((dst, dport, src, sport), None)
        conn = _Conn(self._next_id)
        self._next_id += 1
        a = _Half(conn, (src, sport), (dst, dport))
        b = _Half(conn, (dst, dport), (src, sport))
        a.peer, b.peer = b, a
        rkey = (dst, dport, src, sport)
        conn.halves = {key: a, rkey: b}
        self._halves[key] = a
        self._halves[rkey] = b
        self._conns[conn.id] = conn
        client = server = None
        syn = bool(pkt.flags & SYN)
        if syn:
            client, server = (a.sender, a.receiver) if not pkt.flags & ACK else (a.receiver, a.sender)
        out.append(Open(conn.id, client, server, pkt.ts, syn))
        return a

    def _close(self, conn: _Conn, ts: float, reason: str, out: list) -> None:
        for half in conn.halves.values():
            self._flush(half, ts, out)
        out.append(Close(conn.id, ts, reason, conn.retrans, conn.ooo))
        del self._conns[conn.id]
        for key, half in conn.halves.items():
            del self._halves[key]
            self._closed[key] = (half.nxt or 0) & _M32
            if len(self._closed) > _CLOSED_MEMORY:
                self._closed.popitem(last=False)

    def _check_fin(self, half: _Half) -> None:
        if half.nxt >= half.fin and not half.starts:
            half.done = True

    # ------------------------------------------------------------ one direction
    def _remember(self, half: _Half, start: int, data: bytes) -> None:
        half.recent.append((start, data))
        half.recent_len += len(data)
        if half.recent_len > 2 * _KEEP_DELIVERED:
            self._trim(half)

    @staticmethod
    def _trim(half: _Half) -> None:
        """Keep at least _KEEP_DELIVERED bytes; trimmed rarely, so cheap per packet."""
        recent = half.recent
        while half.recent_len - len(recent[0][1]) >= _KEEP_DELIVERED:
            half.recent_len -= len(recent.popleft()[1])

    def _conflict(self, half: _Half, ts: float, start: int, count: int, out: list) -> None:
        out.append(
            StreamAnomaly(
                half.conn.id,
                ts,
                AnomalyKind.OVERLAP_CONFLICT,
                f"{half.sender[0]}:{half.sender[1]} -> {half.receiver[0]}:{half.receiver[1]}: "
                f"{count} byte(s) from seq {start & _M32} differ from the first-seen data; first-seen kept",
            )
        )

    def _check_delivered(self, half: _Half, start: int, data: bytes, ts: float, out: list) -> None:
        """Compare the already-delivered part of a segment with what was delivered."""
        end = start + len(data)
        if len(data) <= 1 and end == half.nxt:
            return  # keep-alive probe: one garbage byte below nxt by design
        diff = 0
        where = None
        for rstart, rdata in half.recent:
            rend = rstart + len(rdata)
            lo, hi = max(start, rstart), min(end, rend)
            if lo < hi and data[lo - start : hi - start] != rdata[lo - rstart : hi - rstart]:
                a, b = data[lo - start : hi - start], rdata[lo - rstart : hi - rstart]
                diff += sum(x != y for x, y in zip(a, b, strict=False))
                where = lo if where is None else where
        if diff:
            self._conflict(half, ts, where, diff, out)

    def _insert(self, half: _Half, start: int, data: bytes, missing: int, ts: float, out: list) -> None:
        nxt = half.nxt
        if start > nxt:
            half.conn.ooo += 1
        elif start < nxt:
            half.conn.retrans += 1
            cut = nxt - start
            if data:
                self._check_delivered(half, start, data[:cut], ts, out)
            if cut >= len(data):
                missing -= cut - len(data)
                data = b""
                start = nxt
                if missing <= 0:
                    return
            else:
                data = data[cut:]
                start = nxt
        parts = []
        if data:
            parts.append((start, data))
        if missing > 0:
            parts.append((start + len(data), missing))
        starts, pieces, stamps = half.starts, half.pieces, half.stamps
        diff = 0
        where = None
        for pstart, pdata in parts:
            plen = len(pdata) if isinstance(pdata, bytes) else pdata
            pend = pstart + plen
            i = max(bisect_right(starts, pstart) - 1, 0)
            cursor = pstart
            new = []
            while i < len(starts) and starts[i] < pend:
                s = starts[i]
                old = pieces[i]
                olen = len(old) if isinstance(old, bytes) else old
                e = s + olen
                if e <= cursor:
                    i += 1
                    continue
                if s > cursor:
                    new.append((cursor, s))
                lo, hi = max(cursor, s), min(pend, e)
                if isinstance(old, bytes) and isinstance(pdata, bytes):
                    a, b = pdata[lo - pstart : hi - pstart], old[lo - s : hi - s]
                    if a != b:
                        diff += sum(x != y for x, y in zip(a, b, strict=False))
                        where = lo if where is None else where
                cursor = max(cursor, e)
                i += 1
            if cursor < pend:
                new.append((cursor, pend))
            for lo, hi in new:
                piece = pdata[lo - pstart : hi - pstart] if isinstance(pdata, bytes) else hi - lo
                j = bisect_right(starts, lo)
                starts.insert(j, lo)
                pieces.insert(j, piece)
                stamps.insert(j, ts)
                if isinstance(piece, bytes):
                    half.buffered += len(piece)
                    self._buffered += len(piece)
        if diff:
            self._conflict(half, ts, where, diff, out)

    def _drain(self, half: _Half, out: list) -> None:
        """Deliver the pieces now in order, each with the time of its own packet."""
        starts, pieces, stamps = half.starts, half.pieces, half.stamps
        cid = half.conn.id
        i = 0
        while i < len(starts) and starts[i] == half.nxt:
            start = starts[i]
            piece = pieces[i]
            ts = stamps[i]
            i += 1
            if isinstance(piece, bytes):
                half.buffered -= len(piece)
                self._buffered -= len(piece)
                half.nxt = start + len(piece)
                self._remember(half, start, piece)
                out.append(Data(cid, half.sender, half.receiver, ts, piece))
            else:
                half.nxt = start + piece
                out.append(Gap(cid, half.sender, half.receiver, ts, piece))
        if i:
            del starts[:i], pieces[:i], stamps[:i]

    def _force(self, half: _Half, out: list) -> None:
        """Too much data waits behind the oldest hole: give it up."""
        while half.buffered > self.max_buffer and half.starts:
            self._skip_hole(half, half.starts[0], half.stamps[0], out)

    def _shed(self, out: list) -> None:
        """Out-of-order data over all connections above max_buffer_total: the holes of the directions
        holding the most are given up (Gaps), until a quarter of the budget is free."""
        halves = sorted(
            (h for c in self._conns.values() for h in c.halves.values() if h.starts),
            key=lambda h: h.buffered,
            reverse=True,
        )
        for half in halves:
            while half.starts and self._buffered > self.max_buffer_total * 3 // 4:
                self._skip_hole(half, half.starts[0], half.stamps[0], out)
            # what came out would stay alive as overlap-check history: a shed direction starts that afresh
            half.recent.clear()
            half.recent_len = 0
            if self._buffered <= self.max_buffer_total * 3 // 4:
                break

    def _acked(self, half: _Half, ack: int | None, ts: float, out: list) -> None:
        """Note an ACK for `half` from its receiver (None: no ACK in this packet),
        then give up what ACKs proved lost ACK_PROOF packets ago (module docstring)."""
        if ack is not None:
            a = half.unwrap(ack)
            if a > half.nxt:
                if half.acked is None or half.acked <= half.nxt:
                    half.acked, half.acked_at = a, half.conn.n  # fresh evidence
                elif a > half.acked:
                    half.acked = a
        acked = half.acked
        if acked is None or acked <= half.nxt or half.conn.n - half.acked_at < ACK_PROOF:
            return
        while half.starts and half.nxt < acked:
            if half.starts[0] <= acked:
                self._skip_hole(half, half.starts[0], half.stamps[0], out)
            else:  # only the acked part of the hole is known lost
                self._skip_hole(half, acked, ts, out)

    def _skip_hole(self, half: _Half, to: int, ts: float, out: list) -> None:
        """Bytes from nxt up to `to` are lost; `ts` is that of the bytes after them."""
        out.append(Gap(half.conn.id, half.sender, half.receiver, ts, to - half.nxt))
        half.nxt = to
        self._drain(half, out)

    def _flush(self, half: _Half, ts: float, out: list) -> None:
        """The holes of this direction can no longer be filled."""
        if half.nxt is None:
            return
        while half.starts:
            self._skip_hole(half, half.starts[0], half.stamps[0], out)
        if half.fin is not None and half.nxt < half.fin:
            out.append(Gap(half.conn.id, half.sender, half.receiver, ts, half.fin - half.nxt))
            half.nxt = half.fin
