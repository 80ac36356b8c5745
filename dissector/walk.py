"""Body walks specialised per message version: error codes and topic ids without visiting
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

from functools import cache
from uuid import UUID

from protocol.topic_ids import with_topic_name

__all__ = ["walker", "NO_SCHEMA"]

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
