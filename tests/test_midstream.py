"""A capture begun mid-connection decodes what a capture with the handshake decodes.

Real clients send frames with bytes after their last field (librdkafka's Metadata v12 has been
seen doing it): in a connection whose start was captured, such a frame is one exchange flagged
`trailing_bytes`. A capture begun mid-connection finds its first frame boundary by plausibility
(the frames layer's hunt); a frame with trailing bytes must count as plausible there too, or the
hunt skips it and its exchange is lost. These captures are synthetic on purpose: a broker will not
send a malformed frame at a chosen moment of a real connection.
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


def decoded(path) -> tuple[list, list]:
    items = list(dissect([str(path)], connections=True))
    ex = [
        (x.correlation_id, x.status, x.flags, x.request and x.request["Topics"][0]["Name"])
        for x in items
        if x.type == "exchange"
    ]
    anomalies = [(x.kind, x.detail) for x in items if x.type == "anomaly"]
    return ex, anomalies


def test_a_frame_with_trailing_bytes_decodes_midstream_as_with_the_handshake(tmp_path):
    for first in (False, True):
        whole, whole_anomalies = decoded(capture(tmp_path, f"whole-{first}.pcap", handshake=True, first_trailing=first))
        mid, mid_anomalies = decoded(capture(tmp_path, f"mid-{first}.pcap", handshake=False, first_trailing=first))
        trailing = 1 if first else 2
        assert whole == [(c, "ok", ("trailing_bytes",) if c == trailing else (), f"topic-{c}") for c in (1, 2, 3)], (
            whole
        )
        assert mid == whole, (first, mid)
        assert [k for k, _ in whole_anomalies] == ["trailing_bytes"]
        # midstream: the same finding, and the earlier frame's tail named as skipped
        assert sorted(k for k, _ in mid_anomalies) == ["resync", "trailing_bytes"], mid_anomalies
        (resync,) = [d for k, d in mid_anomalies if k == "resync"]
        assert "17 bytes" in resync, resync
