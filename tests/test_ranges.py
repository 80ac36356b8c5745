"""dissector.ranges (the native core's range splitting and reading) against the Python reference.

The reference is what dissector/ranges.py was in Python: the same header walks, a range read
through the Python capture reader's own record readers behind a window (prefix, then the
range's bytes), and landing.spark._scan_arrow's bucketing. Both must give the same ranges
(starts, ends, frame counts, preambles), the same rows (packets, anomalies with their kinds,
details and frame indices) and the same buckets and chunks, on every sample, shared capture,
fuzz crasher, damaged file, multi-section pcapng and mutated file.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector import ranges
from tests.ranges_reference import _row, capture, check, read_range
from tests.pcapgen import ETHERNET, Flow, seed_writers

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "pcaps"

SAMPLES = sorted((ROOT / "samples").glob("*.pcap")) + (sorted(SHARED.glob("*")) if SHARED.is_dir() else [])
CRASHERS = sorted(p for p in (ROOT / "tests" / "fuzz" / "crashers").glob("*/*") if p.is_file())


@pytest.mark.parametrize(
    "path",
    # the biggest (kraft3-ak, 600 KB: 16 s of cuts) with -m slow
    [pytest.param(p, marks=pytest.mark.slow) if p.stat().st_size > 500_000 else p for p in SAMPLES],
    ids=lambda p: p.name,
)
def test_samples(path):
    assert check(path) >= 5


@pytest.mark.parametrize("path", CRASHERS, ids=lambda p: p.parent.name + "/" + p.name[:14])
def test_fuzz_crashers(path):
    check(path)


def test_whole_file_rows_are_the_ranges_rows_in_a_row():
    """Cut anywhere, the ranges of a clean file give read_packets' rows, numbered alike."""
    path = str(ROOT / "samples" / "confluent-codecs.pcap")
    whole = [_row(p) for p in capture.read_packets([path])]
    for target in (1, 1000, 1 << 16):
        rows, index = [], 0
        for r in ranges.split_ranges(path, target):
            rows += read_range(r, 0, index)
            index += r.frames
        assert rows == whole


def _pcapng_blocks(blob: bytes):
    """(ts units in us, caplen, origlen, frame) of each record of a pcap."""
    pos = 24
    while pos + 16 <= len(blob):
        sec, usec, caplen, orig = struct.unpack_from("<IIII", blob, pos)
        yield sec * 1_000_000 + usec, caplen, orig, blob[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen


def _block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(e + "II", btype, len(body) + 12) + body + struct.pack(e + "I", len(body) + 12)


def multi_section_pcapng(src: Path) -> bytes:
    """A sample as a pcapng of three sections (little-, big-, little-endian), each with its own
    interfaces (us, ns with an offset, 2^-20), packets as EPBs, obsolete PBs and SPBs, and
    blocks of other types (name resolution, statistics, custom) between them."""
    recs = list(_pcapng_blocks(src.read_bytes()))
    out = []
    third = len(recs) // 3
    for s, part in enumerate((recs[:third], recs[third : 2 * third], recs[2 * third :])):
        e = ">" if s == 1 else "<"
        out.append(_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1)))
        ifaces = [(6, 0), (9, -5), (0x94, 0)]  # (tsresol, tsoffset)
        for res, off in ifaces:
            opts = struct.pack(e + "HHB3x", 9, 1, res)
            if off:
                opts += struct.pack(e + "HHq", 14, 8, off)
            out.append(_block(e, 1, struct.pack(e + "HHI", ETHERNET, 0, 262144) + opts + struct.pack(e + "HH", 0, 0)))
        for i, (us, caplen, orig, data) in enumerate(part):
            iface = i % 3
            res, off = ifaces[iface]
            t = us - off * 1_000_000
            units = t * 1000 if res == 9 else (t << 20) // 1_000_000 if res == 0x94 else t
            if i % 11 == 5:
                out.append(_block(e, 3, struct.pack(e + "I", orig) + data))  # SPB: interface 0
            elif i % 13 == 7:
                out.append(
                    _block(
                        e, 2, struct.pack(e + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, caplen, orig) + data
                    )
                )
            else:
                out.append(
                    _block(e, 6, struct.pack(e + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, caplen, orig) + data)
                )
            if i % 17 == 3:
                out.append(_block(e, 4, b"\0\0\0\0"))  # name resolution
            if i % 19 == 4:
                out.append(_block(e, 5, struct.pack(e + "III", 0, 0, 0)))  # interface statistics
            if i % 23 == 2:
                out.append(_block(e, 0xBAD, b"custom"))
    return b"".join(out)


@pytest.mark.parametrize("name", ["confluent-codecs.pcap", "java-txn-ak.pcap", "admin.pcap"])
def test_pcapng_several_sections_and_interfaces(tmp_path, name):
    path = tmp_path / (name + "ng")
    path.write_bytes(multi_section_pcapng(ROOT / "samples" / name))
    assert check(path) > 15
    gz = tmp_path / (name + "ng.gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    check(gz, targets=[2048])


def _damaged():
    from tests.test_corrupt_files import KINDS, damaged

    return [(k, damaged(k)[0]) for k in KINDS]


@pytest.mark.parametrize("kind,blob", _damaged(), ids=lambda x: x if isinstance(x, str) else "")
def test_damaged_files(tmp_path, kind, blob):
    path = tmp_path / kind
    path.write_bytes(blob)
    check(path)
    gz = tmp_path / (kind + ".gz")
    gz.write_bytes(gzip.compress(blob))
    check(gz, targets=[2048], buckets=(2,))


def test_small_odd_and_missing_files(tmp_path):
    ng = multi_section_pcapng(ROOT / "samples" / "admin.pcap")
    cases = {
        "empty": b"",
        "two": b"\xd4\xc3",
        "pcap-header-only": (ROOT / "samples" / "admin.pcap").read_bytes()[:24],
        "pcap-header-cut": (ROOT / "samples" / "admin.pcap").read_bytes()[:20],
        "shb-only": ng[:28],
        "bad-bom": ng[:8] + b"\x01\x02\x03\x04" + ng[12:],
        "idb-then-cut": ng[:200],
        "garbage": b"hello, this is not a capture at all" * 40,
        "bz2": __import__("bz2").compress((ROOT / "samples" / "admin.pcap").read_bytes()),
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        check(tmp_path / name, targets=[1, 2048])
    check(tmp_path / "missing", targets=[1])


def _flow() -> list:
    f = Flow()
    return f.handshake() + [p for _ in range(6) for p in (f.send("c", b"x" * 300), f.send("s", b"y" * 40))] + f.close()


_SEEDS = {
    **seed_writers(_flow()),
    "pcapng-3-sections": lambda p: p.write_bytes(multi_section_pcapng(ROOT / "samples" / "admin.pcap")) and p,
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(_SEEDS)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 10**6),
    target=st.sampled_from([1, 100, 500, 3000]),
)
def test_mutated_files(tmp_path_factory, kind, edits, cut, target):
    path = tmp_path_factory.mktemp("rg") / "x"
    _SEEDS[kind](path)
    blob = bytearray(path.read_bytes())
    for pos, val in edits:
        blob[pos % len(blob)] = val
    path.write_bytes(bytes(blob[: len(blob) - cut % 40]))
    check(path, targets=[target], buckets=(3,))


def test_bucket_of_is_landing_spark_bucket():
    from tests.ranges_reference import conn_bucket as _bucket
    from tests.oracle import conn_key

    class P:
        def __init__(self, src, sport, dst, dport):
            self.src, self.sport, self.dst, self.dport = src, sport, dst, dport

    for src, sport, dst, dport in [
        ("10.0.0.1", 9092, "10.0.0.2", 50000),
        ("10.0.0.2", 50000, "10.0.0.1", 9092),
        ("::1", 9092, "::ffff:1.2.3.4", 1),
        ("fe80::1", 0, "fe80::1", 65535),
        ("1.1.1.1", 5, "1.1.1.1", 4),
    ]:
        for n in (1, 2, 7, 64):
            assert ranges.bucket_of(src, sport, dst, dport, n) == _bucket(conn_key(P(src, sport, dst, dport)), n)


def test_ranges_and_stage_1_read_without_the_python_capture_reader(tmp_path):
    """dissector.ranges and landing.spark's _split/_scan_arrow never import dissector.capture."""
    import subprocess
    import sys

    code = f"""
import sys
sys.modules["dissector.capture"] = None  # importing it raises
from landing import spark
from dissector import ranges
[r] = spark._split((0, {str(ROOT / "samples" / "admin.pcap")!r}, 1 << 20))[1]
import pyarrow as pa
ids = pa.record_batch([pa.array([0])], names=["id"])
out = pa.Table.from_batches(spark._scan_arrow(iter([ids]), [spark._plain((0, r, 0))], 3, spark._part_keys(3)))
chunks = [pa.ipc.read_record_batch(pa.py_buffer(d), ranges.packet_schema()) for d in out["data"].to_pylist() if d]
# every bucket is told the range's frames, which stage 2 numbers the next range's from
assert out["frames"].to_pylist()[-3:] == [r.frames] * 3 and r.frames > 0 and sum(c.num_rows for c in chunks) > 0
assert sorted(out["part"].to_pylist()[-3:]) == sorted(spark._part_keys(3))
assert "dissector.capture" not in [m for m in sys.modules if sys.modules[m] is not None]
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_start_time_is_the_merge_order(tmp_path):
    """The native core's start_ts (the merge order of a set's files) is capture._start_ts (first
    record, even a fault; inf for none)."""
    from dissector.native import start_ts

    from tests.test_corrupt_files import KINDS, damaged

    paths = list(SAMPLES) + list(CRASHERS) + [tmp_path / "missing"]
    for kind in KINDS:
        (tmp_path / kind).write_bytes(damaged(kind)[0])
        (tmp_path / (kind + ".gz")).write_bytes(gzip.compress(damaged(kind)[0]))
        paths += [tmp_path / kind, tmp_path / (kind + ".gz")]
    for p in paths:
        assert start_ts(str(p)) == capture._start_ts(str(p)), p


@pytest.mark.parametrize("name", ["admin.pcap", "java-txn-ak.pcap"])
def test_payload_refs_point_into_the_file_and_land_alike(tmp_path, name):
    """scan(refs=True), as Spark's stage 1 ships packets: a payload stays in the file, its row giving
    where (`at`, `size`), on a pcap and on a pcapng of several sections (EPBs, PBs, SPBs); every other
    column is as without refs, and a lander reading the payloads there makes the same items."""
    from dissector import native

    ng = tmp_path / (name + "ng")
    ng.write_bytes(multi_section_pcapng(ROOT / "samples" / name))
    for path in (ROOT / "samples" / name, ng):
        blob = path.read_bytes()
        inline, refs, index, moved = [], [], 0, 0
        for r in ranges.split_ranges(path, 1 << 14, count=True):
            a = [b for _, _, b in ranges.scan(r, 0, index, buckets=1)]
            b = [b for _, _, b in ranges.scan(r, 0, index, buckets=1, refs=True)]
            index += r.frames
            for x, y in zip(a, b, strict=True):
                dx, dy = x.to_pydict(), y.to_pydict()
                assert set(dx["at"]) == {-1}
                for i, (pay, at, size) in enumerate(zip(dx["payload"], dy["at"], dy["size"], strict=True)):
                    assert size == len(pay)
                    if at >= 0:
                        assert dy["payload"][i] == b"" and pay and blob[at : at + size] == pay
                        moved += 1
                    else:
                        assert dy["payload"][i] == pay and (not pay or dx["anomaly"][i] is not None)
                assert {k: v for k, v in dx.items() if k not in ("payload", "at")} == {
                    k: v for k, v in dy.items() if k not in ("payload", "at")
                }
            inline += a
            refs += [(y, r) for y in b]
        assert moved > 20

        def items(batches):
            packets = ranges.lander_input(batches)
            return list(
                native.stitched([], ports=(), max_frame_size=100 << 20, packets=packets, end=lambda: (0.0, None))
            )

        assert len(items(refs)) > 10 and items(refs) == items(inline)


def test_payload_refs_past_their_range_are_refused(tmp_path):
    """A batch whose rows point outside the range it comes with (a capture changed between the stages)
    is refused in one line, not read from elsewhere."""
    from dataclasses import replace

    from dissector import native

    path = ROOT / "samples" / "java-txn-ak.pcap"
    [r] = ranges.split_ranges(path, 1 << 30, count=True)
    batches = [b for _, _, b in ranges.scan(r, buckets=1, refs=True)]
    for where in (replace(r, end=r.start + 100), replace(r, path=str(tmp_path / "gone.pcap"))):
        packets = ranges.lander_input([(b, where) for b in batches])
        with pytest.raises((ValueError, OSError)) as e:
            list(native.stitched([], ports=(), max_frame_size=100 << 20, packets=packets, end=lambda: (0.0, None)))
        assert "\n" not in str(e.value) and ("points past" in str(e.value) or "gone.pcap" in str(e.value))
