"""Differential tests: kafkawire against kio 0.6.5 (Rust-backed, generated from the same Kafka specs).

For every (api key, version, direction) kio has a class for, entities drawn from
kio's own field metadata are written by kio; kafkawire must decode those bytes
whole to the same values, re-encode them byte for byte, encode the same values
(converted) to the same bytes, and reject every truncation kio also rejects. Real
frames from ../shared/pcaps go through both decoders too.
"""

from __future__ import annotations

import datetime

import pytest

pytest.importorskip("kio")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kio.serial.errors import DecodeError as KioDecodeError  # noqa: E402

import protocol  # noqa: E402
from protocol import registry  # noqa: E402
from protocol.codec import decode_body, run_decoder  # noqa: E402

from .kio_compat import (  # noqa: E402
    Target,
    combos,
    diff,
    entity_strategy,
    kio_class,
    kio_decode,
    kio_encode,
    message_target,
    other_targets,
    schema_fields,
    to_kafkawire,
)
from .pcap_frames import PCAPS, exchanges  # noqa: E402

COMBOS = combos()
OTHERS = other_targets()
FAST = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
MANY = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


def _ids(combo) -> str:
    api_key, version, direction = combo
    return f"{registry.api_name(api_key)}-v{version}-{direction}"


def _decode_whole(t: Target, buf) -> dict:
    return run_decoder(t.decode, buf, 0, whole=True)[0]


def check_agreement(t: Target, entity, cut: int) -> None:
    wire = kio_encode(entity)

    # kio writes, kafkawire reads: the whole body, the same values.
    decoded = _decode_whole(t, wire)
    assert diff(entity, decoded, t.fields, t.version, t.flexible) == []
    again = bytearray()
    t.encode(decoded, again)
    assert bytes(again) == wire

    # The same values, encoded by kafkawire: kio's bytes exactly, and kio reads them back.
    ours = bytearray()
    t.encode(to_kafkawire(entity, t.fields, t.version, t.flexible), ours)
    assert bytes(ours) == wire
    back, end = kio_decode(t.kio_cls, bytes(ours))
    assert end == len(ours)
    assert diff(back, decoded, t.fields, t.version, t.flexible) == []

    # A body cut short is bad bytes to both; kafkawire says so with its one exception type.
    if wire:
        short = wire[: cut % len(wire)]
        with pytest.raises(protocol.DecodeError):
            _decode_whole(t, short)
        with pytest.raises(KioDecodeError):
            kio_decode(t.kio_cls, short)


def test_kio_coverage_is_inside_the_registry():
    # kio 0.6.5 knows 89 API keys; every (key, version, direction) it has, kafkawire has too.
    assert len(COMBOS) == 604
    assert len({k for k, _, _ in COMBOS}) == 89
    assert [c for c in COMBOS if not registry.has(*c)] == []


@pytest.mark.parametrize("combo", COMBOS, ids=_ids)
@FAST
@given(data=st.data())
def test_kio_and_kafkawire_agree(combo, data):
    t = message_target(*combo)
    check_agreement(t, data.draw(entity_strategy(t.kio_cls), label="kio entity"), data.draw(st.integers(0, 2**16)))


def test_kio_data_and_header_coverage():
    # Consumer protocol, control records, principal, KRaft records; request header v1-v2, response header v0-v1.
    assert len(OTHERS) == 21


@pytest.mark.parametrize("target", OTHERS, ids=lambda t: t.label.replace(" ", "-"))
@FAST
@given(data=st.data())
def test_kio_and_kafkawire_agree_on_data_and_headers(target, data):
    check_agreement(
        target, data.draw(entity_strategy(target.kio_cls), label="kio entity"), data.draw(st.integers(0, 2**16))
    )


@pytest.mark.slow
@pytest.mark.parametrize("combo", COMBOS, ids=_ids)
@MANY
@given(data=st.data())
def test_kio_and_kafkawire_agree_many(combo, data):
    # Longer strings/bytes (multi-byte varint lengths) and bigger arrays than the default run.
    t = message_target(*combo)
    check_agreement(
        t, data.draw(entity_strategy(t.kio_cls, small=False), label="kio entity"), data.draw(st.integers(0, 2**16))
    )


def test_metadata_v12_response_field_by_field():
    # A readable anchor for the generic machinery above: known values, both directions.
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12 import response as m

    entity = m.MetadataResponse(
        throttle_time=datetime.timedelta(milliseconds=7),
        brokers=(m.MetadataResponseBroker(node_id=1, host="b1", port=9092, rack="r"),),
        cluster_id="c",
        controller_id=1,
        topics=(
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name="t",
                topic_id=None,
                is_internal=False,
                partitions=(
                    m.MetadataResponsePartition(
                        error_code=ErrorCode.leader_not_available,
                        partition_index=3,
                        leader_id=1,
                        leader_epoch=5,
                        replica_nodes=(1, 2),
                        isr_nodes=(1,),
                        offline_replicas=(),
                    ),
                ),
                topic_authorized_operations=-2147483648,
            ),
        ),
    )
    body = decode_body(kio_encode(entity), 0, 3, 12, "response")
    assert body["ThrottleTimeMs"] == 7
    assert body["Brokers"] == [{"NodeId": 1, "Host": "b1", "Port": 9092, "Rack": "r"}]
    assert body["ClusterId"] == "c"
    part = body["Topics"][0]["Partitions"][0]
    # Arrays of numbers may be lists or tuples (the compiler returns struct's tuples as is).
    assert (part["ErrorCode"], part["PartitionIndex"], part["LeaderEpoch"], tuple(part["ReplicaNodes"])) == (
        5,
        3,
        5,
        (1, 2),
    )
    assert body["Topics"][0]["TopicId"].int == 0
    check_agreement(message_target(3, 12, "response"), entity, 17)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "kio bug: timedelta_i64 fields are written as round(td.total_seconds() * 1000), a float, so any value "
        "above 2**53 ms loses its low milliseconds (18014398509481982 ms goes on the wire as 18014398509481980)"
    ),
)
def test_kio_timedelta_i64_keeps_every_millisecond():
    from kio.schema.offset_commit.v2.request import OffsetCommitRequest

    ms = 2**54 - 2
    entity = OffsetCommitRequest(
        group_id="g", generation_id=1, member_id="m", retention_time=datetime.timedelta(milliseconds=ms), topics=()
    )
    assert decode_body(kio_encode(entity), 0, 8, 2, "request")["RetentionTimeMs"] == ms


def _pcap_bodies(pcap):
    """(direction, api key, body version, frame, body offset) for every frame of a capture."""
    for req, resp, api_key, api_version in exchanges(pcap):
        _, pos = protocol.decode_request_header(req)
        yield "request", api_key, api_version, req, pos
        if resp is None:
            continue
        _, pos = protocol.decode_response_header(resp, api_key, api_version)
        try:
            version = protocol.decode_response(resp, api_key, api_version).body_version
        except protocol.DecodeError:
            version = api_version
        yield "response", api_key, version, resp, pos


@pytest.mark.skipif(not PCAPS, reason="../shared/pcaps not present")
@pytest.mark.parametrize("pcap", PCAPS, ids=lambda p: p.name)
def test_real_frames_decode_alike(pcap):
    compared, rejected_by_both, kio_lacks = 0, [], []
    for direction, api_key, version, frame, pos in _pcap_bodies(pcap):
        combo = (api_key, version, direction)
        try:
            cls = kio_class(*combo)
        except KeyError:
            kio_lacks.append(combo)
            continue
        try:
            ours = decode_body(frame, pos, *combo)
        except protocol.DecodeError:
            with pytest.raises(KioDecodeError):
                kio_decode(cls, frame, pos)
            rejected_by_both.append(combo)
            continue
        theirs, end = kio_decode(cls, frame, pos)
        assert end == len(frame)
        fields, flexible = schema_fields(*combo)
        assert diff(theirs, ours, fields, version, flexible) == [], (pcap.name, combo)
        compared += 1
    expected = {
        "kpy_basic.pcap": (108, [], []),
        "ck_compression.pcap": (166, [], []),
        # A Metadata v13 request answered with a v12 body; ApiVersions v99 and API key 1000 probes.
        "errors.pcap": (114, [(3, 13, "response")], [(18, 99, "request"), (18, 5, "response"), (1000, 0, "request")]),
        "midstream.pcap": (34, [], []),
    }
    if pcap.name in expected:
        assert (compared, rejected_by_both, sorted(kio_lacks)) == (
            expected[pcap.name][0],
            expected[pcap.name][1],
            sorted(expected[pcap.name][2]),
        )
    else:
        assert compared > 0
