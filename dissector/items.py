"""What dissect() yields: exchanges, anomalies and connection accounts.

Defined once here; the native core builds them by keyword (dissector/native.py hands the classes
and their field names over, and it checks the names against its own), and every consumer (the
tables, replay, the report) reads them. Keyword-only: an item built with a value in the wrong
place fails, not shifts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Exchange", "Anomaly", "Connection", "FILE_FAULTS", "file_fault"]

from dissector.anomalies import FILE_FAULTS


def file_fault(item) -> str | None:
    """A file fault (FILE_FAULTS: each command turns one into a one-line error naming the file, and
    exit status 2, after writing what came before it): the detail of a dissected item that is such a fault (an anomaly of no connection), else None."""
    if item.type == "anomaly" and item.connection is None and item.kind in FILE_FAULTS:
        return item.detail
    return None


@dataclass(slots=True, kw_only=True)
class Exchange:
    type: ClassVar[str] = "exchange"
    ts: float | None
    response_ts: float | None
    latency_ms: float | None
    connection: int
    client: str
    broker: str
    api_key: int | None
    api_name: str
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    status: str  # ok, unanswered, orphan_response, undecodable
    error_codes: list[int]
    request: dict | None
    response: dict | None
    request_size: int | None
    response_size: int | None
    request_raw: bytes | None = None
    response_raw: bytes | None = None
    response_version: int | None = None  # the version the response body decoded as (see version_mismatch)
    flags: tuple = ()  # findings on an ok exchange: "trailing_bytes", "version_mismatch"
    # its connection's TLS, when it is TLS: {"version", "cipher_suite", "sni", "decrypted"}
    tls: dict | None = None
    # with dissect(by_topic=True), what it did per topic it names: ((topic, record bytes in the
    # request, record bytes in the answer, error codes), ...); () when it names none
    topics: tuple | None = None


@dataclass(slots=True, kw_only=True)
class Connection:
    """The accounting of one Kafka connection, given when it closes (dissect(connections=True))."""

    type: ClassVar[str] = "connection"
    connection: int
    client: str
    broker: str
    first_ts: float | None
    last_ts: float | None
    bytes_to_broker: int
    bytes_to_client: int
    frames_to_broker: int
    frames_to_client: int
    gaps: int
    gap_bytes: int
    retransmissions: int
    out_of_order: int
    resyncs: int
    client_ids: list
    detected_by: str  # syn_port, port or heuristic
    exchanges: int
    # where every byte went, per direction: bytes_to_X == frame_bytes_to_X + skipped_bytes_to_X,
    # and the stream's length is that plus gap_bytes_to_X (lost bytes are not in the capture)
    frame_bytes_to_broker: int = 0  # in whole Kafka frames, size prefixes included
    frame_bytes_to_client: int = 0
    skipped_bytes_to_broker: int = 0  # captured but in no frame (cut or damaged frames, resyncs)
    skipped_bytes_to_client: int = 0
    gap_bytes_to_broker: int = 0  # lost in capture holes
    gap_bytes_to_client: int = 0
    tls: dict | None = None  # as Exchange.tls


@dataclass(slots=True, kw_only=True)
class Anomaly:
    type: ClassVar[str] = "anomaly"
    connection: int | None
    ts: float
    kind: str
    detail: str
