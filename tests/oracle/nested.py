"""Payloads Kafka carries inside `bytes` fields, decoded beside them: the oracle for the native
core's nested.rs, written on protocol's Python decoders (test-only, as the rest of tests/oracle/).

Each decoded payload is added as a sibling key ``<Field>Decoded`` so the raw field stays
untouched: the consumer protocol's Subscription and Assignment in JoinGroup, SyncGroup and
DescribeGroups when the group's protocol type is ``consumer``, Envelope's embedded request and
response and its DefaultPrincipalData. A SyncGroup that does not say its protocol type (before
v5) has its assignment tried and left alone when it is not the consumer protocol's.
"""

from __future__ import annotations

import struct

from protocol.codec import decode_request, decode_response, run_decoder
from protocol.errors import DecodeError
from protocol.registry import data_codec, data_versions

JOIN_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, ENVELOPE = 11, 14, 15, 58
CONSUMER = "consumer"
_QUIET = object()


def decode_version_prefixed(name: str, buf) -> dict:
    """Kafka's version-prefixed blobs: int16 version, then the struct of that version.

    A newer version than we know is read with the newest known layout and its
    tail ignored, which is what Kafka itself does for these forward-compatible types.
    """
    if buf is None or len(buf) < 2:
        raise DecodeError(f"{name}: {0 if buf is None else len(buf)} bytes, no version prefix")
    (version,) = struct.unpack_from(">h", buf, 0)
    known = data_versions(name)
    if version < known[0]:
        raise DecodeError(f"{name}: version {version} predates v{known[0]}", offset=0)
    use = min(version, known[-1])
    obj, _end = run_decoder(data_codec(name, use)[0], buf, 2, whole=use == version)
    return {"Version": version, **obj}


def _attach(holder: dict, field: str, fn, skip_empty: bool = False, failed=None) -> None:
    raw = holder.get(field)
    if raw is None or (skip_empty and len(raw) == 0):
        return
    try:
        holder[field + "Decoded"] = fn(raw)
    except DecodeError as exc:
        if failed is not _QUIET:
            holder[field + "Decoded"] = {"_error": str(exc)}


def _protocol_type(*bodies: dict | None) -> str | None:
    for body in bodies:
        if body and body.get("ProtocolType") is not None:
            return body["ProtocolType"]
    return None


def _subscription(b):
    return decode_version_prefixed("ConsumerProtocolSubscription", b)


def _assignment(b):
    return decode_version_prefixed("ConsumerProtocolAssignment", b)


def expand(api_key: int, direction: str, body: dict, request: dict | None = None) -> None:
    """Decode the nested payloads of one body in place; a response's `request` body gives it context."""
    if not isinstance(body, dict):
        return
    if api_key == JOIN_GROUP:
        if _protocol_type(body, request) == CONSUMER:
            for item in body.get("Protocols" if direction == "request" else "Members") or []:
                _attach(item, "Metadata", _subscription)
    elif api_key == SYNC_GROUP:
        kind = _protocol_type(body, request)
        if kind not in (CONSUMER, None):
            return
        failed = _QUIET if kind is None else None
        if direction == "request":
            for item in body.get("Assignments") or []:
                _attach(item, "Assignment", _assignment, True, failed)
        else:
            _attach(body, "Assignment", _assignment, True, failed)
    elif api_key == DESCRIBE_GROUPS and direction == "response":
        for group in body.get("Groups") or []:
            if group.get("ProtocolType") == CONSUMER:
                for m in group.get("Members") or []:
                    _attach(m, "MemberMetadata", _subscription, True)
                    _attach(m, "MemberAssignment", _assignment, True)
    elif api_key == ENVELOPE:
        if direction == "request":
            _attach(body, "RequestData", lambda b: _message_dict(decode_request(bytes(b))))
            _attach(body, "RequestPrincipal", lambda b: decode_version_prefixed("DefaultPrincipalData", b))
        else:
            data = (request or {}).get("RequestData")
            if data is not None and len(data) >= 4:
                key, version = struct.unpack_from(">hh", data, 0)
                _attach(body, "ResponseData", lambda b: _message_dict(decode_response(bytes(b), key, version)))


def _message_dict(msg) -> dict:
    return {"api_key": msg.api_key, "api_version": msg.api_version, "header": msg.header, "body": msg.body}
