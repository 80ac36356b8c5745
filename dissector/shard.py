"""Both cores for `kafkawire dissect`: connections sharded over worker processes.

Connections are independent, so each of `jobs` forked workers reads the whole
capture (reading is cheap next to reassembly and decoding) but reassembles,
decodes and formats only its own connections, and sends formatted lines to the
parent. A new connection goes to the shard with the fewest bytes so far; every
worker reads the same packets, so all make the same choice without talking. The parent gives every connection the id
the single-process pipeline would (its rank by first frame, over all workers:
a connection opens in exactly one worker, and each worker reports the frames
it has read past, so ranks are final once every worker has passed a frame)
and writes the lines in request-time order with the same bounded reordering
as dissector.order (its watermark is the oldest open time over all workers).

Topic ids: each worker resolves them from its own connections' responses and
reports the names it learns with the frame they came in; the parent fills in a
`"TopicName": null` from another worker's name learned at an earlier frame, as
one process would have. The lines are the same as one process writes, in the
same order, except items released early past the reordering bounds (an answer
slower than the window, see dissector.order), whose place can differ: a test
compares the two on every sample.
"""
from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import re
from multiprocessing.connection import wait

import orjson

from dissector.order import MAX_BYTES, MAX_ITEMS, WINDOW

__all__ = ["dissect_lines", "default_jobs"]

_BATCH = 512                    # frames a worker reads between two messages to the parent
_SENTINEL = 10 ** 15            # connection ids in worker lines are -(_SENTINEL + local id) until renumbered
_INF = float("inf")
_UNNAMED = re.compile(rb'"TopicId":"([0-9a-f-]{36})","TopicName":null')
_UNNAMED_TEXT = re.compile(rb"topic-id:([0-9a-f-]{36})")     # dissector.topics.UNRESOLVED in text lines


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _worker(k: int, jobs: int, paths, opts: dict, conn) -> None:
    """Dissect the connections of shard k; send [(kind, ...)] batches and a final None."""
    try:
        _work(k, jobs, paths, opts, conn)
    except BaseException as e:  # noqa: BLE001 - the parent must hear of it, not hang
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def _work(k: int, jobs: int, paths, opts: dict, conn) -> None:
    from dissector.capture import CaptureAnomaly, read_packets
    from dissector.exchanges import Exchanges
    from dissector.output import _Encoder, format_text
    from dissector.redact import redact
    from dissector.tcp import Reassembler

    fmt = opts["format"]
    if fmt == "jsonl":
        encode = _Encoder(opts["records"], opts["raw"], opts.get("payloads", True)).line
    else:
        def encode(item):
            return (format_text(item) + "\n").encode()
    show = opts["show_secrets"]
    keep = opts.get("keep")
    reasm = Reassembler()
    ex = Exchanges(ports=opts["ports"], max_frame_size=opts["max_frame_size"])
    feed = ex.feed
    owner: dict = {}
    load = [0] * jobs     # payload bytes given to each shard so far
    out: list = []
    faults: list = []
    from dissector.cli import FILE_FAULTS

    def emit(items) -> None:
        for item in items:
            kind = item.type
            if kind == "exchange":
                ts = item.ts if item.ts is not None else item.response_ts
                size = (item.request_size or 0) + (item.response_size or 0)
            else:
                ts = item.ts
                size = 0
            local = item.connection
            if local is None and kind == "anomaly" and item.kind in FILE_FAULTS:
                faults.append(item.detail)
            if keep is not None and not keep(item):
                continue
            if local is not None:
                item.connection = -(_SENTINEL + local)
            if not show:
                item = redact(item)
            out.append(("item", local, -_INF if ts is None else ts, size, encode(item), frame))

    # The owner of a TCP/IPv4-over-Ethernet frame whose endpoints have been seen is known from its raw
    # bytes: another worker's frames are dropped before they are parsed. Every worker runs the same
    # code over the same frames, so `load` (and with it each new connection's shard) stays the same in all.
    fast: dict = {}         # raw endpoint bytes (both directions) -> shard
    counted = (0, 0)        # (frame, shard) of the last frame `skip` judged and counted into `load`
    fresh = (0, b"")        # (frame, raw endpoint bytes) of the last frame `skip` did not know
    quiet = 0               # frames dropped since the last one let through

    def skip(linktype, raw, index):
        nonlocal counted, fresh, quiet
        if linktype != 1 or raw[12:14] != b"\x08\x00" or raw[23] != 6 or raw[20] & 0x3F or raw[21]:
            return False        # not plain IPv4/TCP (or a fragment, reported by the parser)
        t = 14 + ((raw[14] & 15) << 2)
        if len(raw) < t + 20:
            return False        # a cut TCP header: the parser reports it
        key = raw[26:34] + raw[t:t + 4]
        shard = fast.get(key)
        if shard is None:
            fresh = (index, key)
            return False
        load[shard] += len(raw)
        counted = (index, shard)
        if shard == k:
            return False
        quiet += 1
        if quiet < _BATCH:
            return True
        quiet = 0       # let one through: the parent must hear how far this worker has read
        return False

    now = None
    frame = 0
    sent = 0
    names = ex.topic_names
    told = 0
    for pkt in read_packets(paths, skip=skip):
        if type(pkt) is CaptureAnomaly:
            if k == 0:   # every worker reads every file; one reports its faults
                emit(feed(pkt))
            continue
        frame = pkt.index
        if counted[0] == frame:
            shard = counted[1]
        else:
            key = (pkt.src, pkt.sport, pkt.dst, pkt.dport)
            shard = owner.get(key)
            if shard is None:
                if len(owner) > 200_000:   # bounded: a scan of many ports must not grow memory
                    owner.clear()
                    fast.clear()
                # every worker sees the same packets and so makes the same choice: the least loaded shard
                shard = load.index(min(load))
                owner[key] = owner[(pkt.dst, pkt.dport, pkt.src, pkt.sport)] = shard
            load[shard] += len(pkt.payload) + 64
            if fresh[0] == frame:
                raw = fresh[1]
                fast[raw] = fast[raw[4:8] + raw[:4] + raw[10:12] + raw[8:10]] = shard
        if shard == k:
            if now is None or pkt.ts > now:
                now = pkt.ts
            for ev in reasm.feed(pkt):
                if type(ev).__name__ == "Open":
                    out.append(("open", ev.conn, pkt.index))
                items = feed(ev)
                if items:
                    emit(items)
            if len(names) != told:   # the other workers' lines may name these topic ids
                out.append(("names", frame, [(str(u), v) for u, v in list(names.items())[told:]]))
                told = len(names)
        if frame - sent >= _BATCH:
            sent = frame
            oldest = ex.oldest_open()
            stuck = reasm.oldest_held()
            if stuck is not None and (oldest is None or stuck < oldest):
                oldest = stuck
            conn.send(("batch", pkt.index, now, oldest, out))
            out = []
    frame = _INF
    for ev in reasm.finish():
        emit(feed(ev))
    emit(ex.finish(now))
    conn.send(("batch", _INF, now, None, out))
    conn.send(("done", faults))


class _Merge:
    """The parent's side: renumber connections, order lines, write them."""

    def __init__(self, jobs: int, put, window: float):
        self.put = put
        self.window = window
        self.passed = [0.0] * jobs          # frame index each worker has read past
        self.oldest: list = [None] * jobs   # each worker's oldest open time
        self.now = None
        self.opens: list = []               # heap of (first frame, worker, local id) not yet numbered
        self.ids: dict = {}                 # (worker, local id) -> global id
        self.next_id = 0
        self.waiting: dict = {}             # (worker, local id) -> [entries] until numbered
        self.names: dict[bytes, tuple] = {}  # topic id -> (frame it was learned at, name as JSON)
        self.heap: list = []
        self.seq = 0
        self.bytes = 0

    def batch(self, w: int, passed, now, oldest, entries) -> None:
        for e in entries:
            kind = e[0]
            if kind == "open":
                heapq.heappush(self.opens, (e[2], w, e[1]))
            elif kind == "names":
                for tid, name in e[2]:
                    key = tid.encode()
                    if key not in self.names or self.names[key][0] > e[1]:
                        self.names[key] = (e[1], orjson.dumps(name))
            else:
                _, local, ts, size, line, frame = e
                if local is None:
                    self._hold(ts, -1, size, line, frame)
                elif (w, local) in self.ids:
                    self._line(self.ids[(w, local)], local, ts, size, line, frame)
                else:
                    self.waiting.setdefault((w, local), []).append((ts, size, line, frame))
        self.passed[w] = passed
        self.oldest[w] = oldest
        if now is not None and (self.now is None or now > self.now):
            self.now = now
        self._number()
        self._release()

    def _number(self) -> None:
        safe = min(self.passed)
        opens = self.opens
        while opens and opens[0][0] <= safe:
            _, w, local = heapq.heappop(opens)
            gid = self.ids[(w, local)] = self.next_id
            self.next_id += 1
            for ts, size, line, frame in self.waiting.pop((w, local), ()):
                self._line(gid, local, ts, size, line, frame)

    def _line(self, gid: int, local: int, ts, size, line: bytes, frame) -> None:
        line = line.replace(str(-(_SENTINEL + local)).encode(), str(gid).encode(), 1)
        self._hold(ts, gid, size, line, frame)

    def _hold(self, ts, gid, size, line, frame) -> None:
        self.seq += 1
        self.bytes += size + 512
        heapq.heappush(self.heap, (ts, gid, self.seq, size + 512, line, frame))

    def _named(self, line: bytes, frame) -> bytes:
        """Topic ids another worker had learned a name for before this item's frame, as one process would."""
        names = self.names

        def sub(m):
            known = names.get(m.group(1))
            if known is None or known[0] >= frame:
                return m.group(0)
            return b'"TopicId":"' + m.group(1) + b'","TopicName":' + known[1]
        def text(m):
            known = names.get(m.group(1))
            if known is None or known[0] >= frame:
                return m.group(0)
            return orjson.loads(known[1]).encode()
        if line[:1] == b"{":
            return _UNNAMED.sub(sub, line)
        return _UNNAMED_TEXT.sub(text, line)

    def _out(self, entry) -> None:
        line = entry[4]
        if self.names and (b'"TopicName":null' in line or b"topic-id:" in line):
            line = self._named(line, entry[5])
        self.put(line)

    def _release(self, final: bool = False) -> None:
        heap = self.heap
        if final:
            while heap:
                self._out(heapq.heappop(heap))
            return
        if self.now is None:
            return
        open_times = [t for t in self.oldest if t is not None]
        oldest = min(open_times) if open_times else None
        now = self.now
        bound = now if oldest is None or oldest > now else max(oldest, now - self.window)
        if self.waiting:   # lines of a connection not numbered yet hold back everything after them
            first = min(x[0] for lines in self.waiting.values() for x in lines)
            bound = min(bound, first)
        pop = heapq.heappop
        safe = min(self.passed)
        while heap and (heap[0][0] < bound or len(heap) > MAX_ITEMS or self.bytes > MAX_BYTES):
            if heap[0][5] > safe and len(heap) <= MAX_ITEMS and self.bytes <= MAX_BYTES:
                break   # a name for its topic ids may still come from a worker that is behind
            entry = pop(heap)
            self.bytes -= entry[3]
            self._out(entry)

    def finish(self) -> None:
        self.passed = [_INF] * len(self.passed)
        self._number()
        for key, lines in list(self.waiting.items()):   # cannot happen: every connection opened somewhere
            for ts, size, line, frame in lines:
                self._hold(ts, -1, size, line, frame)
        self.waiting.clear()
        self._release(final=True)


def dissect_lines(paths, out, *, jobs: int, fmt: str = "text", ports=(), max_frame_size: int,
                  show_secrets: bool = False, records: bool = False, raw: bool = False,
                  window: float = WINDOW, keep=None, payloads: bool = True) -> list[str]:
    """Write the dissect output of `paths` to the binary stream `out` using `jobs` processes.
    Returns the file-level faults (corrupt, cut or empty capture files), one line each."""
    ctx = mp.get_context("fork")   # workers inherit the parent's hash seed, so shards agree
    opts = {"format": fmt, "ports": tuple(ports), "max_frame_size": max_frame_size, "show_secrets": show_secrets,
            "records": records, "raw": raw, "keep": keep, "payloads": payloads}
    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    pipes, procs = [], []
    for k in range(jobs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(k, jobs, paths, opts, send), daemon=True)
        p.start()
        send.close()
        pipes.append(recv)
        procs.append(p)
    merge = _Merge(jobs, out.write, window)
    live = {pipe: k for k, pipe in enumerate(pipes)}
    error = None
    faults: list = []
    try:
        while live:
            for pipe in wait(list(live)):
                k = live[pipe]
                try:
                    msg = pipe.recv()
                except EOFError:
                    del live[pipe]
                    error = error or f"worker {k} ended without finishing"
                    continue
                if msg[0] == "batch":
                    merge.batch(k, *msg[1:])
                elif msg[0] == "done":
                    faults += msg[1]
                    del live[pipe]
                else:
                    del live[pipe]
                    error = error or msg[1]
        if error:
            raise RuntimeError(f"a dissect worker failed: {error}")
        merge.finish()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(5)
    return faults
