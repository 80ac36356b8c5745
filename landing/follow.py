"""Continuous landing (`kafkawire land --follow DIR --out LAKE`): land the files tcpdump rotates
into DIR (`-C`, `-G`, `-C -W` rings) as each one completes, appended to LAKE with the open
connections carried from file to file (landing.carry), until interrupted or idle.

    follow("caps/", "lake/", idle_exit=10)      # returns a Followed: landed, deleted, faults ...

Which files, in which order (scan, complete):

- The captures of DIR are its regular, non-hidden files that start with a pcap, pcapng, gzip, bzip2
  or xz magic (a file of fewer than 4 bytes is one being created and counts; anything else is
  reported once and left alone).
- They are ordered by their first packet's time, as the native core orders a set it merges; a
  file with no packet yet (tcpdump has written its header only) comes after those, by mtime, then
  name. Names alone do not order tcpdump's rotations: `-C` names `x.pcap`, `x.pcap1`, ...,
  `x.pcap10` (10 sorts before 2), strftime names of `-G` may wrap (%H%M%S), and a `-C N -W K` ring
  reuses `x.pcap0`...: the file rewritten is the newest, with a new first packet.
- tcpdump writes one file at a time: every file but the last of that order is complete. At the
  end (interrupted, `stop()`, or `idle_exit` seconds without a new file or a size change) the last
  one is landed too, as it stands: it may end mid-packet (its truncated_file fault is reported,
  the normal end of a capture cut short, not an error).

A file is known by (path, first packet time): a ring's rewritten `x.pcap0` is a new file. Each
complete file is landed in its own run of `landing.local.land_local(mode="append")`, in order:
its rows, the capture's entry and the carried state are committed together (landing.lake), so a
Ctrl-C lands nothing half-written, and a restarted follow skips the files the runs table holds (same
content) and continues the connections where the last landing left them.

A file gone before it was landed (a `-W` ring overwrote it, a cleanup deleted it) is reported in
one line and skipped. The carried connections then run across a hole: they continue, their bytes
lost in it counted as gaps (`gaps`/`gap_bytes` in connections, `gap_in_frame` anomalies), as one
run over the files kept makes them; the tables equal a one-shot land of the files kept.

The last file, landed at the end as it stood, is written down (LAKE/_kafkawire/follow.json): a
follow restarted while tcpdump went on writing that file finds it grown, reports it and leaves it
(landing it again would land its first part twice; what tcpdump wrote after is not landed).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Entry", "Followed", "complete", "follow", "order_key", "scan"]

# pcap (us and ns, both byte orders), pcapng, gzip, bzip2, xz
_MAGICS = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zX",
)
FOLLOW = "follow.json"  # under LAKE/_kafkawire: the last file landed before it was complete


@dataclass(frozen=True)
class Entry:
    """One capture file of the followed directory, as listed."""

    path: str
    start: float | None  # its first packet's time; None: no packet yet
    size: int
    mtime_ns: int

    @property
    def key(self) -> tuple[str, float | None]:
        """What a file is known by: a ring's rewritten file is another (its first packet differs)."""
        return (self.path, self.start)


def order_key(e: Entry) -> tuple:
    """Capture order: by first packet time; files with no packet yet last, by mtime; then name."""
    if e.start is None:
        return (1, float(e.mtime_ns), os.path.basename(e.path))
    return (0, e.start, os.path.basename(e.path))


def complete(entries: list[Entry], final: bool = False) -> list[Entry]:
    """The complete files of an ordered listing: all but the last (tcpdump's current file), or,
    at the end, all."""
    return list(entries) if final else list(entries[:-1])


def _start(path: str) -> float | None:
    from dissector.native import start_ts

    ts = start_ts(path)
    # the core gives 0.0 for a file without a whole first record (a header only, or being written)
    return None if ts <= 0.0 or ts == float("inf") else ts


# the first packet times of capture files seen unchanged (path, inode, size, mtime): a poll reads
# the head of a new or growing file only, not of every file a long rotation has left in the folder
_STARTS: dict[tuple, float | None] = {}
_STARTS_MAX = 1 << 16


def scan(directory: str | os.PathLike, ignored: set | None = None, report=None) -> list[Entry]:
    """The capture files of `directory` (a folder, or a prefix in a store) in capture order
    (order_key). Files that vanish while listed are left out; other files are reported once
    (through `report`, remembered in `ignored`)."""
    from dissector import fs

    if fs.is_uri(os.fspath(directory)):
        return _scan_remote(os.fspath(directory), ignored, report)
    out = []
    try:
        listing = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for d in listing:
        if d.name.startswith("."):
            continue
        try:
            if not d.is_file():
                continue
            st = d.stat()
            key = (d.path, st.st_ino, st.st_size, st.st_mtime_ns)
            if key in _STARTS:
                out.append(Entry(d.path, _STARTS[key], st.st_size, st.st_mtime_ns))
                continue
            with open(d.path, "rb") as f:
                head = f.read(4)
            if len(head) == 4 and not head.startswith(_MAGICS):
                if ignored is not None and d.path not in ignored:
                    ignored.add(d.path)
                    if report is not None:
                        report(f"kafkawire: {d.path} is not a capture (pcap, pcapng, gzip, bzip2, xz): left alone")
                continue
            start = _start(d.path) if len(head) == 4 else None
        except FileNotFoundError:
            continue
        if start is not None:
            if len(_STARTS) >= _STARTS_MAX:
                _STARTS.clear()
            _STARTS[key] = start
        out.append(Entry(d.path, start, st.st_size, st.st_mtime_ns))
    return sorted(out, key=order_key)


HEAD = 1 << 20  # bytes of a remote file read for its first packet time


def _scan_remote(prefix: str, ignored: set | None, report) -> list[Entry]:
    """scan() of a prefix in an object store: one listing, and a ranged read of the head of each
    file not seen unchanged (its first packet time)."""
    import tempfile

    from dissector import fs

    out = []
    for uri, size, mtime in fs.entries(prefix):
        key = (uri, size, mtime)
        if key in _STARTS:
            out.append(Entry(uri, _STARTS[key], size, mtime))
            continue
        try:
            with fs.open_random(uri) as f:
                head = f.read_at(min(HEAD, f.size), 0)
        except FileNotFoundError:
            continue
        if len(head) >= 4 and not head.startswith(_MAGICS):
            if ignored is not None and uri not in ignored:
                ignored.add(uri)
                if report is not None:
                    report(f"kafkawire: {uri} is not a capture (pcap, pcapng, gzip, bzip2, xz): left alone")
            continue
        start = None
        if len(head) >= 4:
            # the native core reads the first record of the head as it does a local file's
            with tempfile.NamedTemporaryFile(prefix="kafkawire-head-") as t:
                t.write(head)
                t.flush()
                start = _start(t.name)
        if start is not None:
            if len(_STARTS) >= _STARTS_MAX:
                _STARTS.clear()
            _STARTS[key] = start
        out.append(Entry(uri, start, size, mtime))
    return sorted(out, key=order_key)


@dataclass
class Followed:
    """What a follow did."""

    landed: list[str] = field(default_factory=list)  # files landed, in order
    deleted: list[str] = field(default_factory=list)  # files gone before they were landed
    skipped: list[str] = field(default_factory=list)  # files the lake held already (same content)
    faults: list[str] = field(default_factory=list)  # file faults of complete files (exit status 2)
    notes: list[str] = field(default_factory=list)  # faults of the last file, landed as it stood
    grown: list[str] = field(default_factory=list)  # landed as it stood by a follow before, then grew
    interrupted: bool = False
    runs: int = 0


def _deleted_line(path: str) -> str:
    return f"kafkawire: {path} was deleted before it was landed (tcpdump -W ring buffer?)"


def follow(
    directory: str | os.PathLike,
    out: str | os.PathLike,
    *,
    ports=(),
    records: bool = False,
    payloads: bool = True,
    tls_keylog=(),
    threads: int = 1,
    poll: float = 1.0,
    idle_exit: float | None = None,
    stop: Callable[[], bool] | None = None,
    report: Callable[[str], None] = print,
    landed: Callable[[str, dict], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Followed:
    """Land the files tcpdump rotates into `directory` as they complete, appended to the lake
    `out`, until `stop()` is true, `idle_exit` seconds pass without a new file or a size change,
    or Ctrl-C (then: `interrupted`, the files pending landed unless the Ctrl-C came during a
    landing, which is dropped whole). One-line messages go to `report`; `landed(path, counts)`
    after each file. tls_keylog: key log paths (as dissector.dissect takes them), read again for
    every file (clients append to them as they connect). threads: as land_local's (the first
    landing's count holds for the appended ones)."""
    from dissector.tls import read_keylogs
    from landing.lake import HOME

    directory = os.fspath(directory)
    result = Followed()
    done: set = set()  # keys of the files landed, skipped or reported this session
    pending: dict = {}  # key -> Entry: listed, not landed yet
    ignored: set = set()
    home = Path(out) / HOME
    was = _read_follow(home)
    changed = clock()

    def land(e: Entry, final: bool) -> None:
        from landing.local import land_local

        faults: list = []
        skipped: list = []
        try:
            counts = land_local(
                [e.path],
                out,
                ports=ports,
                records=records,
                payloads=payloads,
                faults=faults,
                mode="append",
                skipped=skipped,
                tls_keylogs=read_keylogs(tls_keylog),
                threads=threads,
            )
        except FileNotFoundError:  # gone between the listing and the landing
            gone(e)
            return
        done.add(e.key)
        pending.pop(e.key, None)
        if skipped:
            result.skipped.append(e.path)
            return
        if any("FileNotFoundError" in f for f in faults):  # gone between the listing and the read
            gone(e)
            return
        result.runs += 1
        result.landed.append(e.path)
        for f in faults:
            (result.notes if final else result.faults).append(f)
            report(f"kafkawire: {f}")
        if final:  # landed as it stood: a restarted follow must not land it again
            _write_follow(home, e)
        if landed is not None:
            landed(e.path, counts)

    def gone(e: Entry) -> None:
        done.add(e.key)
        pending.pop(e.key, None)
        result.deleted.append(e.path)
        report(_deleted_line(e.path))

    last: tuple | None = None

    def step(final: bool) -> None:
        nonlocal last, changed
        entries = scan(directory, ignored, report)
        keys = {e.key for e in entries}
        for k, e in list(pending.items()):
            if k not in keys:  # listed before, not landed, gone (or rewritten by a ring)
                gone(e)
        now = tuple((e.path, e.size, e.start) for e in entries)
        moved, last = now != last, now
        for e in entries:
            if e.key not in done and e.start is not None:  # a header alone holds nothing to lose
                pending.setdefault(e.key, e)
        for e in complete(entries, final):
            if e.key in done or e.start is None:
                continue
            if (
                was is not None
                and os.path.abspath(e.path) == was["path"]
                and e.start == was["start"]
                and e.size > was["size"]
            ):
                done.add(e.key)
                pending.pop(e.key, None)
                result.grown.append(e.path)
                report(
                    f"kafkawire: {e.path} grew after a follow landed it as it stood ({was['size']:,} bytes): "
                    "not landed again (its first part is in the lake; the rest is left out)"
                )
                continue
            land(e, final and e is entries[-1])
        if moved:  # idle counts from the end of the landings a change brought
            changed = clock()

    landing = False
    try:
        while True:
            stopping = stop is not None and stop()
            landing = True
            step(False)
            landing = False
            if stopping or (idle_exit is not None and clock() - changed >= idle_exit):
                break
            sleep(poll)
    except KeyboardInterrupt:
        result.interrupted = True
        if landing:  # the landing under way was dropped whole (its staged commit): stop here
            return result
    try:
        step(True)
    except KeyboardInterrupt:
        result.interrupted = True
    return result


def _read_follow(home: Path) -> dict | None:
    try:
        return json.loads((home / FOLLOW).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def _write_follow(home: Path, e: Entry) -> None:
    from landing.lake import write_atomic

    home.mkdir(parents=True, exist_ok=True)
    write_atomic(
        home / FOLLOW, json.dumps({"path": os.path.abspath(e.path), "start": e.start, "size": e.size}).encode()
    )


def table_rows(out: str | os.PathLike, records: bool = False) -> dict[str, int]:
    """Rows per table the lake holds now (a follow's summary)."""
    from landing.schemas import TABLES
    from landing.writer import dataset

    rows = {}
    for t in TABLES:
        if t == "records" and not records:
            continue
        rows[t] = dataset(out, t).count_rows() if (Path(out) / t).is_dir() else 0
    return rows
