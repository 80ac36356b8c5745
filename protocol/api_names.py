"""An API key's name, as Kafka's specs spell it (Unknown(N) for a key no spec names)."""

from __future__ import annotations

from ._generated.registry_data import API_NAMES

__all__ = ["api_name"]


def api_name(api_key: int) -> str:
    name = API_NAMES.get(api_key)
    return f"Unknown({api_key})" if name is None else name
