"""The native core (native/, Rust, built by pip as `dissector._native`): the one engine.

It reads capture files, reassembles TCP, splits frames, pairs exchanges, decodes them, puts
them in request-time order, and writes the text and jsonl lines and the table rows, for every
command. This module is the one place that starts it: `core()` gives the module, or raises
NativeCoreMissing, whose one line says how to build it; nothing runs anything else instead.

The boundary runs one way: config() builds the one keyword-built object
(_native.EngineConfig) that hands the native core everything it uses (limits,
the registry's data, the item classes, callbacks, the tables' columns); the
core imports none of its consumers. What both sides define is checked as the
config is built (ValueError on a mismatch): the item classes' fields, the
anomaly kinds (dissector.anomalies), the API keys it names, the columns.
dissector/_native.pyi types the module (checked by mypy's stubtest).

Uses: dissect() (items), write() (`kafkawire dissect`'s lines, every one written by the native
renderer, whatever the options), stitched() (items with stable connection ids, for the tables),
lander() (`kafkawire land`: the tables' rows built natively; with carry/state, an appended run that
continues the previous one's open connections: landing.carry).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dissector._native import KeyLog  # noqa: F401 (the type dissector.tls hands on)

try:
    from dissector import _native
except ImportError:  # a source tree nobody built: core() says how to build it
    _native = None

__all__ = [
    "NativeCoreMissing",
    "core",
    "config",
    "dissect",
    "write",
    "lander",
    "stitched",
    "start_ts",
    "nested_payloads",
    "internal_schemas",
    "internal_row",
    "internal_topics",
    "metadata_topic_names",
    "arrow_array",
    "DEFAULT_MAX_FRAME_SIZE",
    "WINDOW",
]

# The engine's limits (dissector/__init__.py explains what each bounds).
DEFAULT_MAX_FRAME_SIZE = 100 << 20  # the broker's socket.request.max.bytes
WINDOW = 5.0  # seconds of capture time the reorder holds: Fetch long polls wait 0.5 s, rebalances longer
MAX_ITEMS = 20000  # items the reorder holds at most...
MAX_BYTES = 64 << 20  # ...and bytes of their frames
MAX_BUFFER_PER_DIRECTION = 16 << 20  # out-of-order bytes one TCP direction may hold
LOST_AFTER = 1 << 20  # bytes past a hole after which it is declared lost
MAX_BUFFER_TOTAL = 256 << 20  # out-of-order bytes over all connections


class NativeCoreMissing(RuntimeError):
    """kafkawire's native core was not built into this installation."""


def core():
    """The native module; NativeCoreMissing (one line: how to build it) when it was not built."""
    if _native is None:
        raise NativeCoreMissing(
            "kafkawire's native core (dissector._native) is not built: install a Rust toolchain "
            "(https://rustup.rs) and reinstall kafkawire (pip install -e .)"
        )
    return _native


def config(
    *,
    ports,
    max_frame_size: int,
    connections: bool,
    window: float,
    max_decompressed: int | None = None,
    columns: dict[str, list[str]] | None = None,
    tls_keylogs: Sequence[bytes] = (),
):
    """The native engine's configuration (_native.EngineConfig), built by keyword: everything the
    native core takes from Python comes down through it (it imports none of kafkawire's modules),
    and what both sides define (the item classes' fields, the anomaly kinds, the API keys it names,
    the tables' columns) is checked against the native side's as it is built, raising ValueError on a
    mismatch. columns: table -> column names of the tables an engine writes rows for (lander()).
    tls_keylogs: the NSS key logs that TLS connections are decrypted with: parsed
    (dissector.tls.load_keylogs: the engine takes that parse) or texts (read_keylogs, a pcapng's
    Decryption Secrets Blocks)."""
    from dataclasses import fields

    from dissector.anomalies import FILE_FAULTS, TABLE
    from dissector.files import FILE_ERRORS, open_capture
    from dissector.items import Anomaly, Connection, Exchange
    from dissector.topics import RECORD_APIS
    from protocol import registry
    from protocol.compression import DEFAULT_MAX_DECOMPRESSED
    from protocol.secrets import SECRET_APIS

    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    native = core()
    if columns is not None:
        native.check_columns(columns)  # a table out of step with the native rows fails here, before any run
    return native.EngineConfig(
        ports=list(ports),
        connections=connections,
        limits=native.Limits(
            max_frame_size=max_frame_size,
            max_buffer_per_direction=MAX_BUFFER_PER_DIRECTION,
            lost_after=LOST_AFTER,
            max_buffer_total=MAX_BUFFER_TOTAL,
            window=window,
            max_items=MAX_ITEMS,
            max_bytes=MAX_BYTES,
            max_decompressed=max_decompressed or DEFAULT_MAX_DECOMPRESSED,
        ),
        protocol=native.Protocol(
            api_names=registry.API_NAMES,
            secret_apis=sorted(SECRET_APIS),
            record_apis=sorted(RECORD_APIS),
        ),
        items=native.Items(
            exchange=Exchange,
            exchange_fields=names(Exchange),
            anomaly=Anomaly,
            anomaly_fields=names(Anomaly),
            connection=Connection,
            connection_fields=names(Connection),
            anomaly_table=[list(r) for r in TABLE],
            file_faults=sorted(FILE_FAULTS),
        ),
        opener=open_capture,
        file_errors=FILE_ERRORS,
        columns=columns,
        # a KeyLog (dissector.tls.load_keylogs) is handed over parsed; a text is parsed as this is built
        tls_keylogs=[k if isinstance(k, native.KeyLog) else bytes(k) for k in tls_keylogs],
    )


def _engine(
    files: list[str],
    *,
    ports,
    max_frame_size: int,
    connections: bool,
    window: float,
    progress: Callable[[int], None] | None,
    render: str | None = None,
    stitch: bool = False,
    max_decompressed: int | None = None,
    columns: dict[str, list[str]] | None = None,
    packets=None,
    end=None,
    tls_keylogs: Sequence[bytes] = (),
    redact: bool = True,
    threads: int = 1,
):
    cfg = config(
        ports=ports,
        max_frame_size=max_frame_size,
        connections=connections,
        window=window,
        max_decompressed=max_decompressed,
        columns=columns,
        tls_keylogs=tls_keylogs,
    )
    engine = core().Engine(
        config=cfg,
        files=[os.fsencode(f) for f in files],
        packets=packets,
        end=end,
        progress=progress,
        render=render,
        stitch=stitch,
        rows=columns is not None,
        threads=threads,
    )
    # secrets out of every exchange before anything is made of it, unless --show-secrets
    engine.set_redact(redact)
    return engine


def dissect(
    files: list[str],
    *,
    ports,
    max_frame_size: int,
    connections: bool,
    window: float,
    progress: Callable[[int], None] | None = None,
    tls_keylogs: Sequence[bytes] = (),
    live: str | None = None,
    in_flight: Callable[[list], None] | None = None,
    show_secrets: bool = False,
    by_topic: bool = False,
) -> Iterator:
    """dissector.dissect() on the native core: the same items in the same order, their secrets
    redacted unless show_secrets (live: as write()'s; in_flight, by_topic: as dissector.dissect()'s)."""
    engine = _engine(
        files,
        redact=not show_secrets,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=connections,
        window=window,
        progress=progress,
        tls_keylogs=tls_keylogs,
    )
    if live is not None:
        engine.set_live(arrival=live == "arrival")
    if by_topic:
        engine.set_topics(True)
    told = 0.0
    while True:
        batch = engine.next_batch()
        if batch is None:
            if in_flight is not None:
                in_flight([])
            return
        if in_flight is not None and (now := time.monotonic()) - told >= IN_FLIGHT_EVERY:
            told = now
            in_flight(engine.in_flight())
        yield from batch


# how often (wall seconds) dissect()'s in_flight callback hears of the requests awaiting their answer
IN_FLIGHT_EVERY = 0.25


def write(
    files: list,
    out,
    fmt: str,
    *,
    ports,
    max_frame_size: int,
    show_secrets: bool,
    records: bool = False,
    raw: bool = False,
    payloads: bool = True,
    keep=None,
    progress: Callable[[int], None] | None = None,
    faults: list | None = None,
    tls_keylogs: Sequence[bytes] = (),
    tls_summary: dict | None = None,
    live: str | None = None,
    watch: Callable | None = None,
    in_flight: Callable[[list], None] | None = None,
) -> None:
    """`kafkawire dissect`'s output: the lines of dissector.dissect()'s items kept by `keep` (a
    dissector.filters.Filter or None), in `fmt` (text or jsonl) with the options records, raw and
    payloads (--records, --raw, --no-payloads), to the binary stream `out`, secrets redacted unless
    show_secrets. Every line is written by the native renderer; the file faults also come back as
    items, which go to `faults`. tls_summary: a dict that gets the run's TLS counts (Engine.tls_stats).
    live: a stream (dissector.stream) is read: "window" releases each line as soon as the order
    allows (and as the wall clock moves on while the stream is quiet), "arrival" as each exchange
    completes; every batch is flushed. watch: called with the item of every line written (after
    it); in_flight: as dissector.dissect()'s, every IN_FLIGHT_EVERY seconds."""
    from dissector.items import file_fault

    engine = _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=False,
        window=WINDOW,
        progress=progress,
        render=fmt,
        tls_keylogs=tls_keylogs,
        redact=not show_secrets,
    )
    engine.set_render_options(records, raw, not payloads, keep)
    if live is not None:
        engine.set_live(arrival=live == "arrival")
    if watch is not None:
        engine.set_watched(True)
    put = out.write
    told = time.monotonic()
    while True:
        if live is not None:
            out.flush()
        if in_flight is not None and (now := time.monotonic()) - told >= IN_FLIGHT_EVERY:
            told = now
            in_flight(engine.in_flight())
        batch = engine.next_batch()
        if batch is None:
            if tls_summary is not None:
                tls_summary.update(engine.tls_stats())
            return
        for x in batch:
            if type(x) is bytes:
                put(x)
                continue
            if (fault := file_fault(x)) is not None:
                if faults is not None:
                    faults.append(fault)
            elif watch is not None:
                watch(x)


def lander(
    files: list[str],
    *,
    ports,
    columns: dict[str, list[str]],
    max_frame_size: int | None = None,
    progress: Callable[[int], None] | None = None,
    max_decompressed: int | None = None,
    packets=None,
    end=None,
    carry: bool = False,
    state: bytes | None = None,
    tls_keylogs: Sequence[bytes] = (),
    threads: int = 1,
):
    """The engine for `land` (a stitched() run) that writes the exchanges, errors,
    connections, anomalies and (set_row_options) records rows itself, those of the exchanges it
    holds as Python objects too (redacted first): next_batch() gives the file faults, rows_take()
    the rows; the limits default to the dissector's.

    packets, end: instead of reading `files`, take packets already read (landing.spark's shuffled
    packet batches, as dissector.ranges.lander_input gives them, or rows: a Packet's fields or a
    CaptureAnomaly's, as tuples) that are part of a capture set whose
    (last packet time, latest packet time) is `end` (or what `end()` gives after the last packet),
    as stitched(packets=packets, end=end).

    columns: table -> column names of the tables it writes (exchanges, errors, connections,
    anomalies), as the caller's schemas have them; checked against the native side's.

    carry, state: an appended land run (landing.carry). With carry, after the last packet
    next_batch() returns early and carried() gives the state a next run continues from (its open
    connections whole); the batches after it hold the end of capture's rows, which are
    provisional. state: what an earlier run's carried() gave, restored before the first packet.

    threads: over files, the connections are split among that many buckets, each dissected on a
    thread of its own (0: one per core); the rows are the same, in another order. A state made
    over buckets goes on over as many, whatever `threads` says."""
    engine = _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size or DEFAULT_MAX_FRAME_SIZE,
        connections=True,
        window=0.0,
        progress=progress,
        stitch=True,
        max_decompressed=max_decompressed,
        columns=columns,
        packets=packets,
        end=end,
        tls_keylogs=tls_keylogs,
        threads=threads,
    )
    if state is not None:
        engine.restore(state)
    if carry:
        engine.set_carry()
    return engine


def stitched(
    files: list[str],
    *,
    ports,
    max_frame_size: int,
    progress: Callable[[int], None] | None = None,
    packets=None,
    end=None,
    tls_keylogs: Sequence[bytes] = (),
    show_secrets: bool = False,
) -> Iterator:
    """The items of a land run as they complete, secrets redacted unless show_secrets. Both
    engines land through such a run: the local one over all packets of the set, a Spark task over
    the packets of the connections hashed to it (every packet of a TCP 4-tuple goes to the same
    task, in capture order). A dissector's connection number is an ordinal of first appearance,
    which a task seeing a subset cannot know: here a connection is numbered by a 63-bit hash of
    its client, broker and first packet time, the same in any split. Tables are sets (sort by
    ids), so no reorder window is held. packets, end: as lander()'s."""
    engine = _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=True,
        window=0.0,
        progress=progress,
        stitch=True,
        packets=packets,
        end=end,
        tls_keylogs=tls_keylogs,
        redact=not show_secrets,
    )
    while True:
        batch = engine.next_batch()
        if batch is None:
            return
        yield from batch


def start_ts(path: str) -> float:
    """A capture file's first timestamp (its first record's, even a fault's; inf for none): what a
    set of files is ordered by before it is merged."""
    from dissector.files import FILE_ERRORS, open_capture

    ts = core().first_ts(os.fsencode(path), open_capture, FILE_ERRORS)
    return float("inf") if ts is None else ts


def nested_payloads() -> list[tuple[str, str, str, str]]:
    """The payloads decoded inside bytes fields: (type, API, direction, field path)."""
    return core().nested_payloads()


def internal_topics() -> frozenset[str]:
    """The topics whose records internal_row decodes (Kafka's own: __cluster_metadata, ...)."""
    return frozenset(core().internal_topics())


def internal_schemas() -> list[tuple[str, int, str | None, str]]:
    """The internal topics' record types: (topic, record type id, key type or None, value type)."""
    return core().internal_schemas()


def internal_row(
    topic: str | None, key: bytes | None, value: bytes | None, control: bool = False
) -> tuple[str | None, str | None, bool]:
    """One record of `topic` as Kafka's own schemas read it: (key JSON, value JSON), None where
    there is nothing to decode (another topic, a metadata record's null key, a tombstone), and
    whether the value holds a secret (a SCRAM credential, a delegation token): the records table
    leaves such a value out."""
    return core().internal_row(topic, key, value, control)


def metadata_topic_names(field: bytes) -> list[tuple[bytes, str]]:
    """The (topic id bytes, name) pairs of the TopicRecords in a __cluster_metadata records field:
    the names the core learns from the metadata log."""
    return core().metadata_topic_names(field)


def arrow_array(column, typ):
    """One column the native core built, as a pyarrow array of type `typ`: imported through the
    Arrow C data interface (its buffers are not copied)."""
    import pyarrow as pa

    return pa.array(column, type=typ)
