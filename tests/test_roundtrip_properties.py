"""encode -> decode -> encode for every (api key, version, direction) the registry knows."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import registry
from protocol.registry import DATA, MESSAGES, codec, data_codec, header_codec

from .schema_strategies import struct_value

CASES = sorted((k, d, v) for (k, d), segs in MESSAGES.items() for seg in segs for v in seg["versions"])
PROFILE = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _roundtrip(dec, enc, value):
    w = bytearray()
    enc(value, w)
    decoded, end = dec(bytes(w), 0)
    assert end == len(w)
    assert decoded == value
    again = bytearray()
    enc(decoded, again)
    assert again == w


def test_every_message_version_is_covered():
    # 95 API keys, request and response, every version either spec folder defines.
    assert len({k for k, _, _ in CASES}) == 95
    assert len(CASES) == 736


@pytest.mark.parametrize("api_key,direction,version", CASES, ids=lambda x: str(x))
def test_roundtrip(api_key, direction, version):
    seg = registry.schema(api_key, version, direction)
    flexible = registry.is_flexible(api_key, version, direction)
    dec, enc = codec(api_key, version, direction)

    @PROFILE
    @given(struct_value(seg["fields"], version, flexible))
    def check(value):
        _roundtrip(dec, enc, value)

    check()


DATA_CASES = sorted((name, v) for name, segs in DATA.items() for seg in segs for v in seg["versions"])


@pytest.mark.parametrize("name,version", DATA_CASES, ids=lambda x: str(x))
def test_data_roundtrip(name, version):
    seg = next(s for s in DATA[name] if version in s["versions"])
    flex = seg["flexible"]
    flexible = bool(flex and flex[0] <= version <= flex[1])
    dec, enc = data_codec(name, version)

    @PROFILE
    @given(struct_value(seg["fields"], version, flexible))
    def check(value):
        _roundtrip(dec, enc, value)

    check()


@pytest.mark.parametrize(
    "kind,version", [("request", 0), ("request", 1), ("request", 2), ("response", 0), ("response", 1)]
)
def test_header_roundtrip(kind, version):
    seg = registry.HEADERS["RequestHeader" if kind == "request" else "ResponseHeader"][0]
    dec, enc = header_codec(kind, version)

    @PROFILE
    @given(struct_value(seg["fields"], version, version == (2 if kind == "request" else 1)))
    def check(value):
        _roundtrip(dec, enc, value)

    check()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=64), st.sampled_from(CASES))
def test_garbage_raises_only_decode_error(data, case):
    """Any bytes either decode or raise DecodeError: never another exception."""
    from protocol import DecodeError
    from protocol.codec import decode_body

    api_key, direction, version = case
    try:
        decode_body(data, 0, api_key, version, direction)
    except DecodeError as exc:
        assert exc.api_key == api_key and exc.offset is not None
