"""The native decoder (native/py/src/schema.rs, decode.rs) against its Python twin.

protocol/codec.py's fast path (_fast: the generated decoders of protocol/compiler.py)
is the reference: for every frame the native decoder must accept exactly what it
accepts, give exactly the same objects (types, tuple vs list, dict key order,
memoryviews into the frame), and on a refusal say "short" exactly when the Python
general path's reason says the bytes ran out. The walk (tests/walk_reference.py) must
collect the same errors, learn the same topic names and annotate the same dicts.
"""

from __future__ import annotations

import math
import random
import struct
import uuid
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

_native = pytest.importorskip("dissector._native")

import protocol  # noqa: E402
from tests.lenient_reference import walk_body as _walk_body  # noqa: E402
from protocol import codec, headers, registry  # noqa: E402
from protocol.errors import DecodeError  # noqa: E402
from tests.fuzz.targets import _cases  # noqa: E402
from tests.schema_strategies import struct_value  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PCAPS = sorted(REPO.glob("samples/*.pcap")) + sorted((REPO.parent / "shared" / "pcaps").glob("*.pcap"))

NAT = _native.Registry(nested=False)


# -- strict comparison ----------------------------------------------------------------


def same(a, b, frame=None, path="body"):
    """a (native) is b (Python): same types all the way down, same dict key order."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__} ({a!r} vs {b!r})"
    if type(a) is dict:
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], frame, f"{path}.{k}")
    elif type(a) in (list, tuple):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, frame, f"{path}[{i}]")
    elif type(a) is memoryview:
        assert a.tobytes() == b.tobytes(), f"{path}: {a.tobytes()!r} != {b.tobytes()!r}"
        assert (a.format, a.itemsize, a.readonly, a.ndim) == (b.format, b.itemsize, b.readonly, b.ndim), path
        if frame is not None:
            assert a.obj is frame and b.obj is frame, f"{path}: not a view of the frame"
    elif type(a) is float:
        assert struct.pack(">d", a) == struct.pack(">d", b) or (math.isnan(a) and math.isnan(b)), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


# -- one frame, both decoders ------------------------------------------------------------


def python_reason(frame: bytes, key: int, version: int, direction: str) -> str:
    try:
        if direction == "request":
            protocol.decode_request(frame)
        else:
            protocol.decode_response(frame, key, version)
    except DecodeError as e:
        return e.reason
    raise AssertionError("the general path decodes a frame _fast refused")


def python_general(frame: bytes, key: int, version: int, direction: str, lenient: bool):
    """protocol's decode of any frame: its Message, or ("error", its text, whether it is short)."""
    try:
        if direction == "request":
            return protocol.decode_request(frame, lenient=lenient)
        return protocol.decode_response(frame, key, version, lenient=lenient)
    except DecodeError as e:
        return ("error", str(e), "past the end" in e.reason or "ends in the middle" in e.reason)


def check_general(frame: bytes, key: int, version: int, direction: str) -> None:
    """The core's general path (lenient.rs) == protocol's decoder, strict and lenient: the same
    body, versions, trailing bytes and mismatch, or the same error text word for word."""
    for lenient in (False, True):
        want = python_general(frame, key, version, direction, lenient)
        got = NAT.general(frame, None if direction == "request" else key, version, lenient)
        where = f"{key} v{version} {direction} lenient={lenient} on {frame.hex()}"
        if type(want) is tuple:
            assert got == want, where
            continue
        assert got[0] != "error", f"{where}: native {got!r}"
        body, *rest = got
        same(body, want.body, frame)
        expected = (want.api_key, want.api_version, want.correlation_id, want.client_id, want.body_version)
        assert tuple(rest) == (*expected, len(want.trailing), want.version_mismatch), where


def check(frame: bytes, key: int, version: int, direction: str):
    """Native == Python for one frame; returns the Python Message (or None)."""
    check_general(frame, key, version, direction)
    if direction == "request":
        got = NAT.decode_request(frame)
        if len(frame) < 8:
            assert got == "other"
            return None
        key, version = struct.unpack_from(">hh", frame)
    else:
        got = NAT.decode_response(frame, key, version)
    if codec._plan(key, version, direction) is None:
        assert got == "noplan", (key, version, direction, got)
        return None
    msg = codec._fast(frame, key, version, direction)
    if msg is None:
        reason = python_reason(frame, key, version, direction)
        want = "short" if ("past the end" in reason or "ends in the middle" in reason) else "other"
        assert got == want, f"{key} v{version} {direction}: native {got!r}, Python {reason!r} on {frame.hex()}"
        return None
    assert type(got) is tuple, f"{key} v{version} {direction}: native {got!r} on a frame Python decodes: {frame.hex()}"
    body, k, v, corr, client_id = got
    same(body, msg.body, frame)
    assert (k, v, corr, client_id) == (msg.api_key, msg.api_version, msg.correlation_id, msg.client_id)
    return msg


# -- mutations ---------------------------------------------------------------------------

PATTERNS = [
    b"\x00",
    b"\x01",
    b"\x02",
    b"\x40",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00\x40",
    b"\x80\x80\x80\x80\x80\x01",
    b"\xff\xff\xff\xff\x0f",
    b"\x80\x00",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x03\xc3\x28",
    b"\x01\x05\x09",
]


def mutate(frame: bytes, rnd: random.Random) -> bytes:
    b = bytearray(frame)
    op = rnd.randrange(6)
    if op == 0:
        return bytes(b[: rnd.randrange(len(b) + 1)])
    if op == 1 and b:
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if op == 2:
        return bytes(b) + bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
    p = rnd.choice(PATTERNS)
    at = rnd.randrange(len(b) + 1)
    if op == 3:
        b[at : at + len(p)] = p
    elif op == 4:
        b[at:at] = p
    else:
        del b[at : at + rnd.randint(1, 3)]
    return bytes(b)


# -- generated values, every case -----------------------------------------------------------

CASES = _cases()
BY_KEY: dict[int, list] = {}
for _k, _v, _d in CASES:
    BY_KEY.setdefault(_k, []).append((_v, _d))


@cache
def body_strategy(key: int, version: int, direction: str):
    seg = registry.schema(key, version, direction)
    return struct_value(seg["fields"], version, registry.is_flexible(key, version, direction))


def header_strategy(key: int, version: int, direction: str):
    corr = st.integers(-(1 << 31), (1 << 31) - 1)
    if direction == "response":
        return st.fixed_dictionaries({"CorrelationId": corr})
    optional = {}
    if headers.request_header_version(key, version) == 2:
        optional["_unknown_tagged_fields"] = st.dictionaries(
            st.integers(0, 300), st.binary(max_size=4), min_size=1, max_size=2
        )
    return st.fixed_dictionaries(
        {"CorrelationId": corr, "ClientId": st.one_of(st.none(), st.text(max_size=6))}, optional=optional
    )


def encode(key: int, version: int, direction: str, hdr: dict, body: dict) -> bytes:
    fn = protocol.encode_request if direction == "request" else protocol.encode_response
    return fn(key, version, hdr, body)


def walk_both(frame: bytes, key: int, version: int, direction: str, py_names: dict, nat_names, generic: bool):
    """Python's _walk_body (or the generic _walk) on Python's body vs the native walk: same
    body after, same errors."""
    from tests.lenient_reference import _walk

    msg = codec._fast(frame, key, version, direction)
    if msg is None:
        return
    body = msg.body
    learn = direction == "response"
    errors: list[int] = []
    if generic:
        _walk(body, errors if learn else None, py_names, learn)
        got = (
            NAT.walk_request(frame, nat_names, True)
            if direction == "request"
            else NAT.walk_response(frame, key, version, nat_names, True)
        )
    else:
        _walk_body(key, version, direction, body, errors if learn else None, py_names)
        got = (
            NAT.walk_request(frame, nat_names)
            if direction == "request"
            else NAT.walk_response(frame, key, version, nat_names)
        )
    assert type(got) is tuple, got
    (nbody, *_), nerrors = got
    same(nbody, body, frame)
    assert nerrors == errors


@pytest.mark.parametrize("api_key", sorted(BY_KEY))
@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_generated_bodies_and_mutations(api_key, data):
    """Every (version, direction) of the key: a generated body, encoded; the frame and
    a few mutations of it decode the same; the walks agree (names carried along)."""
    rnd = random.Random(data.draw(st.integers(0, 1 << 30), label="seed"))
    names = [({}, _native.Names()), ({}, _native.Names())]  # schema walk, generic walk
    for version, direction in BY_KEY[api_key]:
        body = data.draw(body_strategy(api_key, version, direction), label=f"v{version} {direction}")
        hdr = data.draw(header_strategy(api_key, version, direction), label="header")
        frame = encode(api_key, version, direction, hdr, body)
        msg = check(frame, api_key, version, direction)
        if api_key != 18:
            assert msg is not None, f"{api_key} v{version} {direction}: the encoded frame does not decode"
            for generic, (py_names, nat_names) in enumerate(names):
                walk_both(frame, api_key, version, direction, py_names, nat_names, bool(generic))
        for _ in range(5):
            check(mutate(frame, rnd), api_key, version, direction)
    for py_names, nat_names in names:
        assert nat_names.to_dict() == py_names


# -- real captures ------------------------------------------------------------------------


@cache
def capture_frames() -> list[tuple[bytes, int, int, str]]:
    """(frame, api key, version, direction) of every exchange of the captures, in dissect order."""
    from dissector import dissect

    out = []
    for path in PCAPS:
        for it in dissect(path, show_secrets=True):
            if it.type != "exchange" or it.api_key is None:
                continue
            if it.request_raw is not None:
                out.append((bytes(it.request_raw), it.api_key, it.api_version, "request"))
            if it.response_raw is not None:
                out.append((bytes(it.response_raw), it.api_key, it.api_version, "response"))
    return out


def test_captures_decode_alike():
    frames = capture_frames()
    assert len(frames) > 500
    decoded = sum(check(*f) is not None for f in frames)
    assert decoded > 0.7 * len(frames)  # the rest: mostly ApiVersions (no plan)


def test_captures_walk_alike():
    """The captures' bodies walked in order: Python's _walk_body with a dict on every body,
    against the native walk on what the native decoder decodes and Python's _walk_body
    with the native Names on the rest (ApiVersions, lenient decodes) - as the engine mixes them."""

    def decode(frame, key, version, direction):
        if direction == "request":
            return protocol.decode_request(frame, lenient=True)
        return protocol.decode_response(frame, key, version, lenient=True)

    py_names: dict = {}
    nat_names = _native.Names()
    mixed = 0
    for frame, key, version, direction in capture_frames():
        try:
            msg = decode(frame, key, version, direction)
        except DecodeError:
            continue
        mine = decode(frame, key, version, direction).body
        key, version = msg.api_key, msg.body_version
        errors: list[int] = []
        body = msg.body
        _walk_body(key, version, direction, body, errors if direction == "response" else None, py_names)
        got = (
            NAT.walk_request(frame, nat_names)
            if direction == "request"
            else NAT.walk_response(frame, key, version, nat_names)
        )
        if type(got) is tuple:
            (nbody, *_), nerrors = got
            same(nbody, body, frame)
            if direction == "response":
                assert nerrors == errors
        else:
            mixed += 1
            nerrors = []
            _walk_body(key, version, direction, mine, nerrors if direction == "response" else None, nat_names)
            same(mine, body)
            assert nerrors == errors
        assert nat_names.to_dict() == py_names
        assert len(nat_names) == len(py_names)
    assert len(py_names) > 0 and mixed > 0


def test_captures_generic_walk_alike():
    """The generic walk (exchanges.py's _walk, for versions the registry lacks) on the
    captures' bodies: same errors, annotations and names."""
    from tests.lenient_reference import _walk

    py_names: dict = {}
    nat_names = _native.Names()
    for frame, key, version, direction in capture_frames():
        msg = codec._fast(frame, key, version, direction)
        if msg is None:
            continue
        learn = direction == "response"
        errors: list[int] = []
        _walk(msg.body, errors if learn else None, py_names, learn)
        got = (
            NAT.walk_request(frame, nat_names, True)
            if direction == "request"
            else NAT.walk_response(frame, key, version, nat_names, True)
        )
        (nbody, *_), nerrors = got
        same(nbody, msg.body, frame)
        assert nerrors == (errors if learn else [])
    assert nat_names.to_dict() == py_names and py_names


@pytest.mark.slow  # 50 s on 2 cores; test_generated_bodies_and_mutations mutates in the default run
def test_capture_mutations():
    """Per (api key, version, direction) of the captures: truncations at every length of two
    frames, every few patterns written over every byte of one; random mutations of all frames."""
    frames = capture_frames()
    rnd = random.Random(1234)
    by_case: dict = {}
    for f in frames:
        if len(f[0]) <= 400:
            by_case.setdefault(f[1:], []).append(f)
    assert len(by_case) > 60
    for fs in by_case.values():
        for frame, key, version, direction in rnd.sample(fs, min(2, len(fs))):
            for n in range(len(frame) + 1):
                check(frame[:n], key, version, direction)
        frame, key, version, direction = min(fs, key=lambda f: len(f[0]))
        for at in range(len(frame)):
            for p in PATTERNS[at % 3 :: 3]:
                check(frame[:at] + p + frame[at + len(p) :], key, version, direction)
    for frame, key, version, direction in frames:
        for _ in range(10):
            check(mutate(frame, rnd), key, version, direction)


# -- hand-made edge cases ---------------------------------------------------------------------


def _u(i: int) -> uuid.UUID:
    return uuid.UUID(int=i)


def test_tagged_fields():
    """Known tagged fields (in wire order, a repeated tag overwriting), unknown ones kept as
    bytes, and tag sections whose announced sizes lie."""
    key, version = 1, 15  # Fetch v15 request: ClusterId (tag 0), ReplicaState (tag 1)
    body = {
        "ClusterId": "c1",
        "ReplicaState": {"ReplicaId": 3, "ReplicaEpoch": 9},
        "_unknown_tagged_fields": {1000: b"xy", 7: b""},
        "Topics": [],
        "ForgottenTopicsData": [],
    }
    frame = protocol.encode_request(key, version, {"CorrelationId": 1, "ClientId": "c"}, body)
    assert check(frame, key, version, "request") is not None
    # the root's tag section is the frame's tail: rewrite it by hand
    tail = frame.rfind(b"\x04\x00")  # 4 tagged fields, the first with tag 0
    assert tail > 0
    head = frame[:tail]

    def tags(*fields):
        out = bytes([len(fields)])
        for tag, data in fields:
            out += bytes([tag, len(data)]) + data
        return out

    cases = [
        tags((1, b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00"), (0, b"\x03ab"), (0, b"\x02z")),  # repeat
        tags((9, b"a"), (0, b"\x03ab"), (9, b"bc")),  # unknown first, repeated
        tags((0, b"\x03abc")),  # size lies: decoded 3 of 4
        tags((0, b"\x05ab")),  # string runs to the frame's end
        tags((0, b"\x00")),  # a null ClusterId
        tags((0, b"\x03\xc3\x28")),  # bad UTF-8
        tags((1, b"\x00")),  # struct cut short
        bytes([3]) + b"\x00\x01a",  # 3 tags, bytes for 1
        bytes([1, 0, 9]) + b"\x03ab",  # size past the end
        bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),  # count varint too long
        bytes([1, 0x80, 0x00, 0x01, 0x00]),  # tag 0 as a 2-byte varint, size 1
        bytes([0x80, 0x00]),  # zero tags, long form
    ]
    for tail_bytes in cases:
        check(head + tail_bytes, key, version, "request")
        for n in range(len(tail_bytes)):
            check(head + tail_bytes[:n], key, version, "request")


def test_header_versions():
    keys = sorted(registry.API_NAMES) + [-1, 95, 200, 32767]
    for key in keys:
        for version in list(range(-1, 25)) + [100, 32767]:
            assert NAT.request_header_version(key, version) == headers.request_header_version(key, version), (
                key,
                version,
            )
            assert NAT.response_header_version(key, version) == headers.response_header_version(key, version), (
                key,
                version,
            )


def test_header_edge_cases():
    # ControlledShutdown v0: request header v0, no client id
    body = {"BrokerId": 7}
    frame = protocol.encode_request(7, 0, {"CorrelationId": 11}, body)
    msg = check(frame, 7, 0, "request")
    assert msg is not None and msg.header_version == 0
    assert NAT.decode_request(frame)[4] is None
    frame1 = protocol.encode_request(7, 1, {"CorrelationId": 11, "ClientId": "x"}, body)
    assert NAT.decode_request(frame1)[4] == "x"
    # ApiVersions: NoPlan both ways, whatever the version
    for v in (0, 3, 4, 9):
        req = struct.pack(">hhi", 18, v, 1) + b"\x00\x01a\x00"
        assert NAT.decode_request(req) == "noplan"
        assert NAT.decode_response(b"\x00\x00\x00\x01\x00\x00\x00", 18, v) == "noplan"
    # unknown api keys, versions newer than the registry, negative ones
    for key, v in ((200, 0), (-1, 0), (3, 99), (1, 32767), (0, -1)):
        req = struct.pack(">hhih", key, v, 5, -1) + b"\x00" * 8
        assert NAT.decode_request(req) == "noplan"
        assert NAT.decode_response(b"\x00\x00\x00\x05" + b"\x00" * 8, key, v) == "noplan"
    # shorter than a header
    for n in range(8):
        assert NAT.decode_request(bytes(n)) == "other"
    # a null ClientId, and a ClientId that is never compact even in header v2
    for cid in (None, "", "a" * 200):
        f = protocol.encode_request(3, 12, {"CorrelationId": 3, "ClientId": cid}, {"Topics": None})
        assert check(f, 3, 12, "request") is not None
        assert NAT.decode_request(f)[4] == cid


def test_value_quirks():
    """Python's quirks, copied: negative array counts, nulls for non-nullable fields, any
    non-zero bool byte, nullable structs marked by any byte >= 128, compact lengths written long."""
    hdr = (
        struct.pack(">hhih", 3, 4, 9, 1) + b"c"
    )  # Metadata v4 request: Topics (nullable array), AllowAutoTopicCreation
    for count in (b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe", b"\x00\x00\x00\x00"):
        for flag in (b"\x00", b"\x01", b"\x02", b"\xff"):
            check(hdr + count + flag, 3, 4, "request")
    # a non-nullable string given -1
    frame = struct.pack(">hhih", 3, 4, 9, 1) + b"c" + b"\x00\x00\x00\x01" + b"\xff\xff" + b"\x01"
    msg = check(frame, 3, 4, "request")
    assert msg is not None and msg.body["Topics"][0]["Name"] is None
    # compact lengths as non-canonical varints, in a flexible Metadata v12 request
    base = struct.pack(">hhih", 3, 12, 9, 1) + b"c" + b"\x00"
    for topics in (
        b"\x00",
        b"\x01",
        b"\x80\x00",
        b"\x81\x00",
        b"\x82\x00" + b"\x00" * 16 + b"\x02a\x00",
        b"\x02" + b"\x00" * 16 + b"\x80\x00\x00",
        b"\x02" + b"\x00" * 16 + b"\x82\x00a\x00",
    ):
        check(base + topics + b"\x01\x00", 3, 12, "request")
    # nullable structs: every message that has one, its marker byte and its neighbours rewritten
    rnd = random.Random(5)
    for key, version, direction in CASES:
        seg = registry.schema(key, version, direction)
        if not any(_nullable_struct(f, version) for f in seg["fields"]):
            continue
        frame = encode(
            key, version, direction, {"CorrelationId": 1, "ClientId": "x"}, {}
        )  # defaults: nullable structs come out as {} (present)
        for _ in range(30):
            check(mutate(frame, rnd), key, version, direction)
        for at in range(len(frame)):
            for marker in (b"\x7f", b"\x80", b"\xff"):
                check(frame[:at] + marker + frame[at + 1 :], key, version, direction)


def _nullable_struct(f, version) -> bool:
    if (
        f["type"] == "struct"
        and not f.get("array")
        and f.get("nullable")
        and f["nullable"][0] <= version <= f["nullable"][1]
    ):
        return True
    return any(_nullable_struct(g, version) for g in f.get("fields") or ())


def test_names_mapping():
    names = _native.Names()
    a, b = _u(1), _u(2)
    assert len(names) == 0 and names.get(a) is None and names.get(a, "x") == "x" and a not in names
    names[a] = "t1"
    names[b] = "t2"
    names[a] = "t1b"
    assert names.get(a) == "t1b" and names[b] == "t2" and a in names and len(names) == 2
    assert names.items() == [(a, "t1b"), (b, "t2")]
    assert names.get("not a uuid") is None and "x" not in names
    with pytest.raises(KeyError):
        names[_u(3)]
    with pytest.raises(TypeError):
        names["x"] = "y"
    # the topic-id helpers of protocol.topic_ids work on it unchanged
    from protocol.topic_ids import name_topic_ids, with_topic_name

    d = {"TopicId": a, "Partitions": [{"TopicId": b}, {"TopicId": _u(9)}]}
    with_topic_name(d, names)
    assert list(d) == ["TopicId", "TopicName", "Partitions"] and d["TopicName"] == "t1b"
    name_topic_ids(d["Partitions"], names)
    assert d["Partitions"] == [{"TopicId": b, "TopicName": "t2"}, {"TopicId": _u(9), "TopicName": None}]


def test_field_int():
    frame = protocol.encode_request(
        0,
        9,
        {"CorrelationId": 1, "ClientId": "p"},
        {"TransactionalId": None, "Acks": 0, "TimeoutMs": 5, "TopicData": []},
    )
    assert NAT.field_int(frame, "request", 0, 9, "Acks") == 0
    assert NAT.field_int(frame, "request", 0, 9, "TimeoutMs") == 5
    assert NAT.field_int(frame, "request", 0, 9, "TransactionalId") is None
    assert NAT.field_int(frame, "request", 0, 9, "NoSuchField") is None
    resp = protocol.encode_response(17, 0, {"CorrelationId": 1}, {"ErrorCode": 0, "Mechanisms": ["PLAIN"]})
    assert NAT.field_int(resp, "response", 17, 0, "ErrorCode") == 0


def test_faster_than_python():
    """decode + objects of a few real frames: the native decoder must beat the generated ones."""
    import time

    wanted = {(0, "request"), (0, "response"), (1, "request"), (1, "response"), (3, "response")}
    seen = {}
    for frame, key, version, direction in capture_frames():
        if (key, direction) in wanted and (key, direction) not in seen and codec._fast(frame, key, version, direction):
            seen[(key, direction)] = (frame, key, version, direction)
    assert seen

    def python_time(frame, key, version, direction, n):
        t0 = time.perf_counter()
        for _ in range(n):
            codec._fast(frame, key, version, direction)
        return (time.perf_counter() - t0) / n

    for frame, key, version, direction in seen.values():
        NAT.time(frame, direction, key, version, 10)  # plans and caches made outside the timing
        native = min(NAT.time(frame, direction, key, version, 200) for _ in range(3))
        python = min(python_time(frame, key, version, direction, 200) for _ in range(3))
        assert native < python, (key, version, direction, native, python)
