"""The tables' schemas: the one source of truth for every column.

Each table is a pyarrow schema whose fields carry a `doc` in their metadata;
`markdown()` renders them into the README (a test keeps the two in step).
Every table is partitioned by `date` (hive style `date=YYYY-MM-DD`, UTC, from
the row's time); the column lives in the directory names, not in the files.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["TABLES", "SCHEMAS", "PARTITION", "markdown", "schema"]

PARTITION = "date"
_TS = pa.timestamp("us", tz="UTC")


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, nullable=True, metadata={"doc": doc})


_IDS = [
    _f(
        "exchange_id",
        pa.int64(),
        "stable id of the exchange: a hash of its connection, correlation id and times; joins every table",
    ),
    _f(
        "connection_id",
        pa.int64(),
        "the TCP connection: a hash of its 4-tuple and first packet time, the same however the capture is split "
        "(files, byte ranges, engines); jsonl `connection` numbers connections instead",
    ),
]
_WHO = [
    _f("client", pa.string(), "client endpoint ip:port"),
    _f("broker", pa.string(), "broker endpoint ip:port"),
    _f("client_id", pa.string(), "the request header's client id"),
]

EXCHANGES = pa.schema(
    _IDS
    + [
        _f("ts", _TS, "time of the request's first byte (an orphan response: its own time)"),
        _f("response_ts", _TS, "time of the response's first byte"),
        _f("latency_ms", pa.float64(), "request first byte to response first byte, ms"),
        *_WHO,
        _f("api_key", pa.int16(), "API key"),
        _f("api_name", pa.string(), "API name (Produce, Fetch, ...; SaslToken for raw SASL v0 tokens)"),
        _f("api_version", pa.int16(), "request version"),
        _f(
            "response_version",
            pa.int16(),
            "the version the response body decoded as (differs from api_version on version_mismatch)",
        ),
        _f("correlation_id", pa.int32(), "correlation id"),
        _f("status", pa.string(), "ok, unanswered, orphan_response or undecodable"),
        _f(
            "error_codes",
            pa.list_(pa.int16()),
            "every non-zero error code in the response, in order (see the errors table)",
        ),
        _f("flags", pa.list_(pa.string()), "findings on a decoded exchange: trailing_bytes, version_mismatch"),
        _f("request_size", pa.int32(), "request frame size without the 4-byte prefix"),
        _f("response_size", pa.int32(), "response frame size without the 4-byte prefix"),
        _f("topics", pa.list_(pa.string()), "topics the request names (else the response), ids resolved to names"),
        _f("partition_count", pa.int32(), "topic partitions the request names"),
        _f("group_id", pa.string(), "consumer group of group APIs"),
        _f("transactional_id", pa.string(), "Produce and transaction APIs: transactional id"),
        _f("acks", pa.int16(), "Produce: acks"),
        _f("timeout_ms", pa.int32(), "Produce: timeout"),
        _f(
            "producer_id",
            pa.int64(),
            "Produce: producer id of the first batch that has one; InitProducerId: the id given",
        ),
        _f("record_count", pa.int64(), "Produce (request) and Fetch (response): records in all batches"),
        _f("record_bytes", pa.int64(), "record data bytes as sent (compressed)"),
        _f("record_bytes_uncompressed", pa.int64(), "record data bytes after decompression (batch framing included)"),
        _f("codecs", pa.list_(pa.string()), "compression codecs of the batches"),
        _f("max_wait_ms", pa.int32(), "Fetch: max wait"),
        _f("min_bytes", pa.int32(), "Fetch: min bytes"),
        _f("isolation_level", pa.int8(), "Fetch: 0 read_uncommitted, 1 read_committed"),
        _f("throttle_time_ms", pa.int32(), "response throttle time"),
        _f("request_json", pa.string(), "the decoded request body as JSON (the jsonl `request`)"),
        _f("response_json", pa.string(), "the decoded response body as JSON (the jsonl `response`)"),
    ]
)

ERRORS = pa.schema(
    _IDS
    + [
        _f("ts", _TS, "the exchange's request time"),
        *_WHO,
        _f("api_key", pa.int16(), "API key"),
        _f("api_name", pa.string(), "API name"),
        _f("api_version", pa.int16(), "request version"),
        _f("path", pa.string(), "where in the response, e.g. Responses[2].PartitionResponses[0].ErrorCode"),
        _f("topic", pa.string(), "the topic the error is about, if any"),
        _f("partition", pa.int32(), "the partition the error is about, if any"),
        _f("code", pa.int16(), "error code"),
        _f("name", pa.string(), "error name from Kafka's table"),
        _f("retriable", pa.bool_(), "Kafka's retriable flag for the code"),
    ]
)

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
RECORDS = pa.schema(
    _IDS
    + [
        _f("ts", _TS, "time of the frame that carried the record (request for produce, response for fetch)"),
        _f("direction", pa.string(), "produce (in a request) or fetch (in a response)"),
        _f("client_id", pa.string(), "the request header's client id"),
        _f("topic", pa.string(), "topic"),
        _f("partition", pa.int32(), "partition"),
        _f(
            "offset",
            pa.int64(),
            "record offset (fetch: base + delta; produce: the broker's BaseOffset + delta, null if not answered)",
        ),
        _f("timestamp", pa.timestamp("ms", tz="UTC"), "record timestamp"),
        _f("timestamp_type", pa.string(), "CreateTime or LogAppendTime"),
        _f("key", pa.binary(), "record key (null with --no-payloads)"),
        _f("value", pa.binary(), "record value (null with --no-payloads)"),
        _f("key_size", pa.int32(), "key bytes (-1 for a null key)"),
        _f("value_size", pa.int32(), "value bytes (-1 for a null value)"),
        _f("headers", pa.list_(_HEADER), "record headers (values null with --no-payloads)"),
        _f("key_schema_id", pa.int32(), "schema id when the key is in Confluent's wire format (magic 0 + 4-byte id)"),
        _f("value_schema_id", pa.int32(), "schema id when the value is in Confluent's wire format"),
        _f("codec", pa.string(), "batch compression codec"),
        _f("magic", pa.int8(), "batch format: 2 record batch, 0/1 legacy message set"),
        _f("batch_base_offset", pa.int64(), "the batch's base offset as on the wire"),
        _f("producer_id", pa.int64(), "batch producer id (-1: none)"),
        _f("producer_epoch", pa.int16(), "batch producer epoch"),
        _f("base_sequence", pa.int32(), "batch base sequence"),
        _f("transactional", pa.bool_(), "batch is transactional"),
        _f("control", pa.bool_(), "batch is a control batch (transaction markers)"),
        _f("crc_ok", pa.bool_(), "the batch CRC matches"),
    ]
)

CONNECTIONS = pa.schema(
    [
        _IDS[1],
        *_WHO[:2],
        _f("first_ts", _TS, "first packet of the connection"),
        _f("last_ts", _TS, "last packet of the connection"),
        _f("bytes_to_broker", pa.int64(), "TCP payload bytes client -> broker"),
        _f("bytes_to_client", pa.int64(), "TCP payload bytes broker -> client"),
        _f("frames_to_broker", pa.int64(), "Kafka frames (requests, tokens) client -> broker"),
        _f("frames_to_client", pa.int64(), "Kafka frames broker -> client"),
        _f("gaps", pa.int32(), "holes in the byte stream (capture loss)"),
        _f("gap_bytes", pa.int64(), "bytes lost in those holes"),
        _f("frame_bytes_to_broker", pa.int64(), "bytes_to_broker in whole Kafka frames (size prefixes included)"),
        _f("frame_bytes_to_client", pa.int64(), "bytes_to_client in whole Kafka frames (size prefixes included)"),
        _f(
            "skipped_bytes_to_broker",
            pa.int64(),
            "bytes_to_broker in no frame: cut or damaged frames, bytes skipped to find a frame boundary (see anomalies)",
        ),
        _f("skipped_bytes_to_client", pa.int64(), "bytes_to_client in no frame (as skipped_bytes_to_broker)"),
        _f("gap_bytes_to_broker", pa.int64(), "gap_bytes in the client -> broker direction"),
        _f("gap_bytes_to_client", pa.int64(), "gap_bytes in the broker -> client direction"),
        _f("retransmissions", pa.int64(), "segments that repeated bytes already seen"),
        _f("out_of_order", pa.int64(), "segments that arrived ahead of a hole"),
        _f("resyncs", pa.int32(), "times frame splitting had to hunt for the next frame boundary"),
        _f("client_ids", pa.list_(pa.string()), "client ids seen on the connection"),
        _f("detected_by", pa.string(), "how it was recognised as Kafka: syn_port, port or heuristic"),
        _f("exchanges", pa.int64(), "exchanges on the connection"),
    ]
)

ANOMALIES = pa.schema(
    [
        _IDS[1],
        _f("ts", _TS, "when"),
        _f("kind", pa.string(), "what kind (gap_in_frame, trailing_bytes, corrupt_file, ...)"),
        _f("detail", pa.string(), "one line saying what and where"),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "exchanges": EXCHANGES,
    "errors": ERRORS,
    "records": RECORDS,
    "connections": CONNECTIONS,
    "anomalies": ANOMALIES,
}
TABLES = tuple(SCHEMAS)


def schema(table: str) -> pa.Schema:
    return SCHEMAS[table]


def markdown() -> str:
    """Every table's columns as Markdown, for the README."""
    out = []
    for name, sch in SCHEMAS.items():
        out.append(f"#### `{name}`\n\n| column | type | meaning |\n| --- | --- | --- |")
        for f in sch:
            out.append(f"| `{f.name}` | {f.type} | {f.metadata[b'doc'].decode()} |")
        when = "first_ts" if "first_ts" in sch.names else "ts"
        out.append(
            f"| `{PARTITION}` | string (partition) | `YYYY-MM-DD` (UTC) of `{when}`, as hive-style directories |\n"
        )
    return "\n".join(out)
