"""The native core: dissect()'s pipeline in Rust (native/), when it was built.

`dissector._native` is built by setuptools-rust when cargo is on the machine;
without it, or with KAFKAWIRE_NATIVE=0 in the environment, kafkawire runs on
its Python pipeline alone. Both give the same items for the same capture: the
Rust modules are ports of the Python ones (capture, tcp, frames, the
registry's decoders and body walks, exchanges, order), and
tests/test_native_*.py compare the two on every sample, on synthetic
pathologies and on fuzzed input.

What the Python side alone knows how to do is asked of it through `Helpers`:
the lenient decoder (trailing bytes, a response that only decodes as another
version, ApiVersions' fallback layouts), a decode error's message, and the
walk over a body Python decoded (dissector.exchanges.decode_request and
decode_response, which the Python pipeline uses too). Those are rare; the
common frame never leaves Rust until its item is released.

Uses: dissect() (items), write() (`kafkawire dissect`'s lines, every one written
by the native renderer, whatever the options), stitched() (landing.stitch's items), lander()
(`kafkawire land`: the tables' rows built natively).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

try:
    from dissector import _native
except ImportError:  # built without cargo: the Python pipeline does everything
    _native = None

__all__ = ["available", "dissect", "write", "lander", "stitched"]


def available(files=None) -> bool:
    """Whether dissect() and the commands run on the native core: it was built and KAFKAWIRE_NATIVE is
    not 0 (any file name will do: the native reader takes them as bytes). `files` is not looked at."""
    return _native is not None and os.environ.get("KAFKAWIRE_NATIVE", "1") != "0"


class Helpers:
    """The callbacks the native exchanges layer makes (each mirrors a branch of dissector.exchanges)."""

    def __init__(self):
        import protocol
        from dissector.exchanges import decode_request, decode_response

        self._protocol = protocol
        self._decode_request, self._decode_response = decode_request, decode_response

    def request(self, frame: bytes, names):
        """Exchanges._request's decode (dissector.exchanges.decode_request)."""
        return self._decode_request(frame, names)

    def response(self, frame: bytes, api_key, api_version, corr, client_id, names):
        """Exchanges._answer's decode (dissector.exchanges.decode_response)."""
        return self._decode_response(frame, api_key, api_version, corr, client_id, names)

    def frame_decodes(self, frame: bytes, whole: bool, api_key, api_version) -> int:
        """exchanges._frame_decodes for what only the general decoder reads: 0 no, 1 yes, 2 verified."""
        p = self._protocol
        try:
            if api_key is None:
                p.decode_request(frame)
            else:
                p.decode_response(frame, api_key, api_version)
        except p.DecodeError as e:
            return int(not whole and ("past the end" in e.reason or "ends in the middle" in e.reason))
        return 2 if whole else 1

    def has_response(self, api_key: int, api_version: int) -> bool:
        return self._protocol.registry.has(api_key, api_version, "response")


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
    rows: tuple | None = None,
    packets=None,
    end=None,
):
    from dissector import exchanges, order, tcp
    from dissector.capture import FILE_FAULTS, _open
    from protocol import registry
    from protocol.secrets import SECRET_APIS

    return _native.Engine(
        [os.fsencode(f) for f in files],
        _open,
        list(ports),
        max_frame_size,
        connections,
        (registry.MESSAGES, registry.HEADERS),
        Helpers(),
        exchanges._VERSIONS,
        registry.API_NAMES,
        (exchanges.Exchange, exchanges.Anomaly, exchanges.Connection),
        (tcp.MAX_BUFFER_PER_DIRECTION, tcp.LOST_AFTER, tcp.MAX_BUFFER_TOTAL),
        (window, order.MAX_ITEMS, order.MAX_BYTES),
        progress,
        render,
        sorted(SECRET_APIS),
        stitch,
        rows,
        sorted(FILE_FAULTS),
        packets,
        end,
    )


def dissect(
    files: list[str],
    *,
    ports,
    max_frame_size: int,
    connections: bool,
    window: float,
    progress: Callable[[int], None] | None = None,
) -> Iterator:
    """dissector.dissect() on the native core, before redaction: the same items in the same order."""
    engine = _engine(
        files, ports=ports, max_frame_size=max_frame_size, connections=connections, window=window, progress=progress
    )
    while True:
        batch = engine.next_batch()
        if batch is None:
            return
        yield from batch


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
) -> None:
    """`kafkawire dissect`'s output: the lines of dissector.dissect()'s items kept by `keep` (a
    dissector.filters.Filter or None), in `fmt` (text or jsonl) with the options records, raw and
    payloads (--records, --raw, --no-payloads), to the binary stream `out`. Every line is written
    by the native renderer; the items it hands back as objects (file faults, which also go to
    `faults`, secrets to redact, bodies only Python decoded) are redacted and filtered here and
    written by its `Lines`."""
    from dissector.capture import file_fault
    from dissector.order import WINDOW
    from dissector.redact import redact
    from dissector.topics import topics

    engine = _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=False,
        window=WINDOW,
        progress=progress,
        render=fmt,
    )
    engine.set_render_options(records, raw, not payloads, keep)
    line = _native.Lines(fmt, records, raw, not payloads).line
    text = fmt == "text"
    put = out.write
    while True:
        batch = engine.next_batch()
        if batch is None:
            return
        for x in batch:
            if type(x) is bytes:
                put(x)
                continue
            if faults is not None and (fault := file_fault(x)) is not None:
                faults.append(fault)
            if not show_secrets:
                redact(x)
            if keep is not None and not keep(x):
                continue
            put(line(x, topics(x) if text and x.type == "exchange" else None))


def lander(
    files: list[str],
    *,
    ports,
    max_frame_size: int | None = None,
    progress: Callable[[int], None] | None = None,
    max_decompressed: int | None = None,
    packets=None,
    end=None,
):
    """The engine for `land` (landing.stitch.items()'s run) that writes the exchanges, errors,
    connections and anomalies rows itself: next_batch() gives the items it left to Python's Rows
    (secrets to redact, bodies Python decoded, file faults), rows_take() its own rows; the
    limits default to the dissector's.

    packets, end: instead of reading `files`, take rows of packets (landing.spark's shuffled
    tuples: a Packet's fields, or a CaptureAnomaly's) that are part of a capture set whose
    (last packet time, latest packet time) is `end` (or what `end()` gives after the last packet),
    as landing.stitch.items(packets, end=end)."""
    from dissector.frames import DEFAULT_MAX_FRAME_SIZE
    from protocol.compression import DEFAULT_MAX_DECOMPRESSED

    return _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size or DEFAULT_MAX_FRAME_SIZE,
        connections=True,
        window=0.0,
        progress=progress,
        stitch=True,
        rows=max_decompressed or DEFAULT_MAX_DECOMPRESSED,
        packets=packets,
        end=end,
    )


def stitched(
    files: list[str],
    *,
    ports,
    max_frame_size: int,
    progress: Callable[[int], None] | None = None,
    packets=None,
    end=None,
) -> Iterator:
    """landing.stitch.items(read_packets(files)) on the native core, before redaction: the same items
    (connections numbered by stitch.stable_id), as they complete. packets, end: as lander()'s."""
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
    )
    while True:
        batch = engine.next_batch()
        if batch is None:
            return
        yield from batch
