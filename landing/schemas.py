"""The tables' schemas: the one source of truth for every column.

Each table is a pyarrow schema whose fields carry a `doc` in their metadata;
`markdown()` renders them into docs/tables.md (a test keeps the two in step).
Every table is partitioned by `date` (hive style `date=YYYY-MM-DD`, UTC, from
the row's time); the column lives in the directory names, not in the files.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["TABLES", "SCHEMAS", "DERIVED", "GROUP_SOURCE", "PARTITION", "TIMESTAMP", "field", "markdown", "schema"]

PARTITION = "date"
TIMESTAMP = pa.timestamp("us", tz="UTC")


def field(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, nullable=True, metadata={"doc": doc})


_IDS = [
    field(
        "exchange_id",
        pa.int64(),
        "stable id of the exchange: a hash of its connection, correlation id and times; joins every table",
    ),
    field(
        "connection_id",
        pa.int64(),
        "the TCP connection: a hash of its 4-tuple and first packet time, the same however the capture is split "
        "(files, byte ranges, engines); jsonl `connection` numbers connections instead",
    ),
]
_WHO = [
    field("client", pa.string(), "client endpoint ip:port"),
    field("broker", pa.string(), "broker endpoint ip:port"),
    field("client_id", pa.string(), "the request header's client id"),
]

EXCHANGES = pa.schema(
    _IDS
    + [
        field("ts", TIMESTAMP, "time of the request's first byte (an orphan response: its own time)"),
        field("response_ts", TIMESTAMP, "time of the response's first byte"),
        field("latency_ms", pa.float64(), "request first byte to response first byte, ms"),
        *_WHO,
        field("api_key", pa.int16(), "API key"),
        field("api_name", pa.string(), "API name (Produce, Fetch, ...; SaslToken for raw SASL v0 tokens)"),
        field("api_version", pa.int16(), "request version"),
        field(
            "response_version",
            pa.int16(),
            "the version the response body decoded as (differs from api_version on version_mismatch)",
        ),
        field("correlation_id", pa.int32(), "correlation id"),
        field("status", pa.string(), "ok, unanswered, orphan_response or undecodable"),
        field(
            "error_codes",
            pa.list_(pa.int16()),
            "every non-zero error code in the response, in order (see the errors table)",
        ),
        field("flags", pa.list_(pa.string()), "findings on a decoded exchange: trailing_bytes, version_mismatch"),
        field("request_size", pa.int32(), "request frame size without the 4-byte prefix"),
        field("response_size", pa.int32(), "response frame size without the 4-byte prefix"),
        field("topics", pa.list_(pa.string()), "topics the request names (else the response), ids resolved to names"),
        field("partition_count", pa.int32(), "topic partitions the request names"),
        field("group_id", pa.string(), "consumer group of group APIs"),
        field("transactional_id", pa.string(), "Produce and transaction APIs: transactional id"),
        field("acks", pa.int16(), "Produce: acks"),
        field("timeout_ms", pa.int32(), "Produce: timeout"),
        field(
            "producer_id",
            pa.int64(),
            "Produce: producer id of the first batch that has one; InitProducerId: the id given",
        ),
        field("record_count", pa.int64(), "Produce (request) and Fetch (response): records in all batches"),
        field("record_bytes", pa.int64(), "record data bytes as sent (compressed)"),
        field(
            "record_bytes_uncompressed", pa.int64(), "record data bytes after decompression (batch framing included)"
        ),
        field("codecs", pa.list_(pa.string()), "compression codecs of the batches"),
        field("max_wait_ms", pa.int32(), "Fetch: max wait"),
        field("min_bytes", pa.int32(), "Fetch: min bytes"),
        field("isolation_level", pa.int8(), "Fetch: 0 read_uncommitted, 1 read_committed"),
        field("throttle_time_ms", pa.int32(), "response throttle time"),
        field("request_json", pa.string(), "the decoded request body as JSON (the jsonl `request`)"),
        field("response_json", pa.string(), "the decoded response body as JSON (the jsonl `response`)"),
        field("tls_version", pa.string(), "TLS connections: the version the hellos agreed (TLSv1.2, TLSv1.3)"),
        field("tls_cipher_suite", pa.string(), "TLS connections: the cipher suite (IANA name)"),
    ]
)

ERRORS = pa.schema(
    _IDS
    + [
        field("ts", TIMESTAMP, "the exchange's request time"),
        *_WHO,
        field("api_key", pa.int16(), "API key"),
        field("api_name", pa.string(), "API name"),
        field("api_version", pa.int16(), "request version"),
        field("path", pa.string(), "where in the response, e.g. Responses[2].PartitionResponses[0].ErrorCode"),
        field("topic", pa.string(), "the topic the error is about, if any"),
        field("partition", pa.int32(), "the partition the error is about, if any"),
        field("code", pa.int16(), "error code"),
        field("name", pa.string(), "error name from Kafka's table"),
        field("retriable", pa.bool_(), "Kafka's retriable flag for the code"),
    ]
)

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
RECORDS = pa.schema(
    _IDS
    + [
        field("ts", TIMESTAMP, "time of the frame that carried the record (request for produce, response for fetch)"),
        field("direction", pa.string(), "produce (in a request) or fetch (in a response)"),
        field("client_id", pa.string(), "the request header's client id"),
        field("topic", pa.string(), "topic"),
        field("partition", pa.int32(), "partition"),
        field(
            "offset",
            pa.int64(),
            "record offset (fetch: base + delta; produce: the broker's BaseOffset + delta, null if not answered)",
        ),
        field("timestamp", pa.timestamp("ms", tz="UTC"), "record timestamp"),
        field("timestamp_type", pa.string(), "CreateTime or LogAppendTime"),
        field("key", pa.binary(), "record key (null with --no-payloads)"),
        field("value", pa.binary(), "record value (null with --no-payloads)"),
        field("key_size", pa.int32(), "key bytes (-1 for a null key)"),
        field("value_size", pa.int32(), "value bytes (-1 for a null value)"),
        field("headers", pa.list_(_HEADER), "record headers (values null with --no-payloads)"),
        field(
            "key_schema_id", pa.int32(), "schema id when the key is in Confluent's wire format (magic 0 + 4-byte id)"
        ),
        field("value_schema_id", pa.int32(), "schema id when the value is in Confluent's wire format"),
        field("codec", pa.string(), "batch compression codec"),
        field("magic", pa.int8(), "batch format: 2 record batch, 0/1 legacy message set"),
        field("batch_base_offset", pa.int64(), "the batch's base offset as on the wire"),
        field("producer_id", pa.int64(), "batch producer id (-1: none)"),
        field("producer_epoch", pa.int16(), "batch producer epoch"),
        field("base_sequence", pa.int32(), "batch base sequence"),
        field("transactional", pa.bool_(), "batch is transactional"),
        field("control", pa.bool_(), "batch is a control batch (transaction markers)"),
        field("crc_ok", pa.bool_(), "the batch CRC matches"),
        field(
            "key_decoded",
            pa.string(),
            "JSON: the key as Kafka's own schema reads it, for control records and the internal topics' "
            "(__cluster_metadata, __consumer_offsets, __transaction_state, __share_group_state); "
            "null with --no-payloads",
        ),
        field(
            "value_decoded",
            pa.string(),
            'JSON: the value likewise ({"type", "version", "data"}; {"_error": why} when it does not decode; '
            "SCRAM credentials and token ids <redacted>, and such a record's value column null)",
        ),
    ]
)

BATCHES = pa.schema(
    _IDS
    + [
        field("ts", TIMESTAMP, "time of the frame that carried the batch (request for produce, response for fetch)"),
        field("direction", pa.string(), "produce (in a request) or fetch (in a response)"),
        *_WHO,
        field("topic", pa.string(), "topic"),
        field("partition", pa.int32(), "partition"),
        field(
            "base_offset",
            pa.int64(),
            "fetch: the batch's base offset; produce: the one the broker's answer gave it (null if not answered)",
        ),
        field("records", pa.int64(), "records in the batch (a legacy message 1, a compressed wrapper its messages)"),
        field("bytes", pa.int64(), "the batch's bytes on the wire (compressed)"),
        field(
            "uncompressed_bytes",
            pa.int64(),
            "the batch's bytes with its payload decompressed (= bytes without a codec; null if it does not decompress)",
        ),
        field("codec", pa.string(), "compression codec"),
        field("magic", pa.int8(), "batch format: 2 record batch, 0/1 legacy message set"),
        field("producer_id", pa.int64(), "producer id (-1: none; null for a legacy message)"),
        field("producer_epoch", pa.int16(), "producer epoch"),
        field("base_sequence", pa.int32(), "base sequence"),
        field("transactional", pa.bool_(), "batch is transactional"),
        field("control", pa.bool_(), "batch is a control batch (transaction markers)"),
    ]
)

CONNECTIONS = pa.schema(
    [
        _IDS[1],
        *_WHO[:2],
        field("first_ts", TIMESTAMP, "first packet of the connection"),
        field("last_ts", TIMESTAMP, "last packet of the connection"),
        field("bytes_to_broker", pa.int64(), "TCP payload bytes client -> broker"),
        field("bytes_to_client", pa.int64(), "TCP payload bytes broker -> client"),
        field("frames_to_broker", pa.int64(), "Kafka frames (requests, tokens) client -> broker"),
        field("frames_to_client", pa.int64(), "Kafka frames broker -> client"),
        field("gaps", pa.int32(), "holes in the byte stream (capture loss)"),
        field("gap_bytes", pa.int64(), "bytes lost in those holes"),
        field("frame_bytes_to_broker", pa.int64(), "bytes_to_broker in whole Kafka frames (size prefixes included)"),
        field("frame_bytes_to_client", pa.int64(), "bytes_to_client in whole Kafka frames (size prefixes included)"),
        field(
            "skipped_bytes_to_broker",
            pa.int64(),
            "bytes_to_broker in no frame: cut or damaged frames, bytes skipped to find a frame boundary (see anomalies)",
        ),
        field("skipped_bytes_to_client", pa.int64(), "bytes_to_client in no frame (as skipped_bytes_to_broker)"),
        field("gap_bytes_to_broker", pa.int64(), "gap_bytes in the client -> broker direction"),
        field("gap_bytes_to_client", pa.int64(), "gap_bytes in the broker -> client direction"),
        field("retransmissions", pa.int64(), "segments that repeated bytes already seen"),
        field("out_of_order", pa.int64(), "segments that arrived ahead of a hole"),
        field("resyncs", pa.int32(), "times frame splitting had to hunt for the next frame boundary"),
        field("client_ids", pa.list_(pa.string()), "client ids seen on the connection"),
        field("detected_by", pa.string(), "how it was recognised as Kafka: syn_port, port or heuristic"),
        field("exchanges", pa.int64(), "exchanges on the connection"),
        field("tls_version", pa.string(), "TLS: the version the hellos agreed (TLSv1.2, TLSv1.3); null for plaintext"),
        field("tls_cipher_suite", pa.string(), "TLS: the cipher suite (IANA name)"),
        field("tls_sni", pa.string(), "TLS: the server name the ClientHello asked for"),
        field(
            "tls_decrypted",
            pa.bool_(),
            "TLS: decrypted with a key log (a connection left encrypted has no row: see its tls_encrypted anomaly)",
        ),
    ]
)

ANOMALIES = pa.schema(
    [
        _IDS[1],
        field("ts", TIMESTAMP, "when"),
        field("kind", pa.string(), "what kind (gap_in_frame, trailing_bytes, corrupt_file, ...)"),
        field("detail", pa.string(), "one line saying what and where"),
    ]
)

_MEMBER = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("host", pa.string()),
        pa.field("instance_id", pa.string()),
    ]
)
GROUP_GENERATIONS = pa.schema(
    [
        field("group_id", pa.string(), "consumer group"),
        field(
            "protocol",
            pa.string(),
            "classic (JoinGroup/SyncGroup), consumer (KIP-848 ConsumerGroupHeartbeat), share or streams",
        ),
        field("protocol_type", pa.string(), "classic: the group's protocol type (consumer, connect, ...)"),
        field("protocol_name", pa.string(), "classic: the assignor the group chose (range, cooperative-sticky, ...)"),
        field(
            "generation", pa.int32(), "classic: the generation id; KIP-848: the member epoch the members were moved to"
        ),
        field("leader", pa.string(), "classic: the leader's member id"),
        field("members", pa.list_(_MEMBER), "the members of the generation: member id, client id, host, instance id"),
        field("member_count", pa.int32(), "members of the generation"),
        field(
            "began",
            TIMESTAMP,
            "when the rebalance began: the first JoinGroup, LeaveGroup or rejoin-answer after the previous "
            "generation settled (KIP-848: the heartbeat that asked for it, else the first of the new epoch)",
        ),
        field(
            "settled",
            TIMESTAMP,
            "when it settled: the last successful SyncGroup answer (KIP-848: the last heartbeat answer that "
            "delivered an assignment of the epoch); null if the capture does not show it",
        ),
        field("stopped_ms", pa.float64(), "settled - began: how long the group was rebalancing, ms"),
        field(
            "trigger",
            pa.string(),
            "what the traffic shows started it: member_joined, member_rejoined, member_left, subscription_changed, "
            "rebalance_in_progress, unknown_member_id, illegal_generation, fenced_member_epoch, epoch_bumped",
        ),
        field("trigger_detail", pa.string(), "whom it concerns: a member id, or the joining client's client id"),
        field(
            "reason",
            pa.string(),
            "classic: the client's own words for it (KIP-800): the Reason of the JoinGroup or LeaveGroup that began "
            "it, else the first a member's JoinGroup into the generation gave; null where the protocol carries none "
            "(JoinGroup before v8, LeaveGroup before v5, KIP-848 heartbeats)",
        ),
        field("partitions", pa.int32(), "partitions assigned in the generation (null: no assignment seen)"),
        field("moved", pa.int32(), "partitions whose owner changed since the group's previous assignment"),
    ]
)
GROUP_ASSIGNMENTS = pa.schema(
    [
        field("group_id", pa.string(), "consumer group"),
        field("protocol", pa.string(), "classic, consumer or share (as group_generations)"),
        field("generation", pa.int32(), "the generation (KIP-848: epoch) the assignment belongs to"),
        field("member_id", pa.string(), "the member that owns the partition"),
        field("client_id", pa.string(), "that member's client id"),
        field("topic", pa.string(), "topic (KIP-848: the name, else the topic id)"),
        field("partition", pa.int32(), "partition"),
        field("ts", TIMESTAMP, "when the assignment was delivered (the generation's settled, else began)"),
        field("previous_member", pa.string(), "the member that owned it in the previous assignment, if another"),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "exchanges": EXCHANGES,
    "errors": ERRORS,
    "records": RECORDS,
    "batches": BATCHES,
    "connections": CONNECTIONS,
    "anomalies": ANOMALIES,
    "group_generations": GROUP_GENERATIONS,
    "group_assignments": GROUP_ASSIGNMENTS,
}
TABLES = tuple(SCHEMAS)
# made from the landed exchanges once a run's are all in (landing.groups), not row by row
DERIVED = ("group_generations", "group_assignments")
# the exchanges' columns they are made from
GROUP_SOURCE = (
    "exchange_id",
    "ts",
    "response_ts",
    "client",
    "client_id",
    "api_key",
    "correlation_id",
    "status",
    "error_codes",
    "group_id",
    "request_json",
    "response_json",
)


def schema(table: str) -> pa.Schema:
    return SCHEMAS[table]


def markdown() -> str:
    """Every table's columns as Markdown, for docs/tables.md."""
    out = []
    for name, sch in SCHEMAS.items():
        out.append(f"#### `{name}`\n\n| column | type | meaning |\n| --- | --- | --- |")
        for f in sch:
            out.append(f"| `{f.name}` | {f.type} | {f.metadata[b'doc'].decode()} |")
        when = next(w for w in ("first_ts", "began", "ts") if w in sch.names)
        out.append(
            f"| `{PARTITION}` | string (partition) | `YYYY-MM-DD` (UTC) of `{when}`, as hive-style directories |\n"
        )
    return "\n".join(out)
