"""Bridge between kio 0.6.5 (Rust-backed Kafka protocol library) and kafkawire, for differential tests and bench.

kio names fields in snake_case and renames a few (ThrottleTimeMs -> throttle_time,
as a timedelta), but its dataclass fields follow the spec's field order for each
version exactly, so fields are paired by position, not by name. Values are
compared in kafkawire's plain form: ints for error codes, millisecond ints for
timedeltas and datetimes, bytes for bytes/records, the zero UUID for kio's None uuid.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import uuid
from dataclasses import MISSING
from functools import lru_cache
from pkgutil import resolve_name

from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import classify_field, get_field_tag
from kio.static.constants import EntityType

from protocol import registry
from protocol.compiler import ZERO_UUID, default_value

_MS = datetime.timedelta(milliseconds=1)


def _in(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def combos() -> list[tuple[int, int, str]]:
    """Every (api key, version, direction) kio has a payload class for."""
    out = []
    for api_key, name in sorted(api_key_map.items()):
        for version, types in sorted(schema_name_map[name].items()):
            for et in (EntityType.request, EntityType.response):
                if et in types:
                    out.append((api_key, version, et.name))
    return out


@lru_cache(maxsize=None)
def kio_class(api_key: int, version: int, direction: str) -> type:
    types = schema_name_map[api_key_map[api_key]][version]
    return resolve_name(types[EntityType[direction]])


def kio_encode(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def kio_decode(cls, buf, offset: int = 0):
    """(entity, end offset)."""
    entity, size = entity_reader(cls)(buf, offset)
    return entity, offset + size


def schema_fields(api_key: int, version: int, direction: str) -> tuple[list[dict], bool]:
    seg = registry.schema(api_key, version, direction)
    return seg["fields"], registry.is_flexible(api_key, version, direction)


def _present(fields: list[dict], version: int) -> list[dict]:
    return [f for f in fields if _in(f["versions"], version)]


def _pairs(cls, fields: list[dict], version: int):
    kfs = dataclasses.fields(cls)
    present = _present(fields, version)
    if len(kfs) != len(present):
        raise AssertionError(f"{cls.__qualname__}: kio has {len(kfs)} fields, kafkawire {len(present)} "
                             f"({[f.name for f in kfs]} vs {[f['name'] for f in present]})")
    return zip(kfs, present)


def _ms(td: datetime.timedelta) -> int:
    return td // _MS


def plain(kf: dataclasses.Field, value):
    """A kio primitive value in kafkawire's form (arrays handled by the caller)."""
    kt = kf.metadata.get("kafka_type")
    if kt in ("timedelta_i32", "timedelta_i64"):
        return _ms(value)
    if kt == "datetime_i64":
        return -1 if value is None else round(value.timestamp() * 1000)
    if kt == "uuid":
        return ZERO_UUID if value is None else value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _kw_plain(value):
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _tag_written(kf: dataclasses.Field, value) -> bool:
    """kio writes a tagged field only when it differs from its default (see kio.serial._serialize)."""
    if kf.default is not MISSING:
        return value != kf.default
    return value != get_tagged_field_default(kf)


def diff(entity, kw: dict, fields: list[dict], version: int, flexible: bool, path: str = "") -> list[str]:
    """Field-by-field disagreements between a kio entity and a kafkawire dict ([] when equal)."""
    out: list[str] = []
    for kf, f in _pairs(type(entity), fields, version):
        where = f"{path}{f['name']}"
        kv = getattr(entity, kf.name)
        tagged = flexible and _in(f.get("tagged"), version)
        if f["name"] in kw:
            wv = kw[f["name"]]
        elif tagged:
            wv = default_value(f)
        else:
            out.append(f"{where}: missing from kafkawire's dict")
            continue
        if f["type"] == "struct":
            sub = classify_field(kf).type_
            if f.get("array"):
                if kv is None or wv is None:
                    if (kv is None) != (wv is None):
                        out.append(f"{where}: kio {kv!r} vs kafkawire {wv!r}")
                    continue
                if len(kv) != len(wv):
                    out.append(f"{where}: kio {len(kv)} elements vs kafkawire {len(wv)}")
                    continue
                for i, (a, b) in enumerate(zip(kv, wv)):
                    out += diff(a, b, f["fields"], version, flexible, f"{where}[{i}].")
            elif kv is None or wv is None:
                if (kv is None) != (wv is None):
                    out.append(f"{where}: kio {kv!r} vs kafkawire {wv!r}")
            else:
                out += diff(kv, wv, f["fields"], version, flexible, f"{where}.")
            continue
        if f.get("array"):
            a = None if kv is None else [plain(kf, x) for x in kv]
            b = None if wv is None else [_kw_plain(x) for x in wv]
        else:
            a, b = plain(kf, kv), _kw_plain(wv)
        if a != b or type(a) is bool and type(b) is not bool:
            out.append(f"{where}: kio {a!r} vs kafkawire {b!r}")
    return out


def to_kafkawire(entity, fields: list[dict], version: int, flexible: bool) -> dict:
    """The kafkawire dict that should encode to the same bytes kio writes for this entity."""
    d: dict = {}
    for kf, f in _pairs(type(entity), fields, version):
        kv = getattr(entity, kf.name)
        if flexible and _in(f.get("tagged"), version) and not _tag_written(kf, kv):
            continue
        if f["type"] == "struct":
            if kv is None:
                d[f["name"]] = None
            elif f.get("array"):
                d[f["name"]] = [to_kafkawire(x, f["fields"], version, flexible) for x in kv]
            else:
                d[f["name"]] = to_kafkawire(kv, f["fields"], version, flexible)
        elif f.get("array"):
            d[f["name"]] = None if kv is None else [plain(kf, x) for x in kv]
        else:
            d[f["name"]] = plain(kf, kv)
    return d


def kio_coverage() -> set[tuple[int, int, str]]:
    return set(combos())


__all__ = ["combos", "diff", "kio_class", "kio_decode", "kio_encode", "plain", "schema_fields", "to_kafkawire",
           "uuid"]
