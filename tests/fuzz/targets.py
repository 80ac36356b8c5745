"""Fuzz targets: one function per parser of hostile input, each taking the fuzzer's bytes.

A target feeds one input to one parser and checks what every parser of captures
must keep, whatever the bytes:
- only the project's own error type escapes: protocol.DecodeError from the
  registry's message decoders; nothing at all from the record reader, the
  capture readers, the byte-range splitter, the reassembler, the exchange
  pairer and replay's comparison, which report faults as values (anomalies,
  `truncated`, `error` fields);
- values are what they claim: a decoded body is a dict, every TCP byte handed
  on is the byte the sender sent at that offset, a byte range holds exactly the
  packets the whole file has there;
- bounded work and memory: checked around the target by the runners
  (tests/fuzz/run.py: libFuzzer's -timeout and -malloc_limit_mb/-rss_limit_mb;
  tests/test_fuzz.py: a per-input deadline and tracemalloc's peak against
  `memory_bound(len(data))`). Decompression is capped (DECOMPRESS_CAP here, far
  below the 64 MiB default, so a bomb is caught by the cap and not by the
  memory check).

Any other exception, or a failed assert, is a finding: the runners keep the
input under tests/fuzz/crashers/TARGET/ and tests/test_fuzz.py replays those
forever after.
"""

from __future__ import annotations

import os
import struct
import tempfile

from protocol import DecodeError, decode_request, decode_response, registry
from protocol.records import read_record_set

__all__ = ["TARGETS", "DECOMPRESS_CAP", "memory_bound"]

DECOMPRESS_CAP = 1 << 20
_REQUEST, _RESPONSE = "request", "response"


def memory_bound(n: int) -> int:
    """The most a target may allocate for an n-byte input: a few copies of it, the decompression cap, slack
    for the registry's decoders and for Python's objects (a decoded field costs ~100 bytes per input byte
    at worst: a one-byte varint becomes an int in a list)."""
    return 200 * n + 4 * DECOMPRESS_CAP + (8 << 20)


_CASES: list[tuple[int, int, str]] | None = None


def _cases() -> list[tuple[int, int, str]]:
    global _CASES
    if _CASES is None:
        _CASES = [
            (k, v, d)
            for k in registry.api_keys()
            for d in (_REQUEST, _RESPONSE)
            for v in registry.request_versions(k)
            if registry.has(k, v, d)
        ]
    return _CASES


def generated() -> list:
    """Every decoder the registry generates at run time (so a coverage-guided run can
    instrument them: they are not in any module atheris instruments on import)."""
    out = [registry.codec(k, v, d)[0] for k, v, d in _cases()]
    for kind in ("request", "response"):
        for v in range(3):
            try:
                out.append(registry.header_codec(kind, v)[0])
            except (KeyError, ValueError):
                pass
    return out


def case_prefix(api_key: int, version: int, direction: str) -> bytes:
    """The 2 bytes that make `frame` pick this (api key, version, direction): for seeding."""
    return _cases().index((api_key, version, direction)).to_bytes(2, "big")


def frame(data: bytes) -> None:
    """A frame body for one (api key, version, direction): bytes 0-1 pick it, byte 2 bit 0 picks lenient
    decoding, the rest is the frame after its size prefix (a request's own header names its api key and
    version, so the target writes those two fields over the fuzzer's)."""
    if len(data) < 3:
        return
    cases = _cases()
    api_key, version, direction = cases[int.from_bytes(data[:2], "big") % len(cases)]
    lenient = bool(data[2] & 1)
    body = data[3:]
    try:
        if direction == _REQUEST:
            msg = decode_request(struct.pack(">hh", api_key, version) + body[4:], lenient=lenient)
        else:
            msg = decode_response(body, api_key, version, lenient=lenient)
    except DecodeError as e:
        assert str(e)
        return
    assert type(msg.body) is dict
    assert msg.api_key == api_key if direction == _REQUEST else True


def records(data: bytes) -> None:
    """A Produce/Fetch `Records` field: record batches (magic 2) or message sets (magic 0/1), any codec."""
    rs = read_record_set(data, max_decompressed=DECOMPRESS_CAP)
    total = 0
    for batch in rs.batches:
        for r in batch.records():
            total += len(r.value or b"") + len(r.key or b"")
            assert total <= DECOMPRESS_CAP * max(1, len(rs.batches)) + len(data)
    for a in rs.anomalies:
        assert a["kind"] and a["detail"]


def _with_file(data: bytes, fn) -> None:
    fd, path = tempfile.mkstemp(prefix="kwfuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        fn(path)
    finally:
        os.unlink(path)


def capture(data: bytes) -> None:
    """A capture file (pcap, pcapng, gzip'd either) through the whole dissector: file faults are
    anomalies, never exceptions, and the exchanges before a fault come out."""
    from dissector import dissect

    def run(path):
        for item in dissect([path], ports=[9092]):
            assert item.type in ("exchange", "anomaly", "connection")
            if item.type == "exchange":
                assert item.status in ("ok", "unanswered", "orphan_response", "undecodable")

    _with_file(data, run)


_TLS_KEYS: list[bytes] = []


def tls(data: bytes) -> None:
    """A TLS capture through the whole dissector with the bundled samples' key logs: damaged records,
    handshakes and key logs' matches are anomalies, never exceptions; the items are well formed."""
    from pathlib import Path

    from dissector import dissect

    if not _TLS_KEYS:
        for keys in sorted((Path(__file__).resolve().parents[2] / "samples" / "tls").glob("*.keys")):
            _TLS_KEYS.append(keys.read_bytes())

    def run(path):
        keys = path + ".keys"
        with open(keys, "wb") as f:
            f.write(b"".join(_TLS_KEYS))
        try:
            for item in dissect([path], tls_keylog=keys, connections=True):
                assert item.type in ("exchange", "anomaly", "connection")
                if item.type == "anomaly":
                    assert item.kind and item.detail
                elif item.tls is not None:
                    assert set(item.tls) == {"version", "cipher_suite", "sni", "decrypted"}
        finally:
            os.unlink(keys)

    _with_file(data, run)


def native(data: bytes) -> None:
    """A capture file through dissect() on the native core and on the Python pipeline: the same items
    (a Rust panic is a BaseException, so it is never taken for a fault and fails the run)."""
    from dissector import dissect
    from tests import oracle
    from tests.native_compare import assert_same_items, without_core_only

    def run(path):
        want = list(oracle.dissect([path], ports=[9092], connections=True))
        got = list(dissect([path], ports=[9092], connections=True))
        assert_same_items(without_core_only(got, want), want)

    _with_file(data, run)


def ranges(data: bytes) -> None:
    """The Spark input's byte-range splitter and reader (the native core's): the same ranges, rows,
    buckets and chunks as the Python reference's (tests/ranges_reference.py), and the ranges together
    hold exactly the whole file's packets, whatever the split size (byte 0 picks it)."""
    from dissector.ranges import split_ranges
    from tests.ranges_reference import capture, check, read_range

    if not data:
        return
    target = 64 + data[0] * 16
    body = data[1:]

    def run(path):
        check(path, targets=[target], buckets=(3,))
        whole = [(p.ts, p.index, p.payload) for p in capture.read_packets([path]) if type(p) is capture.Packet]
        split, index = [], 0
        for r in split_ranges(path, target):
            split += [(row[0], row[10], row[8]) for row in read_range(r, 0, index) if len(row) == 11]
            if r.frames is None:
                break  # a range read through the file's own reader holds the rest of the file
            index += r.frames
        # a fault ends reading at different places (one stream vs a window), so compare what both have
        n = min(len(whole), len(split))
        assert split[:n] == whole[:n]

    _with_file(body, run)


def tcp(data: bytes) -> None:
    """The reassembler fed one connection's segments reordered, duplicated, dropped, overlapping and cut:
    every Data byte it hands on is the byte sent at that stream offset, and Data + Gap never run past
    what was sent (bytes 0-1 seed the stream, then 6 bytes per segment: offset, length, flags)."""
    from tests.oracle.capture import Packet
    from tests.oracle.tcp import Data, Gap, Reassembler

    if len(data) < 2:
        return
    stream = bytes((i * 31 + data[0] + (i >> 8) * data[1]) & 0xFF for i in range(4096))
    isn = 1000 + data[0] * 65536 * 251 % (1 << 32)
    r = Reassembler(lost_after=2048)
    events = []
    pkts = [Packet(0.0, "10.0.0.1", 40000, "10.0.0.2", 9092, isn, 0, 0x02, b"", 0, 1)]
    body = data[2:]
    for i in range(0, len(body) - 5, 6):
        off, n, flags, cut = struct.unpack_from(">HHBB", body, i)
        off %= len(stream)
        n %= 1600
        payload = stream[off : off + n]
        missing = 0
        if cut & 0x80:  # snaplen cut the tail
            keep = len(payload) * (cut & 0x7F) // 127
            missing, payload = len(payload) - keep, payload[:keep]
        fl = 0x10 | (flags & 0x0D)  # ACK, plus FIN / RST / PSH picked by the fuzzer
        ack_side = bool(flags & 0x80)
        if ack_side:  # the receiver acknowledging up to an offset: may prove a hole lost
            pkts.append(
                Packet(
                    i + 1.0,
                    "10.0.0.2",
                    9092,
                    "10.0.0.1",
                    40000,
                    777,
                    (isn + 1 + off) & 0xFFFFFFFF,
                    0x10,
                    b"",
                    0,
                    len(pkts) + 1,
                )
            )
        else:
            pkts.append(
                Packet(
                    i + 1.0,
                    "10.0.0.1",
                    40000,
                    "10.0.0.2",
                    9092,
                    (isn + 1 + off) & 0xFFFFFFFF,
                    1,
                    fl,
                    payload,
                    missing,
                    len(pkts) + 1,
                )
            )
    for p in pkts:
        events += r.feed(p)
    events += r.finish()
    pos = {}
    first = events[0].conn if events else None  # the connection the SYN opened; after a FIN or RST the
    for ev in events:  # same 4-tuple reopens mid-stream, offsets unknown
        if ev.conn != first:
            continue
        if type(ev) is Data:
            at = pos.get(ev.sender, 0)
            if ev.sender[1] == 40000:
                assert ev.data == stream[at : at + len(ev.data)], f"data at {at} is not what was sent there"
            pos[ev.sender] = at + len(ev.data)
        elif type(ev) is Gap:
            assert ev.size > 0
            pos[ev.sender] = pos.get(ev.sender, 0) + ev.size
    assert pos.get(("10.0.0.1", 40000), 0) <= len(stream) + 1600


def exchanges(data: bytes) -> None:
    """Both directions of a connection on the Kafka port carrying the fuzzer's bytes (byte 0: where the
    client's bytes end and the broker's begin): framing, pairing, decoding and the body walk report
    whatever they find as exchanges and anomalies."""
    from tests.oracle.exchanges import Exchanges
    from tests.oracle.tcp import Close, Data, Open

    if not data:
        return
    cut = min(len(data), 1 + data[0] * len(data) // 256)
    client, broker = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
    ex = Exchanges()
    out = ex.feed(Open(0, client, broker, 0.0, True))
    pieces = [(client, broker, data[1:cut]), (broker, client, data[cut:])]
    t = 0.0
    for sender, receiver, blob in pieces:
        for i in range(0, len(blob), 1448):
            t += 0.001
            out += ex.feed(Data(0, sender, receiver, t, blob[i : i + 1448]))
    out += ex.feed(Close(0, t + 1, "fin"))
    out += ex.finish(t + 2)
    for item in out:
        assert item.type in ("exchange", "anomaly", "connection")


def compare(data: bytes) -> None:
    """replay's response comparison on two bodies built from the bytes: a body equals itself, and every
    difference names a path both sides can be looked up by."""
    from replay.compare import diff

    half = len(data) // 2
    a, b = _value(data[:half], 0)[0], _value(data[half:], 0)[0]
    assert diff(a, a) == []
    for path, _, _ in diff(a, b):
        assert isinstance(path, str)


def _value(data: bytes, pos: int, depth: int = 0):
    """A JSON-like value (dicts with Kafka-looking keys, lists, ints, strings, None) from bytes."""
    if pos >= len(data):
        return None, pos
    tag = data[pos]
    pos += 1
    kind = tag % 6 if depth < 6 else 0
    if kind == 0:
        return tag - 128, pos
    if kind == 1:
        return data[pos : pos + 3].hex(), pos + 3
    if kind == 2:
        return None, pos
    if kind == 3:
        return bool(tag & 8), pos
    n = (tag >> 3) % 5
    if kind == 4:
        out = []
        for _ in range(n):
            v, pos = _value(data, pos, depth + 1)
            out.append(v)
        return out, pos
    keys = ("ErrorCode", "Name", "PartitionIndex", "Topics", "ThrottleTimeMs", "MemberId", "Offset", "Records")
    obj = {}
    for i in range(n):
        k = keys[(tag + i) % len(keys)]
        obj[k], pos = _value(data, pos, depth + 1)
    return obj, pos


TARGETS = {
    "frame": frame,
    "records": records,
    "capture": capture,
    "tls": tls,
    "native": native,
    "ranges": ranges,
    "tcp": tcp,
    "exchanges": exchanges,
    "compare": compare,
}
