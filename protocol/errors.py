"""Kafka error codes (generated table) and the one exception type for bad bytes."""

from __future__ import annotations

from ._generated.error_codes import ERRORS
from .api_names import api_name


class DecodeError(ValueError):
    """Bytes that do not decode as the message they claim to be.

    Says which api/version/field and at what byte offset decoding stopped, so a
    dissector can report the frame and keep going.
    """

    def __init__(
        self,
        reason: str,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        direction: str | None = None,
        field: str = "",
        offset: int | None = None,
    ):
        self.reason = reason
        self.api_key = api_key
        self.api_version = api_version
        self.direction = direction
        self.field = field
        self.offset = offset
        self.decodes_as: list[int] = []  # other versions the bytes decode as whole, when known
        where = []
        if api_key is not None:
            where.append(f"{api_name(api_key)} v{api_version} {direction or ''}".rstrip())
        if field:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


def error_name(code: int) -> str:
    entry = ERRORS.get(code)
    return entry[0] if entry else f"UNKNOWN_ERROR_{code}"


def is_retriable(code: int) -> bool:
    entry = ERRORS.get(code)
    return bool(entry and entry[1])
