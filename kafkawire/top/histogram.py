"""A log-bucketed latency histogram with a bounded relative error (DDSketch's mapping, HDR-like).

Why this and not a t-digest: what `top` shows is a latency, read as "p99 is 40 ms", so the error
that matters is on the value, not on the rank. A log-bucketed histogram guarantees every quantile
(p50 and the tail alike) within a relative error `alpha` of a value at the right rank; a t-digest
bounds the rank error, tightest at the tails and loosest at the median, and its value error
depends on the data. The buckets are also cheap to add to (one log, one dict update), exact to
merge, and bounded: with alpha = 1% the buckets between 1 µs and 1 hour are 1,100, so a group holds
at most that many counters, whatever the number of exchanges.

Quantiles are rank-interpolated as numpy's default ("linear", pandas' quantile, the report's): the
values at ranks floor((n-1)q) and ceil((n-1)q) are each estimated within `alpha`, and so is their
weighted mean; min and max are kept exact and clamp the estimates.
"""

from __future__ import annotations

import math

__all__ = ["LogHistogram", "ALPHA"]

ALPHA = 0.01  # relative error of every quantile
_FLOOR = 1e-3  # ms: values at or below it (1 µs) share the lowest bucket


class LogHistogram:
    """Counts of values (ms, >= 0) in buckets [gamma^(i-1), gamma^i), gamma = (1+alpha)/(1-alpha)."""

    __slots__ = ("alpha", "_gamma", "_log_gamma", "buckets", "count", "min", "max", "total")

    def __init__(self, alpha: float = ALPHA):
        self.alpha = alpha
        self._gamma = (1 + alpha) / (1 - alpha)
        self._log_gamma = math.log(self._gamma)
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.min = math.inf
        self.max = -math.inf
        self.total = 0.0

    def index(self, value: float) -> int:
        """The bucket of a value (the same for every histogram of the same alpha)."""
        return math.ceil(math.log(max(value, _FLOOR)) / self._log_gamma)

    def add(self, value: float, i: int | None = None) -> None:
        """Count a value; `i`, its index() when already known."""
        if i is None:
            i = math.ceil(math.log(max(value, _FLOOR)) / self._log_gamma)
        self.buckets[i] = self.buckets.get(i, 0) + 1
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def merge(self, other: LogHistogram) -> None:
        for i, n in other.buckets.items():
            self.buckets[i] = self.buckets.get(i, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def _value(self, i: int) -> float:
        """The bucket's representative: within alpha of every value in it."""
        return 2 * self._gamma**i / (self._gamma + 1)

    def quantiles(self, qs: list[float]) -> list[float | None]:
        """The values at these quantiles (0..1), rank-interpolated like numpy's "linear"; None when empty."""
        if not self.count:
            return [None] * len(qs)
        ranks = []
        for q in qs:
            h = (self.count - 1) * q
            ranks.append((math.floor(h), math.ceil(h), h - math.floor(h)))
        wanted = sorted({r for lo, hi, _ in ranks for r in (lo, hi)})
        at: dict[int, float] = {}
        seen, k = 0, 0
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            while k < len(wanted) and wanted[k] < seen:
                at[wanted[k]] = self._clamp(wanted[k], i)
                k += 1
            if k == len(wanted):
                break
        return [at[lo] + (at[hi] - at[lo]) * frac for lo, hi, frac in ranks]

    def _clamp(self, rank: int, i: int) -> float:
        if rank == 0:
            return self.min
        if rank == self.count - 1:
            return self.max
        return min(max(self._value(i), self.min), self.max)
