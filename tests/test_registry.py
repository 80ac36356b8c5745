"""The schema registry: coverage, headers and their exceptions, errors, real frames."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import uuid

import pytest

from protocol import DecodeError, decode_request, decode_response, encode_request, encode_response, registry
from protocol.errors import ERRORS, error_name, is_retriable
from protocol.headers import request_header_version, response_header_version

from .pcap_frames import PCAPS, exchanges


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def cs(text: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: uvarint length + 1."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


# -- coverage -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "api_key,low,high",
    [
        (0, 0, 13),
        (1, 0, 18),
        (2, 0, 11),
        (3, 0, 13),
        (4, 0, 7),
        (5, 0, 4),
        (6, 0, 8),
        (7, 0, 3),
        (18, 0, 5),
    ],
)
def test_version_ranges_union_both_snapshots(api_key, low, high):
    assert registry.request_versions(api_key) == list(range(low, high + 1))


def test_versions_kafka4_removed_are_marked():
    assert [v for v in range(14) if registry.removed_in_kafka4(0, v)] == [0, 1, 2]
    assert [v for v in range(19) if registry.removed_in_kafka4(1, v)] == [0, 1, 2, 3]
    assert registry.removed_in_kafka4(4, 7) and not registry.removed_in_kafka4(3, 0)


def test_share_and_streams_group_apis_are_known():
    names = {registry.api_name(k) for k in registry.api_keys()}
    assert {
        "ShareGroupHeartbeat",
        "ShareFetch",
        "ShareAcknowledge",
        "StreamsGroupHeartbeat",
        "StreamsGroupDescribe",
        "ReadShareGroupStateSummary",
    } <= names
    assert registry.api_keys() == list(range(95))


def test_old_versions_come_from_the_older_snapshot_and_new_from_the_newest():
    assert registry.schema(0, 2, "request")["source"] == "kafka-message-specs"
    assert registry.schema(0, 13, "request")["source"] == "kafka-message-specs-latest"
    assert registry.schema(4, 7, "request")["source"] == "kafka-message-specs"  # LeaderAndIsr: gone in 4.x
    # The one layout the snapshots disagree on: the latest folder is right.
    assert registry.schema(85, 0, "response")["source"] == "kafka-message-specs-latest"


def test_registry_carries_no_description_text():
    import protocol._generated.registry_data as data

    text = open(data.__file__, encoding="utf-8").read()
    assert "GENERATED" in text.splitlines()[0]
    assert "'about'" not in text and "The topic name." not in text


def test_apis_json_command():
    out = subprocess.run(
        [sys.executable, "-m", "kafkawire", "apis", "--json"], capture_output=True, text=True, check=True
    )
    rows = json.loads(out.stdout)
    by_key = {r["api_key"]: r for r in rows}
    assert len(rows) == 95 and set(rows[0]) == {"api_key", "name", "versions", "flexible_versions"}
    assert by_key[0]["name"] == "Produce" and by_key[0]["versions"] == list(range(14))
    assert by_key[0]["flexible_versions"] == list(range(9, 14))
    assert by_key[18]["flexible_versions"] == [3, 4, 5]
    table = subprocess.run(
        [sys.executable, "-m", "kafkawire", "apis"], capture_output=True, text=True, check=True
    ).stdout
    assert "Produce" in table and "0-13" in table and "removed in Kafka 4" in table


def test_generator_is_reproducible(tmp_path):
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1].parent / "shared"
    if not shared.is_dir():
        pytest.skip("../shared not present")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "protocol.codegen",
            str(shared / "kafka-message-specs-latest"),
            str(shared / "kafka-message-specs"),
            "--errors",
            str(shared / "kafka-error-codes.tsv"),
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    import protocol._generated as gen

    committed = Path(gen.__file__).parent
    for name in ("registry_data.py", "error_codes.py"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name


def test_error_codes_table():
    assert len(ERRORS) == 138 and min(ERRORS) == -1 and max(ERRORS) == 136
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER" and is_retriable(6)
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(35) == "UNSUPPORTED_VERSION" and not is_retriable(35)
    assert error_name(999) == "UNKNOWN_ERROR_999"


# -- headers and their exceptions ------------------------------------------------------------


def test_header_versions():
    assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
    assert request_header_version(7, 0) == 0 and request_header_version(7, 1) == 1
    assert response_header_version(3, 9) == 1 and response_header_version(3, 8) == 0
    assert response_header_version(18, 3) == 0  # ApiVersions responses: always v0


def test_controlled_shutdown_v0_has_no_client_id():
    frame = struct.pack(">hhii", 7, 0, 42, 1001)  # api_key, version, correlation, BrokerId
    msg = decode_request(frame)
    assert msg.header == {"RequestApiKey": 7, "RequestApiVersion": 0, "CorrelationId": 42}
    assert msg.body == {"BrokerId": 1001} and msg.client_id is None
    assert encode_request(7, 0, msg.header, msg.body) == frame


def test_flexible_header_client_id_is_not_compact():
    # Metadata v12 request: header v2 = int16-length client id + tagged fields.
    body = (
        b"\x01" + b"\x00" + b"\x00" + b"\x00"
    )  # Topics=[] (compact 0 items), AllowAuto=false, IncludeTopicAuth=false, tags
    frame = struct.pack(">hhi", 3, 12, 7) + s16("my-client") + b"\x00" + body
    msg = decode_request(frame)
    assert msg.client_id == "my-client" and msg.header_version == 2
    assert msg.body == {"Topics": [], "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False}


def test_apiversions_response_header_v0_even_when_flexible():
    # ApiVersions v3 response: header v0 (no tagged fields), flexible body.
    body = struct.pack(">h", 0) + b"\x02" + struct.pack(">hhh", 18, 0, 4) + b"\x00" + struct.pack(">i", 0) + b"\x00"
    msg = decode_response(struct.pack(">i", 9) + body, 18, 3)
    assert msg.header == {"CorrelationId": 9} and msg.header_version == 0
    assert msg.body["ApiKeys"] == [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4}]


def test_apiversions_unsupported_version_answer_is_v0():
    # Broker answers a v3 request with error 35 and a v0 body (non-compact array).
    body = struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 2)
    msg = decode_response(struct.pack(">i", 1) + body, 18, 3)
    assert msg.body_version == 0
    assert msg.body == {"ErrorCode": 35, "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 2}]}


# -- the seed guide's BNF, built by hand ---------------------------------------------------


def test_bnf_produce_v0_request():
    # Produce Request (Version: 0) => acks timeout [topic_data]; topic_data => topic [data]; data => partition record_set
    record_set = b"\x00" * 12
    frame = (
        struct.pack(">hhi", 0, 0, 1)
        + s16("bnf")
        + struct.pack(">hi", 1, 1500)
        + struct.pack(">i", 1)
        + s16("events")
        + struct.pack(">i", 1)
        + struct.pack(">i", 3)
        + struct.pack(">i", len(record_set))
        + record_set
    )
    msg = decode_request(frame)
    assert (msg.api_key, msg.api_version, msg.correlation_id, msg.client_id) == (0, 0, 1, "bnf")
    assert msg.body["Acks"] == 1 and msg.body["TimeoutMs"] == 1500
    (topic,) = msg.body["TopicData"]
    assert topic["Name"] == "events" and topic["PartitionData"][0]["Index"] == 3
    assert bytes(topic["PartitionData"][0]["Records"]) == record_set
    assert encode_request(0, 0, msg.header, msg.body) == frame


def test_bnf_metadata_v0_response():
    # Metadata Response (Version: 0) => [brokers] [topics]; brokers => node_id host port;
    # topics => error_code name [partitions]; partitions => error_code partition_index leader_id [replica_nodes] [isr_nodes]
    frame = (
        struct.pack(">i", 5)
        + struct.pack(">i", 1)
        + struct.pack(">i", 0)
        + s16("localhost")
        + struct.pack(">i", 9092)
        + struct.pack(">i", 1)
        + struct.pack(">h", 0)
        + s16("t")
        + struct.pack(">i", 1)
        + struct.pack(">hii", 0, 0, 0)
        + struct.pack(">ii", 1, 0)
        + struct.pack(">ii", 1, 0)
    )
    msg = decode_response(frame, 3, 0)
    assert msg.body == {
        "Brokers": [{"NodeId": 0, "Host": "localhost", "Port": 9092}],
        "Topics": [
            {
                "ErrorCode": 0,
                "Name": "t",
                "Partitions": [
                    {"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 0, "ReplicaNodes": (0,), "IsrNodes": (0,)}
                ],
            }
        ],
    }


def test_tagged_fields_known_and_unknown():
    # ApiVersions v3 request: ClientSoftwareName/Version + a tag nobody defines (tag 7, 2 bytes).
    frame = struct.pack(">hhi", 18, 3, 2) + s16("c") + b"\x00" + cs("kw") + cs("1.0") + b"\x01\x07\x02hi"
    msg = decode_request(frame)
    assert msg.body == {
        "ClientSoftwareName": "kw",
        "ClientSoftwareVersion": "1.0",
        "_unknown_tagged_fields": {7: b"hi"},
    }
    assert encode_request(18, 3, msg.header, msg.body) == frame


def test_known_tagged_field_decoded_by_name():
    # Fetch v12 request with ClusterId (tag 0) set.
    # ReplicaId..SessionEpoch, Topics=[], ForgottenTopicsData=[], RackId="", then 1 tag: tag 0, 4 bytes.
    body = (
        struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
        + b"\x01"
        + b"\x01"
        + b"\x01"
        + b"\x01"
        + b"\x00"
        + b"\x04"
        + cs("abc")
    )
    frame = struct.pack(">hhi", 1, 12, 3) + s16("c") + b"\x00" + body
    msg = decode_request(frame)
    assert msg.body["ClusterId"] == "abc" and msg.body["ReplicaId"] == -1 and msg.body["Topics"] == []


# -- bad bytes -----------------------------------------------------------------------------


def test_decode_error_names_field_and_offset():
    frame = (
        struct.pack(">hhi", 3, 0, 1) + s16("c") + struct.pack(">i", 2) + s16("ok") + struct.pack(">h", 50) + b"short"
    )
    with pytest.raises(DecodeError) as info:
        decode_request(frame)
    err = info.value
    assert (err.api_key, err.api_version, err.direction) == (3, 0, "request")
    # 8 header + 3 client id + 4 count + 4 "ok" + 2 length: decoding stopped at byte 21.
    assert err.field == "Topics[].Name" and err.offset == 21
    assert "string length 50 runs past the end (5 bytes left)" in str(err) and "Metadata v0 request" in str(err)


def test_absurd_array_length_is_rejected_before_allocation():
    frame = struct.pack(">hhi", 3, 0, 1) + s16("c") + struct.pack(">i", 2_000_000_000)
    with pytest.raises(DecodeError, match="array of 2000000000 elements runs past the end"):
        decode_request(frame)


def test_left_over_bytes_are_an_error():
    frame = struct.pack(">hhi", 3, 0, 1) + s16("c") + struct.pack(">i", 0) + b"junk"
    with pytest.raises(DecodeError, match="4 bytes left over"):
        decode_request(frame)


def test_wrong_version_body_hints_at_the_version_it_is():
    # A Metadata v12-shaped response answered to a v13 request (Tansu does this).
    msg = {"ThrottleTimeMs": 0, "Brokers": [], "ClusterId": None, "ControllerId": 1, "Topics": []}
    frame = encode_response(3, 12, {"CorrelationId": 1}, msg)
    with pytest.raises(DecodeError) as info:
        decode_response(frame, 3, 13)
    assert 12 in info.value.decodes_as and "decodes whole as" in str(info.value)


def test_lenient_decoding_keeps_fields_and_says_what_was_odd():
    frame = struct.pack(">hhi", 3, 0, 1) + s16("c") + struct.pack(">i", 1) + s16("ok") + b"junk"
    msg = decode_request(frame, lenient=True)
    assert msg.body == {"Topics": [{"Name": "ok"}]} and msg.trailing == b"junk" and not msg.version_mismatch
    assert decode_request(frame[:-4], lenient=True).trailing == b""
    body = {"ThrottleTimeMs": 0, "Brokers": [], "ClusterId": None, "ControllerId": 1, "Topics": []}
    msg = decode_response(encode_response(3, 12, {"CorrelationId": 1}, body), 3, 13, lenient=True)
    assert (msg.api_version, msg.body_version, msg.version_mismatch, msg.trailing) == (13, 12, True, b"")
    assert msg.body == body
    with pytest.raises(DecodeError, match="runs past the end"):  # a prefix that does not decode stays an error
        decode_request(frame[:-8], lenient=True)


def test_memoryview_input_is_zero_copy():
    payload = bytes(range(200))
    frame = bytearray(
        encode_request(
            0,
            9,
            {"CorrelationId": 1, "ClientId": "p"},
            {
                "TransactionalId": None,
                "Acks": 1,
                "TimeoutMs": 10,
                "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": payload}]}],
            },
        )
    )
    msg = decode_request(memoryview(frame))
    records = msg.body["TopicData"][0]["PartitionData"][0]["Records"]
    assert isinstance(records, memoryview) and records.obj is frame and bytes(records) == payload


def test_uuid_fields_are_uuids():
    tid = uuid.uuid4()
    body = {
        "Topics": [{"TopicId": tid, "Name": None}],
        "AllowAutoTopicCreation": True,
        "IncludeTopicAuthorizedOperations": False,
    }
    msg = decode_request(encode_request(3, 12, {"CorrelationId": 1, "ClientId": None}, body))
    assert msg.body["Topics"][0]["TopicId"] == tid


# -- real frames -----------------------------------------------------------------------------

# Frames in errors.pcap that cannot decode, and why: the workload sends an unknown API key
# on purpose, and Tansu answers a Metadata v13 request with a v12 body.
KNOWN_UNDECODABLE = {("errors.pcap", "request", 1000, 0), ("errors.pcap", "response", 3, 13)}


@pytest.mark.skipif(not PCAPS, reason="../shared/pcaps not present")
@pytest.mark.parametrize("pcap", PCAPS, ids=lambda p: p.name)
def test_every_frame_in_the_shared_captures_decodes_and_reencodes(pcap):
    decoded = failed = 0
    for req, resp, api_key, api_version in exchanges(pcap):
        for direction, frame in (("request", req), ("response", resp)):
            if frame is None:
                continue
            try:
                if direction == "request":
                    msg = decode_request(frame)
                    again = encode_request(api_key, api_version, msg.header, msg.body, body_version=msg.body_version)
                else:
                    msg = decode_response(frame, api_key, api_version)
                    again = encode_response(api_key, api_version, msg.header, msg.body, body_version=msg.body_version)
            except DecodeError:
                assert (pcap.name, direction, api_key, api_version) in KNOWN_UNDECODABLE
                failed += 1
                continue
            assert again == bytes(frame), (direction, api_key, api_version)
            decoded += 1
    expected = {
        "kpy_basic.pcap": (108, 0),
        "ck_compression.pcap": (166, 0),
        "errors.pcap": (116, 2),
        "midstream.pcap": (34, 0),
    }
    assert (decoded, failed) == expected[pcap.name]
