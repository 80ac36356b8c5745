"""The Python pipeline, frozen as a test-only oracle.

kafkawire runs on one engine, the native core (native/). Before it there was a Python pipeline
(capture -> tcp -> frames -> exchanges -> order); it lives on here, unchanged in behaviour, so
that tests and the differential fuzzer can hold the native core to an implementation written
separately: the two found real bugs in each other. No feature is ever added here. Where the
native core's behaviour changes on purpose, the test that compares them changes, not this code.
The modules keep their old names: capture, tcp, frames, exchanges, order; `dissect()` and
`stitched()` run them as dissector.dissect() and the tables' stitching once did.

What changed here since the freeze (ad01a4b), and why each stays:
- moved in, not written here: output.py (the jsonl/text writer) and rows.py (the tables' rows)
  left the package when the native core took their jobs; the core is held to them.
- names, not behaviour: anomaly kinds as dissector.anomalies.AnomalyKind (equal strings, one
  registry), FILE_ERRORS, the keyword-only item classes built through one positional adapter
  (exchanges._positional), `stable_id`/`conn_key` copied from the landing.stitch module that
  the core replaced (below, as they were).
- two features every native item carries (about 135 lines): nested payloads (nested.py's
  `expand`, the consumer protocol and Envelope decoded beside their bytes) and topic names
  learned from KRaft's metadata log (exchanges._learn_metadata_log). Without them each
  comparison over a sample with a consumer group or a controller would first strip the same
  features from the native side, in a normaliser as long as they are and itself feature code.
  Both features are also held to oracles of their own that owe nothing to this package (kio,
  kafka-python's consumer-protocol classes, the broker's forwarded answers, DumpLogSegments).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator

from dissector.native import DEFAULT_MAX_FRAME_SIZE, WINDOW
from tests.redact_reference import redact
from tests.oracle.capture import CaptureAnomaly, Packet, _capture_files, _merged, packets_of
from tests.oracle.exchanges import Exchanges
from tests.oracle.order import Reorder
from tests.oracle.tcp import Open, Reassembler

__all__ = ["dissect", "stitched", "row_items"]


# landing.stitch's two helpers as they were when the oracle was frozen (the native core computes
# both now; the oracle keeps its own copies rather than import feature code)
def stable_id(key: tuple, ts: float) -> int:
    """A connection's id: its 4-tuple (either direction) and its first packet's time."""
    key = f"{key}|{round(ts * 1_000_000)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def conn_key(pkt) -> tuple:
    """The same key for both directions of a TCP 4-tuple."""
    a, b = (pkt.src, pkt.sport), (pkt.dst, pkt.dport)
    return (a, b) if a <= b else (b, a)


def dissect(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    ports: Iterable[int] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    show_secrets: bool = False,
    progress: Callable[[int], None] | None = None,
    connections: bool = False,
    window: float = WINDOW,
) -> Iterator:
    """dissector.dissect() on the Python pipeline: the items the native core must also give."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = _capture_files(paths)
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


def row_items(rows: Iterable[tuple], *, ports: Iterable[int] = (), end=None) -> Iterator:
    """stitched() of packets given as rows (a Packet's or a CaptureAnomaly's fields), redacted."""
    yield from stitched((Packet(*r) if len(r) == 11 else CaptureAnomaly(*r) for r in rows), ports=ports, end=end)


def stitched(
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
        reasm._last_ts, now = end() if callable(end) else end
    for ev in reasm.finish():
        yield from fix(feed(ev))
    if progress is not None:
        progress(n)
    yield from fix(ex.finish(now))
