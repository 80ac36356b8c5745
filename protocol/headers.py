"""Which request/response header version goes with which (api key, version).

Kafka's rule is "flexible body -> flexible header", with two exceptions that
the specs alone do not say: ControlledShutdown v0 predates the client id
(request header v0), and ApiVersions responses always use response header v0 so
that a client can read the error before it knows what the broker speaks.
"""

from __future__ import annotations

from functools import cache

from .registry import RESPONSE, has, is_flexible, newest_version, request_versions

CONTROLLED_SHUTDOWN = 7
API_VERSIONS = 18


@cache  # runs once per frame: keep it a dict lookup
def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    newest = newest_version(api_key)
    if newest is not None and api_version > newest:
        # Flexible ranges are open-ended ("9+"), so a version newer than the
        # registry is flexible whenever the newest known one is.
        api_version = newest
    return 2 if has(api_key, api_version) and is_flexible(api_key, api_version) else 1


@cache
def body_versions(api_key: int, api_version: int) -> tuple[int, ...]:
    """Layouts to try for a body, in order.

    ApiVersions must be readable before the peers agree on versions: a version
    newer than the registry is tried as each known layout, newest first (Kafka
    brokers do not parse such bodies at all; Tansu answers them with a v3 body).
    """
    if api_key == API_VERSIONS:
        newest = newest_version(api_key)
        if api_version > newest:
            return tuple(request_versions(api_key)[::-1])
    return (api_version,)


@cache
def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS:
        return 0
    return 1 if has(api_key, api_version, RESPONSE) and is_flexible(api_key, api_version, RESPONSE) else 0
