"""Payloads inside bytes fields, decoded by the native core (native/py/src/nested.rs), held to
decoders that share no code with it: kio's (Rust-backed, generated from the same specs by other
people), kafka-python's own consumer-protocol classes, and, for Envelope, the broker itself (the
answer it forwards to the client is the one the controller put in the Envelope).

The frozen Python oracle (tests/oracle/nested.py) is compared item by item in
tests/test_native_dissect.py; here the values themselves are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kio.schema.index import schema_name_map

from dissector import dissect
from protocol import registry
from tests.kio_compat import diff, kio_class, kio_decode, message_target, other_targets
from landing.writer import dataset

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted((ROOT.parent / "shared" / "pcaps").glob("*.pcap"))
ENVELOPE = ROOT / "samples" / "envelope-ak.pcap"
DATA_TYPES = {
    "MetadataDecoded": "ConsumerProtocolSubscription",
    "MemberMetadataDecoded": "ConsumerProtocolSubscription",
}
DATA_TYPES |= {
    "AssignmentDecoded": "ConsumerProtocolAssignment",
    "MemberAssignmentDecoded": "ConsumerProtocolAssignment",
}
KIO_DATA = {t.label: t for t in other_targets()}


def _decoded(obj, path=""):
    """(path, field name, raw bytes, decoded value) of every `<Field>Decoded` under obj."""
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _decoded(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("Decoded"):
                yield f"{path}.{k}", k, obj[k[: -len("Decoded")]], v
            else:
                yield from _decoded(v, f"{path}.{k}")


def _exchanges(paths, **kw):
    return [x for x in dissect(paths, **kw) if x.type == "exchange"]


def _kio_data(name: str, version: int):
    """kio's class for a data type at the newest version it has up to `version`."""
    have = sorted(v for v in schema_name_map[_snake(name)] if v <= version)
    return KIO_DATA[f"{name} v{have[-1]}"]


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


@pytest.mark.parametrize("pcap", SAMPLES + SHARED, ids=lambda p: p.name)
def test_consumer_protocol_payloads_equal_kio_and_kafka_python(pcap):
    """Every decoded Subscription and Assignment in the capture, against kio and kafka-python."""
    seen = 0
    for x in _exchanges([pcap]):
        for body in (x.request, x.response):
            for where, key, raw, value in _decoded(body):
                if key not in DATA_TYPES:
                    continue
                name = DATA_TYPES[key]
                raw = bytes(raw)
                if "_error" in value:
                    assert len(raw) < 2, (x.api_name, where, value)  # the one kind of bad payload the samples hold
                    continue
                seen += 1
                target = _kio_data(name, value["Version"])
                entity, end = kio_decode(target.kio_cls, raw, 2)
                assert end == len(raw)
                mine = {k: v for k, v in value.items() if k != "Version"}
                assert diff(entity, mine, target.fields, target.version, target.flexible) == [], (x.api_name, where)
                theirs = (
                    ConsumerProtocolSubscription if "Subscription" in name else ConsumerProtocolAssignment
                ).decode(raw)
                assert theirs.version == value["Version"]
                if "Subscription" in name:
                    assert list(theirs.topics) == list(value["Topics"])
                else:
                    got = [(t["Topic"], list(t["Partitions"])) for t in value["AssignedPartitions"]]
                    assert got == [(t.topic, list(t.partitions)) for t in theirs.assigned_partitions]
    groups = {"kafka-python-ak.pcap", "kafka-python-basic.pcap", "aiokafka.pcap", "confluent-codecs.pcap"}
    if pcap.name in groups | {"kpy_basic.pcap", "ck_compression.pcap"}:
        assert seen >= 3, f"{pcap.name}: only {seen} consumer-protocol payloads decoded"


def test_a_rebalance_read_by_hand():
    """kafka-python-ak.pcap's one consumer, as its workload made it: subscribed to kpy-plain and
    kpy-gzip, leader of generation 1, given partition 0 of each (both have one partition)."""
    xs = {(x.api_name, x.correlation_id): x for x in _exchanges([ROOT / "samples" / "kafka-python-ak.pcap"])}
    join = xs[("JoinGroup", 4)]
    sub = join.request["Protocols"][0]["MetadataDecoded"]
    assert sub["Version"] == 0 and sorted(sub["Topics"]) == ["kpy-gzip", "kpy-plain"]
    (member,) = join.response["Members"]
    assert member["MemberId"] == join.response["Leader"] == join.response["MemberId"]
    assert sorted(member["MetadataDecoded"]["Topics"]) == ["kpy-gzip", "kpy-plain"]
    sync = xs[("SyncGroup", 5)]
    assert sync.request["GenerationId"] == join.response["GenerationId"] == 1
    (given,) = sync.request["Assignments"]
    for asg in (given["AssignmentDecoded"], sync.response["AssignmentDecoded"]):
        assert [(t["Topic"], list(t["Partitions"])) for t in asg["AssignedPartitions"]] == [
            ("kpy-gzip", [0]),
            ("kpy-plain", [0]),
        ]
    text = _run("dissect", ROOT / "samples" / "kafka-python-ak.pcap")
    assert [ln.split()[-1] for ln in text.splitlines() if "SyncGroup v5" in ln] == ["assigned=2"]
    assert [ln.split()[-1] for ln in text.splitlines() if "JoinGroup v7" in ln and "corr=4 " in ln] == ["members=1"]


def test_other_protocol_types_keep_their_bytes(tmp_path):
    """A JoinGroup whose protocol type is not `consumer` (Connect's, say) is left as bytes."""
    import struct

    from tests.pcapgen import Flow, write_pcap

    def s16(v: str) -> bytes:
        return struct.pack(">h", len(v)) + v.encode()

    meta = bytes.fromhex("0000000000010003616263ffffffff")  # a consumer Subscription, under type connect
    body = s16("g") + struct.pack(">ii", 10000, 10000) + s16("") + s16("connect")
    body += struct.pack(">i", 1) + s16("default") + struct.pack(">i", len(meta)) + meta
    req = struct.pack(">hhi", 11, 2, 7) + s16("w") + body
    resp = struct.pack(">ii", 7, 0) + struct.pack(">hi", 0, 1) + s16("default") + s16("m") + s16("m")
    resp += struct.pack(">i", 1) + s16("m") + struct.pack(">i", len(meta)) + meta
    f = Flow()
    pkts = f.handshake() + [
        f.send("c", struct.pack(">i", len(req)) + req),
        f.send("s", struct.pack(">i", len(resp)) + resp),
    ]
    path = write_pcap(tmp_path / "connect.pcap", pkts)
    (x,) = _exchanges([path])
    assert x.api_name == "JoinGroup" and x.status == "ok", x
    assert bytes(x.request["Protocols"][0]["Metadata"]) == meta
    assert list(_decoded(x.request)) == [] and list(_decoded(x.response)) == []


def _run(*args) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "kafkawire", *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_envelopes_from_a_real_broker():
    """envelope-ak.pcap: a broker forwarding a client's admin requests to its controller. Each
    Envelope's inner request agrees with kio and with the client's own request; the inner answer
    equals what the broker then sent the client."""
    xs = _exchanges([ENVELOPE], show_secrets=True)
    envelopes = [x for x in xs if x.api_name == "Envelope"]
    inner = [e.request["RequestDataDecoded"] for e in envelopes]
    assert [registry.api_name(i["api_key"]) for i in inner] == [
        "CreateTopics",
        "IncrementalAlterConfigs",
        "AlterUserScramCredentials",
        "CreatePartitions",
        "DeleteTopics",
    ]
    clients = {x.api_name: x for x in xs if x.client_id == "kw-envelope"}
    for env, i in zip(envelopes, inner, strict=True):
        name = registry.api_name(i["api_key"])
        assert i["header"]["ClientId"] == "kw-envelope"
        assert env.request["RequestPrincipalDecoded"] == {
            "Version": 0,
            "Type": "User",
            "Name": "ANONYMOUS",
            "TokenAuthenticated": False,
        }
        for direction, part in (("request", i), ("response", env.response["ResponseDataDecoded"])):
            t = message_target(part["api_key"], part["api_version"], direction)
            entity, _ = kio_decode(t.kio_cls, _body_bytes(env, direction), 0)
            assert diff(entity, part["body"], t.fields, t.version, t.flexible) == [], (name, direction)
        client = clients[name]
        assert client.api_version == i["api_version"]
        assert _plain(env.response["ResponseDataDecoded"]["body"]) == _plain(client.response), name
        if name != "AlterUserScramCredentials":  # librdkafka's has a byte too many, which the broker drops
            assert _plain(i["body"]) == _plain(client.request), name


def _body_bytes(env, direction: str) -> bytes:
    """The inner message's body bytes: its frame after its header (kio decodes bodies)."""
    import protocol

    if direction == "request":
        raw = bytes(env.request["RequestData"])
        _, pos = protocol.decode_request_header(raw)
    else:
        raw = bytes(env.response["ResponseData"])
        i = env.request["RequestDataDecoded"]
        _, pos = protocol.decode_response_header(raw, i["api_key"], i["api_version"])
    return raw[pos:]


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def test_secrets_inside_an_envelope_are_redacted_everywhere(tmp_path):
    """carol's salt and salted password travel in the AlterUserScramCredentials an Envelope
    carries: blanked in the decoded inner body, starred in RequestData and the raw frame, and
    absent from the landed tables; --show-secrets shows them."""
    shown = [x for x in _exchanges([ENVELOPE], show_secrets=True) if x.api_name == "Envelope"]
    (scram,) = [x for x in shown if x.request["RequestDataDecoded"]["api_key"] == 51]
    (up,) = scram.request["RequestDataDecoded"]["body"]["Upsertions"]
    assert up["Name"] == "carol" and up["Iterations"] == 4096
    secrets = [bytes(up["Salt"]), bytes(up["SaltedPassword"])]
    assert all(len(s) >= 16 for s in secrets)
    hexes = [s.hex() for s in secrets]
    assert all(h in _run("dissect", ENVELOPE, "--format", "jsonl", "--show-secrets") for h in hexes)

    jsonl = _run("dissect", ENVELOPE, "--format", "jsonl", "--raw")
    assert not any(h in jsonl for h in hexes)
    (line,) = [json.loads(ln) for ln in jsonl.splitlines() if '"api_key":51,"api_version":0,"header"' in ln]
    (up,) = line["request"]["RequestDataDecoded"]["body"]["Upsertions"]
    assert up["Salt"] == up["SaltedPassword"] == "<redacted>"
    assert "2a" * 32 in line["request"]["RequestData"]["hex"] and "2a" * 32 in line["request_raw"]
    text = _run("dissect", ENVELOPE)
    assert "inner=AlterUserScramCredentials v0" in text

    out = tmp_path / "lake"
    _run("land", ENVELOPE, "--out", out)

    table = dataset(out, "exchanges").to_table().to_pylist()
    cells = json.dumps([{k: str(v) for k, v in r.items()} for r in table])
    assert "RequestDataDecoded" in cells
    assert not any(h in cells for h in hexes)


def test_kio_knows_every_nested_type():
    """The registry's nested types and the versions kio has of them (the kio comparisons above
    would silently test less if a type went missing)."""
    for name in ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "DefaultPrincipalData"):
        assert registry.data_versions(name)
        assert _kio_data(name, registry.data_versions(name)[-1])
    assert kio_class(58, 0, "request")


def test_every_payload_apis_lists_is_decoded_in_the_samples():
    """`kafkawire apis --nested` rows (nested.rs' PAYLOADS) each name a field the samples have
    decoded beside its bytes, and the text table and JSON list the same rows."""
    from dissector.native import nested_payloads

    found = set()
    for x in _exchanges(SAMPLES):
        for direction, body in (("request", x.request), ("response", x.response)):
            for where, _key, _raw, value in _decoded(body):
                if "_error" not in value:
                    path = "".join(c for c in where.replace("Decoded", "") if not c.isdigit()).lstrip(".")
                    found.add((x.api_name, direction, path))
    rows = nested_payloads()
    assert len(rows) == 9
    for _kind, api, direction, field in rows:
        if api == "DescribeGroups":  # the samples' groups are empty when described
            continue
        assert (api, direction, field) in found, (api, direction, field)
    listed = json.loads(_run("apis", "--nested", "--json"))
    assert [(r["api"], r["direction"], r["field"]) for r in listed] == [(a, d, f) for _, a, d, f in rows]
    assert {r["type"]: r["versions"] for r in listed}["ConsumerProtocolAssignment"] == [0, 1, 2, 3]
    assert "RequestPrincipal" in _run("apis", "--nested")


def _one_exchange(tmp_path, req: bytes, resp: bytes) -> Path:
    from tests.pcapgen import Flow, write_pcap

    f = Flow()
    pkts = f.handshake() + [
        f.send("c", len(req).to_bytes(4, "big") + req),
        f.send("s", len(resp).to_bytes(4, "big") + resp),
    ]
    return write_pcap(tmp_path / "one.pcap", pkts)


def test_describe_groups_members_decoded_as_kafka_python_wrote_them(tmp_path):
    """DescribeGroups v5 answering for a stable group: each member's metadata and assignment,
    encoded by kafka-python's own consumer-protocol classes (Subscription v3 with owned
    partitions and a rack, Assignment v1 with user data), read back by the native core."""
    import protocol

    sub = ConsumerProtocolSubscription(
        version=3,
        topics=["orders", "audit"],
        user_data=None,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic="orders", partitions=[0, 2])],
        generation_id=7,
        rack_id="rack-1",
    ).encode()
    asg = ConsumerProtocolAssignment(
        version=1,
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic="orders", partitions=[2, 0])],
        user_data=b"ud",
    ).encode()
    member = {"MemberId": "m-1", "GroupInstanceId": None, "ClientId": "c", "ClientHost": "/10.0.0.1"}
    group = {"ErrorCode": 0, "GroupId": "g", "GroupState": "Stable", "ProtocolType": "consumer"}
    group |= {"ProtocolData": "range", "AuthorizedOperations": -2147483648}
    groups = [
        group | {"Members": [member | {"MemberMetadata": sub, "MemberAssignment": asg}]},
        group
        | {
            "GroupId": "c",
            "ProtocolType": "connect",
            "Members": [member | {"MemberMetadata": sub, "MemberAssignment": asg}],
        },
    ]
    req = protocol.encode_request(
        15, 5, {"CorrelationId": 3, "ClientId": "c"}, {"Groups": ["g", "c"], "IncludeAuthorizedOperations": False}
    )
    resp = protocol.encode_response(15, 5, {"CorrelationId": 3}, {"ThrottleTimeMs": 0, "Groups": groups})
    (x,) = _exchanges([_one_exchange(tmp_path, req, resp)])
    consumer, connect = x.response["Groups"]
    (m,) = consumer["Members"]
    assert m["MemberMetadataDecoded"] == {
        "Version": 3,
        "Topics": ["orders", "audit"],
        "UserData": None,
        "OwnedPartitions": [{"Topic": "orders", "Partitions": (0, 2)}],
        "GenerationId": 7,
        "RackId": "rack-1",
    }
    a = m["MemberAssignmentDecoded"]
    assert a["Version"] == 1 and bytes(a["UserData"]) == b"ud"
    assert [(t["Topic"], tuple(t["Partitions"])) for t in a["AssignedPartitions"]] == [("orders", (2, 0))]
    assert "MemberMetadataDecoded" not in connect["Members"][0]


def test_a_payload_cut_short_says_so_and_the_rest_decodes(tmp_path):
    """A SyncGroup v5 (protocol type consumer) whose assignment stops mid-field: the exchange
    decodes, the assignment gets one `_error`, its bytes stay; the next exchange is unharmed."""
    import protocol

    good = ConsumerProtocolAssignment(
        version=0, assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[0, 1])]
    ).encode()
    cut = good[:-6]
    hdr = {"CorrelationId": 9, "ClientId": "c"}
    body = {"GroupId": "g", "GenerationId": 1, "MemberId": "m", "GroupInstanceId": None}
    body |= {"ProtocolType": "consumer", "ProtocolName": "range", "Assignments": [{"MemberId": "m", "Assignment": cut}]}
    req = protocol.encode_request(14, 5, hdr, body)
    resp = protocol.encode_response(
        14,
        5,
        {"CorrelationId": 9},
        {"ThrottleTimeMs": 0, "ErrorCode": 0, "ProtocolType": "consumer", "ProtocolName": "range", "Assignment": good},
    )
    (x,) = _exchanges([_one_exchange(tmp_path, req, resp)])
    assert x.status == "ok"
    (given,) = x.request["Assignments"]
    assert bytes(given["Assignment"]) == cut
    assert (
        set(given["AssignmentDecoded"]) == {"_error"}
        and "ConsumerProtocolAssignment v0" in given["AssignmentDecoded"]["_error"]
    )
    assert [list(t["Partitions"]) for t in x.response["AssignmentDecoded"]["AssignedPartitions"]] == [[0, 1]]
