"""Packet captures in, decoded Kafka exchanges out.

    from dissector import dissect
    for item in dissect(["capture.pcap"], ports=[29092]):
        if item.type == "exchange":
            print(item.api_name, item.correlation_id, item.status, item.error_codes)

Layers (one module each): capture (files -> packets), tcp (-> byte streams),
frames (-> size-prefixed frames), exchanges (-> paired, decoded exchanges),
order (-> request-time order), redact (secrets out), output (text / jsonl),
cli (`kafkawire dissect`).

The native core (native/, Rust; dissector/native.py drives it) is a port of
these layers, one Rust module per Python module, and runs them when it was
built: the same items, several times faster. The Python modules stay the
reference the tests hold it to, the fallback without cargo, and the home of
what is rare (the lenient decoder, ApiVersions' fallback layouts, the text of a
decode error), which the native core asks of them.

Output order: items come sorted by request time (an exchange's `ts`, an orphan
response's `response_ts`, an anomaly's `ts`), not in the order they complete.
Finished exchanges are held until nothing still open can precede them, for at
most 5 s of capture time (`window`), 20000 items or ~64 MiB of frames; past
that bound the oldest are released early, so a request answered more than 5 s
later (or never, reported when its connection closes) comes out late and
unmarked, after items with later times. Nothing is dropped.

Memory is bounded by open connections, not by capture size: per open
connection ~12 KiB of state and up to 128 KiB per direction of delivered bytes
kept for overlap checks; out-of-order data over all connections up to 256 MiB
(tcp.Reassembler.max_buffer_total: past it the directions holding the most give
up their holes, as Gaps); frames in progress over all connections up to 256 MiB
(exchanges.Exchanges.max_partial_bytes: past it the largest are dropped, each an
anomaly `frame_over_budget` and an undecodable exchange); one frame at most
100 MiB (max_frame_size); the reordering window above. tests/test_memory.py
measures it with tracemalloc.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from dissector.exchanges import Anomaly, Connection, Exchange
from dissector.frames import DEFAULT_MAX_FRAME_SIZE
from dissector.order import WINDOW, Reorder

__all__ = ["dissect", "Exchange", "Anomaly", "Connection", "DEFAULT_MAX_FRAME_SIZE"]


def dissect(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    ports: Iterable[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    show_secrets: bool = False,
    progress: Callable[[int], None] | None = None,
    connections: bool = False,
    window: float = WINDOW,
    engine: str = "auto",
) -> Iterator[Exchange | Anomaly | Connection]:
    """Exchanges (and anomalies) in request-time order.

    Order: by an exchange's `ts` (its request's first byte; an orphan response by
    its `response_ts`), an anomaly's `ts`; ties by connection, then completion.
    Exchanges complete when their answer arrives, so finished ones are held until
    nothing still open (a request awaiting its answer, a half-received frame, data
    behind a TCP hole) can come before them, but at most `window` seconds of
    capture time (default 5), 20000 items or about 64 MiB of frames: an exchange
    whose answer took longer than the window, or an unanswered request reported
    when its connection closes after that, comes out late, after items with later
    times (see dissector.order).

    ports: Kafka ports besides 9092 (others are still found by plausibility).
    show_secrets: keep SASL passwords/proofs/tokens and delegation-token HMACs
    (redacted by default, in the decoded bodies and in request_raw/response_raw).
    progress: called with the number of packets read so far, every 4096 packets.
    connections: also yield a Connection item (bytes, frames, gaps, retransmissions,
    out-of-order segments, resyncs, client ids, and where every byte of each direction
    went: frame_bytes_to_*, skipped_bytes_to_*, gap_bytes_to_*) as each Kafka connection closes.
    engine: "native" (the Rust core, dissector/native.py), "python" (this package's own
    modules), or "auto": native when it was built and KAFKAWIRE_NATIVE is not 0. Both give the
    same items (tests/test_native_*.py); native is several times faster.
    """
    from dissector import native
    from dissector.capture import CaptureAnomaly, _capture_files, packets_of, _merged
    from dissector.exchanges import Exchanges
    from dissector.redact import redact
    from dissector.tcp import Reassembler

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if engine not in ("auto", "native", "python"):
        raise ValueError(f"engine must be auto, native or python, not {engine!r}")
    if engine == "native" and native._native is None:
        raise RuntimeError("kafkawire was built without its native core (no cargo at install time)")
    files = _capture_files(paths)
    if engine == "native" or engine == "auto" and native.available(files):
        items = native.dissect(
            files, ports=ports, max_frame_size=max_frame_size, connections=connections, window=window, progress=progress
        )
        yield from (items if show_secrets else map(redact, items))
        return
    reasm = Reassembler()
    ex = Exchanges(ports=ports, max_frame_size=max_frame_size, connections=connections)
    feed = ex.feed
    held = Reorder(window)
    add = held.add
    now = None
    n = 0
    for pkt in packets_of(_merged(files)):
        if type(pkt) is CaptureAnomaly:
            add(feed(pkt))
            continue
        n += 1
        ts = pkt.ts
        if now is None or ts > now:
            now = ts
        grew = False
        for ev in reasm.feed(pkt):
            items = feed(ev)
            if items:
                add(items)
                grew = True
        if not n & 31 or grew and held.over():
            if progress is not None and not n & 4095:
                progress(n)
            if held:
                oldest = ex.oldest_open()
                stuck = reasm.oldest_held()
                if stuck is not None and (oldest is None or stuck < oldest):
                    oldest = stuck
                out = held.release(now, oldest)
                yield from (out if show_secrets else map(redact, out))
    for ev in reasm.finish():
        add(feed(ev))
    add(ex.finish(now))
    if progress is not None:
        progress(n)
    out = held.flush()
    yield from (out if show_secrets else map(redact, out))
