"""The frames the native core leaves to Python: lenient decoding through protocol's decoder.

The native core decodes every frame whose bytes fit its message version exactly. A frame that
does not (bytes left over after the last field, a response that only decodes as another version,
ApiVersions' fallback layouts, a frame that fails to decode and needs its error text) is handed
to `Callbacks`, which decodes it leniently with protocol's Python decoder and walks the body
(error codes collected, topic ids named) as dissector/walk.py's compiled walks do.
These are rare; the common frame never leaves the native core.
"""

from __future__ import annotations

import struct
from uuid import UUID

import protocol
from dissector.walk import NO_SCHEMA, walker
from protocol.topic_ids import with_topic_name

__all__ = ["Callbacks", "VERSIONS", "decode_request", "decode_response", "peek_request", "walk_body"]

_PEEK = struct.Struct(">hhih")
_ZERO_UUID = UUID(int=0)


def _version_table() -> dict[int, tuple[int, int]]:
    from protocol import registry

    table = {}
    for k in registry.api_keys():
        vs = registry.request_versions(k)
        if vs:
            table[k] = (min(vs), max(vs))
    return table


VERSIONS = _version_table()  # api key -> (lowest, highest) request version the registry knows


def peek_request(frame) -> tuple[int, int, int, str | None] | None:
    """api key, version, correlation id, client id straight from the bytes (works for unknown api keys)."""
    if len(frame) < 8:
        return None
    if len(frame) < 10:
        return (*_PEEK.unpack_from(frame + b"\xff\xff", 0)[:3], None)
    api_key, version, corr, n = _PEEK.unpack_from(frame, 0)
    client_id = None
    if 0 <= n <= len(frame) - 10:
        client_id = bytes(frame[10 : 10 + n]).decode("utf-8", "replace")
    return api_key, version, corr, client_id


def decode_request(frame, names: dict) -> tuple:
    """A request frame leniently decoded and walked (topic ids named from `names`): (api key,
    version, correlation id, client id, body, failed, the trailing_bytes anomaly's detail or None).
    A frame that does not decode keeps the header fields its bytes give and {"_decode_error": ...}.
    The native core asks this of the frames it leaves to Python (Callbacks)."""

    try:
        msg = protocol.decode_request(frame, lenient=True)
    except protocol.DecodeError as e:
        api_key, version, corr, client_id = peek_request(frame)
        return api_key, version, corr, client_id, {"_decode_error": str(e)}, True, None
    walk_body(msg.api_key, msg.api_version, "request", msg.body, None, names)
    trailing = None
    if msg.trailing:
        trailing = (
            f"client: {protocol.registry.api_name(msg.api_key)} v{msg.api_version} request correlation id "
            f"{msg.correlation_id} (client id {msg.client_id!r}): {len(msg.trailing)} bytes left over after "
            f"the last field"
        )
    return msg.api_key, msg.api_version, msg.correlation_id, msg.client_id, msg.body, False, trailing


def decode_response(frame, api_key, api_version, corr, client_id, names: dict) -> tuple:
    """The answer to a request (api key, version, correlation id, client id) leniently decoded and
    walked (error codes collected, topic names learned): (body, the version it decoded as, error
    codes, [(finding, detail)] for version_mismatch and trailing_bytes, failed)."""

    errors: list[int] = []
    try:
        msg = protocol.decode_response(frame, api_key, api_version, lenient=True)
    except protocol.DecodeError as e:
        return {"_decode_error": str(e)}, None, errors, [], True
    walk_body(api_key, msg.body_version, "response", msg.body, errors, names)
    found = []
    if msg.trailing or msg.version_mismatch:
        what = (
            f"broker: {protocol.registry.api_name(api_key)} v{api_version} response correlation id {corr} "
            f"(client id {client_id!r})"
        )
        if msg.version_mismatch:
            found.append(("version_mismatch", f"{what}: the body decodes only as v{msg.body_version}, decoded as that"))
        if msg.trailing:
            found.append(("trailing_bytes", f"{what}: {len(msg.trailing)} bytes left over after the last field"))
    return msg.body, msg.body_version, errors, found, False


# -- body walking --------------------------------------------------------------


def _walk(obj, errors: list | None, names: dict, learn: bool) -> None:
    """One pass over a decoded body: collect non-zero *ErrorCode values (in order,
    with repeats), learn TopicId -> Name pairs, annotate bare TopicIds."""
    if type(obj) is list:
        for v in obj:
            if type(v) is dict or type(v) is list:
                _walk(v, errors, names, learn)
        return
    if learn:
        tid = obj.get("TopicId")
        name = obj.get("Name")
        if type(tid) is UUID and tid != _ZERO_UUID and type(name) is str:
            names[tid] = name
    annotate = False
    for k, v in obj.items():
        t = type(v)
        if t is dict or t is list:
            _walk(v, errors, names, learn)
        elif t is int:
            if v and errors is not None and k.endswith("ErrorCode"):
                errors.append(v)
        elif t is UUID and k == "TopicId" and "Name" not in obj and "TopicName" not in obj:
            annotate = True
    if annotate:
        with_topic_name(obj, names)


def walk_body(api_key: int, version: int, direction: str, body: dict, errors: list | None, names: dict) -> None:
    """_walk, specialised to the message version's schema (dissector/walk.py) when it is known."""
    fn = walker(api_key, version, direction)
    if fn is NO_SCHEMA:
        _walk(body, errors, names, direction == "response")
    elif fn is not None:
        fn(body, [] if errors is None else errors, names, direction == "response")


class Callbacks:
    """What the native exchanges layer asks of Python, one method per question."""

    def request(self, frame: bytes, names):
        return decode_request(frame, names)

    def response(self, frame: bytes, api_key, api_version, corr, client_id, names):
        return decode_response(frame, api_key, api_version, corr, client_id, names)

    def frame_decodes(self, frame: bytes, whole: bool, api_key, api_version) -> int:
        """Whether a candidate frame decodes with the general decoder: 0 no, 1 yes, 2 verified (whole)."""
        try:
            if api_key is None:
                protocol.decode_request(frame)
            else:
                protocol.decode_response(frame, api_key, api_version)
        except protocol.DecodeError as e:
            # a frame too big to wait for: its first bytes must decode up to where they stop
            return int(not whole and ("past the end" in e.reason or "ends in the middle" in e.reason))
        return 2 if whole else 1

    def has_response(self, api_key: int, api_version: int) -> bool:
        return protocol.registry.has(api_key, api_version, "response")
