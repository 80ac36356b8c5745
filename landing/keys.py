"""What identifies and partitions a table row, for whoever writes rows beside the native core's
(replay's tables) or joins them: `exchange_id` (the stable id that joins every table),
`date_of` (a row's `date` partition) and `UNRESOLVED` (the prefix of a topic known only by its id).
The native core computes the same (native/py/src/rows.rs)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import struct
from functools import lru_cache

from dissector.topics import UNRESOLVED

__all__ = ["UNRESOLVED", "date_of", "exchange_id"]

_ID = struct.Struct(">q")


def exchange_id(
    connection: int | None, correlation_id: int | None, ts: float | None, response_ts: float | None, api_key: int | None
) -> int:
    """A stable 64-bit id from what identifies an exchange in any engine and any split of the capture."""
    key = f"{connection}|{correlation_id}|{_us(ts)}|{_us(response_ts)}|{api_key}".encode()
    return _ID.unpack(hashlib.blake2b(key, digest_size=8).digest())[0]


def _us(ts: float | None) -> int | None:
    # microseconds since the epoch, rounded to the capture's resolution: float noise cannot change an id
    return None if ts is None else round(ts * 1_000_000)


@lru_cache(maxsize=4096)
def _day(days: int) -> str:
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=days)).isoformat()


def date_of(ts: float | None) -> str | None:
    """The partition value of a row: its UTC date, None when the time is unknown."""
    if not ts:
        return None
    return _day(int(ts // 86400))
