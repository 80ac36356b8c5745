"""Both cores for `kafkawire dissect`: connections sharded over worker processes.

Connections are independent, so each of `jobs` forked workers reads the whole
capture (reading is cheap next to reassembly and decoding) but reassembles,
decodes and formats only its own connections, and sends formatted lines to the
parent. Which connection goes where is planned before the workers start: one
pass over the frame headers weighs each connection by its frames (per-exchange
work dominates, not per-byte work) and the heaviest go first, each to the
lightest shard so far. A worker drops another's frames by their raw endpoint
bytes before parsing them. The parent gives every connection the id
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
import zlib
from multiprocessing.connection import wait

import orjson

from dissector.order import MAX_BYTES, MAX_ITEMS, WINDOW

__all__ = ["dissect_lines", "default_jobs"]

_BATCH = 512  # frames a worker reads between two messages to the parent
_SENTINEL = 10**15  # connection ids in worker lines are -(_SENTINEL + local id) until renumbered
_INF = float("inf")
_MAX_PLANNED = 200_000  # connections weighed in advance (each way of keying them)
_UNNAMED = re.compile(rb'"TopicId":"([0-9a-f-]{36})","TopicName":null')
_UNNAMED_TEXT = re.compile(rb"topic-id:([0-9a-f-]{36})")  # dissector.topics.UNRESOLVED in text lines


class _Enough(Exception):
    pass


AUTO_PACKETS = 100_000  # captures of about this many packets or more use every core by default


def default_jobs(paths=None) -> int:
    """Workers for `dissect` without --jobs: one per core (at most two: the parent's merge is the next
    limit) when the capture holds about AUTO_PACKETS packets or more, judged from its size and its first
    packets; one below that, where forking and reading the capture once per worker cost more than they
    give (a capture of big batches has few packets for its size, and little per-packet work)."""
    cores = max(1, min(2, os.cpu_count() or 1))
    if paths is None or cores == 1:
        return cores
    from dissector.capture import _capture_files, read_packets

    files = _capture_files([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            pass  # the reader reports it
    seen = [0, 0]  # records, bytes (with their 16-byte pcap record headers)

    def count(linktype, raw, index):
        seen[0] += 1
        seen[1] += len(raw) + 16
        if seen[0] >= 2000:
            raise _Enough
        return True

    try:
        for _ in read_packets(files[:1], skip=count):  # only faults come out: every frame is skipped
            pass
    except _Enough:
        pass
    if not seen[0]:
        return 1
    return cores if total / (seen[1] / seen[0]) >= AUTO_PACKETS else 1


def _raw_key(linktype: int, raw) -> bytes | None:
    """The endpoints of a plain TCP/IPv4-over-Ethernet frame as raw bytes (source address, destination
    address, ports), read without parsing the packet; None for anything else (other link types, IPv6,
    fragments, cut headers: the parser handles and reports those)."""
    if linktype != 1 or len(raw) < 34 or raw[12:14] != b"\x08\x00" or raw[23] != 6 or raw[20] & 0x3F or raw[21]:
        return None
    t = 14 + ((raw[14] & 15) << 2)
    if len(raw) < t + 20:
        return None
    return raw[26:34] + raw[t : t + 4]


def _reverse(key: bytes) -> bytes:
    return key[4:8] + key[:4] + key[10:12] + key[8:10]


def _hashed(key, jobs: int) -> int:
    """The shard of a connection the plan did not weigh (past its bound): the same in every worker."""
    return zlib.crc32(repr(key).encode()) % jobs


def _owners(paths, jobs: int) -> tuple[dict, dict]:
    """Each connection's shard, decided before any worker starts: one pass over the frame headers
    weighs every connection (a frame with payload counts far more than its bytes: per-exchange work,
    not per-byte work, dominates), then the heaviest go first, each to the lightest shard so far.
    Returns (raw endpoint bytes -> shard, (src, sport, dst, dport) -> shard), both directions; the
    second for frames without raw keys (other link types, IPv6). At most _MAX_PLANNED connections
    each; the rest are hashed."""
    from dissector.capture import Packet, read_packets

    raw_cost: dict = {}  # raw endpoint bytes, either direction -> [cost, the connection's raw key]
    text_cost: dict = {}

    def weigh(linktype, raw, index):
        key = _raw_key(linktype, raw)
        if key is None:
            return False  # parsed below
        entry = raw_cost.get(key)
        if entry is None:
            if len(raw_cost) >= 2 * _MAX_PLANNED:
                return True
            entry = raw_cost[key] = raw_cost[_reverse(key)] = [0, key]
        entry[0] += _frame_cost(len(raw) - 54)  # headers without options: a weight, not a count
        return True

    for pkt in read_packets(paths, skip=weigh):
        if type(pkt) is Packet:
            key = min((pkt.src, pkt.sport, pkt.dst, pkt.dport), (pkt.dst, pkt.dport, pkt.src, pkt.sport))
            if key in text_cost or len(text_cost) < _MAX_PLANNED:
                text_cost[key] = text_cost.get(key, 0) + _frame_cost(len(pkt.payload))
    load = [0] * jobs
    fast: dict = {}
    owner: dict = {}
    conns = {id(e): e for e in raw_cost.values()}.values()
    both = [(c, 0, key) for c, key in conns] + [(c, 1, key) for key, c in text_cost.items()]
    both.sort(key=lambda x: (-x[0], x[1], x[2]))
    for cost, text, key in both:
        shard = load.index(min(load))
        load[shard] += cost
        if text:
            owner[key] = owner[(key[2], key[3], key[0], key[1])] = shard
        else:
            fast[key] = fast[_reverse(key)] = shard
    return fast, owner


def _frame_cost(payload: int) -> int:
    # a frame with data costs about what 16 KB of record bytes do (frames, pairing, decoding, output);
    # a bare ACK about a tenth of that (reading, reassembly)
    return 16384 + payload if payload > 0 else 1600


def _worker(k: int, jobs: int, paths, opts: dict, owners, conn) -> None:
    """Dissect the connections of shard k; send [(kind, ...)] batches and a final None."""
    try:
        _work(k, jobs, paths, opts, owners, conn)
    except BaseException as e:  # noqa: BLE001 - the parent must hear of it, not hang
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def _work(k: int, jobs: int, paths, opts: dict, owners, conn) -> None:
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
    out: list = []
    faults: list = []
    from dissector.capture import FILE_FAULTS

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

    fast, owner = owners  # see _owners: every worker got the same from the parent
    judged = (0, 0)  # (frame, shard) of the last frame `skip` found the shard of
    quiet = 0  # frames dropped since the last one let through

    def skip(linktype, raw, index):
        nonlocal judged, quiet
        key = _raw_key(linktype, raw)
        if key is None:
            return False
        shard = fast.get(key)
        if shard is None:
            rev = _reverse(key)
            shard = _hashed(min(key, rev), jobs)
        judged = (index, shard)
        if shard == k:
            return False
        quiet += 1
        if quiet < _BATCH:
            return True
        quiet = 0  # let one through: the parent must hear how far this worker has read
        return False

    now = None
    frame = 0
    sent = 0
    names = ex.topic_names
    told = 0
    for pkt in read_packets(paths, skip=skip):
        if type(pkt) is CaptureAnomaly:
            if k == 0:  # every worker reads every file; one reports its faults
                emit(feed(pkt))
            continue
        frame = pkt.index
        if judged[0] == frame:
            shard = judged[1]
        else:
            key = (pkt.src, pkt.sport, pkt.dst, pkt.dport)
            shard = owner.get(key)
            if shard is None:
                shard = _hashed(min(key, (pkt.dst, pkt.dport, pkt.src, pkt.sport)), jobs)
        if shard == k:
            if now is None or pkt.ts > now:
                now = pkt.ts
            for ev in reasm.feed(pkt):
                if type(ev).__name__ == "Open":
                    out.append(("open", ev.conn, pkt.index))
                items = feed(ev)
                if items:
                    emit(items)
            if len(names) != told:  # the other workers' lines may name these topic ids
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
        self.passed = [0.0] * jobs  # frame index each worker has read past
        self.oldest: list = [None] * jobs  # each worker's oldest open time
        self.now = None
        self.opens: list = []  # heap of (first frame, worker, local id) not yet numbered
        self.ids: dict = {}  # (worker, local id) -> global id
        self.next_id = 0
        self.waiting: dict = {}  # (worker, local id) -> [entries] until numbered
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
        if self.waiting:  # lines of a connection not numbered yet hold back everything after them
            first = min(x[0] for lines in self.waiting.values() for x in lines)
            bound = min(bound, first)
        pop = heapq.heappop
        safe = min(self.passed)
        while heap and (heap[0][0] < bound or len(heap) > MAX_ITEMS or self.bytes > MAX_BYTES):
            if heap[0][5] > safe and len(heap) <= MAX_ITEMS and self.bytes <= MAX_BYTES:
                break  # a name for its topic ids may still come from a worker that is behind
            entry = pop(heap)
            self.bytes -= entry[3]
            self._out(entry)

    def finish(self) -> None:
        self.passed = [_INF] * len(self.passed)
        self._number()
        for key, lines in list(self.waiting.items()):  # cannot happen: every connection opened somewhere
            for ts, size, line, frame in lines:
                self._hold(ts, -1, size, line, frame)
        self.waiting.clear()
        self._release(final=True)


def dissect_lines(
    paths,
    out,
    *,
    jobs: int,
    fmt: str = "text",
    ports=(),
    max_frame_size: int,
    show_secrets: bool = False,
    records: bool = False,
    raw: bool = False,
    window: float = WINDOW,
    keep=None,
    payloads: bool = True,
) -> list[str]:
    """Write the dissect output of `paths` to the binary stream `out` using `jobs` processes.
    Returns the file-level faults (corrupt, cut or empty capture files), one line each."""
    ctx = mp.get_context("fork")  # workers inherit the parent's hash seed, so shards agree
    opts = {
        "format": fmt,
        "ports": tuple(ports),
        "max_frame_size": max_frame_size,
        "show_secrets": show_secrets,
        "records": records,
        "raw": raw,
        "keep": keep,
        "payloads": payloads,
    }
    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    owners = _owners(paths, jobs)
    pipes, procs = [], []
    for k in range(jobs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(k, jobs, paths, opts, owners, send), daemon=True)
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
