"""What the core's general decoding path and body walk (native/core/src/lenient.rs, decode.rs) are
held to, in Python over protocol's decoder: lenient decoding of a request or response with the
anomaly texts it gives (`decode_request`, `decode_response`), the generic walk (`_walk`), the walks
specialised per message version (`walker`), and `walk_body`, which picks between them. The frozen
oracle (tests/oracle) decodes with these; reference code for tests, as tests/ranges_reference.py is.

Body walks specialised per message version: error codes and topic ids without visiting
every dict and list of a decoded body.

`walker(api_key, version, direction)` gives a function `walk(body, errors, names, learn)`
that does what the generic walk in dissector/exchanges.py does (collect non-zero
*ErrorCode values in body order, learn TopicId -> Name pairs, give a bare TopicId a
TopicName), but only along the schema paths that lead to such fields; None when the
version has none of them. The source is generated once per version, like the decoders
of protocol/compiler.py, and follows the decoded dicts' key order: regular fields in
schema order, then tagged fields by tag, as they come off the wire.
"""

from __future__ import annotations

import struct
from functools import cache
from uuid import UUID

import protocol
from protocol.topic_ids import with_topic_name

__all__ = ["VERSIONS", "decode_request", "decode_response", "peek_request", "walker", "walk_body", "NO_SCHEMA"]

_ZERO_UUID = UUID(int=0)
_INTS = frozenset(("int8", "int16", "int32", "int64", "uint16", "uint32"))
NO_SCHEMA = object()  # walker() result when the registry does not know the version: use the generic walk


def _live(fields, version: int) -> list[dict]:
    """Fields present in `version`, in decoded-dict order."""
    regular, tagged = [], []
    for f in fields:
        lo, hi = f.get("versions") or (0, 32767)
        if not lo <= version <= hi:
            continue
        tv = f.get("tagged")
        if "tag" in f and (tv is None or tv[0] <= version <= tv[1]):
            tagged.append(f)
        else:
            regular.append(f)
    tagged.sort(key=lambda f: f["tag"])
    return regular + tagged


def _interesting(fields, version: int) -> bool:
    for f in _live(fields, version):
        name = f["name"]
        if name == "TopicId" or name.endswith("ErrorCode") and f.get("type") in _INTS:
            return True
        if f.get("fields") and _interesting(f["fields"], version):
            return True
    return False


def _emit(fields, version: int, var: str, depth: int, lines: list[str], ind: str) -> None:
    live = _live(fields, version)
    names = {f["name"] for f in live}
    if "TopicId" in names and "Name" in names:
        lines += [
            f"{ind}if learn:",
            f"{ind}    tid = {var}.get('TopicId')",
            f"{ind}    nm = {var}.get('Name')",
            f"{ind}    if type(tid) is UUID and tid != ZERO and type(nm) is str:",
            f"{ind}        names[tid] = nm",
        ]
    for f in live:
        name = f["name"]
        sub = f.get("fields")
        if name.endswith("ErrorCode") and f.get("type") in _INTS:
            lines += [f"{ind}x = {var}.get({name!r})", f"{ind}if x and type(x) is int:", f"{ind}    errors.append(x)"]
        elif sub and _interesting(sub, version):
            child = f"d{depth + 1}"
            if f.get("array"):
                lines += [f"{ind}for {child} in {var}.get({name!r}) or ():", f"{ind}    if type({child}) is dict:"]
                _emit(sub, version, child, depth + 1, lines, ind + "        ")
            else:
                lines += [f"{ind}{child} = {var}.get({name!r})", f"{ind}if type({child}) is dict:"]
                _emit(sub, version, child, depth + 1, lines, ind + "    ")
    if "TopicId" in names:
        lines += [
            f"{ind}tid = {var}.get('TopicId')",
            f"{ind}if type(tid) is UUID and 'Name' not in {var} and 'TopicName' not in {var}:",
            f"{ind}    annotate({var}, names)",
        ]
    lines.append(f"{ind}pass")


@cache
def walker(api_key: int, version: int, direction: str):
    from protocol import registry

    seg = registry.schema(api_key, version, direction)
    if seg is None:
        return NO_SCHEMA
    if not _interesting(seg["fields"], version):
        return None
    lines = ["def walk(d0, errors, names, learn):"]
    _emit(seg["fields"], version, "d0", 0, lines, "    ")
    ns = {"UUID": UUID, "ZERO": _ZERO_UUID, "annotate": with_topic_name}
    exec(compile("\n".join(lines), f"<kafkawire walk {api_key} v{version} {direction}>", "exec"), ns)
    fn = ns["walk"]
    fn.source = "\n".join(lines)
    return fn


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
