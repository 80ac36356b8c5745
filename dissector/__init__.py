"""Packet captures in, decoded Kafka exchanges out.

    from dissector import dissect
    for item in dissect(["capture.pcap"], ports=[29092]):
        if item.type == "exchange":
            print(item.api_name, item.correlation_id, item.status, item.error_codes)

The pipeline (capture files -> packets -> TCP streams -> frames -> paired,
decoded exchanges -> request-time order) is the native core's (native/, Rust;
dissector/native.py starts it). This package is its Python face: the items it
yields (items), the files and URIs it reads (files, fs, stream), topic names
(topics), filters (filters), TLS key logs (tls) and byte ranges (ranges, resync).

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
(native.MAX_BUFFER_TOTAL: past it the directions holding the most give up their
holes, as Gaps); frames in progress over all connections up to 256 MiB (past it
the largest are dropped, each an anomaly `frame_over_budget` and an undecodable
exchange); one frame at most 100 MiB (max_frame_size); the reordering window
above. The native core's TCP layer holds its bound in its own tests
(native/core/src/tcp.rs); tests/test_memory.py measures the same bounds on the
Python oracle (tests/oracle) with tracemalloc, which cannot see Rust's heap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from dissector.items import Anomaly, Connection, Exchange
from dissector.native import DEFAULT_MAX_FRAME_SIZE, WINDOW, NativeCoreMissing

__all__ = ["dissect", "Exchange", "Anomaly", "Connection", "DEFAULT_MAX_FRAME_SIZE", "NativeCoreMissing"]


def dissect(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    ports: Iterable[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    show_secrets: bool = False,
    progress: Callable[[int], None] | None = None,
    connections: bool = False,
    window: float = WINDOW,
    tls_keylog: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    order: str = "window",
    in_flight: Callable[[list], None] | None = None,
    by_topic: bool = False,
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
    times.

    ports: Kafka ports besides 9092 (others are still found by plausibility).
    show_secrets: keep SASL passwords/proofs/tokens and delegation-token HMACs
    (redacted by default, in the decoded bodies and in request_raw/response_raw).
    progress: called with the number of packets read so far, every 4096 packets.
    connections: also yield a Connection item (bytes, frames, gaps, retransmissions,
    out-of-order segments, resyncs, client ids, and where every byte of each direction
    went: frame_bytes_to_*, skipped_bytes_to_*, gap_bytes_to_*) as each Kafka connection closes.
    tls_keylog: NSS key log file(s) that TLS connections are decrypted with (dissector.tls; a
    pcapng's Decryption Secrets Blocks are used without it). A TLS connection without keys is one
    tls_encrypted anomaly; a decrypted one's items carry `tls` facts.
    by_topic: each exchange carries `topics`, what it did per topic it names (record bytes each
    way, error codes; see Exchange.topics), for a view by topic.
    """
    from dissector import native
    from dissector.files import capture_files
    from dissector.stream import is_stream
    from dissector.tls import load_keylogs

    keylogs = load_keylogs(tls_keylog)
    files = capture_files(paths)
    live = order if any(is_stream(f) for f in files) or order == "arrival" else None
    items = native.dissect(
        files,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=connections,
        window=window,
        progress=progress,
        tls_keylogs=keylogs,
        live=live,
        in_flight=in_flight,
        show_secrets=show_secrets,
        by_topic=by_topic,
    )
    yield from items
