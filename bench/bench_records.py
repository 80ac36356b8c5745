"""Record decoding speed: kafkawire's protocol.records vs kio's record reader.

Run: python bench/bench_records.py [--quick]
Prints records/s (CRC checked, records split) for batches of 1 KB records per
codec, and batch headers/s without record decoding, with ratios against kio
where kio applies: kio's read_batch handles uncompressed batches only and
always checks the CRC and parses every record, so for the header rows its
figure is what getting the headers costs with kio. kio cannot decompress, so
on compressed rows it gets the same decompressed payload and its read_record.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crc32c import crc32c  # noqa: E402

from protocol import compression  # noqa: E402
from protocol.records import Record, build_batch, read_record_set  # noqa: E402

try:
    from kio.records.readers import read_batch as kio_read_batch, read_record as kio_read_record
except ImportError:  # kio is a dev dependency
    kio_read_batch = kio_read_record = None

RECORDS_PER_BATCH = 100
RECORD_SIZE = 1024
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _value(rng):
    # Text-like, so compressors have something to do but not everything.
    words = [b"kafka", b"record", b"batch", b"offset", b"%d" % rng.randrange(10**6), b"value"]
    out = bytearray()
    while len(out) < RECORD_SIZE:
        out += rng.choice(words) + b" "
    return bytes(out[:RECORD_SIZE])


def _batch(codec, rng, base_offset=0, n=RECORDS_PER_BATCH):
    recs = [
        Record(
            offset=base_offset + i,
            timestamp=1_700_000_000_000 + i,
            key=b"key-%d" % i,
            value=_value(rng),
            headers=[("trace-id", b"%08d" % i)],
        )
        for i in range(n)
    ]
    return build_batch(
        recs, codec=codec, base_offset=base_offset, producer_id=1, producer_epoch=0, base_sequence=base_offset
    )


def _rate(fn, units, min_time):
    """Best-of-3 units/s, each round repeating fn for at least min_time seconds."""
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = max(best, n * units / dt)
    return best


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    min_time = 0.1 if "--quick" in argv else 0.5
    rng = random.Random(1)
    rows = []

    for codec in CODECS:
        raw = _batch(codec, rng)

        def ours(raw=raw):
            batch = read_record_set(raw).batches[0]
            assert batch.crc_ok  # kio always checks the CRC; so do we here
            assert len(batch.records()) == RECORDS_PER_BATCH

        mine = _rate(ours, RECORDS_PER_BATCH, min_time)
        peer = None
        if codec == "none" and kio_read_batch is not None:

            def theirs(raw=raw):
                batch, _ = kio_read_batch(raw, 0)
                assert len(batch.records) == RECORDS_PER_BATCH

            peer = _rate(theirs, RECORDS_PER_BATCH, min_time)
        elif kio_read_record is not None:
            # kio cannot decompress: give it our decompressed payload and its record reader.
            def theirs(raw=raw, codec=compression.CODEC_IDS[codec]):
                crc32c(raw[21:])
                buf = bytes(compression.decompress(codec, raw[61:]))
                pos = 0
                for _ in range(RECORDS_PER_BATCH):
                    _, size = kio_read_record(buf, 0, 0, pos)
                    pos += size
                assert pos == len(buf)

            peer = _rate(theirs, RECORDS_PER_BATCH, min_time)
        rows.append((f"records/s, {codec}, {len(raw) // 1024} KiB batch", mine, peer))

    # Many small batches, as in a busy Fetch response: headers only vs full decode.
    many = b"".join(_batch("none", rng, base_offset=10 * i, n=10) for i in range(200))

    def headers():
        assert len(read_record_set(many).batches) == 200

    def headers_crc():
        assert read_record_set(many).summary()["crc_ok"]

    peer = None
    if kio_read_batch is not None:

        def kio_all():
            pos = n = 0
            while pos < len(many):
                _, size = kio_read_batch(many, pos)
                pos += size
                n += 1
            assert n == 200

        peer = _rate(kio_all, 200, min_time)
    rows.append(("batch headers/s, no CRC (kio: full read)", _rate(headers, 200, min_time), peer))
    rows.append(("batch headers/s + CRC, summary (kio: full read)", _rate(headers_crc, 200, min_time), peer))

    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'kafkawire':>12}  {'kio 0.6.5':>12}  {'ratio':>7}")
    for name, mine, peer in rows:
        p = f"{peer:12,.0f}" if peer else f"{'n/a':>12}"
        ratio = f"{mine / peer:6.2f}x" if peer else f"{'':>7}"
        print(f"{name:<{w}}  {mine:12,.0f}  {p}  {ratio}")
    print(
        f"({RECORDS_PER_BATCH} records of {RECORD_SIZE} B per batch; header rows: 200 batches "
        f"of 10 records; best of 3; ratio = kafkawire / kio. kio has no decompression: on\n"
        f" compressed rows it gets protocol.compression's output and runs read_record per record)"
    )


if __name__ == "__main__":
    main()
