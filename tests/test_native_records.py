"""native/py/src/records.rs and compression.rs against protocol/records.py and compression.py.

For a records field, both sides give: the summary (native JSON == orjson.dumps of
RecordSet.summary() and of summarize()), every batch's header facts (magic, codec,
crc_ok, record_count, producer id, base offset, size, uncompressed_size, flags, and
len(records()) for a legacy wrapper, asked after uncompressed_size as rows.py asks),
truncated, partial and the anomalies (detail strings byte for byte); and for an exchange's
fields, what the oracle's Rows._record_columns (tests/oracle/rows.py) computes. decompress() gives the same
data, or the same CompressionError message, or DecompressedTooLarge.

Inputs: every records field of every real capture, the cases tests/test_records.py and
tests/test_compression.py build, and hypothesis-mutated fields and compressed streams.
"""

from __future__ import annotations

import glob
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

_native = pytest.importorskip("dissector._native")

from protocol import compression as C  # noqa: E402
from protocol import records as R  # noqa: E402
from protocol.records import Record, build_batch, build_message_set  # noqa: E402
from tests.test_records import _hand_message  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(glob.glob(str(ROOT / "samples" / "*.pcap")))
SHARED = sorted(glob.glob(str(ROOT.parent / "shared" / "pcaps" / "*.pcap")))  # optional, beside the repo
CAPTURES = SAMPLES + SHARED


def floor(samples: int, shared: int) -> int:
    """A count's lower bound for the captures present: what the bundled samples give, plus what
    ../shared/pcaps gives when it is beside the repo (a fresh clone has no ../shared)."""
    return samples + (shared if SHARED else 0)


CODECS = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
DATA = os.urandom(3000) * 20 + b"tail"
# KAFKAWIRE_FUZZ_SCALE=20 for a longer hunt than the suite's
SCALE = int(os.environ.get("KAFKAWIRE_FUZZ_SCALE", "1"))


# -- the two sides ------------------------------------------------------------------------


def py_decompress(codec, data, cap=C.DEFAULT_MAX_DECOMPRESSED, legacy=False):
    try:
        return ("ok", bytes(C.decompress(codec, data, max_size=cap, legacy_lz4=legacy)))
    except C.DecompressedTooLarge:
        return ("too_large", None)
    except C.CompressionError as e:
        return ("error", str(e))


def py_facts(data, allow_partial=True, cap=C.DEFAULT_MAX_DECOMPRESSED):
    """What _native.record_facts gives, from protocol.records."""
    summary = orjson.dumps(R.summarize(data, allow_partial=allow_partial))
    rs = R.read_record_set(data, max_decompressed=cap, allow_partial=allow_partial)
    assert orjson.dumps(rs.summary()) == summary
    batches = []
    for b in rs.batches:
        count = b.record_count
        head = (
            b.position,
            b.magic,
            b.attributes,
            b.codec,
            b.codec_name,
            b.crc,
            b.crc_ok,
            count,
            getattr(b, "producer_id", None) if b.magic == 2 else None,
            b.base_offset,
            b.size,
        )
        u = b.uncompressed_size
        records = None
        if count is None:
            records = len(b.records())
        batches.append(head + (u, b.transactional, b.control, records))
    partial = rs.partial
    if partial is not None:
        partial = (partial["offset"], partial["base_offset"], partial["length"], partial["magic"], partial["available"])
    anomalies = [(a["kind"], a["offset"], a["detail"]) for a in rs.anomalies]
    return summary, batches, rs.truncated, partial, anomalies


def py_records(data, allow_partial=True, cap=C.DEFAULT_MAX_DECOMPRESSED):
    """What _native.records_of gives, from protocol.records: each batch's records as the records
    table reads them (a negative timestamp is unknown, header keys as UTF-8 text)."""
    rs = R.read_record_set(data, max_decompressed=cap, allow_partial=allow_partial)

    def text(k):
        return None if k is None else k.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    def ts(t):
        return t if t is not None and t >= 0 else None

    def raw(b):
        return None if b is None else bytes(b)

    return [
        [
            (r.offset, ts(r.timestamp), raw(r.key), raw(r.value), [(text(k), raw(v)) for k, v in r.headers])
            for r in b.records()
        ]
        for b in rs.batches
    ]


def same_facts(data, allow_partial=True, cap=C.DEFAULT_MAX_DECOMPRESSED):
    data = bytes(data)
    want = py_facts(data, allow_partial, cap)
    got = _native.record_facts(data, allow_partial, cap)
    assert got[0] == want[0], (got[0], want[0])
    assert got[1:] == want[1:]
    # and the records themselves, as the records table has them
    assert _native.records_of(data, allow_partial, cap) == py_records(data, allow_partial, cap)
    if allow_partial:
        same_records_json(data, cap)
    return want


def same_records_json(data, cap=C.DEFAULT_MAX_DECOMPRESSED):
    """`dissect --records`' JSON of the field (kafkawire_core::record_sets) is the oracle's
    (tests/oracle/output.py: read_record_set(...).to_dict(records=True) as orjson writes it),
    with payloads and without."""
    from tests.oracle import output

    if cap != C.DEFAULT_MAX_DECOMPRESSED:
        return  # the oracle reads with the default cap
    for payloads in (True, False):
        want = orjson.dumps(output._records(data, True, payloads), option=orjson.OPT_NON_STR_KEYS)
        got = _native.records_json(data, no_payloads=not payloads)
        assert got == want, (got[:400], want[:400])


def both_ways(data, cap=C.DEFAULT_MAX_DECOMPRESSED):
    for allow in (True, False):
        same_facts(data, allow, cap)


def py_columns(fields, cap=C.DEFAULT_MAX_DECOMPRESSED):
    """The oracle's record_totals (Rows._record_columns' sums) over plain fields, and their summaries."""
    from tests.oracle.rows import record_totals

    summaries: dict = {}
    totals = record_totals(fields, cap, summaries)
    return totals, [orjson.dumps(summaries[id(f)]) for f in fields]


def same_columns(fields, cap=C.DEFAULT_MAX_DECOMPRESSED):
    fields = [bytes(f) for f in fields]
    cols, summaries = _native.record_columns(fields, cap)
    want = py_columns(fields, cap)
    assert (cols, summaries) == want
    return want


def same_decompress(codec, data, cap=C.DEFAULT_MAX_DECOMPRESSED, legacy=False):
    data = bytes(data)
    want = py_decompress(codec, data, cap, legacy)
    got = _native.decompress(codec, data, cap, legacy)
    assert got == want, (
        codec,
        got[0],
        want[0],
        got[1] if got[0] == "error" else "",
        want[1] if want[0] == "error" else "",
    )
    return want


# -- real captures --------------------------------------------------------------------------


def _records_fields(v, out):
    if type(v) is dict:
        for k, x in v.items():
            if k == "Records" and type(x) is memoryview:
                out.append(x)
            else:
                _records_fields(x, out)
    elif type(v) is list:
        for x in v:
            _records_fields(x, out)


_CAPTURED = None


def captured_fields():
    """[(capture, api key, [record fields of one exchange])] for every Produce request and
    Fetch response of every capture, read by the Python pipeline (tests/oracle)."""
    global _CAPTURED
    if _CAPTURED is None:
        from tests import oracle

        out = []
        for path in CAPTURES:
            for it in oracle.dissect(path):
                if it.type != "exchange":
                    continue
                body = it.request if it.api_key == 0 else it.response if it.api_key == 1 else None
                fields = []
                _records_fields(body, fields)
                if fields:
                    out.append((Path(path).name, it.api_key, [bytes(f) for f in fields]))
        _CAPTURED = out
    return _CAPTURED


def test_every_captured_records_field():
    fields = [(name, api, f) for name, api, fs in captured_fields() for f in fs]
    # today 107 fields in samples/, 121 in ../shared/pcaps
    assert len(fields) > floor(samples=100, shared=100)
    kinds = set()
    for _name, api, f in fields:
        summary, batches, *_ = same_facts(f, allow_partial=True)
        same_facts(f, allow_partial=(api == 1))
        kinds.update((b[1], b[4]) for b in batches)
    # the captures hold every codec under magic 2, and legacy message sets
    assert {(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")} <= kinds
    assert any(m < 2 for m, _ in kinds)


def test_every_captured_exchange_columns_as_rows_computes():
    """Rows._record_columns itself, on every exchange with record fields: the columns it puts
    in the row and the summaries it hands the JSON of the bodies."""
    pytest.importorskip("pyarrow")
    from tests.oracle import rows as rows_mod

    seen = []
    orig = rows_mod.Rows._record_columns

    def spy(self, x, eid, date, blobs, out, produce_answers):
        orig(self, x, eid, date, blobs, out, produce_answers)
        sums = [orjson.dumps(self._summaries[id(b)]) for _, _, b in blobs]
        seen.append(
            (
                [bytes(b) for _, _, b in blobs],
                sums,
                (out["record_count"], out["record_bytes"], out["record_bytes_uncompressed"], out["codecs"]),
            )
        )

    from tests import oracle

    rows_mod.Rows._record_columns = spy
    try:
        for path in CAPTURES:
            rows = rows_mod.Rows()
            for it in oracle.dissect(path):
                n = len(seen)
                rows.add(it)
                if it.type == "exchange" and len(seen) > n:
                    if it.api_key == 0:  # the producer id column is Produce's
                        seen[-1] += (rows.cols["exchanges"]["producer_id"][-1],)
    finally:
        rows_mod.Rows._record_columns = orig
    # today 59 exchanges in samples/, 51 in ../shared/pcaps
    assert len(seen) > floor(samples=55, shared=45)
    # all exchanges through one reader (its buffers reused, as a land reuses them)
    every = _native.record_columns_many([blobs for blobs, *_ in seen], C.DEFAULT_MAX_DECOMPRESSED)
    for (blobs, sums, want, *producer), (cols, got_sums) in zip(seen, every, strict=True):
        assert got_sums == sums
        assert cols[:4] == want
        if producer:
            assert cols[4] == producer[0]
        assert (cols, got_sums) == py_columns(blobs)


def test_speed_per_records_field(capsys):
    """Not a benchmark (the machine is shared): the report's figure, and a sanity bound."""
    fields = [f for _, _, fs in captured_fields() for f in fs]
    t = time.perf_counter()
    reps = 3
    for _ in range(reps):
        py_columns(fields)
    py_us = (time.perf_counter() - t) / reps / len(fields) * 1e6
    nat_us = _native._records_bench(fields, 20) / len(fields) * 1e6
    with capsys.disabled():
        print(
            f"\nrecords field: Python {py_us:.1f} us, native {nat_us:.2f} us "
            f"({len(fields)} fields of the captures, summary + rows columns)"
        )
    assert nat_us < py_us


# -- the cases of tests/test_records.py -----------------------------------------------------


def _recs(n, base_ts=1_700_000_000_000, value=b"v", base_offset=0):
    return [
        Record(
            offset=base_offset + i,
            timestamp=base_ts + i,
            key=b"k%d" % i if i % 3 else None,
            value=value * i,
            headers=[("h", b"%d" % i), ("empty", None)] if i % 2 else [],
        )
        for i in range(n)
    ]


NAMES = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", NAMES)
def test_batches_of_every_codec(codec):
    for framing in ("xerial", "raw"):
        raw = build_batch(
            _recs(7, value=b"x" * 50),
            codec=codec,
            producer_id=77,
            producer_epoch=1,
            base_sequence=5,
            transactional=True,
            snappy_framing=framing,
        )
        two = raw + build_batch(_recs(3, base_offset=7), base_offset=7, codec=codec, control=True)
        for data in (raw, two, two[:-1], two[: len(raw) + 30], two[: len(raw) + 70], raw[:16], raw[:5]):
            both_ways(data)
        same_columns([raw, two, two[: len(raw) + 70]])


def test_empty_field_and_small_cuts():
    both_ways(b"")
    raw = build_batch(_recs(2))
    for cut in range(0, 80):
        both_ways(raw[:cut])
        both_ways(raw + raw[:cut])


def test_crc_mismatch_bad_magic_bad_length_and_garbage():
    raw = bytearray(build_batch(_recs(5), codec="gzip"))
    raw[-3] ^= 0xFF
    both_ways(raw)
    good = build_batch(_recs(2))
    for junk in (
        b"\x00" * 16 + b"\x09" + b"\x00" * 50,
        struct.pack(">qi", 0, 3) + b"\x02" * 60,
        struct.pack(">qi", 0, -7) + b"\x00" * 60,
        struct.pack(">qi", 0, 10) + b"\x01" * 30,
        b"\xff" * 100,
        b"\x00" * 17,
    ):
        both_ways(good + junk)
        both_ways(junk)
    fake = bytearray(build_batch(_recs(3, base_offset=2), base_offset=2))
    struct.pack_into(">h", fake, 21, 0x3F00)
    both_ways(good + bytes(fake[:70]))
    struct.pack_into(">h", fake, 21, 0)
    struct.pack_into(">i", fake, 8, 0x7FFFFFF0)
    both_ways(good + bytes(fake[:70]))
    struct.pack_into(">i", fake, 57, -3)
    both_ways(good + bytes(fake[:70]))
    struct.pack_into(">h", fake, 21, -1)
    both_ways(good + bytes(fake[:70]))
    struct.pack_into(">h", fake, 21, 5)
    both_ways(good + bytes(fake[:70]))


def test_bombs_and_caps():
    for codec in NAMES[1:]:
        raw = build_batch([Record(offset=0, timestamp=0, value=bytes(1 << 20))], codec=codec)
        for cap in (1 << 10, (1 << 20) - 1, 1 << 20, 1 << 21):
            both_ways(raw, cap)
            same_columns([raw, raw], cap)


def test_negative_and_absurd_counts():
    raw = bytearray(build_batch(_recs(3)))
    struct.pack_into(">i", raw, 57, -5)
    struct.pack_into(">I", raw, 17, R.crc32c(bytes(raw[21:])))
    both_ways(raw)
    struct.pack_into(">i", raw, 57, 2**31 - 1)
    both_ways(raw + raw)
    same_columns([raw, raw])


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_plain_messages(magic):
    rows = [(10, b"k", b"v0", 111), (11, None, b"v1", 112), (12, b"", None, 113)]
    hand = b"".join(_hand_message(o, magic, 0, k, v, ts if magic else None) for o, k, v, ts in rows)
    both_ways(hand)
    both_ways(hand[:-1])
    same_columns([hand, hand])
    # attribute bits a plain message may carry (the signed byte, unknown codecs)
    for attr in (0x08, -1, -128, 5, 0x7F):
        both_ways(_hand_message(1, magic, attr, b"k", b"v", 3 if magic else None))


@pytest.mark.parametrize("codec", NAMES[1:])
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_wrappers(codec, magic):
    recs = [Record(offset=40 + i, timestamp=5 + i, key=b"k", value=b"m%d" % i) for i in range(4)]
    built = build_message_set(recs, magic=magic, codec=codec)
    both_ways(built)
    same_columns([built, build_message_set(recs, magic=magic) + built])
    # lz4 under magic 0 carries Kafka's old broken header checksum, which only legacy readers take
    inner = b"".join(_hand_message(i, 1, 0, b"k%d" % i, b"val%d" % i, 1000 + i) for i in range(3))
    cid = C.CODEC_IDS[codec]
    wrapper = _hand_message(502, 1, cid, None, C.compress(cid, inner), 1002)
    both_ways(wrapper)
    # inner set cut off (a fault after the first message), a nested wrapper, a null value,
    # a value that does not decompress, an unknown codec
    broken = _hand_message(0, 1, 0, b"a", b"1", 0) + _hand_message(1, 1, 0, b"b", b"2", 0)[:-3]
    both_ways(_hand_message(1, 1, cid, None, C.compress(cid, broken), 0))
    nested = _hand_message(0, 1, 0, b"a", b"1", 0) + wrapper + _hand_message(9, 1, 0, b"z", b"9", 0)
    both_ways(_hand_message(9, 1, cid, None, C.compress(cid, nested), 0))
    both_ways(_hand_message(1, magic, cid, None, None, 0))
    both_ways(_hand_message(1, magic, cid, None, b"not compressed", 0))
    both_ways(_hand_message(1, magic, 6, None, C.compress(cid, inner), 0))
    # a wrapper around a bomb
    bomb = _hand_message(1, magic, cid, None, C.compress(cid, bytes(1 << 20)), 0)
    both_ways(bomb, cap=1 << 16)
    same_columns([bomb], cap=1 << 16)


def test_wrapper_around_a_magic_2_batch_is_a_fault():
    """A magic 2 batch inside a legacy wrapper's message set is a fault (it once raised
    AttributeError out of records(): a Batch has no key or timestamp): the messages before
    it count, as before any other fault."""
    inner = _hand_message(0, 1, 0, b"k", b"v", 1) + build_batch(_recs(2))
    w = _hand_message(5, 1, C.GZIP, None, C.compress(C.GZIP, inner), 0)
    facts = same_facts(w)
    assert facts[1][0][-1] == 1
    assert same_columns([w])[0][0] == 1
    from protocol.records import read_record_set

    b = read_record_set(w).batches[0]
    assert len(b.records()) == 1 and "record batch (magic 2) inside a magic 1 wrapper" in b.error
    # a compressed magic 2 batch first is a plain fault: counted natively
    inner = build_batch(_recs(2), codec="gzip") + build_batch(_recs(2))
    both_ways(_hand_message(5, 1, C.GZIP, None, C.compress(C.GZIP, inner), 0))


def test_mixed_magic_and_legacy_faults():
    data = _hand_message(0, 1, 0, b"k", b"v", 1) + build_batch(_recs(2, base_offset=1), base_offset=1)
    both_ways(data)
    same_columns([data])
    msg = bytearray(_hand_message(0, 1, 0, b"k", b"v", 1))
    msg[-1] ^= 0xFF
    both_ways(msg)
    good = _hand_message(0, 0, 0, b"k", b"v")
    for off, val in ((18, 100), (18, -2), (22 + 1, 100), (23, -9), (12, 0)):
        bad = bytearray(_hand_message(1, 0, 0, b"k", b"v"))
        if off == 12:
            bad[8:12] = struct.pack(">i", len(bad) - 12 + 3)
            bad += b"abc"
        else:
            struct.pack_into(">i", bad, off, val)
        both_ways(good + bytes(bad))


# -- the cases of tests/test_compression.py --------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trips_caps_and_truncation(codec):
    packed = C.compress(codec, DATA)
    for cap in (len(DATA), len(DATA) - 1, 1 << 16, 0, 1):
        same_decompress(codec, packed, cap)
    same_decompress(codec, packed[: len(packed) // 2])
    same_decompress(codec, b"\x00\x01garbage-garbage-garbage")
    same_decompress(codec, b"")
    for legacy in (False, True):
        same_decompress(codec, C.compress(codec, DATA, legacy_lz4=legacy), legacy=legacy)
        same_decompress(codec, C.compress(codec, DATA, legacy_lz4=legacy), legacy=not legacy)


@pytest.mark.parametrize("codec", CODECS)
def test_caps_at_the_pieces_edges(codec):
    """Caps around the pieces the decoders are read in (8 KiB, lz4's 256 KiB), on whole and
    on corrupt streams (the fault after or before the cap)."""
    data = os.urandom(200_000) * 3
    packed = C.compress(codec, data)
    bad = bytearray(packed)
    bad[-40] ^= 0x55
    cut = packed[: len(packed) * 3 // 4]
    caps = (
        len(data),
        len(data) - 1,
        8191,
        8192,
        8193,
        16384,
        (256 << 10) - 1,
        256 << 10,
        (256 << 10) + 1,
        (512 << 10) + 5,
    )
    items = [(codec, blob, cap, False) for blob in (packed, bytes(bad), cut) for cap in caps]
    for it in items:
        same_decompress(*it)
    assert _native.decompress_many(items) == [py_decompress(*it) for it in items]


def test_codec_none_unknown_and_framings():
    import cramjam

    for cap in (2, 3, 4):
        same_decompress(C.NONE, b"abc", cap)
    for codec in (5, 6, 7, -1, 99):
        same_decompress(codec, b"xx")
    same_decompress(C.SNAPPY, C.compress(C.SNAPPY, DATA, snappy_framing="raw"))
    framed = bytes(cramjam.snappy.compress(DATA))
    for cut in (len(framed), len(framed) - 1, 12, 10, 5):
        same_decompress(C.SNAPPY, framed[:cut])
    same_decompress(C.SNAPPY, framed, 1000)
    xerial = C.compress(C.SNAPPY, DATA)
    for blob in (
        xerial[:8],
        xerial[:15],
        xerial[:16],
        xerial[:18],
        xerial[:21],
        xerial + b"\x00\x00",
        b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 1000) + b"\x05abc",
    ):
        same_decompress(C.SNAPPY, blob)
    same_decompress(C.SNAPPY, xerial, 40000)
    linked = bytes(cramjam.lz4.compress(os.urandom(1000) * 300))
    same_decompress(C.LZ4, linked)
    same_decompress(C.LZ4, linked, 299_999)
    same_decompress(C.LZ4, linked + b"trailing bytes after the frame")
    c = cramjam.zstd.Compressor()
    c.compress(DATA)
    stream = bytes(c.finish())
    for blob in (stream, stream + stream, stream + b"junk", stream[:-1]):
        same_decompress(C.ZSTD, blob)
    gz = C.compress(C.GZIP, DATA)
    for blob in (gz + gz, gz + b"junk", gz[:-4] + struct.pack("<I", 0xFFFFFFFF)):
        same_decompress(C.GZIP, blob)
    # a bomb whose checksum is wrong: cramjam (2.14) streams gzip too, so past the cap it is
    # too large before the bad checksum is seen, and under the cap an error, on both sides
    bomb = bytearray(C.compress(C.GZIP, bytes(1 << 20)))
    bomb[-8] ^= 1
    assert same_decompress(C.GZIP, bomb, 1 << 16)[0] == "too_large"
    assert same_decompress(C.GZIP, bomb, 2 << 20)[0] == "error"
    for cut in range(4, 40):
        same_decompress(C.ZSTD, C.compress(C.ZSTD, DATA)[:cut])
        same_decompress(C.LZ4, C.compress(C.LZ4, DATA)[:cut], legacy=True)


def test_xxh32():
    for b in (b"", b"a", b"abc", os.urandom(15), os.urandom(16), os.urandom(17), os.urandom(100)):
        assert _native._xxh32(b) == C.xxh32(b)


BOMB_SCRIPT = r"""
import sys
from dissector import _native

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

def peak_growth(fn):
    with open("/proc/self/clear_refs", "w") as f:   # VmHWM back to VmRSS
        f.write("5")
    before = kib("VmRSS")
    fn()
    return kib("VmHWM") - before

bomb = open(sys.argv[1], "rb").read()
codec, cap = int(sys.argv[2]), int(sys.argv[3])

def bombs():
    for _ in range(3):
        assert _native.decompress(codec, bomb, cap, False) == ("too_large", None)

def big():
    b"\x01" * (64 << 20)

print(peak_growth(bombs), peak_growth(big))
"""


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_stays_under_the_cap(codec, tmp_path):
    """A 64 MiB bomb under a 4 MiB cap: the process's peak memory grows by about the cap,
    never the bomb (peak RSS in a fresh interpreter, and the same measure seeing 64 MiB)."""
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's /proc/self/clear_refs")
    cap = 4 << 20
    bomb = C.compress(codec, bytes(64 << 20))
    path = tmp_path / "bomb"
    path.write_bytes(bomb)
    out = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, str(path), str(codec), str(cap)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    grown_kib, check_kib = map(int, out.split())
    assert grown_kib * 1024 < 2 * cap + (8 << 20), grown_kib
    assert check_kib * 1024 > (48 << 20), check_kib
    assert py_decompress(codec, bomb, cap) == ("too_large", None)


# -- hypothesis -------------------------------------------------------------------------------


def _pool():
    """Real fields (one of each kind of the captures) and built ones, as mutation seeds."""
    seen, pool = set(), []
    for _, _, fs in captured_fields():
        for f in fs:
            rs = R.read_record_set(f)
            key = tuple(sorted({(b.magic, b.codec_name) for b in rs.batches})), rs.truncated
            if key not in seen and len(f) < 20000:
                seen.add(key)
                pool.append(f)
    for codec in NAMES:
        pool.append(build_batch(_recs(6, value=b"ab"), codec=codec, producer_id=3))
    for codec in NAMES[1:]:
        pool.append(build_message_set(_recs(3), magic=1, codec=codec))
        pool.append(build_message_set(_recs(3), magic=0, codec=codec))
    pool.append(build_message_set(_recs(3), magic=0) + build_message_set(_recs(2), magic=1))
    return pool


_POOL = None


def pool():
    global _POOL
    if _POOL is None:
        _POOL = _pool()
    return _POOL


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(pool())))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "length", "count", "attr", "magic", "tail"]))
        n = len(data)
        at = draw(st.integers(0, max(n - 1, 0)))
        if how == "flip" and n:
            data[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            data = data[:at] if draw(st.booleans()) else data[at:]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how in ("length", "count") and n >= 61:
            off = 8 if how == "length" else 57
            val = draw(st.sampled_from([-1, 0, 13, 48, 49, 2**31 - 1, -(2**31), n, n - 12, n - 11]))
            struct.pack_into(">i", data, off, val)
        elif how == "attr" and n >= 23:
            struct.pack_into(">h", data, 21, draw(st.integers(-(2**15), 2**15 - 1)))
        elif how == "magic" and n >= 17:
            data[16] = draw(st.sampled_from([0, 1, 2, 3, 255]))
        elif how == "tail":
            data += draw(st.binary(max_size=70))
    return bytes(data)


@settings(
    max_examples=400 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(mutated(), st.booleans(), st.sampled_from([1 << 10, 1 << 16, C.DEFAULT_MAX_DECOMPRESSED]))
def test_mutated_records_fields(data, allow_partial, cap):
    same_facts(data, allow_partial, cap)
    same_columns([data], cap)


@settings(
    max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(st.lists(mutated(), min_size=1, max_size=3), min_size=1, max_size=4))
def test_mutated_exchanges_columns(exchanges):
    """Several exchanges through one reader: a field read after a faulty one reads the same."""
    exchanges = [[bytes(f) for f in fields] + [f for f in pool()[:2]] for fields in exchanges]
    got = _native.record_columns_many(exchanges, 1 << 16)
    for fields, (cols, summaries) in zip(exchanges, got, strict=True):
        assert (cols, summaries) == py_columns(fields, 1 << 16)


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(CODECS),
    cut=st.integers(0, 400),
    flips=st.binary(max_size=6),
    legacy=st.booleans(),
    raw=st.booleans(),
    cap=st.sampled_from([1 << 12, 1 << 16]),
)
def test_mutated_compressed_streams(codec, cut, flips, legacy, raw, cap):
    frame = bytearray(
        C.compress(codec, DATA[:3000] + bytes(2000), legacy_lz4=legacy, snappy_framing="raw" if raw else "xerial")
    )
    for i, x in enumerate(flips):
        frame[(cut + 37 * i) % len(frame)] ^= x or 0x80
    items = []
    for blob in (bytes(frame), bytes(frame[:cut])):
        for legacy_flag in (True, False):
            same_decompress(codec, blob, cap, legacy=legacy_flag)
            items.append((codec, blob, cap, legacy_flag))
    # the same through one Decompressor, after a good stream and before one: a context left
    # in a bad state by a corrupt stream must not change the next verdict
    good = C.compress(codec, DATA[:1000], legacy_lz4=legacy)
    items = [(codec, good, cap, legacy)] + items + [(codec, good, cap, legacy)]
    got = _native.decompress_many(items)
    assert got == [py_decompress(*it) for it in items]


@settings(max_examples=150 * SCALE, deadline=None)
@given(codec=st.sampled_from(CODECS + [0, 5]), data=st.binary(max_size=200), legacy=st.booleans())
def test_garbage_streams(codec, data, legacy):
    same_decompress(codec, data, 1 << 16, legacy)
