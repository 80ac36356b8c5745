"""Packets -> landing items with connection ids that do not depend on how the capture was split.

Both engines land through `items()`: the local one over all packets of the
set, the Spark one over the packets of the connections hashed to one task
(every packet of a TCP 4-tuple goes to the same task, in capture order).  The
dissector's connection number is an ordinal of first appearance, which a task
seeing a subset cannot know; here it becomes a 63-bit hash of the client, the
broker and the connection's first packet time (`stable_id`), the same in any
split.  Table order is not the dissector's request-time order (tables are
sets; sort by ids), so no reorder window is needed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from dissector.capture import CaptureAnomaly
from dissector.exchanges import Exchanges
from dissector.frames import DEFAULT_MAX_FRAME_SIZE
from dissector.redact import redact
from dissector.tcp import Open, Reassembler

__all__ = ["items", "file_items", "row_items", "stable_id", "conn_key"]


def stable_id(key: tuple, ts: float) -> int:
    """A connection's id: its 4-tuple (either direction) and its first packet's time."""
    key = f"{key}|{round(ts * 1_000_000)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def conn_key(pkt) -> tuple:
    """The same key for both directions of a TCP 4-tuple."""
    a, b = (pkt.src, pkt.sport), (pkt.dst, pkt.dport)
    return (a, b) if a <= b else (b, a)


def file_items(files: list, *, ports: Iterable[int] = (), show_secrets: bool = False, progress=None) -> Iterator:
    """items(read_packets(files)): on the native core when it is there (the same items, faster)."""
    from dissector import native
    from dissector.capture import _capture_files, read_packets

    files = _capture_files(files)
    if not native.available(files):
        yield from items(read_packets(files), ports=ports, show_secrets=show_secrets, progress=progress)
        return
    out = native.stitched(files, ports=ports, max_frame_size=DEFAULT_MAX_FRAME_SIZE, progress=progress)
    yield from (out if show_secrets else map(redact, out))


def row_items(rows: Iterable[tuple], *, ports: Iterable[int] = (), end=None, core: str = "auto") -> Iterator:
    """items() of packets given as rows (a Packet's or a CaptureAnomaly's fields, as landing.spark
    ships them), redacted; on the native core unless `core` is "python" (or it was not built)."""
    from dissector import native
    from dissector.capture import Packet

    if core != "python" and native.available():
        out = native.stitched([], ports=ports, max_frame_size=DEFAULT_MAX_FRAME_SIZE, packets=rows, end=end)
        yield from map(redact, out)
        return
    if core == "native":
        raise RuntimeError("kafkawire's native core is not available here")
    yield from items((Packet(*r) if len(r) == 11 else CaptureAnomaly(*r) for r in rows), ports=ports, end=end)


def items(
    packets: Iterable,
    *,
    ports: Iterable[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    show_secrets: bool = False,
    end=None,
    progress=None,
) -> Iterator:
    """Exchange, Anomaly and Connection items of `packets` (Packet / CaptureAnomaly) with stable connection ids.

    end: (the last packet's time, the latest packet time) of the whole capture set, when
    `packets` is only part of it: connections still open are closed at those times,
    as in a run over every packet (a callable giving them, asked after the last packet).
    progress: called with the number of packets read so far, every 4096 packets (as dissect() does).
    """
    reasm = Reassembler()
    ex = Exchanges(ports=ports, max_frame_size=max_frame_size, connections=True)
    feed = ex.feed
    ids: dict[int, int] = {}
    now = None
    n = 0

    def fix(out):
        for it in out:
            c = it.connection
            if c is not None:
                it.connection = ids[c]
            yield it if show_secrets else redact(it)

    for pkt in packets:
        if type(pkt) is CaptureAnomaly:
            yield from fix(feed(pkt))
            continue
        n += 1
        if progress is not None and not n & 4095:
            progress(n)
        ts = pkt.ts
        if now is None or ts > now:
            now = ts
        for ev in reasm.feed(pkt):
            if type(ev) is Open:
                ids[ev.conn] = stable_id(conn_key(pkt), ev.ts)
            out = feed(ev)
            if out:
                yield from fix(out)
    if end is not None:
        reasm._last_ts, now = end() if callable(end) else end  # noqa: SLF001 -- the set's last packet time, as a run over every packet sees it
    for ev in reasm.finish():
        yield from fix(feed(ev))
    if progress is not None:
        progress(n)
    yield from fix(ex.finish(now))
