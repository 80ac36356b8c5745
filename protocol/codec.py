"""Frames in, plain objects out (and back): the public decode/encode functions.

A frame here is one request or response *without* its 4-byte size prefix.
Bodies are dicts keyed by the spec's field names; `bytes` and `records` fields
are memoryviews into the frame, so nothing large is copied.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

from .compiler import explain_failure
from .errors import DecodeError
from .headers import API_VERSIONS, body_versions, request_header_version, response_header_version
from .registry import REQUEST, RESPONSE, codec, data_codec, header_codec, request_versions

_UNSUPPORTED_VERSION = 35
_I16 = struct.Struct(">h")
_KEY_VERSION = struct.Struct(">hh")


@dataclass(slots=True)
class Message:
    api_key: int
    api_version: int
    direction: str  # "request" or "response"
    correlation_id: int
    header: dict
    body: dict
    header_version: int
    body_version: int  # the version the body was decoded as (ApiVersions may fall back to 0)
    # lenient decoding only: bytes after the body's last field (kept so that re-encoding
    # can put them back), and whether the body only decodes as another version than asked
    trailing: bytes = b""
    version_mismatch: bool = False

    @property
    def client_id(self) -> str | None:
        return self.header.get("ClientId")


def run_decoder(fn, buf, pos: int, *, whole: bool, api_key=None, api_version=None, direction=None):
    """Call a generated decoder; turn any failure into one DecodeError naming field and offset."""
    try:
        obj, end = fn(buf, pos)
    except Exception as exc:  # generated code signals bad bytes with whatever Python raises
        field, offset, reason = explain_failure(exc)
        raise DecodeError(
            reason, api_key=api_key, api_version=api_version, direction=direction, field=field, offset=offset
        ) from None
    if whole and end != len(buf):
        raise DecodeError(
            f"{len(buf) - end} bytes left over after the message",
            api_key=api_key,
            api_version=api_version,
            direction=direction,
            offset=end,
        )
    return obj, end


def decode_data(name: str, version: int, buf, pos: int = 0) -> dict:
    """Decode one of Kafka's `data` specs (control records, consumer protocol, principals)."""
    return run_decoder(data_codec(name, version)[0], buf, pos, whole=True)[0]


def encode_data(name: str, version: int, obj: dict) -> bytes:
    w = bytearray()
    data_codec(name, version)[1](obj, w)
    return bytes(w)


def decode_request_header(frame) -> tuple[dict, int]:
    """The request header alone: cheap enough for plausibility checks on unknown bytes."""
    if len(frame) < 8:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version = struct.unpack_from(">hh", frame, 0)
    hv = request_header_version(api_key, api_version)
    return run_decoder(header_codec(REQUEST, hv)[0], frame, 0, whole=False, api_key=None, direction="request header")


@cache
def _plan(api_key: int, api_version: int, direction: str) -> tuple | None:
    """(header decoder, header version, body decoder, body version) when one layout is all
    there is to try: the common case, decoded without the general path's calls."""
    if api_key == API_VERSIONS:  # several layouts and a fallback body: the general path
        return None
    try:
        hv = (request_header_version if direction == REQUEST else response_header_version)(api_key, api_version)
        return header_codec(direction, hv)[0], hv, codec(api_key, api_version, direction)[0], api_version
    except KeyError:
        return None


def _fast(frame, api_key: int, api_version: int, direction: str) -> Message | None:
    """The whole frame through the plan's two decoders, or None: then the general path
    (which raises the precise error, or decodes leniently)."""
    plan = _plan(api_key, api_version, direction)
    if plan is None:
        return None
    hfn, hv, bfn, bv = plan
    try:
        header, pos = hfn(frame, 0)
        body, end = bfn(frame, pos)
    except Exception:  # noqa: BLE001 - the general path says what went wrong
        return None
    if end != len(frame):
        return None
    return Message(api_key, api_version, direction, header["CorrelationId"], header, body, hv, bv)


def decode_request(frame, *, lenient: bool = False) -> Message:
    """lenient: bytes left over after the body's last field are returned in
    Message.trailing instead of failing (real clients send such requests; the
    fields before them are sound)."""
    if len(frame) >= 8:
        msg = _fast(frame, *_KEY_VERSION.unpack_from(frame, 0), REQUEST)
        if msg is not None:
            return msg
    header, pos = decode_request_header(frame)
    api_key, api_version = header["RequestApiKey"], header["RequestApiVersion"]
    hv = request_header_version(api_key, api_version)
    versions = body_versions(api_key, api_version)
    try:
        body, version = _decode_first(frame, pos, api_key, versions, REQUEST)
    except DecodeError:
        if not lenient:
            raise
        body, version, end = _decode_prefix(frame, pos, api_key, versions, REQUEST)
        return Message(
            api_key,
            api_version,
            REQUEST,
            header["CorrelationId"],
            header,
            body,
            hv,
            version,
            trailing=bytes(frame[end:]),
        )
    return Message(api_key, api_version, REQUEST, header["CorrelationId"], header, body, hv, version)


def decode_response_header(frame, api_key: int, api_version: int) -> tuple[dict, int]:
    hv = response_header_version(api_key, api_version)
    return run_decoder(header_codec(RESPONSE, hv)[0], frame, 0, whole=False, direction="response header")


def decode_response(frame, api_key: int, api_version: int, *, lenient: bool = False) -> Message:
    """lenient: a body that does not decode as the asked version is decoded as the
    nearest version it does decode as whole (version_mismatch=True; Tansu answers
    Metadata v13 with a v12 body), else as the asked version with its left-over
    bytes in Message.trailing. The strict error is raised when neither works."""
    msg = _fast(frame, api_key, api_version, RESPONSE)
    if msg is not None:
        return msg
    header, pos = decode_response_header(frame, api_key, api_version)
    hv = response_header_version(api_key, api_version)
    versions = body_versions(api_key, api_version)
    # A broker that does not speak the requested ApiVersions version answers
    # UNSUPPORTED_VERSION with a v0 body so that any client can read it.
    if (
        api_key == API_VERSIONS
        and api_version > 0
        and len(frame) >= pos + 2
        and _I16.unpack_from(frame, pos)[0] == _UNSUPPORTED_VERSION
    ):
        versions = (0,)
    try:
        body, version = _decode_first(frame, pos, api_key, versions, RESPONSE)
    except DecodeError as exc:
        exc.decodes_as = versions_that_decode(frame, pos, api_key, RESPONSE, exclude=versions[0])
        if exc.decodes_as:
            exc.args = (f"{exc.args[0]} (the body decodes whole as v{', v'.join(map(str, exc.decodes_as))})",)
        if not lenient:
            raise
        if exc.decodes_as:
            version = min(exc.decodes_as, key=lambda v: (abs(v - api_version), -v))
            body = decode_body(frame, pos, api_key, version, RESPONSE)
            return Message(
                api_key,
                api_version,
                RESPONSE,
                header["CorrelationId"],
                header,
                body,
                hv,
                version,
                version_mismatch=True,
            )
        try:
            body, version, end = _decode_prefix(frame, pos, api_key, versions, RESPONSE)
        except DecodeError:
            raise exc from None
        return Message(
            api_key,
            api_version,
            RESPONSE,
            header["CorrelationId"],
            header,
            body,
            hv,
            version,
            trailing=bytes(frame[end:]),
        )
    return Message(api_key, api_version, RESPONSE, header["CorrelationId"], header, body, hv, version)


def _decode_first(frame, pos: int, api_key: int, versions: tuple[int, ...], direction: str) -> tuple[dict, int]:
    for i, v in enumerate(versions):
        try:
            return decode_body(frame, pos, api_key, v, direction), v
        except DecodeError:
            if i == len(versions) - 1:
                raise
    raise AssertionError("no versions to try")


def _decode_prefix(frame, pos: int, api_key: int, versions: tuple[int, ...], direction: str) -> tuple[dict, int, int]:
    """The first of `versions` whose fields all decode, ignoring what follows them: (body, version, end)."""
    for i, v in enumerate(versions):
        try:
            fn = codec(api_key, v, direction)[0]
        except KeyError:
            raise DecodeError(
                "the registry has no such message version",
                api_key=api_key,
                api_version=v,
                direction=direction,
                offset=pos,
            ) from None
        try:
            body, end = run_decoder(fn, frame, pos, whole=False, api_key=api_key, api_version=v, direction=direction)
        except DecodeError:
            if i == len(versions) - 1:
                raise
            continue
        return body, v, end
    raise AssertionError("no versions to try")


def versions_that_decode(frame, pos: int, api_key: int, direction: str, exclude: int = -1) -> list[int]:
    """Every other version whose layout consumes the body exactly: a hint when a peer sent the wrong one.

    Only called after a failure, so its cost never touches frames that decode.
    """
    found = []
    for v in request_versions(api_key):
        if v == exclude:
            continue
        try:
            decode_body(frame, pos, api_key, v, direction)
        except DecodeError:
            continue
        found.append(v)
    return found


def decode_body(frame, pos: int, api_key: int, api_version: int, direction: str) -> dict:
    try:
        fn = codec(api_key, api_version, direction)[0]
    except KeyError:
        raise DecodeError(
            "the registry has no such message version",
            api_key=api_key,
            api_version=api_version,
            direction=direction,
            offset=pos,
        ) from None
    return run_decoder(fn, frame, pos, whole=True, api_key=api_key, api_version=api_version, direction=direction)[0]


def encode_request(
    api_key: int, api_version: int, header: dict, body: dict, *, body_version: int | None = None
) -> bytes:
    """Header + body, without the size prefix. The header's api key/version are taken from the arguments."""
    w = bytearray()
    hdr = dict(header, RequestApiKey=api_key, RequestApiVersion=api_version)
    header_codec(REQUEST, request_header_version(api_key, api_version))[1](hdr, w)
    codec(api_key, api_version if body_version is None else body_version, REQUEST)[1](body, w)
    return bytes(w)


def encode_response(
    api_key: int, api_version: int, header: dict, body: dict, *, body_version: int | None = None
) -> bytes:
    w = bytearray()
    header_codec(RESPONSE, response_header_version(api_key, api_version))[1](header, w)
    codec(api_key, api_version if body_version is None else body_version, RESPONSE)[1](body, w)
    return bytes(w)


def with_size(frame: bytes) -> bytes:
    """Prefix a frame with its 4-byte size, as it travels on the wire."""
    return len(frame).to_bytes(4, "big") + frame
