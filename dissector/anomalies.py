"""The kinds of anomaly an item can name: defined once here for the Python side.

The native core (native/core/src/anomalies.rs) has its own list of the same kinds; dissector.native hands
these values to it when it builds an engine, and the engine refuses to start when the two lists
differ (tests/test_native_boundary.py holds them equal).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AnomalyKind", "FILE_FAULTS"]


class AnomalyKind(StrEnum):
    """An Anomaly's `kind` (a str: the members compare equal to their values and are written as them)."""

    # the capture files (native/py/src/capture.rs)
    CORRUPT_FILE = "corrupt_file"
    TRUNCATED_FILE = "truncated_file"
    EMPTY_FILE = "empty_file"
    UNKNOWN_LINKTYPE = "unknown_linktype"
    TRUNCATED_PACKET = "truncated_packet"
    # TCP reassembly (native/py/src/tcp.rs)
    OVERLAP_CONFLICT = "overlap_conflict"
    # frame splitting (native/py/src/frames.rs)
    GAP_IN_FRAME = "gap_in_frame"
    FRAME_TOO_LARGE = "frame_too_large"
    BAD_FRAME_SIZE = "bad_frame_size"
    RESYNC = "resync"
    TRUNCATED_FRAME = "truncated_frame"
    FRAME_OVER_BUDGET = "frame_over_budget"
    # pairing and decoding (native/py/src/exchanges.rs)
    SHORT_REQUEST = "short_request"
    SHORT_RESPONSE = "short_response"
    TRAILING_BYTES = "trailing_bytes"
    VERSION_MISMATCH = "version_mismatch"
    TOO_MANY_OUTSTANDING = "too_many_outstanding"
    UNRECOGNISED_CONNECTION = "unrecognised_connection"
    # TLS (native/py/src/tls.rs): one of each per connection, with counts, when it closes
    TLS_ENCRYPTED = "tls_encrypted"  # no keys for it: what its hellos told, records and bytes
    TLS_DECRYPT_FAILED = "tls_decrypt_failed"  # records that failed authentication
    TLS_RECORD_LOST = "tls_record_lost"  # records lost in capture holes (or a broken record stream)


# anomalies of the capture files themselves (no connection): a command's one-line error
FILE_FAULTS = frozenset((AnomalyKind.CORRUPT_FILE, AnomalyKind.TRUNCATED_FILE, AnomalyKind.EMPTY_FILE))
