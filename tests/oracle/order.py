"""Completed exchanges and anomalies -> request-time order, within a bounded window.

Exchanges complete when their answer arrives, so a slow answer (a long-polling
Fetch, a JoinGroup waiting for a rebalance) completes after faster exchanges that
were requested later. `Reorder` holds completed items and releases them sorted
by their time: an exchange's `ts` (its request's first byte), an orphan
response's `response_ts`, an anomaly's `ts`, a connection's accounting by its
`last_ts`; ties by connection id, then completion order.

An item is released once nothing still open can come out before it: its time is
below the *watermark*, the oldest time still open anywhere (a request awaiting
its answer, a frame half received, data held behind a TCP hole), but never
held back further than `window` seconds of capture time behind the newest
packet, and never more than `max_items` items or about `max_bytes` of frames
are held (past those the oldest are released early). So an item whose request
waited longer than the window for its answer (or was never answered and is
reported when its connection closes) comes out late: after items with later
times. Items are never dropped or changed.
"""

from __future__ import annotations

import heapq

__all__ = ["Reorder", "sort_key", "WINDOW", "MAX_ITEMS", "MAX_BYTES"]

WINDOW = 5.0  # seconds of capture time: Fetch long polls wait 0.5 s, rebalances can take longer
MAX_ITEMS = 20000
MAX_BYTES = 64 << 20
_OVERHEAD = 512  # rough bytes of one held item besides its frames


def sort_key(item) -> tuple:
    if item.type == "connection":  # a connection's accounting comes out when it closes
        ts = item.last_ts
    else:
        ts = item.ts
        if ts is None and item.type == "exchange":
            ts = item.response_ts
    conn = item.connection
    return (float("-inf") if ts is None else ts, -1 if conn is None else conn)


class Reorder:
    __slots__ = ("window", "max_items", "max_bytes", "_heap", "_seq", "_bytes")

    def __init__(self, window: float = WINDOW, max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES):
        self.window, self.max_items, self.max_bytes = window, max_items, max_bytes
        self._heap: list = []
        self._seq = 0
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, items: list) -> None:
        heap = self._heap
        for item in items:
            size = _OVERHEAD
            kind = item.type
            if kind == "exchange":
                ts = item.ts
                if ts is None:
                    ts = item.response_ts
                size += (item.request_size or 0) + (item.response_size or 0)
            else:
                ts = item.last_ts if kind == "connection" else item.ts
            conn = item.connection
            self._seq += 1
            self._bytes += size
            heapq.heappush(
                heap, (float("-inf") if ts is None else ts, -1 if conn is None else conn, self._seq, size, item)
            )

    def over(self) -> bool:
        return len(self._heap) > self.max_items or self._bytes > self.max_bytes

    def release(self, now: float, oldest_open: float | None) -> list:
        """Items below the watermark for capture time `now`, plus the oldest ones past the bounds."""
        bound = now if oldest_open is None or oldest_open > now else max(oldest_open, now - self.window)
        heap = self._heap
        out = []
        pop = heapq.heappop
        while heap and (heap[0][0] < bound or len(heap) > self.max_items or self._bytes > self.max_bytes):
            entry = pop(heap)
            self._bytes -= entry[3]
            out.append(entry[4])
        return out

    def flush(self) -> list:
        heap = self._heap
        out = [e[4] for e in sorted(heap)]
        heap.clear()
        self._bytes = 0
        return out
