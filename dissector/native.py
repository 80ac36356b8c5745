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

Uses: dissect() (items), write() (`kafkawire dissect`'s lines, written by the
native side where it can), stitched() (landing.stitch's items), lander()
(`kafkawire land`: the tables' rows built natively).

The boundary runs one way: config() builds the one keyword-built object
(_native.EngineConfig) that hands the native core everything it uses (limits,
the registry's data, the item classes, callbacks, the tables' columns); the
core imports none of its consumers. What both sides define is checked as the
config is built (ValueError on a mismatch): the item classes' fields, the
anomaly kinds (dissector.anomalies), the API keys it names, the columns.
dissector/_native.pyi types the module (checked by mypy's stubtest).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

try:
    from dissector import _native
except ImportError:  # built without cargo: the Python pipeline does everything
    _native = None

__all__ = ["available", "config", "dissect", "write", "lander", "stitched"]


def available(files=None) -> bool:
    """Whether dissect() and the commands run on the native core: it was built, KAFKAWIRE_NATIVE is not
    0, and every file name is text the native reader can take (a name that is not UTF-8 is left to
    the Python pipeline)."""
    if _native is None or os.environ.get("KAFKAWIRE_NATIVE", "1") == "0":
        return False
    try:
        for f in files or ():
            os.fspath(f).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def config(
    *,
    ports,
    max_frame_size: int,
    connections: bool,
    window: float,
    max_decompressed: int | None = None,
    columns: dict[str, list[str]] | None = None,
):
    """The native engine's configuration (_native.EngineConfig), built by keyword: everything the
    native core takes from Python comes down through it (it imports none of kafkawire's modules),
    and what both sides define (the item classes' fields, the anomaly kinds, the API keys it names,
    the tables' columns) is checked against the native side's as it is built, raising ValueError on a
    mismatch. columns: table -> column names of the tables an engine writes rows for (lander())."""
    from dataclasses import fields

    from dissector import exchanges, order, tcp
    from dissector.anomalies import FILE_FAULTS, AnomalyKind
    from dissector.capture import FILE_ERRORS, _open
    from dissector.output import RECORD_APIS
    from protocol import registry
    from protocol.compression import DEFAULT_MAX_DECOMPRESSED
    from protocol.secrets import SECRET_APIS

    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    return _native.EngineConfig(
        ports=list(ports),
        connections=connections,
        limits=_native.Limits(
            max_frame_size=max_frame_size,
            max_buffer_per_direction=tcp.MAX_BUFFER_PER_DIRECTION,
            lost_after=tcp.LOST_AFTER,
            max_buffer_total=tcp.MAX_BUFFER_TOTAL,
            window=window,
            max_items=order.MAX_ITEMS,
            max_bytes=order.MAX_BYTES,
            max_decompressed=max_decompressed or DEFAULT_MAX_DECOMPRESSED,
        ),
        protocol=_native.Protocol(
            messages=registry.MESSAGES,
            headers=registry.HEADERS,
            versions=exchanges._VERSIONS,
            api_names=registry.API_NAMES,
            secret_apis=sorted(SECRET_APIS),
            record_apis=sorted(RECORD_APIS),
        ),
        items=_native.Items(
            exchange=exchanges.Exchange,
            exchange_fields=names(exchanges.Exchange),
            anomaly=exchanges.Anomaly,
            anomaly_fields=names(exchanges.Anomaly),
            connection=exchanges.Connection,
            connection_fields=names(exchanges.Connection),
            anomaly_kinds=[k.value for k in AnomalyKind],
            file_faults=sorted(FILE_FAULTS),
        ),
        opener=_open,
        file_errors=FILE_ERRORS,
        helpers=Helpers(),
        columns=columns,
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
):
    cfg = config(
        ports=ports,
        max_frame_size=max_frame_size,
        connections=connections,
        window=window,
        max_decompressed=max_decompressed,
        columns=columns,
    )
    return _native.Engine(
        cfg,
        files=files,
        packets=packets,
        end=end,
        progress=progress,
        render=render,
        stitch=stitch,
        rows=columns is not None,
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
    files: list[str],
    out,
    fmt: str,
    *,
    ports,
    max_frame_size: int,
    show_secrets: bool,
    progress: Callable[[int], None] | None = None,
    faults: list | None = None,
) -> None:
    """`kafkawire dissect`'s output with the default options (no --records, --raw, --no-payloads or
    filters): the lines output.write() writes for dissector.dissect()'s items, to the binary stream
    `out`. The native side writes the lines of the items it can; the rest (file faults, which also go
    to `faults`, secrets to redact, bodies only Python decoded) are written by dissector.output."""
    from dissector.capture import file_fault
    from dissector.order import WINDOW
    from dissector.output import _Encoder, format_text
    from dissector.redact import redact

    engine = _engine(
        files,
        ports=ports,
        max_frame_size=max_frame_size,
        connections=False,
        window=WINDOW,
        progress=progress,
        render=fmt,
    )
    line = _Encoder(False, False).line if fmt == "jsonl" else (lambda x: (format_text(x) + "\n").encode())
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
            put(line(x if show_secrets else redact(x)))


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
):
    """The engine for `land` (landing.stitch.items()'s run) that writes the exchanges, errors,
    connections and anomalies rows itself: next_batch() gives the items it left to Python's Rows
    (secrets to redact, bodies Python decoded, file faults), rows_take() its own rows; the
    limits default to the dissector's.

    packets, end: instead of reading `files`, take rows of packets (landing.spark's shuffled
    tuples: a Packet's fields, or a CaptureAnomaly's) that are part of a capture set whose
    (last packet time, latest packet time) is `end` (or what `end()` gives after the last packet),
    as landing.stitch.items(packets, end=end).

    columns: table -> column names of the tables it writes (exchanges, errors, connections,
    anomalies), as the caller's schemas have them; checked against the native side's."""
    from dissector.frames import DEFAULT_MAX_FRAME_SIZE

    return _engine(
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
