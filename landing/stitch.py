"""Packets -> landing items with connection ids that do not depend on how the capture was split.

Both engines land through the native core's stitched run: the local one over all packets of
the set (`file_items`), the Spark one over the packets of the connections hashed to one task (`row_items`)
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

from dissector.native import DEFAULT_MAX_FRAME_SIZE
from dissector.redact import redact

__all__ = ["file_items", "row_items", "stable_id", "conn_key"]


def stable_id(key: tuple, ts: float) -> int:
    """A connection's id: its 4-tuple (either direction) and its first packet's time."""
    key = f"{key}|{round(ts * 1_000_000)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def conn_key(pkt) -> tuple:
    """The same key for both directions of a TCP 4-tuple."""
    a, b = (pkt.src, pkt.sport), (pkt.dst, pkt.dport)
    return (a, b) if a <= b else (b, a)


def file_items(
    files: list, *, ports: Iterable[int] = (), show_secrets: bool = False, progress=None, tls_keylogs=()
) -> Iterator:
    """The items of the capture files `files` with stable connection ids, as they complete
    (tls_keylogs: key log texts, dissector.tls.read_keylogs)."""
    from dissector import native
    from dissector.files import capture_files

    out = native.stitched(
        capture_files(files),
        ports=ports,
        max_frame_size=DEFAULT_MAX_FRAME_SIZE,
        progress=progress,
        tls_keylogs=tls_keylogs,
    )
    yield from (out if show_secrets else map(redact, out))


def row_items(rows: Iterable[tuple], *, ports: Iterable[int] = (), end=None) -> Iterator:
    """The items of packets given as rows (a packet's fields, or a capture anomaly's, as the Spark
    engine's stage 1 ships them) with stable connection ids, redacted.

    end: (the last packet's time, the latest packet time) of the whole capture set, when the rows
    are only part of it: connections still open are closed at those times, as in a run over every
    packet (a callable giving them, asked after the last packet)."""
    from dissector import native

    out = native.stitched([], ports=ports, max_frame_size=DEFAULT_MAX_FRAME_SIZE, packets=rows, end=end)
    yield from map(redact, out)
