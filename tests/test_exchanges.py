"""dissector.exchanges on synthetic stream events: roles, pairing, statuses, SASL, topic ids, redaction."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import protocol
from tests.oracle.exchanges import Exchanges
from tests.oracle.output import format_text, to_json
from tests.redact_reference import redact
from tests.oracle.tcp import Close, Data, Gap, Open

C, S = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
TOPIC_ID = uuid.UUID("01a1fff0-66a6-7da2-a75e-8ec71773e299")


def rq(api_key, version, corr, body=None, client_id="tester"):
    return protocol.with_size(
        protocol.encode_request(api_key, version, {"CorrelationId": corr, "ClientId": client_id}, body or {})
    )


def rs(api_key, version, corr, body=None):
    return protocol.with_size(protocol.encode_response(api_key, version, {"CorrelationId": corr}, body or {}))


class Conv:
    """One connection's events, built in order."""

    def __init__(self, client=C, server=S, syn=True, conn=0):
        self.client, self.server, self.conn = client, server, conn
        self.t = 100.0
        self.events = [Open(conn, client if syn else None, server if syn else None, self.t, syn)]

    def c(self, data):
        self.t += 0.001
        self.events.append(Data(self.conn, self.client, self.server, self.t, data))
        return self

    def s(self, data):
        self.t += 0.001
        self.events.append(Data(self.conn, self.server, self.client, self.t, data))
        return self

    def gap(self, side, size):
        a, b = (self.client, self.server) if side == "c" else (self.server, self.client)
        self.events.append(Gap(self.conn, a, b, self.t, size))
        return self

    def pcap(self, path):
        """These events as a capture file (tests.pcapgen.events_pcap), closed as run() closes them."""
        from tests.pcapgen import events_pcap

        return str(events_pcap(path, self.events, close_at=self.t + 1))

    def run(self, *, ports=(), close=True, secrets=False):
        ex = Exchanges(ports=ports)
        out = []
        for e in self.events + ([Close(self.conn, self.t + 1, "fin")] if close else []):
            out += ex.feed(e)
        out += ex.finish(self.t + 2)
        return out if secrets else [redact(x) for x in out]


def exchanges(items):
    return [x for x in items if x.type == "exchange"]


def test_pairing_latency_and_reused_correlation_ids():
    conv = (
        Conv()
        .c(rq(3, 12, 5, {"Topics": [{"Name": "first"}]}))
        .c(rq(3, 12, 5, {"Topics": [{"Name": "second"}]}))
        .s(rs(3, 12, 5, {"Topics": [{"Name": "first", "ErrorCode": 3}]}))
        .s(rs(3, 12, 5, {"Topics": [{"Name": "second", "ErrorCode": 0}]}))
    )
    out = conv.run()
    assert [x.type for x in out] == ["exchange", "exchange"]
    a, b = out
    assert (a.request["Topics"][0]["Name"], a.response["Topics"][0]["Name"]) == ("first", "first")
    assert (b.request["Topics"][0]["Name"], b.response["Topics"][0]["Name"]) == ("second", "second")
    assert (a.api_name, a.api_version, a.correlation_id, a.client_id, a.status) == ("Metadata", 12, 5, "tester", "ok")
    assert a.error_codes == [3] and b.error_codes == []
    assert a.latency_ms == 2.0 and a.client == "10.0.0.1:40000" and a.broker == "10.0.0.2:9092"
    assert a.request_size == len(conv.events[1].data) - 4


def test_acks_zero_produce_expects_no_response():
    body = {
        "Acks": 0,
        "TimeoutMs": 1000,
        "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": None}]}],
    }
    out = Conv().c(rq(0, 9, 7, body)).c(rq(18, 3, 8)).s(rs(18, 3, 8)).run()
    assert [(x.api_name, x.correlation_id, x.status, x.response) for x in out][:1] == [("Produce", 7, "ok", None)]
    assert [(x.api_name, x.status) for x in out] == [("Produce", "ok"), ("ApiVersions", "ok")]


def test_unanswered_orphan_and_undecodable():
    out = (
        Conv()
        .s(rs(3, 12, 99))  # answer to a request not in the capture
        .c(rq(18, 3, 1))
        .c(rq(3, 12, 2))
        .c(protocol.with_size(b"\x03\xe8\0\0\0\0\0\x03\0\x06tester\x01\x02"))
        .s(protocol.with_size(b"\0\0\0\x01" + b"\xff" * 7))  # ApiVersions answer that does not decode
        .run()
    )
    by_corr = {x.correlation_id: x for x in exchanges(out)}
    assert by_corr[99].status == "orphan_response" and by_corr[99].request is None
    assert bytes(by_corr[99].response["_raw_body"]) == rs(3, 12, 99)[8:]
    assert by_corr[1].status == "undecodable" and "ApiVersions v3 response" in by_corr[1].response["_decode_error"]
    assert by_corr[2].status == "unanswered" and by_corr[2].api_name == "Metadata"
    assert by_corr[3].status == "unanswered" and by_corr[3].api_key == 1000
    assert "_decode_error" in by_corr[3].request and by_corr[3].client_id == "tester"


def test_error_codes_anywhere_with_repeats():
    body = {
        "Responses": [
            {
                "Name": "t",
                "PartitionResponses": [
                    {"Index": 0, "ErrorCode": 6},
                    {"Index": 1, "ErrorCode": 6},
                    {"Index": 2, "ErrorCode": 0},
                ],
            }
        ]
    }
    out = Conv().c(rq(0, 9, 1, {"Acks": -1})).s(rs(0, 9, 1, body)).run()
    assert out[0].error_codes == [6, 6]
    create = {"Topics": [{"Name": "a", "ErrorCode": 36, "TopicConfigErrorCode": 41}]}
    out = Conv().c(rq(19, 7, 1)).s(rs(19, 7, 1, create)).run()
    assert out[0].error_codes == [36, 41]


def test_topic_ids_resolved_from_an_earlier_metadata_response():
    meta = {"Topics": [{"Name": "orders", "TopicId": TOPIC_ID, "Partitions": []}]}
    fetch = {"Topics": [{"TopicId": TOPIC_ID, "Partitions": [{"Partition": 0, "FetchOffset": 0}]}]}
    fetch_resp = {
        "Responses": [
            {"TopicId": TOPIC_ID, "Partitions": [{"PartitionIndex": 0, "Records": None}]},
            {"TopicId": uuid.UUID(int=7), "Partitions": []},
        ]
    }
    out = Conv().c(rq(3, 12, 1)).s(rs(3, 12, 1, meta)).c(rq(1, 13, 2, fetch)).s(rs(1, 13, 2, fetch_resp)).run()
    f = out[1]
    assert list(f.request["Topics"][0])[:2] == ["TopicId", "TopicName"]
    assert f.request["Topics"][0]["TopicName"] == "orders"
    assert [t["TopicName"] for t in f.response["Responses"]] == ["orders", None]
    assert to_json(f)["request"]["Topics"][0]["TopicId"] == str(TOPIC_ID)


def test_kafka_on_another_port_is_found_and_other_traffic_ignored():
    broker = ("10.0.0.2", 29092)
    out = Conv(server=broker).c(rq(18, 3, 1)).s(rs(18, 3, 1)).run()
    assert [(x.api_name, x.broker) for x in out] == [("ApiVersions", "10.0.0.2:29092")]
    http = Conv(server=("10.0.0.2", 8080)).c(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").s(b"HTTP/1.1 200 OK\r\n\r\n").run()
    assert http == []
    # no SYN, unknown port: the side that sends a plausible request is the client, even if the broker speaks first
    conv = Conv(server=broker, syn=False).s(rs(3, 12, 4)).c(rq(3, 12, 5)).s(rs(3, 12, 5))
    out = conv.run()
    # (orphans are only known for sure when the connection closes: a late request could still claim them)
    assert [(x.status, x.correlation_id, x.client) for x in out] == [
        ("ok", 5, "10.0.0.1:40000"),
        ("orphan_response", 4, "10.0.0.1:40000"),
    ]
    # with --port the role comes from the port
    assert [x.status for x in Conv(server=broker, syn=False).c(rq(3, 12, 5)).s(rs(3, 12, 5)).run(ports=[29092])] == [
        "ok"
    ]


def test_gap_inside_a_response_and_inside_a_request():
    big = rs(3, 12, 2, {"Topics": [{"Name": "x" * 200}]})
    conv = Conv().c(rq(3, 12, 2)).s(big[:50]).gap("s", 100).s(big[150:])
    conv.c(rq(18, 3, 3)).s(rs(18, 3, 3))
    out = conv.run()
    lost = [x for x in out if x.type == "exchange" and x.correlation_id == 2][0]
    assert lost.status == "undecodable" and lost.response["_decode_error"] == "response lost in a capture gap"
    assert [a.kind for a in out if a.type == "anomaly"] == ["gap_in_frame"]
    assert "correlation id 2" in [a.detail for a in out if a.type == "anomaly"][0]
    assert [x.status for x in out if x.type == "exchange" and x.correlation_id == 3] == ["ok"]
    # a request cut by a gap still pairs with its answer, which decodes with the api/version from its header
    big_req = rq(3, 12, 9, {"Topics": [{"Name": "y" * 300}]})
    out = Conv().c(big_req[:40]).gap("c", 200).c(big_req[240:]).s(rs(3, 12, 9, {"Topics": [{"Name": "z"}]})).run()
    ex = exchanges(out)
    assert len(ex) == 1 and ex[0].status == "undecodable" and ex[0].response["Topics"][0]["Name"] == "z"
    assert ex[0].request == {"_decode_error": "request lost in a capture gap"}


def _sasl_v0(token: bytes, **kw):
    conv = (
        Conv()
        .c(rq(17, 0, 1, {"Mechanism": "PLAIN"}))
        .s(rs(17, 0, 1, {"ErrorCode": 0, "Mechanisms": ["PLAIN"]}))
        .c(protocol.with_size(token))
        .s(protocol.with_size(b""))
        .c(rq(18, 3, 2))
        .s(rs(18, 3, 2))
    )
    return conv.run(**kw)


def test_sasl_handshake_v0_raw_tokens_are_recognised_and_redacted():
    out = _sasl_v0(b"\0alice\0s3cret-pw")
    assert [x.type for x in out] == ["exchange"] * 3
    hs, token, after = out
    assert (hs.api_name, token.api_name, after.api_name) == ("SaslHandshake", "SaslToken", "ApiVersions")
    assert token.status == "ok" and token.request == {"token": b"\0alice\0<redacted>"}
    assert b"s3cret" not in token.request_raw and token.request_raw.endswith(b"*" * 9)
    j = to_json(token, raw=True)
    assert j["request"]["token"] == "\0alice\0<redacted>"
    assert b"s3cret".hex() not in j["request_raw"]
    shown = _sasl_v0(b"\0alice\0s3cret-pw", secrets=True)[1]
    assert shown.request == {"token": b"\0alice\0s3cret-pw"}


def test_sasl_authenticate_scram_and_oauth_are_redacted():
    final = b"c=biws,r=nonce123,p=UHJvb2ZQcm9vZg=="
    sig = b"v=U2lnbmF0dXJl"
    conv = (
        Conv()
        .c(rq(36, 2, 1, {"AuthBytes": final}))
        .s(rs(36, 2, 1, {"ErrorCode": 0, "AuthBytes": sig}))
        .c(rq(36, 2, 2, {"AuthBytes": b"n,,\x01auth=Bearer eyJhbGciOi.xyz\x01\x01"}))
        .s(rs(36, 2, 2))
    )
    a, b = conv.run()
    assert bytes(a.request["AuthBytes"]) == b"c=biws,r=nonce123,p=<redacted>"
    assert bytes(a.response["AuthBytes"]) == b"v=<redacted>"
    assert b"UHJvb2ZQcm9vZg==" not in a.request_raw and b"U2lnbmF0dXJl" not in a.response_raw
    assert protocol.decode_request(a.request_raw).correlation_id == 1  # still a well-formed frame
    assert bytes(b.request["AuthBytes"]) == b"n,,\x01auth=Bearer <redacted>\x01\x01"
    assert b"eyJhbGciOi" not in b.request_raw
    plain = (
        Conv()
        .c(rq(17, 1, 1, {"Mechanism": "PLAIN"}))
        .s(rs(17, 1, 1, {"Mechanisms": ["PLAIN"]}))
        .c(rq(36, 2, 2, {"AuthBytes": b"admin\0alice\0pa55word"}))
        .s(rs(36, 2, 2, {"AuthBytes": b""}))
        .run()
    )
    assert [x.api_name for x in plain] == ["SaslHandshake", "SaslAuthenticate"]
    assert bytes(plain[1].request["AuthBytes"]) == b"admin\0alice\0<redacted>"
    assert b"pa55word" not in plain[1].request_raw and plain[1].request_raw.endswith(b"alice\0" + b"*" * 8 + b"\0")


def test_delegation_token_hmacs_are_redacted():
    body = {
        "ErrorCode": 0,
        "PrincipalType": "User",
        "PrincipalName": "bob",
        "TokenId": "tok-123",
        "Hmac": b"\x01\x02secret-hmac",
    }
    conv = Conv().c(rq(38, 2, 1)).s(rs(38, 2, 1, body)).c(rq(39, 2, 2, {"Hmac": b"secret-hmac"})).s(rs(39, 2, 2))
    create, renew = conv.run()
    assert create.response["TokenId"] == "<redacted>" and create.response["Hmac"] == b"<redacted>"
    assert b"secret-hmac" not in create.response_raw and b"tok-123" not in create.response_raw
    assert renew.request["Hmac"] == b"<redacted>" and b"secret-hmac" not in renew.request_raw


def test_resync_is_not_fooled_by_a_correlation_id_inside_data():
    fake = "\x00\x00\x00\x10\x00\x00\x00\x03" + "\x00" * 16  # [size 16][correlation id 3] inside a topic name
    big = rs(3, 12, 2, {"Topics": [{"Name": "a" * 100 + fake + "b" * 100}]})
    answer = rs(18, 3, 3, {"ErrorCode": 0, "ApiKeys": [{"ApiKey": 0, "MinVersion": 0, "MaxVersion": 9}]})
    conv = Conv().c(rq(3, 12, 2)).c(rq(18, 3, 3)).s(big[:60]).gap("s", 0).s(big[90:] + answer)
    out = conv.run()
    ex = {x.correlation_id: x for x in exchanges(out)}
    assert ex[2].status == "undecodable" and ex[2].response == {"_decode_error": "response lost in a capture gap"}
    assert ex[3].status == "ok" and ex[3].response["ApiKeys"][0]["MaxVersion"] == 9
    resync = [a for a in out if a.type == "anomaly" and a.kind == "resync"]
    # the gap's size is unknown (0), so stream offsets after it run 30 bytes short
    assert len(resync) == 1 and f"skipped {len(big) - 90} bytes after gap" in resync[0].detail


def test_outstanding_requests_are_bounded():
    conv = Conv()
    for corr in range(1, 8):
        conv.c(rq(18, 3, corr))
    conv.s(rs(18, 3, 6))
    ex = Exchanges(max_pending=4)
    out = []
    for e in conv.events + [Close(0, conv.t + 1, "fin")]:
        out += ex.feed(e)
    got = [(x.correlation_id, x.status) if x.type == "exchange" else x.kind for x in out]
    assert got == [
        (1, "unanswered"),
        "too_many_outstanding",
        (2, "unanswered"),
        "too_many_outstanding",
        (3, "unanswered"),
        "too_many_outstanding",
        (6, "ok"),
        (4, "unanswered"),
        (5, "unanswered"),
        (7, "unanswered"),
    ]


def test_response_cut_off_at_the_end_of_the_capture():
    big = rs(3, 12, 4, {"Topics": [{"Name": "q" * 100}]})
    out = Conv().c(rq(3, 12, 4)).s(big[:50]).run(close=False)
    assert [(x.type, getattr(x, "kind", None) or x.status) for x in out] == [
        ("exchange", "undecodable"),
        ("anomaly", "truncated_frame"),
    ]
    ex = exchanges(out)[0]
    assert ex.correlation_id == 4 and ex.response == {"_decode_error": "response cut off where the capture ends"}


def test_syn_on_unknown_port_accepts_any_version_of_a_known_api():
    # clients open with ApiVersions at versions newer than the broker (or the registry) knows
    broker = ("10.0.0.2", 36659)
    v99 = protocol.with_size(b"\x00\x12\x00\x63\x00\x00\x00\x01\x00\x04test\x00")
    out = Conv(server=broker).c(v99).s(rs(18, 3, 1, {"ErrorCode": 0})).c(rq(3, 12, 2)).s(rs(3, 12, 2)).run()
    assert [(x.api_name, x.api_version, x.broker) for x in out] == [
        ("ApiVersions", 99, "10.0.0.2:36659"),
        ("Metadata", 12, "10.0.0.2:36659"),
    ]
    # without a SYN the first frame must decode, so a v99 opener alone does not make a connection Kafka
    assert Conv(server=broker, syn=False).c(v99).run() == []


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_chunk = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [rq(18, 3, 1), rs(18, 3, 1), rq(3, 12, 2), rs(3, 12, 2), b"\0\0\0\x04\0\0\0\x02", b"\x7f\xff\xff\xff"]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.lists(st.tuples(st.sampled_from("csg"), _chunk, st.integers(0, 40)), max_size=30))
def test_garbage_never_raises(syn, steps):
    conv = Conv(syn=syn)
    for side, data, n in steps:
        if side == "g":
            conv.gap("c" if n % 2 else "s", n)
        elif side == "c":
            conv.c(data)
        else:
            conv.s(data)
    out = conv.run()
    for x in out:
        assert x.type in ("exchange", "anomaly")
        if x.type == "exchange":
            assert x.status in ("ok", "unanswered", "orphan_response", "undecodable")
        json.dumps(to_json(x, raw=True))
        assert format_text(x)


def test_answer_delivered_before_its_late_request_still_pairs():
    # the client's direction stalled on a lost segment, so TCP hands over the answers first
    conv = Conv()
    req3, req4 = rq(3, 12, 3), rq(18, 3, 4)
    conv.events.append(Data(0, S, C, 100.5, rs(3, 12, 3)))
    conv.events.append(Data(0, S, C, 100.6, rs(18, 3, 4)))
    conv.events.append(Data(0, C, S, 100.2, req3))  # request times are when they were sent
    conv.events.append(Data(0, C, S, 100.3, req4))
    conv.events.append(Data(0, S, C, 100.7, rs(3, 12, 9)))  # no request ever: an orphan at close
    conv.events.append(Data(0, C, S, 100.8, rq(3, 12, 10)))
    out = conv.run()
    got = [(x.correlation_id, x.status, x.latency_ms) for x in exchanges(out)]
    assert got == [(3, "ok", 300.0), (4, "ok", 300.0), (9, "orphan_response", None), (10, "unanswered", None)]


def test_no_syn_broker_speaks_first_with_a_request_shaped_answer():
    # A Fetch v12 answer to correlation id 5 starts 00 00 00 05 00 ...: read as a request header
    # that is Produce v5 with a sane client id. Only decoding the whole frame tells them apart.
    records = b"\x00" * 2000
    answer = rs(1, 12, 5, {"Responses": [{"Topic": "t", "Partitions": [{"PartitionIndex": 0, "Records": records}]}]})
    broker = ("10.0.0.2", 36377)
    out = Conv(server=broker, syn=False).s(answer).c(rq(1, 12, 6)).s(rs(1, 12, 6)).run()
    assert [(x.status, x.correlation_id, x.broker) for x in out] == [
        ("ok", 6, "10.0.0.2:36377"),
        ("orphan_response", 5, "10.0.0.2:36377"),
    ]


def test_lost_segments_in_a_busy_connection_cost_only_the_frames_they_hit():
    records = bytes(range(256)) * 20  # 5 KB of record data per request: 4 segments each
    conv = Conv()
    stream = b"".join(
        rq(0, 9, corr, {"Acks": -1, "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": records}]}]})
        for corr in range(1, 41)
    )
    answers = b"".join(
        rs(0, 9, corr, {"Responses": [{"Name": "t", "PartitionResponses": [{"Index": 0, "ErrorCode": 0}]}]})
        for corr in range(1, 41)
    )
    lost = {7, 30, 31, 77, 120}  # segment numbers never captured (31 right after 30: a longer hole)
    for n, at in enumerate(range(0, len(stream), 1448)):
        if n in lost:
            conv.gap("c", len(stream[at : at + 1448]))
        else:
            conv.c(stream[at : at + 1448])
    conv.s(answers[:700]).gap("s", 100).s(answers[800:])
    out = conv.run()
    ex = exchanges(out)
    # segment 7 ends request 2 and starts request 3 (whose header is lost: its answer is an orphan);
    # 30+31 hit request 9, 77 request 22, 120 request 34; the broker's hole hits answers 14, 15, 16
    assert Counter(x.status for x in ex) == {"ok": 32, "undecodable": 7, "orphan_response": 1}
    assert sorted(x.correlation_id for x in ex if x.status == "undecodable") == [2, 9, 14, 15, 16, 22, 34]
    assert [x.correlation_id for x in ex if x.status == "orphan_response"] == [3]
    assert sorted(x.correlation_id for x in ex) == list(range(1, 41))


# -- real clients' quirks: findings, not failures ----------------------------------


def test_trailing_bytes_after_a_request_are_a_finding_not_a_failure():
    # librdkafka has been seen sending a Metadata v12 request with bytes after its last field
    req = rq(
        3,
        12,
        4,
        {"Topics": [{"Name": "orders", "TopicId": uuid.UUID(int=0)}], "AllowAutoTopicCreation": False},
        client_id="rdkafka",
    )
    out = (
        Conv()
        .c(protocol.with_size(req[4:] + b"\0\0\0"))
        .s(rs(3, 12, 4, {"Topics": [{"Name": "orders", "ErrorCode": 3}]}))
        .run()
    )
    (ex,) = exchanges(out)
    assert (ex.status, ex.api_name, ex.api_version, ex.flags) == ("ok", "Metadata", 12, ("trailing_bytes",))
    assert ex.request["Topics"][0]["Name"] == "orders" and ex.request["AllowAutoTopicCreation"] is False
    assert ex.error_codes == [3] and ex.response_version == 12
    (an,) = [x for x in out if x.type == "anomaly"]
    assert an.kind == "trailing_bytes" and an.connection == 0
    assert (
        an.detail
        == "client: Metadata v12 request correlation id 4 (client id 'rdkafka'): 3 bytes left over after the last field"
    )
    assert to_json(ex)["flags"] == ["trailing_bytes"] and format_text(ex).endswith("flags=trailing_bytes")


def test_trailing_bytes_after_a_response():
    out = Conv().c(rq(18, 3, 1)).s(protocol.with_size(rs(18, 3, 1)[4:] + b"\x07")).run()
    (ex,) = exchanges(out)
    assert (ex.status, ex.flags, ex.response["ErrorCode"]) == ("ok", ("trailing_bytes",), 0)
    (an,) = [x for x in out if x.type == "anomaly"]
    assert an.kind == "trailing_bytes" and "ApiVersions v3 response correlation id 1" in an.detail
    assert "1 bytes left over" in an.detail


def test_response_in_another_version_is_decoded_as_that_version():
    v12_body = {
        "ThrottleTimeMs": 0,
        "Brokers": [{"NodeId": 1, "Host": "b1", "Port": 9092}],
        "ClusterId": "c",
        "ControllerId": 1,
        "Topics": [{"Name": "t", "ErrorCode": 3, "TopicId": TOPIC_ID}],
    }
    out = Conv().c(rq(3, 13, 9)).s(rs(3, 12, 9, v12_body)).run()
    (ex,) = exchanges(out)
    assert (ex.status, ex.api_version, ex.response_version, ex.flags) == ("ok", 13, 12, ("version_mismatch",))
    assert ex.response["Brokers"][0]["Host"] == "b1" and ex.error_codes == [3]
    (an,) = [x for x in out if x.type == "anomaly"]
    assert an.kind == "version_mismatch" and "Metadata v13 response correlation id 9" in an.detail
    assert "decodes only as v12" in an.detail
    assert to_json(ex)["response_version"] == 12


def test_a_body_that_fits_no_version_is_still_undecodable():
    out = Conv().c(rq(3, 12, 2)).s(protocol.with_size(b"\0\0\0\x02\0" + b"\xff" * 9)).run()
    (ex,) = exchanges(out)
    assert ex.status == "undecodable" and ex.flags == () and ex.response_version is None
    assert "Metadata v12 response" in ex.response["_decode_error"]
