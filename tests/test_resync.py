"""Record boundaries found from a window of bytes (dissector.resync), which cuts captures in object
stores into ranges. The oracle is the native core's header walk from the file's start
(split_ranges of a local file, one record per range): every boundary found must be one of its
record offsets, and the first one at or after the window's start."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector import resync
from dissector.ranges import split_ranges

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    ROOT / "samples" / "kafka-python-basic.pcap",
    ROOT / "samples" / "java-codecs-ak.pcap",
    ROOT / "samples" / "tls" / "tls-kafka-python-ak-dsb.pcapng",
]


def walked(path: Path) -> list[int]:
    """Every record's offset, by the native core's walk from the start."""
    return sorted({r.start for r in split_ranges(path, 1) if r.start} | {r.end for r in split_ranges(path, 1)})


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_window_finds_the_next_record(path):
    data = path.read_bytes()
    head = resync.head_of(data[: 1 << 20])
    assert head is not None
    find = resync.pcap_boundary if head.fmt == "pcap" else resync.pcapng_boundary
    truth = walked(path)
    assert len(truth) > 20
    window = 16 << 10
    checked = 0
    for at in range(head.first + 4, len(data) - 64, 509 * 4):
        at -= at % 4
        win = data[at : at + window]
        found = find(win, head, at_end=at + len(win) == len(data))
        if found is None:
            continue  # refused: the caller reads that file as one range
        want = min(t for t in truth if t >= at)
        assert at + found == want, (at, found)
        checked += 1
    assert checked >= 0.8 * len(range(head.first + 4, len(data) - 64, 509 * 4))


def test_payload_bytes_are_not_taken_for_records():
    """A window of payload only (a record's bytes copied over and over, no headers) finds nothing."""
    data = (ROOT / "samples" / "kafka-python-basic.pcap").read_bytes()
    head = resync.head_of(data)
    body = data[head.first + 16 : head.first + 16 + 60]
    assert resync.pcap_boundary(body * 300, head, at_end=False) is None


def test_heads_refuse_what_cannot_be_cut():
    assert resync.head_of(b"not a capture at all, not at all....") is None
    assert resync.head_of(b"\x1f\x8b" + b"\0" * 100) is None  # compressed
    path = ROOT / "samples" / "tls" / "tls-kafka-python-ak-dsb.pcapng"
    pcapng = path.read_bytes()
    head = resync.head_of(pcapng)
    # the section header and interface description (the secrets block between them left to the
    # range that holds it), as the native walk gives its later ranges
    assert head.fmt == "pcapng" and head.preamble == split_ranges(path, 20000)[1].preamble
    # its description blocks cut short: no preamble to give the ranges
    assert resync.head_of(pcapng[: head.first - 8]) is None
