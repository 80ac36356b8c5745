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
from dataclasses import MISSING
from functools import cache
from pkgutil import resolve_name

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

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


@cache
def kio_class(api_key: int, version: int, direction: str) -> type:
    types = schema_name_map[api_key_map[api_key]][version]
    return resolve_name(types[EntityType[direction]])


@dataclasses.dataclass(frozen=True)
class Target:
    """One kafkawire schema version paired with the kio class for it."""

    label: str
    kio_cls: type
    fields: list
    version: int
    flexible: bool
    decode: object  # generated decoder: (buf, pos) -> (dict, end)
    encode: object  # generated encoder: (dict, bytearray) -> None


def message_target(api_key: int, version: int, direction: str) -> Target:
    fields, flexible = schema_fields(api_key, version, direction)
    dec, enc = registry.codec(api_key, version, direction)
    return Target(
        f"{registry.api_name(api_key)} v{version} {direction}",
        kio_class(api_key, version, direction),
        fields,
        version,
        flexible,
        dec,
        enc,
    )


def other_targets() -> list[Target]:
    """kio's `data` specs (consumer protocol, control records, ...) and the request/response headers."""
    out = []
    for name, versions in sorted(schema_name_map.items()):
        for version, types in sorted(versions.items()):
            for et in (EntityType.data, EntityType.header):
                if et not in types:
                    continue
                cls = resolve_name(types[et])
                segs = registry.DATA[cls.__name__] if et is EntityType.data else registry.HEADERS[cls.__name__]
                seg = next(sg for sg in segs if version in sg["versions"])
                flexible = _in(seg["flexible"], version)
                dec, enc = (
                    registry.data_codec(cls.__name__, version)
                    if et is EntityType.data
                    else registry.header_codec("request" if name == "request_header" else "response", version)
                )
                out.append(Target(f"{cls.__name__} v{version}", cls, seg["fields"], version, flexible, dec, enc))
    return out


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
        raise AssertionError(
            f"{cls.__qualname__}: kio has {len(kfs)} fields, kafkawire {len(present)} "
            f"({[f.name for f in kfs]} vs {[f['name'] for f in present]})"
        )
    return zip(kfs, present, strict=True)


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
            # Absent from the wire: fine when kio left it out as a default, and both sides must agree on that default.
            if _tag_written(kf, kv):
                out.append(f"{where}: kio wrote tagged field {kv!r}, kafkawire did not decode it")
            elif f["type"] != "struct" and not f.get("array") and plain(kf, kv) != _kw_plain(default_value(f)):
                out.append(f"{where}: default kio {plain(kf, kv)!r} vs kafkawire {default_value(f)!r}")
            continue
        else:
            out.append(f"{where}: missing from kafkawire's dict")
            continue
        if f["type"] == "struct":
            if f.get("array"):
                if kv is None or wv is None:
                    if (kv is None) != (wv is None):
                        out.append(f"{where}: kio {kv!r} vs kafkawire {wv!r}")
                    continue
                if len(kv) != len(wv):
                    out.append(f"{where}: kio {len(kv)} elements vs kafkawire {len(wv)}")
                    continue
                for i, (a, b) in enumerate(zip(kv, wv, strict=True)):
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


_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _primitive(kt: str, small: bool):
    """Values kio accepts for one wire type; small keeps strings/bytes short so 5 examples stay cheap."""
    if small:
        text, blob = st.text(max_size=6), st.binary(max_size=12)
    else:  # some past 127 bytes, for two-byte varint and int16 lengths
        text, blob = st.text() | st.text(min_size=64, max_size=200), st.binary(max_size=300)
    if kt in _INTS:
        bits = _INTS[kt]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if kt == "uint16":
        return st.integers(0, 2**16 - 1)
    if kt == "uint32":
        return st.integers(0, 2**32 - 1)
    if kt == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kt == "bool":
        return st.booleans()
    if kt == "string":
        return text
    if kt in ("bytes", "records"):
        return blob
    if kt == "uuid":
        return st.uuids()
    if kt == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kt == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: i32Timedelta.parse(ms * _MS))
    if kt == "timedelta_i64":
        # kio writes round(td.total_seconds() * 1000): exact only while the float keeps every millisecond.
        return st.integers(-(2**43), 2**43).map(lambda ms: i64Timedelta.parse(ms * _MS))
    if kt == "datetime_i64":
        return st.integers(0, 2**45).map(lambda ms: tz_aware_from_i64(i64(ms)))
    raise AssertionError(f"no strategy for kafka type {kt!r}")


@cache
def entity_strategy(cls, small: bool = True):
    """A hypothesis strategy for kio entities of `cls`, built from kio's own field metadata."""
    kwargs = {}
    for kf in dataclasses.fields(cls):
        shape = classify_field(kf)
        if isinstance(shape, (EntityField, EntityTupleField)):
            base = st.deferred(lambda t=shape.type_: entity_strategy(t, small))
        else:
            base = _primitive(kf.metadata["kafka_type"], small)
        if shape.is_array:
            base = st.lists(base, max_size=3 if small else 12).map(tuple)
        if is_optional(kf):
            base = st.none() | base
        kwargs[kf.name] = base
    return st.builds(cls, **kwargs)


__all__ = [
    "Target",
    "combos",
    "diff",
    "entity_strategy",
    "kio_class",
    "kio_decode",
    "kio_encode",
    "message_target",
    "other_targets",
    "plain",
    "schema_fields",
    "to_kafkawire",
]
