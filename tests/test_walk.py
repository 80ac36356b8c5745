"""The per-version body walks (tests/walk_reference.py) agree with the generic walk they replace."""

from __future__ import annotations

from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lenient_reference import _walk
from tests.lenient_reference import walker
from protocol import registry
from protocol.registry import MESSAGES, codec

from .schema_strategies import struct_value

CASES = sorted(
    (k, d, v)
    for (k, d), segs in MESSAGES.items()
    for seg in segs
    for v in seg["versions"]
    if walker(k, v, d) is not None
)
TOPIC = UUID("6f1e2d3c-4b5a-4968-8776-655443322110")


def _shape(obj):
    """Values and key order, bytes as bytes."""
    if isinstance(obj, dict):
        return [(k, _shape(v)) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [_shape(v) for v in obj]
    return bytes(obj) if isinstance(obj, memoryview) else obj


def test_versions_without_error_codes_or_topic_ids_are_not_walked():
    assert walker(0, 9, "request") is None  # Produce v9 request: no ErrorCode, no TopicId
    assert walker(0, 9, "response") is not None
    assert "TopicId" in walker(1, 13, "response").source and "Records" not in walker(1, 13, "response").source
    assert len(CASES) > 400


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.data())
def test_specialised_walk_matches_the_generic_walk(data):
    api_key, direction, version = data.draw(st.sampled_from(CASES))
    seg = registry.schema(api_key, version, direction)
    flexible = registry.is_flexible(api_key, version, direction)
    value = data.draw(struct_value(seg["fields"], version, flexible))
    dec, enc = codec(api_key, version, direction)
    w = bytearray()
    enc(value, w)
    body = dec(bytes(w), 0)[0]  # the key order decoding gives
    other = dec(bytes(w), 0)[0]
    names = {TOPIC: "known"}
    names2 = dict(names)
    learn = direction == "response"
    errors, errors2 = [], []
    _walk(body, errors if learn else None, names, learn)
    walker(api_key, version, direction)(other, errors2, names2, learn)
    assert errors == (errors2 if learn else errors)
    assert names == names2
    assert _shape(body) == _shape(other)
