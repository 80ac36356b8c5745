"""Split one direction of a TCP stream into Kafka size-prefixed frames.

A pure, incremental byte splitter: feed it the in-order bytes of one direction
(and the gaps between them) and it returns whole frames, without the 4-byte
size prefix. It only ever buffers the frame in progress (at most one frame + 4
bytes) or, while hunting for a frame boundary, a short probe window.

Accounting: every byte fed ends up in a frame (its size prefix included), in
`dropped` (bytes of damaged or cut frames and bytes skipped while hunting, each
run named by a FrameAnomaly, except bytes before the first boundary of a capture
that began mid-connection and never found one), or is still `buffered`.

Where a frame starts is only known while the stream is in sync. After a gap,
an oversized length, or when the capture starts mid-connection, the splitter
*hunts*: it scans byte by byte for an offset where `plausible(buf, pos, end)`
says a frame starts (the caller knows what plausible means for its direction:
a sane request header, or a correlation id it is waiting for).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from struct import Struct
from collections.abc import Callable

from dissector.anomalies import AnomalyKind

__all__ = ["Frame", "FrameAnomaly", "FrameSplitter", "DEFAULT_MAX_FRAME_SIZE", "PROBE_MAX", "HUNT_WINDOW", "VERIFIED"]

DEFAULT_MAX_FRAME_SIZE = 100 << 20  # the broker's socket.request.max.bytes
PROBE_MAX = 4 + 10 + 1024  # size + request header fields + the longest client id we call plausible
HUNT_WINDOW = 8 << 20  # while hunting, plausible() may wait for this many bytes to see a candidate frame whole

_I32 = Struct(">i")

# plausible(buf, pos, end) -> VERIFIED / True / False, or None when buf[pos:end] is too short to tell.
# buf[pos:pos+4] is the candidate size prefix (already checked to be within limits).
# VERIFIED: the whole candidate frame was checked (decoded); True: it only looks right.
VERIFIED = 2
Plausible = Callable[[bytes, int, int], bool | None]


@dataclass(slots=True)
class Frame:
    ts: float  # time of the packet that carried the frame's first byte
    offset: int  # position of the size prefix in this direction's byte stream (gaps counted when their size is known)
    data: bytes  # the frame without its size prefix


@dataclass(slots=True)
class FrameAnomaly:
    ts: float
    kind: str  # "gap_in_frame", "frame_too_large", "bad_frame_size", "resync", "truncated_frame", "frame_over_budget"
    detail: str
    head: bytes = b""  # first bytes of the damaged frame (after the size prefix) when seen: lets the caller name its api/correlation id


def _always(buf: bytes, pos: int, end: int) -> bool | None:
    return True


class FrameSplitter:
    """Incremental splitter for one direction.

    hunting=True starts without sync (capture began mid-connection); then the
    very first offset is tried with `plausible_first` (a looser test: the first
    captured byte is usually a segment, hence frame, start) before hunting.
    """

    __slots__ = (
        "_plausible",
        "_plausible_first",
        "max_frame_size",
        "min_frame_size",
        "_offset",
        "_head",
        "_head_ts",
        "_want",
        "_parts",
        "_have",
        "_skip",
        "_hunting",
        "_first",
        "_tail",
        "_skipped",
        "_hunt_reason",
        "_frame_offset",
        "_waiting",
        "_scan",
        "dropped",
    )

    def __init__(
        self,
        plausible: Plausible = _always,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        min_frame_size: int = 0,
        hunting: bool = False,
        plausible_first: Plausible | None = None,
    ):
        self._plausible = plausible
        self._plausible_first = plausible_first
        self.max_frame_size = max_frame_size
        self.min_frame_size = min_frame_size
        self._offset = 0  # stream position of the next byte fed
        self._head = b""  # partial size prefix (< 4 bytes)
        self._head_ts = 0.0
        self._frame_offset = 0
        self._want = -1  # body size of the frame in progress, -1 when between frames
        self._parts: list[bytes] = []
        self._have = 0
        self._skip = 0  # bytes still to drop (rest of a frame damaged by a gap of known size)
        self._hunting = hunting
        self._first = hunting  # try the first offset with plausible_first
        self._tail = bytearray()  # hunting: unscanned bytes that may hold a frame start
        self._waiting: list[int] = []  # hunting: offsets in _tail that plausible() has not decided yet
        self._scan = 0  # hunting: first offset in _tail not scanned yet
        self._skipped = 0  # hunting: bytes given up so far
        self._hunt_reason = "midstream start"
        self.dropped = 0  # bytes fed that are in no frame (see the module's accounting)

    @property
    def hunting(self) -> bool:
        return self._hunting

    @property
    def partial_ts(self) -> float | None:
        """Time of the frame in progress (its first byte), None between frames."""
        return self._head_ts if self._want >= 0 or self._head else None

    @property
    def buffered(self) -> int:
        """Bytes held right now (for memory checks)."""
        return len(self._head) + self._have + len(self._tail)

    # -- input -----------------------------------------------------------

    def feed(self, data: bytes, ts: float) -> list[Frame | FrameAnomaly]:
        out: list[Frame | FrameAnomaly] = []
        n = len(data)
        pos = 0
        base = self._offset
        self._offset += n
        while pos < n:
            if self._skip:
                take = min(self._skip, n - pos)
                self._skip -= take
                self.dropped += take
                pos += take
            elif self._hunting:
                data, pos, base = self._hunt(data, pos, base, ts, out)
                n = len(data)
            elif self._want < 0:
                if not self._head and pos + 4 <= n:
                    size = _I32.unpack_from(data, pos)[0]
                    if not 0 <= size <= self.max_frame_size and not self._size_ok(size, ts, out, data[pos : pos + 12]):
                        self._start_hunt(b"", ts)
                        self.dropped += 1
                        pos += 1
                        continue
                    end = pos + 4 + size
                    if end <= n:  # the whole frame is in this chunk: one slice, no buffering
                        out.append(Frame(ts, base + pos, data[pos + 4 : end]))
                        pos = end
                        continue
                    self._frame_offset = base + pos
                    self._head_ts = ts
                    self._want = size
                    pos += 4
                    continue
                if not self._head:
                    self._head_ts = ts
                    self._frame_offset = base + pos
                take = min(4 - len(self._head), n - pos)
                self._head += data[pos : pos + take]
                pos += take
                if len(self._head) == 4:
                    size = _I32.unpack_from(self._head, 0)[0]
                    head, self._head = self._head, b""
                    if not self._size_ok(size, ts, out, head + data[pos : pos + 8]):
                        # the 3 bytes after the bad prefix's first byte may start a frame
                        self._start_hunt(head[1:], ts)
                        self.dropped += 1
                        continue
                    self._want = size
                    if size == 0:
                        out.append(Frame(self._head_ts, self._frame_offset, b""))
                        self._want = -1
            else:
                take = min(self._want - self._have, n - pos)
                self._parts.append(data[pos : pos + take])
                self._have += take
                pos += take
                if self._have == self._want:
                    body = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
                    out.append(Frame(self._head_ts, self._frame_offset, body))
                    self._parts = []
                    self._have = 0
                    self._want = -1
        return out

    def gap(self, size: int, ts: float) -> list[FrameAnomaly]:
        """`size` bytes were lost before the next feed (0 = unknown amount)."""
        out: list[FrameAnomaly] = []
        self._offset += size
        if self._hunting:
            self.dropped += len(self._tail)
            self._skipped += len(self._tail) + size
            self._tail = bytearray()
            self._waiting = []
            self._scan = 0
            return out
        if self._skip:
            if size and size <= self._skip:
                self._skip -= size
                return out
            self._skip = 0  # the damaged frame ended inside the gap: what follows is not its rest
            self._start_hunt(b"", ts, "gap")
            return out
        if self._want >= 0:
            head = b"".join(self._parts)[:12] if self._parts else b""
            remaining = self._want - self._have
            self.dropped += 4 + self._have
            what = f"{self._want}-byte frame at stream offset {self._frame_offset}"
            self._parts = []
            self._have = 0
            self._want = -1
            if size and size <= remaining:
                self._skip = remaining - size
                out.append(
                    FrameAnomaly(
                        ts, AnomalyKind.GAP_IN_FRAME, f"{size} bytes lost inside a {what}; skipped the rest of it", head
                    )
                )
                return out
            out.append(
                FrameAnomaly(
                    ts,
                    AnomalyKind.GAP_IN_FRAME,
                    f"{size or 'unknown number of'} bytes lost inside a {what}; resyncing",
                    head,
                )
            )
            self._start_hunt(b"", ts, "gap")
            return out
        if self._head:
            out.append(
                FrameAnomaly(
                    ts,
                    AnomalyKind.GAP_IN_FRAME,
                    f"{size or 'unknown number of'} bytes lost inside a frame's size prefix; resyncing",
                )
            )
            self.dropped += len(self._head)
            self._head = b""
        self._start_hunt(b"", ts, "gap")
        return out

    def drop(self, ts: float, why: str) -> list[FrameAnomaly]:
        """Give up the frame in progress (its bytes so far are freed, the rest skipped as it comes):
        the memory budget for partial frames over all connections ran out (dissector.exchanges)."""
        if self._want < 0 or not self._have:
            return []
        head = b"".join(self._parts)[:12]
        held = self._have
        self._skip = self._want - self._have
        self.dropped += 4 + held  # the rest is counted as it is skipped
        what = f"{self._want}-byte frame at stream offset {self._frame_offset}"
        self._parts = []
        self._have = 0
        self._want = -1
        return [FrameAnomaly(ts, AnomalyKind.FRAME_OVER_BUDGET, f"{what} dropped after {held} bytes: {why}", head)]

    def finish(self, ts: float) -> list[FrameAnomaly]:
        """End of the stream: a frame still in progress is reported, not emitted."""
        out: list[FrameAnomaly] = []
        if self._want >= 0 or self._head:
            head = b"".join(self._parts)[:12] if self._parts else b""
            got = self._have + len(self._head)
            want = f"{self._want}-byte" if self._want >= 0 else "a"
            out.append(
                FrameAnomaly(
                    ts,
                    AnomalyKind.TRUNCATED_FRAME,
                    f"stream ended {got} bytes into {want} frame at stream offset {self._frame_offset}",
                    head,
                )
            )
        elif self._hunting and (self._skipped + len(self._tail)) and self._hunt_reason != "midstream start":
            out.append(
                FrameAnomaly(
                    ts,
                    AnomalyKind.RESYNC,
                    f"stream ended before a frame boundary was found ({self._skipped + len(self._tail)} bytes skipped after {self._hunt_reason})",
                )
            )
        self.dropped += self.buffered + (4 if self._want >= 0 else 0)
        self._head = b""
        self._parts = []
        self._want = -1
        self._have = 0
        self._tail = bytearray()
        self._waiting = []
        self._scan = 0
        return out

    # -- internals --------------------------------------------------------

    def _size_ok(self, size: int, ts: float, out: list, head: bytes) -> bool:
        if size < 0:  # in sync any size >= 0 is taken (a SASL token may be empty); min_frame_size only guides hunting
            out.append(FrameAnomaly(ts, AnomalyKind.BAD_FRAME_SIZE, f"negative frame size {size}; resyncing", head[4:]))
            return False
        if size > self.max_frame_size:
            out.append(
                FrameAnomaly(
                    ts,
                    AnomalyKind.FRAME_TOO_LARGE,
                    f"frame size {size} above the {self.max_frame_size}-byte limit; resyncing",
                    head[4:],
                )
            )
            return False
        return True

    def _start_hunt(self, tail: bytes, ts: float, reason: str = "bad frame size") -> None:
        # tail: bytes that directly precede the next ones fed and may hold a frame start
        self._hunting = True
        self._first = False
        self._hunt_reason = reason
        self._skipped = 1 if reason == "bad frame size" else 0
        self._tail = bytearray(tail)
        self._waiting = []
        self._scan = 0

    def _hunt(self, data: bytes, pos: int, base: int, ts: float, out: list) -> tuple[bytes, int, int]:
        """Scan for a frame start. Returns (data, pos, base) to continue with:
        either synced at a frame start, or everything consumed (tail kept).

        Offsets where plausible() cannot decide yet (it waits to see the candidate
        frame whole) are remembered and re-asked as bytes arrive, while the scan goes
        on past them: a later offset that plausible() accepts outright wins, so one
        false candidate with a big size cannot stall the hunt."""
        tail = self._tail
        if tail:
            tail += memoryview(data)[pos:]  # bytearray: amortised appends
            buf = tail
            bbase = base + len(data) - len(tail)
            i = self._scan
        else:
            buf = data[pos:] if pos else data
            bbase = base + pos
            i = 0
        end = len(buf)
        lo, hi = self.min_frame_size, self.max_frame_size
        if self._first:
            check = self._plausible_first or self._plausible
            ok = None if end < 4 else False
            if end >= 4 and lo <= _I32.unpack_from(buf, 0)[0] <= hi:
                ok = check(buf, 0, end)
            if ok is None and end < HUNT_WINDOW:  # too few bytes to judge the first offset yet
                self._keep(buf, 0)
                self._scan = 0
                return buf, end, bbase
            self._first = False
            if ok:
                return self._synced(buf), 0, bbase
        plausible = self._plausible
        found = -1
        waiting = []
        # ok == VERIFIED wins at once; a plain True only when no earlier offset is still undecided
        for at in chain(self._waiting, self._offsets(buf, i, end)):
            ok = plausible(buf, at, end)
            if ok == VERIFIED or ok and not waiting:
                found = at
                break
            if ok is None or ok:
                waiting.append(at)
        i = max(i, end - 3)
        if found >= 0:
            skipped = self._skipped + found
            self.dropped += found
            if skipped:
                out.append(
                    FrameAnomaly(
                        ts,
                        AnomalyKind.RESYNC,
                        f"skipped {skipped} bytes after {self._hunt_reason}; frame boundary found at stream offset {bbase + found}",
                    )
                )
            self._skipped = 0
            self._waiting = []
            self._scan = 0
            return self._synced(buf), found, bbase
        keep = min(waiting[0], i) if waiting else i
        if end - keep > HUNT_WINDOW:  # plausible() may not make us hold more than HUNT_WINDOW bytes
            keep = end - HUNT_WINDOW
            waiting = [w for w in waiting if w >= keep]
        self._skipped += keep
        self.dropped += keep
        self._keep(buf, keep)
        self._waiting = [w - keep for w in waiting]
        self._scan = i - keep
        return buf, end, bbase

    def _offsets(self, buf, i: int, end: int):
        """Offsets from i whose 4 bytes are a size within limits."""
        unpack = _I32.unpack_from
        lo, hi = self.min_frame_size, self.max_frame_size
        while i + 4 <= end:
            if lo <= unpack(buf, i)[0] <= hi:
                yield i
            i += 1

    def _keep(self, buf, i: int) -> None:
        """Hold buf[i:] as the hunting tail (in place when buf is the tail already)."""
        if buf is self._tail:
            if i:
                del buf[:i]
        else:
            self._tail = bytearray(memoryview(buf)[i:])

    def _synced(self, buf):
        self._hunting = False
        if buf is self._tail:
            self._tail = bytearray()
            return bytes(buf)  # frames are bytes; one copy per resync
        return buf
