"""Which exchanges to keep: the common cases of tshark's display filters, as options.

    keep = Filter(apis={"Produce", "Fetch"}, topics=("orders*",), min_latency=100.0)
    items = filter(keep, dissect(paths))

APIs by name (case-insensitive) or key; client ids and topics as shell patterns
(fnmatch); times as epoch seconds or ISO 8601 (UTC unless it says otherwise).
Anomalies and connection accounting are kept when the connection and time
filters let them through and no exchange-only filter (API, client id, topic,
errors, latency) is set.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["Filter", "parse_time"]


def parse_time(text: str) -> float:
    """Epoch seconds, or an ISO 8601 date/time (UTC unless it carries an offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a time: {text!r} (epoch seconds or ISO 8601, e.g. 2026-11-21T21:53:49)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return t.timestamp()


@dataclass(frozen=True)
class Filter:
    apis: frozenset = frozenset()  # lower-case names and decimal keys
    client_ids: tuple = ()
    topics: tuple = ()
    errors_only: bool = False
    min_latency: float | None = None  # ms
    connections: frozenset = frozenset()
    time_from: float | None = None
    time_to: float | None = None

    @classmethod
    def of(
        cls,
        apis=(),
        client_ids=(),
        topics=(),
        errors_only=False,
        min_latency=None,
        connections=(),
        time_from=None,
        time_to=None,
    ) -> Filter:
        return cls(
            frozenset(str(a).lower() for a in apis),
            tuple(client_ids),
            tuple(topics),
            errors_only,
            min_latency,
            frozenset(connections),
            time_from,
            time_to,
        )

    def __bool__(self) -> bool:
        return bool(
            self.apis
            or self.client_ids
            or self.topics
            or self.errors_only
            or self.min_latency is not None
            or self.connections
            or self.time_from is not None
            or self.time_to is not None
        )

    def _exchange_only(self) -> bool:
        return bool(self.apis or self.client_ids or self.topics or self.errors_only or self.min_latency is not None)

    def __call__(self, item) -> bool:
        kind = item.type
        if self.connections and item.connection not in self.connections:
            return False
        if kind == "connection":
            ts = item.first_ts
        else:
            ts = item.ts
            if ts is None and kind == "exchange":
                ts = item.response_ts
        if self.time_from is not None and (ts is None or ts < self.time_from):
            return False
        if self.time_to is not None and (ts is None or ts >= self.time_to):
            return False
        if kind != "exchange":
            return not self._exchange_only()
        if self.apis and (item.api_name or "").lower() not in self.apis and str(item.api_key) not in self.apis:
            return False
        if self.client_ids and not any(fnmatchcase(item.client_id or "", p) for p in self.client_ids):
            return False
        if self.errors_only and not item.error_codes and item.status == "ok":
            return False
        if self.min_latency is not None and (item.latency_ms is None or item.latency_ms < self.min_latency):
            return False
        if self.topics:
            from dissector.topics import topics

            names = topics(item)
            if not any(fnmatchcase(t, p) for t in names for p in self.topics):
                return False
        return True
