"""How `kafkawire top` draws a snapshot: one rich renderable sized to the terminal (80x24 and up).

    view = View(grouping="api", sort="rate")
    console.print(view.render(model.snapshot(view.grouping), width=80, height=24, state="x20 playing"))

Layout, top to bottom: a header line (the clock, what is playing, the grouping and window), a line of
totals, a table of the groups (the sort's top N that fit the height), the error codes with their
names, the consumer groups rebalancing, and a footer with the keys. Lines never pass `width`: the
group column is cut with an ellipsis, the others have fixed widths (68 columns without the key's).

Two sets of columns (the `t` key switches): the last interval (req/s, p50/p99/max of its answers,
err/s, KB/s) and since start (requests, p50/p99/max from the histogram, errors, bytes); both end with
the requests in flight and unanswered now. By topic, the bytes are the topic's record bytes, in two
columns: in (produced) and out (fetched), KB/s over the interval, bytes since start; the `bytes`
sort takes their sum.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from kafkawire.top.model import Row, Snapshot
from kafkawire.top.options import GROUPINGS, SORTS

__all__ = ["View", "SORTS", "MODES", "fmt_ms", "fmt_rate", "fmt_bytes"]

MODES = ("interval", "total")
# the Row field each sort reads, per mode
_SORT_FIELD = {
    "interval": {"rate": "rate", "p99": "p99", "max": "max", "errors": "errors_rate", "bytes": "bytes_rate"},
    "total": {"rate": "requests", "p99": "p99_all", "max": "max_all", "errors": "errors", "bytes": "bytes"},
}
_KEY_HEADER = {"api": "api", "client": "client id", "broker": "broker", "topic": "topic"}
_FIXED = 6  # lines besides the table's rows, errors and rebalances: header 2, table head 2, footer 1, spare 1
# the numeric columns' headers (the interval's, since start's) and widths
_COLUMNS = (
    ("req/s", "reqs", 6),
    ("p50", "p50", 6),
    ("p99", "p99", 6),
    ("max", "max", 6),
    ("err/s", "errors", 6),
    ("KB/s", "bytes", 6),
    ("infl", "infl", 5),
    ("unans", "unans", 5),
)
# by topic, the bytes column is two: records in (produced) and out (fetched)
_TOPIC_COLUMNS = (*_COLUMNS[:5], ("in/s", "in", 6), ("out/s", "out", 6), *_COLUMNS[6:])
_SORT_COLUMN = {"rate": 0, "p99": 2, "max": 3, "errors": 4, "bytes": 5}  # the column each sort marks


def fmt_ms(v: float | None) -> str:
    """A latency in ms in at most 6 characters, three significant digits or more."""
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.2f}"
    if v < 100:
        return f"{v:.1f}"
    if v < 100_000:
        return f"{v:.0f}"
    return f"{v / 1000:.0f}s"


def fmt_rate(v: float) -> str:
    if v == 0:
        return "0"
    if v < 100:
        return f"{v:.1f}"
    if v < 10_000:
        return f"{v:.0f}"
    return f"{v / 1000:.1f}k"


def fmt_bytes(v: float) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"


def fmt_count(v: int) -> str:
    if v < 1_000_000:
        return str(v)
    return f"{v / 1e6:.1f}M"


@dataclass
class View:
    grouping: str = "api"
    sort: str = "rate"
    mode: str = "interval"
    frozen: bool = False

    def cycle_grouping(self) -> None:
        self.grouping = GROUPINGS[(GROUPINGS.index(self.grouping) + 1) % len(GROUPINGS)]

    def cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def toggle_mode(self) -> None:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]

    def key(self, ch: str) -> bool:
        """Apply a key press; False for `q` (quit)."""
        if ch == "q":
            return False
        if ch == "g":
            self.cycle_grouping()
        elif ch == "s":
            self.cycle_sort()
        elif ch == "t":
            self.toggle_mode()
        elif ch == "f":
            self.frozen = not self.frozen
        return True

    def ordered(self, rows: list[Row]) -> list[Row]:
        f = _SORT_FIELD[self.mode][self.sort]
        by_key = sorted(rows, key=lambda r: r.key)
        return sorted(by_key, key=lambda r: -(getattr(r, f) or 0))

    def render(self, snap: Snapshot, width: int = 80, height: int | None = 24, state: str = "", keys: bool = True):
        """A rich renderable of the snapshot, at most `width` columns and `height` lines (None: every row)."""
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        lines_errors = self._errors(snap)
        lines_rebalances = self._rebalances(snap)
        rows = self.ordered(snap.rows)
        if height is not None:
            room = height - _FIXED + (0 if keys else 1)
            extra = lines_errors + lines_rebalances
            # errors and rebalances take at most half of what is left; the table keeps at least 3 rows
            keep = max(0, min(len(extra), (room - min(3, len(rows))) // 2 if len(rows) > 3 else room - len(rows)))
            lines_errors = lines_errors[: min(len(lines_errors), keep)]
            lines_rebalances = lines_rebalances[: max(0, keep - len(lines_errors))]
            room -= len(lines_errors) + len(lines_rebalances)
            if len(rows) > room:
                rows = rows[: max(0, room - 1)]
                hidden = len(snap.rows) - len(rows)
            else:
                hidden = 0
        else:
            hidden = 0
        total = snap.total
        clock = "--:--:--" if snap.clock is None else _clock(snap.clock)
        head = f"kafkawire top  {clock}  {state}".rstrip()
        span = f"last {snap.window:g}s" if self.mode == "interval" else "since start"
        tail = f"{snap.grouping}  {span}"
        head = head[: max(0, width - 2 - len(tail))]
        head = head + " " * max(2, width - len(head) - len(tail)) + tail
        totals = (
            f"{total.requests} reqs {fmt_rate(total.rate)}/s  p99 {fmt_ms(total.p99_all)}ms  "
            f"errors {total.errors}  in flight {total.in_flight}  unanswered {total.unanswered}  "
            f"rebalancing {len(snap.rebalances)}"
        )
        if snap.anomalies:
            totals += f"  anomalies {snap.anomalies}"
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0), expand=False)
        by_topic = snap.grouping == "topic"
        columns = _TOPIC_COLUMNS if by_topic else _COLUMNS
        nums = sum(w for *_, w in columns) + len(columns)  # with the separators: the key column gets the rest
        table.add_column(_KEY_HEADER[snap.grouping], no_wrap=True, overflow="ellipsis", max_width=max(8, width - nums))
        interval = self.mode == "interval"
        marked = {_SORT_COLUMN[self.sort]} | ({6} if by_topic and self.sort == "bytes" else set())
        for i, (head_interval, head_total, w) in enumerate(columns):
            label = (head_interval if interval else head_total) + ("*" if i in marked else "")
            table.add_column(label, justify="right", no_wrap=True, min_width=w)
        for r in rows:
            table.add_row(r.key, *self._cells(r, interval, by_topic))
        out = [Text(head[:width]), Text(totals[:width]), table]
        if hidden:
            out.append(Text(f"... {hidden} more (sorted by {self.sort})"[:width]))
        out.extend(Text(line[:width]) for line in lines_errors + lines_rebalances)
        if keys:
            frozen = "  FROZEN" if self.frozen else ""
            foot = f"g:group={snap.grouping} s:sort={self.sort} t:{self.mode} f:freeze q:quit{frozen}"
            out.append(Text(foot[:width], style="reverse"))
        return Group(*out)

    @staticmethod
    def _cells(r: Row, interval: bool, by_topic: bool = False) -> list[str]:
        if interval:
            kb = [r.in_rate, r.out_rate] if by_topic else [r.bytes_rate]
            return [
                fmt_rate(r.rate),
                fmt_ms(r.p50),
                fmt_ms(r.p99),
                fmt_ms(r.max),
                fmt_rate(r.errors_rate),
                *(f"{v / 1024:.1f}" for v in kb),
                str(r.in_flight),
                str(r.unanswered),
            ]
        return [
            fmt_count(r.requests),
            fmt_ms(r.p50_all),
            fmt_ms(r.p99_all),
            fmt_ms(r.max_all),
            fmt_count(r.errors),
            *(fmt_bytes(v) for v in ([r.bytes_in, r.bytes_out] if by_topic else [r.bytes])),
            str(r.in_flight),
            str(r.unanswered),
        ]

    def _errors(self, snap: Snapshot) -> list[str]:
        if not snap.errors:
            return []
        return [
            f"err {e.key} {e.name}({e.code}) {fmt_rate(e.rate)}/s total {e.count}"
            for e in (snap.errors if self.mode == "interval" else sorted(snap.errors, key=lambda e: -e.count))
        ]

    @staticmethod
    def _rebalances(snap: Snapshot) -> list[str]:
        out = []
        for r in snap.rebalances:
            age = "" if snap.clock is None else f" for {snap.clock - r.since:.1f}s"
            gen = "" if r.generation is None else (" gen " if r.kind == "classic" else " epoch ") + str(r.generation)
            out.append(f"rebalancing {r.group_id} ({r.kind}): {r.members} member(s) joining{age}{gen}")
        return out


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
