"""Packet captures in, decoded Kafka exchanges out.

    from dissector import dissect
    for item in dissect(["capture.pcap"], ports=[29092]):
        if item.type == "exchange":
            print(item.api_name, item.correlation_id, item.status, item.error_codes)

Layers (one module each): capture (files -> packets), tcp (-> byte streams),
frames (-> size-prefixed frames), exchanges (-> paired, decoded exchanges),
redact (secrets out), output (text / jsonl), cli (`kafkawire dissect`).
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from dissector.exchanges import Anomaly, Connection, Exchange
from dissector.frames import DEFAULT_MAX_FRAME_SIZE

__all__ = ["dissect", "Exchange", "Anomaly", "Connection", "DEFAULT_MAX_FRAME_SIZE"]


def dissect(paths: str | os.PathLike | Iterable[str | os.PathLike], *, ports: Iterable[int] = (),
            max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, show_secrets: bool = False,
            progress: Callable[[int], None] | None = None,
            connections: bool = False) -> Iterator[Exchange | Anomaly | Connection]:
    """Exchanges (and anomalies) in the order they complete.

    ports: Kafka ports besides 9092 (others are still found by plausibility).
    show_secrets: keep SASL passwords/proofs/tokens and delegation-token HMACs
    (redacted by default, in the decoded bodies and in request_raw/response_raw).
    progress: called with the number of packets read so far, every 4096 packets.
    connections: also yield a Connection item (bytes, frames, gaps, retransmissions,
    out-of-order segments, resyncs, client ids) as each Kafka connection closes.
    """
    from dissector.capture import CaptureAnomaly, read_packets
    from dissector.exchanges import Exchanges
    from dissector.redact import redact
    from dissector.tcp import Reassembler

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    reasm = Reassembler()
    ex = Exchanges(ports=ports, max_frame_size=max_frame_size, connections=connections)
    feed = ex.feed
    last_ts = None
    n = 0
    for pkt in read_packets(paths):
        if type(pkt) is CaptureAnomaly:
            items = feed(pkt)
        else:
            n += 1
            last_ts = pkt.ts
            if progress is not None and not n & 4095:
                progress(n)
            items = []
            for ev in reasm.feed(pkt):
                items += feed(ev)
        yield from (items if show_secrets else map(redact, items))
    items = []
    for ev in reasm.finish():
        items += feed(ev)
    items += ex.finish(last_ts)
    if progress is not None:
        progress(n)
    yield from (items if show_secrets else map(redact, items))
