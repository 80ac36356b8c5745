"""The versioned schema registry: find a message by (api key, version, direction).

Schemas are data (``_generated/registry_data.py``, written by protocol.codegen);
each one is compiled into a specialised decoder/encoder pair on first use and
cached, so start-up stays cheap and the hot path never walks the schema tree.
"""

from __future__ import annotations

from functools import cache

from ._generated.registry_data import API_NAMES, DATA, HEADERS, MESSAGES  # noqa: F401 (re-exported)
from .api_names import api_name  # noqa: F401 (re-exported)
from .compiler import compile_schema

REQUEST, RESPONSE = "request", "response"


def _index() -> dict[tuple[int, str, int], dict]:
    out = {}
    for (api_key, direction), segments in MESSAGES.items():
        for seg in segments:
            for v in seg["versions"]:
                out[(api_key, direction, v)] = seg
    return out


_SCHEMAS = _index()


def api_keys() -> list[int]:
    return sorted(API_NAMES)


_REQUEST_VERSIONS = {
    key: tuple(v for seg in segs for v in seg["versions"]) for (key, d), segs in MESSAGES.items() if d == REQUEST
}


def request_versions(api_key: int) -> list[int]:
    return list(_REQUEST_VERSIONS.get(api_key, ()))


def newest_version(api_key: int) -> int | None:
    known = _REQUEST_VERSIONS.get(api_key)
    return known[-1] if known else None


def has(api_key: int, api_version: int, direction: str = REQUEST) -> bool:
    return (api_key, direction, api_version) in _SCHEMAS


def schema(api_key: int, api_version: int, direction: str) -> dict | None:
    """The spec segment (name, flexible range, fields) that defines this version, or None."""
    return _SCHEMAS.get((api_key, direction, api_version))


def removed_in_kafka4(api_key: int, api_version: int) -> bool:
    """True for versions only the older spec snapshot defines: Kafka 4.x brokers no longer accept them."""
    seg = _SCHEMAS.get((api_key, REQUEST, api_version))
    return bool(seg and seg.get("removed"))


def is_flexible(api_key: int, api_version: int, direction: str = REQUEST) -> bool:
    seg = _SCHEMAS.get((api_key, direction, api_version))
    flex = seg and seg["flexible"]
    return bool(flex and flex[0] <= api_version <= flex[1])


@cache
def codec(api_key: int, api_version: int, direction: str):
    """(decode, encode) for one message version; KeyError if the registry lacks it."""
    seg = _SCHEMAS[(api_key, direction, api_version)]
    return compile_schema(
        seg["fields"], api_version, is_flexible(api_key, api_version, direction), f"{seg['name']} v{api_version}"
    )


@cache
def internal() -> tuple[dict, dict]:
    """(DATA, TOPICS) of Kafka's internal topics' records (_generated/internal_data.py): their record
    types, and per topic its kind and the types of each record type id. Loaded on first use: only
    captures of a cluster's own traffic need them."""
    from ._generated import internal_data

    return internal_data.DATA, internal_data.TOPICS


def _data(name: str) -> list:
    """registry DATA's segments of a type, the internal topics' record types too."""
    segs = DATA.get(name)
    return segs if segs is not None else internal()[0][name]


def _data_segment(name: str, version: int) -> dict:
    for seg in _data(name):
        if version in seg["versions"]:
            return seg
    raise KeyError(f"{name} has no version {version}")


@cache
def data_codec(name: str, version: int):
    seg = _data_segment(name, version)
    flex = seg["flexible"]
    return compile_schema(seg["fields"], version, bool(flex and flex[0] <= version <= flex[1]), f"{name} v{version}")


def data_versions(name: str) -> list[int]:
    return [v for seg in _data(name) for v in seg["versions"]]


@cache
def header_codec(kind: str, version: int):
    """kind 'request' (header v0, v1, v2) or 'response' (v0, v1)."""
    seg = HEADERS["RequestHeader" if kind == REQUEST else "ResponseHeader"][0]
    flex = seg["flexible"]
    return compile_schema(
        seg["fields"], version, bool(flex and flex[0] <= version <= flex[1]), f"{seg['name']} v{version}"
    )


def coverage() -> list[dict]:
    """What `kafkawire apis --json` prints: request versions and flexible versions per API."""
    rows = []
    for key in api_keys():
        versions = request_versions(key)
        rows.append(
            {
                "api_key": key,
                "name": api_name(key),
                "versions": versions,
                "flexible_versions": [v for v in versions if is_flexible(key, v)],
            }
        )
    return rows
