"""A capture begun mid-connection decodes what a capture with the handshake decodes, once its first
frame boundary is found.

Real clients send frames with bytes after their last field (librdkafka's Metadata v12 has been
seen doing it): in a connection whose start was captured, such a frame is one exchange flagged
`trailing_bytes`, and so it is midstream once the stream is in sync. The first boundary of a
capture begun mid-connection is found by plausibility (the frames layer's hunt), which takes only
frames that decode exactly: a size and a correlation id inside record data decode as a short
message with bytes left over, and a hunt that took those would be fooled
(test_exchanges.py's test_resync_is_not_fooled_by_a_correlation_id_inside_data). So a trailing
frame that is the very first whole frame is skipped, its bytes named by the resync. These captures
are synthetic on purpose: a broker will not send a malformed frame at a chosen moment of a real
connection.
"""

from __future__ import annotations

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


def capture(tmp_path, name: str, *, handshake: bool, first_trailing: bool):
    """Requests 1-3 and their answers; request 2 (or 1) has 3 trailing bytes. Without the handshake
    the client's first segment starts inside an earlier request's bytes."""
    f = Flow()
    pkts = f.handshake() if handshake else []
    if not handshake:
        earlier = rq(99, "earlier-topic-name")
        pkts.append(f.send("c", earlier[-17:]))  # the tail of a frame whose start was not captured
    for corr in (1, 2, 3):
        trailing = b"\0\0\0" if corr == (1 if first_trailing else 2) else b""
        pkts.append(f.send("c", rq(corr, f"topic-{corr}", trailing)))
        pkts.append(f.send("s", rs(corr, f"topic-{corr}")))
    pkts += f.close()
    return write_pcap(tmp_path / name, pkts)


def decoded(path) -> tuple[list, list, list]:
    """The exchanges (correlation id, status, flags, first topic), the anomalies (kind, detail)
    and the connection items of one run over the capture."""
    items = list(dissect([str(path)], connections=True))
    ex = [
        (x.correlation_id, x.status, x.flags, x.request and x.request["Topics"][0]["Name"])
        for x in items
        if x.type == "exchange"
    ]
    anomalies = [(x.kind, x.detail) for x in items if x.type == "anomaly"]
    return ex, anomalies, [x for x in items if x.type == "connection"]


def test_a_frame_with_trailing_bytes_decodes_midstream_as_with_the_handshake(tmp_path):
    whole, whole_anomalies, _ = decoded(capture(tmp_path, "whole.pcap", handshake=True, first_trailing=False))
    mid, mid_anomalies, _ = decoded(capture(tmp_path, "mid.pcap", handshake=False, first_trailing=False))
    assert whole == [(c, "ok", ("trailing_bytes",) if c == 2 else (), f"topic-{c}") for c in (1, 2, 3)], whole
    assert mid == whole
    assert [k for k, _ in whole_anomalies] == ["trailing_bytes"]
    # midstream: the same finding, and the earlier frame's tail named as skipped
    assert sorted(k for k, _ in mid_anomalies) == ["resync", "trailing_bytes"], mid_anomalies
    (resync,) = [d for k, d in mid_anomalies if k == "resync"]
    assert "skipped 17 bytes after midstream start" in resync, resync


def test_a_trailing_frame_first_midstream_is_skipped_and_named(tmp_path):
    """The hunt takes no frame with bytes left over for the first boundary: request 1 is skipped
    whole, every byte of it named by the resync, and its answer is an orphan."""
    path = capture(tmp_path, "mid-first.pcap", handshake=False, first_trailing=True)
    ex, anomalies, (conn,) = decoded(path)
    assert ex == [(1, "orphan_response", (), None), (2, "ok", (), "topic-2"), (3, "ok", (), "topic-3")], ex
    skipped = 17 + len(rq(1, "topic-1", b"\0\0\0"))
    assert anomalies == [
        (
            "resync",
            f"client: skipped {skipped} bytes after midstream start; frame boundary found at stream offset {skipped}",
        )
    ]
    assert conn.skipped_bytes_to_broker == skipped and conn.skipped_bytes_to_client == 0
