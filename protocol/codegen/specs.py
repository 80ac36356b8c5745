"""Read Kafka's message spec files and normalise them into plain, version-ranged data."""

from __future__ import annotations

import json
import re
from pathlib import Path

MAX_VERSION = 0x7FFF  # "N+" ranges are open-ended; int16 bounds them

_INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}
PRIMITIVES = _INT_TYPES | {"bool", "float64", "string", "bytes", "uuid", "records"}


def strip_comments(text: str) -> str:
    """Drop // comments without touching // inside strings (e.g. URLs in "about")."""
    out = []
    for line in text.splitlines():
        in_str = False
        escaped = False
        cut = len(line)
        for i, ch in enumerate(line):
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = not in_str
            elif not in_str and line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def load_spec(path: Path) -> dict:
    return json.loads(strip_comments(path.read_text(encoding="utf-8")))


def parse_versions(text: str | None) -> tuple[int, int] | None:
    """'0+' -> (0, MAX), '1-3' -> (1, 3), '2' -> (2, 2), 'none'/None -> None."""
    if text is None:
        return None
    text = text.strip()
    if text == "none" or text == "":
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    if "-" in text:
        lo, hi = text.split("-")
        return int(lo), int(hi)
    return int(text), int(text)


def _parse_int(value) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    return int(str(value).strip(), 0)


def normalise_default(ftype: str, raw, nullable_all: bool):
    """The specs mix "-1", -1, "0x7fffffff", "null", "false": give each type one form."""
    if raw is None:
        return None if ftype == "records" else _implicit_default(ftype)
    if raw == "null":
        return None
    if ftype in _INT_TYPES:
        return _parse_int(raw)
    if ftype == "bool":
        return raw if isinstance(raw, bool) else str(raw).strip().lower() == "true"
    if ftype == "float64":
        return float(raw)
    if ftype == "string":
        return str(raw)
    raise ValueError(f"unsupported default {raw!r} for type {ftype}")


def _implicit_default(ftype: str):
    if ftype in _INT_TYPES:
        return 0
    return {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "uuid": None}.get(ftype)


def normalise_fields(fields: list[dict], common: dict[str, dict], owner: str) -> list[dict]:
    """Resolve struct references (commonStructs are scoped per file) into nested field lists."""
    out = []
    for f in fields:
        ftype = f["type"]
        is_array = ftype.startswith("[]")
        elem = ftype[2:] if is_array else ftype
        nullable = parse_versions(f.get("nullableVersions"))
        # Kafka's generator lets a tagged field leave out "versions": its tagged versions then
        entry = {"name": f["name"], "versions": parse_versions(f.get("versions", f.get("taggedVersions")))}
        if elem in PRIMITIVES:
            entry["type"] = elem
        else:
            entry["type"] = "struct"
            sub = f.get("fields")
            if sub is None:
                if elem not in common:
                    raise ValueError(f"{owner}: unknown struct type {elem}")
                sub = common[elem]["fields"]
            entry["struct"] = elem
            entry["fields"] = normalise_fields(sub, common, owner)
        if is_array:
            entry["array"] = True
        if nullable:
            entry["nullable"] = nullable
        if "tag" in f:
            entry["tag"] = int(f["tag"])
            entry["tagged"] = parse_versions(f.get("taggedVersions"))
        if "flexibleVersions" in f:
            entry["flexible"] = parse_versions(f["flexibleVersions"])
        if "entityType" in f:
            # not a wire fact, but what the value names (topicName, groupId, ...): the tables
            # promote such fields without guessing from field names
            entry["entity"] = f["entityType"]
        if "default" in f and not is_array and entry["type"] != "struct":
            entry["default"] = normalise_default(elem, f["default"], nullable is not None)
        elif "default" in f and f["default"] == "null":
            entry["default"] = None
        out.append(entry)
    return out


def normalise_spec(spec: dict, source: str) -> dict:
    common = {c["name"]: c for c in spec.get("commonStructs", [])}
    return {
        "name": spec["name"],
        "type": spec["type"],
        "api_key": spec.get("apiKey"),
        "valid": parse_versions(spec.get("validVersions")),
        "flexible": parse_versions(spec.get("flexibleVersions")),
        "fields": normalise_fields(spec.get("fields", []), common, spec["name"]),
        "source": source,
    }


_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*\.json$")


def read_folder(folder: Path) -> list[dict]:
    return [normalise_spec(load_spec(p), folder.name) for p in sorted(folder.glob("*.json")) if _NAME_RE.match(p.name)]
