"""A capture begun mid-connection decodes what a capture with the handshake decodes, once its first
frame boundary is found.

Real clients send frames with bytes after their last field (librdkafka's Metadata v12 has been
seen doing it, and older librdkafka pads ApiVersions v0 with 4 zero bytes): in a connection whose
start was captured, such a frame is one exchange flagged `trailing_bytes`, and so it is midstream.
The first boundary of a capture begun mid-connection is found by plausibility (the frames layer's
hunt), and a frame that decodes only with bytes left over is no boundary on its own word: a size
and a correlation id inside record data decode as a short message with bytes left over
(test_exchanges.py's test_resync_is_not_fooled_by_a_correlation_id_inside_data). So the hunt takes
such a request only when something outside it agrees: its answer, already captured, decodes
exactly as the answer to it, or the next bytes are a request that decodes exactly and has the next
correlation id. These captures are synthetic on purpose: a broker will not send a malformed frame
at a chosen moment of a real connection.
"""

from __future__ import annotations

import struct
import uuid

import protocol
from dissector import dissect
from tests.pcapgen import Flow, write_pcap


def rq(corr: int, topic: str, trailing: bytes = b"") -> bytes:
    body = {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}], "AllowAutoTopicCreation": False}
    frame = protocol.encode_request(3, 12, {"CorrelationId": corr, "ClientId": "rdkafka"}, body)
    return protocol.with_size(frame + trailing)


def rs(corr: int, topic: str) -> bytes:
    body = {"Topics": [{"Name": topic, "ErrorCode": 3}]}
    return protocol.with_size(protocol.encode_response(3, 12, {"CorrelationId": corr}, body))


def api_versions_v0(corr: int) -> tuple[bytes, bytes]:
    """Older librdkafka's ApiVersions v0 request, padded with 4 zero bytes, and its answer."""
    frame = protocol.encode_request(18, 0, {"CorrelationId": corr, "ClientId": "rdkafka"}, {})
    answer = {"ErrorCode": 0, "ApiKeys": [{"ApiKey": 3, "MinVersion": 0, "MaxVersion": 12}]}
    return protocol.with_size(frame + b"\0" * 4), protocol.with_size(
        protocol.encode_response(18, 0, {"CorrelationId": corr}, answer)
    )


def capture(tmp_path, name: str, *, handshake: bool, first_trailing: bool, pipelined: bool = False, tail=None):
    """Requests 1-3 and their answers; request 2 (or 1) has 3 trailing bytes. Without the handshake
    the client's first segment starts inside an earlier request's bytes (`tail`: its last 17 by
    default). `pipelined`: the client sends the three requests before the first answer comes."""
    f = Flow()
    pkts = f.handshake() if handshake else []
    if not handshake:
        # the tail of a frame whose start was not captured
        pkts.append(f.send("c", rq(99, "earlier-topic-name")[-17:] if tail is None else tail))
    reqs = [rq(c, f"topic-{c}", b"\0\0\0" if c == (1 if first_trailing else 2) else b"") for c in (1, 2, 3)]
    answers = [rs(c, f"topic-{c}") for c in (1, 2, 3)]
    if pipelined:
        pkts += [f.send("c", r) for r in reqs] + [f.send("s", a) for a in answers]
    else:
        for r, a in zip(reqs, answers, strict=True):
            pkts += [f.send("c", r), f.send("s", a)]
    pkts += f.close()
    return write_pcap(tmp_path / name, pkts)


def decoded(path) -> tuple[list, list, list]:
    """The exchanges (correlation id, status, flags, first topic, latency), the anomalies (kind,
    detail) and the connection items of one run over the capture."""
    items = list(dissect([str(path)], connections=True))
    ex = [
        (x.correlation_id, x.status, x.flags, x.request and x.request["Topics"][0]["Name"], x.latency_ms)
        for x in items
        if x.type == "exchange"
    ]
    anomalies = [(x.kind, x.detail) for x in items if x.type == "anomaly"]
    return ex, anomalies, [x for x in items if x.type == "connection"]


def test_a_frame_with_trailing_bytes_decodes_midstream_as_with_the_handshake(tmp_path):
    whole, whole_anomalies, _ = decoded(capture(tmp_path, "whole.pcap", handshake=True, first_trailing=False))
    mid, mid_anomalies, _ = decoded(capture(tmp_path, "mid.pcap", handshake=False, first_trailing=False))
    assert [x[:4] for x in whole] == [
        (c, "ok", ("trailing_bytes",) if c == 2 else (), f"topic-{c}") for c in (1, 2, 3)
    ], whole
    assert mid == whole
    assert [k for k, _ in whole_anomalies] == ["trailing_bytes"]
    # midstream: the same finding, and the earlier frame's tail named as skipped
    assert sorted(k for k, _ in mid_anomalies) == ["resync", "trailing_bytes"], mid_anomalies
    (resync,) = [d for k, d in mid_anomalies if k == "resync"]
    assert "skipped 17 bytes after midstream start" in resync, resync


def test_a_trailing_frame_first_midstream_decodes_as_with_the_handshake(tmp_path):
    """Request 1 has bytes left over and is the first whole frame: the hunt waits on it, and its
    answer (which decodes exactly as a Metadata v12 answer) confirms it. The same exchanges, flags
    and latencies as with the handshake; only the earlier frame's 17 bytes are skipped."""
    for pipelined in (False, True):  # confirmed by its answer, or by request 2 right after it
        kw = dict(first_trailing=True, pipelined=pipelined)
        whole, whole_anomalies, _ = decoded(capture(tmp_path, f"whole-{pipelined}.pcap", handshake=True, **kw))
        mid, anomalies, (conn,) = decoded(capture(tmp_path, f"mid-{pipelined}.pcap", handshake=False, **kw))
        assert [x[:4] for x in whole] == [
            (c, "ok", ("trailing_bytes",) if c == 1 else (), f"topic-{c}") for c in (1, 2, 3)
        ], whole
        assert mid == whole, pipelined
        assert [k for k, _ in whole_anomalies] == ["trailing_bytes"]
        assert sorted(anomalies) == sorted(
            whole_anomalies
            + [("resync", "client: skipped 17 bytes after midstream start; frame boundary found at stream offset 17")]
        ), anomalies
        assert conn.skipped_bytes_to_broker == 17 and conn.skipped_bytes_to_client == 0


def test_a_padded_api_versions_alone_on_a_connection_decodes_midstream(tmp_path):
    """The shape seen on real captures: a connection whose start was missed carries only older
    librdkafka's padded ApiVersions v0 and its answer. The request is the stream's first frame and
    nothing follows it; the answer confirms it, and no byte is skipped."""
    req, answer = api_versions_v0(1)
    out = {}
    for handshake in (True, False):
        f = Flow()
        pkts = (f.handshake() if handshake else []) + [f.send("c", req), f.send("s", answer)] + f.close()
        items = list(dissect([str(write_pcap(tmp_path / f"{handshake}.pcap", pkts))], connections=True))
        out[handshake] = [
            (x.type, x.correlation_id, x.api_name, x.status, x.flags, x.latency_ms)
            if x.type == "exchange"
            else (x.type, x.kind, x.detail)
            for x in items
            if x.type != "connection"
        ]
        (conn,) = [x for x in items if x.type == "connection"]
        assert conn.skipped_bytes_to_broker == conn.skipped_bytes_to_client == 0
    assert out[False] == out[True]
    assert [x[:5] for x in out[True] if x[0] == "exchange"] == [
        ("exchange", 1, "ApiVersions", "ok", ("trailing_bytes",))
    ]


def test_a_padded_api_versions_never_answered_is_skipped_and_named(tmp_path):
    """Without its answer and with nothing after it, nothing confirms the padded request: its 25
    bytes are skipped, and named (the resync at the end of the stream), not dropped silently."""
    req, _ = api_versions_v0(1)
    f = Flow()
    pkts = [f.send("c", req)] + f.close()
    items = list(dissect([str(write_pcap(tmp_path / "alone.pcap", pkts))], connections=True))
    assert [(x.type, x.kind, x.detail) for x in items if x.type == "anomaly"] == [
        (
            "anomaly",
            "resync",
            "client: stream ended before a frame boundary was found (25 bytes skipped after midstream start)",
        )
    ]
    (conn,) = [x for x in items if x.type == "connection"]
    assert len(req) == 25 and conn.skipped_bytes_to_broker == 25


def test_a_fake_trailing_frame_inside_data_does_not_fool_the_hunt(tmp_path):
    """The captured tail of an earlier request ends with bytes that read as a padded ApiVersions v0
    request: the worst place, as the real request 1 starts right after them. The fake's correlation
    id (99) is answered while the hunt waits on it, but by the earlier request's Metadata answer,
    which does not decode as an ApiVersions answer; and request 1 does not carry the correlation
    id after 99. Nothing confirms it: the hunt skips it and syncs on request 1."""
    fake, _ = api_versions_v0(99)
    earlier = protocol.encode_request(
        3, 12, {"CorrelationId": 99, "ClientId": "rdkafka"}, {"Topics": [], "AllowAutoTopicCreation": False}
    )
    tail = earlier[-8:] + fake  # the fake's size prefix claims exactly the bytes up to request 1
    assert struct.unpack_from(">i", fake)[0] == len(fake) - 4
    f = Flow()
    pkts = [f.send("c", tail), f.send("s", rs(99, "earlier"))]
    for c in (1, 2, 3):
        pkts += [f.send("c", rq(c, f"topic-{c}")), f.send("s", rs(c, f"topic-{c}"))]
    ex, anomalies, (conn,) = decoded(write_pcap(tmp_path / "fake.pcap", pkts + f.close()))
    assert [x[:4] for x in ex] == [(99, "orphan_response", (), None)] + [
        (c, "ok", (), f"topic-{c}") for c in (1, 2, 3)
    ], ex
    assert anomalies == [
        (
            "resync",
            f"client: skipped {len(tail)} bytes after midstream start; frame boundary found at stream offset {len(tail)}",
        )
    ]
    assert conn.skipped_bytes_to_broker == len(tail)
