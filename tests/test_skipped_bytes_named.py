"""Every skipped byte is named: a connection's skipped_bytes_to_broker / skipped_bytes_to_client
are the bytes its anomaly rows say were skipped in that direction.

test_accounting.py holds skipped bytes to the captured payload (every byte is in a frame, a skip
or a hole); this holds them to the anomalies, row by row. The rows that skip bytes do not all say
so the same way, so each kind's detail is read with its own pattern (`named`), and a row of a
kind that skips bytes whose detail states no count fails the test rather than counting as 0.

Where a direction had no capture hole the sum is exact. Where it had one, a hunt's count is of
stream bytes from where it began, holes included (the resync says "skipped N bytes after gap",
N counting what the hole took while it hunted): there the rows name every skipped byte and at
most the hole's bytes more.

Captures: every bundled sample (the TLS ones with their key logs), every capture in ../shared/pcaps,
and captures begun mid-connection made from them: the first packets cut off and the first data
segment of each direction cut inside, at several points, dissected with the brokers' ports so that
the connections are found by port and their first boundaries by the frames layer's hunt. Then
synthetic captures of the ways bytes went unnamed before (see each).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import dpkt
import pytest

from dissector import dissect
from tests.pcapgen import Flow, write_pcap
from tests.test_accounting import _ip_of

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap")) + sorted((ROOT / "samples" / "tls").glob("*.pcap*"))
SHARED = sorted((ROOT.parent / "shared" / "pcaps").glob("*.pcap*"))

# what exchanges.rs puts before a frame anomaly's own words: the sender, then what the frame's
# first bytes say it is (a response's correlation id; a request's api, version and correlation id)
_WHO = r"(?P<who>client|broker): "
_FRAME = r"(?:response correlation id -?\d+: |\S+ v-?\d+ request correlation id -?\d+: )?"
_AFTER = r"(?:midstream start|gap|bad frame size)"

# kind -> [(pattern of its detail, bytes it names as skipped)]
_NAMED = {
    "resync": [
        # a hunt found a boundary: N bytes of the stream from where it began
        (rf"{_WHO}skipped (?P<n>\d+) bytes after {_AFTER}; frame boundary found at stream offset -?\d+", "n"),
        # the stream ended first
        (rf"{_WHO}stream ended before a frame boundary was found \((?P<n>\d+) bytes skipped after {_AFTER}\)", "n"),
    ],
    # the bytes held of a frame the stream ended inside: got, and its size prefix if it was read
    "truncated_frame": [
        (rf"{_WHO}{_FRAME}stream ended (?P<got>\d+) bytes into (?:(?P<w>\d+)-byte|a) frame at stream offset -?\d+", ""),
    ],
    # a frame the hole left unreadable and whose size is known: its prefix and body, but what the hole took
    "gap_in_frame": [
        (
            rf"{_WHO}{_FRAME}(?P<g>\d+) bytes lost inside a (?P<w>\d+)-byte frame at stream offset -?\d+; "
            r"skipped the rest of it",
            "",
        ),
        # a frame (or size prefix) that ended inside the hole: what came of it before the hole
        (
            rf"{_WHO}{_FRAME}(?:\d+|unknown number of) bytes lost inside a "
            r"(?:\d+-byte frame at stream offset -?\d+|frame's size prefix); "
            r"skipped the (?P<n>\d+) bytes of it before the gap, resyncing",
            "n",
        ),
    ],
    # a frame in progress given up: prefix and body, what was held and what is skipped as it comes
    "frame_over_budget": [
        (rf"{_WHO}{_FRAME}(?P<w>\d+)-byte frame at stream offset -?\d+ dropped after \d+ bytes: .+", ""),
    ],
    # a size prefix no frame has: its first byte is counted by the resync the hunt it starts names
    "bad_frame_size": [(rf"{_WHO}{_FRAME}negative frame size -\d+; resyncing", "")],
    "frame_too_large": [(rf"{_WHO}{_FRAME}frame size \d+ above the \d+-byte limit; resyncing", "")],
}
_NAMED = {k: [(re.compile(p, re.S), g) for p, g in v] for k, v in _NAMED.items()}


def named(kind: str, detail: str) -> tuple[str, int] | None:
    """(direction the bytes were going, bytes the row names as skipped); None for a kind that
    skips none. A kind that skips bytes without a pattern here that reads its count fails."""
    rules = _NAMED.get(kind)
    if rules is None:
        return None
    for rx, group in rules:
        m = rx.fullmatch(detail)
        if not m:
            continue
        to = "broker" if m["who"] == "client" else "client"
        if group == "n":
            return to, int(m["n"])
        if kind == "truncated_frame":
            return to, int(m["got"]) + (4 if m["w"] else 0)
        if kind == "gap_in_frame":
            return to, 4 + int(m["w"]) - int(m["g"])
        if kind == "frame_over_budget":
            return to, 4 + int(m["w"])
        return to, 0
    raise AssertionError(f"a {kind} row that does not say how many bytes it skipped: {detail!r}")


def check(items: list, where: str) -> dict:
    """Each connection's skipped bytes against what its rows name; returns the sums checked."""
    sums: dict = defaultdict(int)
    bad_sizes: dict = defaultdict(int)
    for a in items:
        if a.type != "anomaly" or a.connection is None:
            continue
        n = named(a.kind, a.detail)
        if n is None:
            continue
        sums[(a.connection, n[0])] += n[1]
        if a.kind in ("bad_frame_size", "frame_too_large"):
            bad_sizes[(a.connection, n[0])] += 1
        elif a.kind == "resync" and "after bad frame size" in a.detail:
            bad_sizes[(a.connection, n[0])] -= 1
    # a bad size prefix's first byte is skipped: the hunt it starts ends in a resync that names it
    assert not any(bad_sizes.values()), (where, dict(bad_sizes))
    conns = [k for k in items if k.type == "connection"]
    assert conns, where
    for k in conns:
        for to in ("broker", "client"):
            skipped = getattr(k, f"skipped_bytes_to_{to}")
            said = sums[(k.connection, to)]
            holes = getattr(k, f"gap_bytes_to_{to}")
            rows = [(a.kind, a.detail) for a in items if a.type == "anomaly" and a.connection == k.connection]
            if holes == 0:
                assert said == skipped, (where, k.connection, to, skipped, said, rows)
            else:
                assert skipped <= said <= skipped + holes, (where, k.connection, to, skipped, said, holes, rows)
    return sums


def _keylog(path: Path):
    keys = path.with_suffix(".keys")
    return str(keys) if keys.exists() else None


@pytest.mark.parametrize("path", SAMPLES + SHARED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_skipped_bytes_are_the_bytes_the_anomalies_name(path):
    items = list(dissect([str(path)], connections=True, tls_keylog=_keylog(path)))
    check(items, path.name)
    if path.parent.parent.name == "tls" or path.parent.name == "tls":
        assert any(k.type == "connection" and k.tls for k in items)  # decrypted, so its frames were read


def _packets(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in dpkt.pcap.Reader(f))


def begun_midstream(src: Path, dst: Path, first: int, cut: int) -> Path:
    """`src` as if the capture had begun at its packet `first`, inside the first data segment of
    each direction: that segment loses its first `cut` bytes (its sequence number moves on by as
    many). Written as raw IP packets."""
    seen = set()
    with open(src, "rb") as f, open(dst, "wb") as o:
        reader = dpkt.pcap.Reader(f)
        link = reader.datalink()
        w = dpkt.pcap.Writer(o, linktype=dpkt.pcap.DLT_RAW, snaplen=262144)
        for i, (ts, buf) in enumerate(reader):
            ip = _ip_of(link, buf) if i >= first else None
            if ip is None:
                continue
            tcp = ip.data
            if isinstance(tcp, dpkt.tcp.TCP) and tcp.data:
                key = (ip.src, tcp.sport, ip.dst, tcp.dport)
                if key not in seen:
                    seen.add(key)
                    if cut and len(tcp.data) > cut:
                        tcp.data, tcp.seq, tcp.sum = tcp.data[cut:], (tcp.seq + cut) & 0xFFFFFFFF, 0
                        if isinstance(ip, dpkt.ip.IP):
                            ip.len, ip.sum = ip.__hdr_len__ + len(ip.opts) + len(tcp), 0
                        else:
                            ip.plen = len(tcp)
            w.writepkt(bytes(ip), ts)
    return dst


MIDSTREAM = [p for p in SAMPLES + SHARED if p.suffix == ".pcap" and p.parent.name != "tls"]  # TLS needs its handshake


@pytest.mark.parametrize("path", MIDSTREAM, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captures_begun_midstream_name_every_skipped_byte(tmp_path, path):
    whole = list(dissect([str(path)], connections=True))
    ports = sorted({int(k.broker.rsplit(":", 1)[1]) for k in whole if k.type == "connection"})
    n = _packets(path)
    skipped = 0
    for first in sorted({1, 5, 12, n // 4, n // 2, 3 * n // 4}):
        for cut in (0, 3, 25):
            mid = begun_midstream(path, tmp_path / f"{first}-{cut}.pcap", first, cut)
            items = list(dissect([str(mid)], connections=True, ports=ports))
            if not any(k.type == "connection" for k in items):
                continue  # nothing Kafka left after the cut
            check(items, mid.name)
            skipped += sum(
                k.skipped_bytes_to_broker + k.skipped_bytes_to_client for k in items if k.type == "connection"
            )
    assert skipped  # the cuts did land inside frames


# -- the ways bytes went unnamed before ---------------------------------------------------------


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def _metadata(corr: int) -> tuple[bytes, bytes]:
    import protocol

    req = protocol.encode_request(3, 12, {"CorrelationId": corr, "ClientId": "kw"}, {"Topics": None})
    resp = protocol.encode_response(3, 12, {"CorrelationId": corr}, {"Topics": []})
    return protocol.with_size(req), protocol.with_size(resp)


def _dissect(tmp_path, name, pkts) -> list:
    return list(dissect([str(write_pcap(tmp_path / name, pkts))], connections=True))


def test_a_hunt_from_the_midstream_start_that_finds_no_boundary_names_its_bytes(tmp_path):
    """The class issue 31 found on real captures (25 bytes toward the broker, no row): a direction
    begun midstream whose hunt never finds a boundary. Here the client's side is the 40-byte tail
    of a request whose start was not captured."""
    _, resp = _metadata(7)
    f = Flow()
    pkts = [f.send("c", b"\x7f" * 40), f.send("s", resp)] + f.close()
    items = _dissect(tmp_path, "tail.pcap", pkts)
    assert check(items, "tail")[(0, "broker")] == 40
    assert [(a.kind, a.detail) for a in items if a.type == "anomaly"] == [
        ("resync", "client: stream ended before a frame boundary was found (40 bytes skipped after midstream start)")
    ]


def test_bytes_the_probe_dropped_are_named(tmp_path):
    """On a port that is not Kafka's, a broker that talks first (an answer to a request sent before
    the capture began) is held while the roles are unknown, up to 64 KiB: what it says past that is
    dropped. Once the client is recognised, those bytes are its hunt's, and its resync names them."""
    f = Flow(server=("10.0.0.2", 31000))
    pkts = [f.send("s", b"\xff" * 15000) for _ in range(6)]
    for corr in (1, 2):
        req, resp = _metadata(corr)
        pkts += [f.send("c", req), f.send("s", resp)]
    items = _dissect(tmp_path, "probe.pcap", pkts + f.close())
    (conn,) = [k for k in items if k.type == "connection"]
    assert conn.detected_by == "heuristic" and conn.bytes_to_client == 90000 + 2 * len(_metadata(1)[1])
    # all 90000 skipped, 30000 of them (two segments) dropped by the probe before the hunt began
    assert conn.skipped_bytes_to_client == 90000
    check(items, "probe")
    assert [x.correlation_id for x in items if x.type == "exchange" and x.status == "ok"] == [1, 2]


def test_bytes_a_hole_took_while_the_first_offset_waited_are_named(tmp_path):
    """The first offset of a stream begun midstream waits for enough bytes to be judged; a hole
    then drops what was held, and the first bytes after the hole are judged in its place. The
    held bytes were skipped: the resync of the boundary found there names them."""
    req, resp = _metadata(3)
    f = Flow()
    pkts = [f.send("s", b"\x00\x00")]  # too few to judge the broker's first offset
    f.skip("s", 10)  # a hole in the broker's direction
    pkts += [f.send("c", req), f.send("s", resp)]
    for _ in range(10):  # the client's acknowledgements prove the hole lost
        pkts.append(f.send("c", flags="A"))
    items = _dissect(tmp_path, "hole.pcap", pkts + f.close())
    (conn,) = [k for k in items if k.type == "connection"]
    assert conn.skipped_bytes_to_client == 2 and conn.gap_bytes_to_client == 10
    check(items, "hole")


def test_a_frame_that_ends_in_a_hole_names_its_bytes_before_the_hole(tmp_path):
    """A hole that takes a frame's end and more: the frame's size prefix and the body before the
    hole are skipped, and the hunt after the hole counts from its far side. The gap_in_frame row
    names them (it used to say only "resyncing")."""
    reqs = [_metadata(c)[0] for c in range(1, 5)]
    f = Flow()
    pkts = [f.send("c", reqs[0]), f.send("s", _metadata(1)[1])]
    pkts.append(f.send("c", reqs[1][:10]))  # the size prefix and 6 bytes of the body
    f.skip("c", len(reqs[1]) - 10 + 5)  # the rest of that frame and the next one's first 5 bytes
    pkts += [f.send("c", reqs[2][5:]), f.send("c", reqs[3]), f.send("s", _metadata(4)[1])]
    for _ in range(10):  # the broker's acknowledgements prove the hole lost
        pkts.append(f.send("s", flags="A"))
    items = _dissect(tmp_path, "ended-in-hole.pcap", pkts + f.close())
    gaps = [a.detail for a in items if a.type == "anomaly" and a.kind == "gap_in_frame"]
    assert len(gaps) == 1 and gaps[0].endswith(
        f"{len(reqs[1]) - 10 + 5} bytes lost inside a {len(reqs[1]) - 4}-byte frame at stream offset "
        f"{len(reqs[0])}; skipped the 10 bytes of it before the gap, resyncing"
    ), gaps
    (conn,) = [k for k in items if k.type == "connection"]
    assert conn.gap_bytes_to_broker == len(reqs[1]) - 10 + 5
    assert check(items, "ended-in-hole")[(0, "broker")] >= 10
