"""Payloads Kafka carries inside `bytes` fields, decoded next to the raw bytes.

Each decoded payload is added as a sibling key ``<Field>Decoded`` so the raw
field stays untouched (encoding ignores keys the schema does not name):
consumer-protocol Subscription/Assignment in JoinGroup/SyncGroup, Envelope's
embedded request/response and its DefaultPrincipalData.
"""

from __future__ import annotations

import struct

from .codec import Message, decode_request, decode_response
from .errors import DecodeError
from .registry import data_codec, data_versions

JOIN_GROUP, SYNC_GROUP, ENVELOPE = 11, 14, 58
CONSUMER = "consumer"


def decode_version_prefixed(name: str, buf) -> dict:
    """Kafka's version-prefixed blobs: int16 version, then the struct of that version.

    A newer version than we know is read with the newest known layout and its
    tail ignored, which is what Kafka itself does for these forward-compatible types.
    """
    if buf is None:
        raise DecodeError(f"{name}: null payload")
    if len(buf) < 2:
        raise DecodeError(f"{name}: {len(buf)} bytes, no version prefix")
    (version,) = struct.unpack_from(">h", buf, 0)
    known = data_versions(name)
    if version < known[0]:
        raise DecodeError(f"{name}: version {version} predates v{known[0]}", offset=0)
    use = min(version, known[-1])
    from .codec import run_decoder

    obj, end = run_decoder(data_codec(name, use)[0], buf, 2, whole=use == version)
    return {"Version": version, **obj}


def _attach(holder: dict, field: str, fn) -> None:
    raw = holder.get(field)
    if raw is None:
        return
    try:
        holder[field + "Decoded"] = fn(raw)
    except DecodeError as exc:
        holder[field + "Decoded"] = {"_error": str(exc)}


def _consumer_type(*bodies: dict | None) -> str | None:
    for body in bodies:
        if body and body.get("ProtocolType") is not None:
            return body["ProtocolType"]
    return None


def expand(msg: Message, request: Message | None = None) -> Message:
    """Decode the nested payloads of one message in place; `request` gives a response its context."""
    body = msg.body
    req_body = request.body if request is not None else None
    if msg.api_key == JOIN_GROUP:
        if _consumer_type(body, req_body) == CONSUMER:
            field_holders = body.get("Protocols" if msg.direction == "request" else "Members") or []
            for item in field_holders:
                _attach(item, "Metadata", lambda b: decode_version_prefixed("ConsumerProtocolSubscription", b))
    elif msg.api_key == SYNC_GROUP:
        # SyncGroup before v5 does not say its protocol type; the JoinGroup that
        # preceded it did, so the caller passes it in via request/ProtocolType when known.
        if _consumer_type(body, req_body) in (CONSUMER, None):
            decode = lambda b: decode_version_prefixed("ConsumerProtocolAssignment", b)  # noqa: E731
            if msg.direction == "request":
                for item in body.get("Assignments") or []:
                    if item.get("Assignment"):
                        _attach(item, "Assignment", decode)
            elif body.get("Assignment"):
                _attach(body, "Assignment", decode)
    elif msg.api_key == ENVELOPE:
        if msg.direction == "request":
            _attach(body, "RequestData", lambda b: _message_dict(decode_request(b)))
            _attach(body, "RequestPrincipal", lambda b: decode_version_prefixed("DefaultPrincipalData", b))
        elif req_body is not None and req_body.get("RequestData") is not None:
            inner = decode_request(req_body["RequestData"])
            _attach(body, "ResponseData", lambda b: _message_dict(decode_response(b, inner.api_key, inner.api_version)))
    return msg


def _message_dict(msg: Message) -> dict:
    return {"api_key": msg.api_key, "api_version": msg.api_version, "header": msg.header, "body": msg.body}
