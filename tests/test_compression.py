"""protocol.compression: codecs, Kafka's framings, the decompressed-size cap."""

import os
import struct
import tracemalloc
import zlib

import cramjam
import pytest
from hypothesis import given, settings, strategies as st

from protocol import compression as C

CODECS = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
DATA = os.urandom(3000) * 20 + b"tail"


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec):
    packed = C.compress(codec, DATA)
    assert len(packed) < len(DATA)
    assert C.decompress(codec, packed) == DATA


def test_none_codec_copies_and_caps():
    assert C.decompress(C.NONE, b"abc") == b"abc"
    with pytest.raises(C.DecompressedTooLarge):
        C.decompress(C.NONE, b"abcd", max_size=3)


def test_unknown_codec():
    with pytest.raises(C.CompressionError, match="unknown compression codec"):
        C.decompress(5, b"xx")
    with pytest.raises(C.CompressionError):
        C.compress(7, b"xx")


def test_snappy_xerial_is_what_java_writes():
    packed = C.compress(C.SNAPPY, DATA)
    # 16-byte xerial header, then int32-length-prefixed raw blocks of at most 32 KiB input.
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, out = 16, b""
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out += block
        pos += 4 + n
    assert out == DATA


def test_snappy_hand_built_xerial_and_raw_and_framed():
    chunks = [b"a" * 100, os.urandom(50), b"xyz"]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for c in chunks:
        raw = bytes(cramjam.snappy.compress_raw(c))
        xerial += struct.pack(">i", len(raw)) + raw
    assert C.decompress(C.SNAPPY, xerial) == b"".join(chunks)
    # librdkafka sends raw snappy blocks, without framing
    assert C.decompress(C.SNAPPY, C.compress(C.SNAPPY, DATA, snappy_framing="raw")) == DATA
    assert C.decompress(C.SNAPPY, bytes(cramjam.snappy.compress(DATA))) == DATA


def test_snappy_xerial_block_running_past_data():
    bad = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 1000) + b"\x05abc"
    with pytest.raises(C.CompressionError, match="runs past the data"):
        C.decompress(C.SNAPPY, bad)


def test_xxh32_reference_values():
    # Reference values of xxHash32 with seed 0.
    assert C.xxh32(b"") == 0x02CC5D05
    assert C.xxh32(b"a") == 0x550D7456
    assert C.xxh32(b"abc") == 0x32D153FF
    frame = bytes(cramjam.lz4.compress(b"hello" * 1000))
    hc = C._lz4_header_end(frame)
    assert frame[hc] == (C.xxh32(frame[4:hc]) >> 8) & 0xFF


def test_lz4_legacy_broken_header_checksum():
    good = C.compress(C.LZ4, DATA)
    broken = C.compress(C.LZ4, DATA, legacy_lz4=True)
    hc = C._lz4_header_end(broken)
    # Kafka 0.8/0.9 hashed the frame magic along with the descriptor.
    assert broken[hc] == (C.xxh32(broken[:hc]) >> 8) & 0xFF
    assert broken[:hc] == good[:hc] and broken[hc + 1 :] == good[hc + 1 :]
    with pytest.raises(C.CompressionError, match="headerChecksum"):
        C.decompress(C.LZ4, broken)
    assert C.decompress(C.LZ4, broken, legacy_lz4=True) == DATA
    assert C.decompress(C.LZ4, good, legacy_lz4=True) == DATA


def test_lz4_blocks_are_independent_without_content_checksum():
    frame = C.compress(C.LZ4, DATA)
    flg = frame[4]
    assert flg >> 6 == 1 and flg & 0x20 and not flg & 0x04


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_and_truncated_input_is_a_compression_error(codec):
    packed = C.compress(codec, DATA)
    with pytest.raises(C.CompressionError):
        C.decompress(codec, packed[: len(packed) // 2])
    with pytest.raises(C.CompressionError):
        C.decompress(codec, b"\x00\x01garbage-garbage-garbage")


@pytest.mark.parametrize("codec", CODECS)
def test_cap_boundary(codec):
    data = os.urandom(5000)
    packed = C.compress(codec, data)
    assert C.decompress(codec, packed, max_size=5000) == data
    with pytest.raises(C.DecompressedTooLarge) as e:
        C.decompress(codec, packed, max_size=4999)
    assert e.value.limit == 4999 and e.value.codec == codec


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_never_allocates_past_the_cap(codec):
    cap = 4 << 20
    bomb = C.compress(codec, bytes(64 << 20))  # 64 MiB of zeros, a few KB packed
    assert len(bomb) < (64 << 20) // 16  # snappy tops out near 21:1
    tracemalloc.start()
    try:
        with pytest.raises(C.DecompressedTooLarge):
            C.decompress(codec, bomb, max_size=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * cap + len(bomb) + (1 << 20)


def test_bomb_with_default_cap():
    bomb = C.compress(C.ZSTD, bytes(C.DEFAULT_MAX_DECOMPRESSED + 1))
    with pytest.raises(C.DecompressedTooLarge):
        C.decompress(C.ZSTD, bomb)


def test_gzip_lying_isize_is_corrupt_not_a_big_allocation():
    packed = bytearray(C.compress(C.GZIP, DATA))
    packed[-4:] = struct.pack("<I", 0xFFFFFFFF)  # ISIZE says 4 GiB
    tracemalloc.start()
    try:
        with pytest.raises(C.CompressionError, match="checksum"):
            C.decompress(C.GZIP, bytes(packed), max_size=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20


def test_zstd_content_size_guess_matches():
    packed = C.compress(C.ZSTD, DATA)
    assert C.decompress(C.ZSTD, packed, max_size=len(DATA)) == DATA


def test_gzip_output_is_standard_gzip():
    assert zlib.decompress(C.compress(C.GZIP, DATA), 31) == DATA


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000), legacy=st.booleans(), raw=st.booleans())
def test_round_trip_property(codec, data, legacy, raw):
    packed = C.compress(codec, data, legacy_lz4=legacy, snappy_framing="raw" if raw else "xerial")
    assert C.decompress(codec, packed, legacy_lz4=legacy) == data


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=200))
def test_garbage_only_raises_compression_error(codec, data):
    try:
        out = C.decompress(codec, data, max_size=1 << 16, legacy_lz4=True)
    except C.CompressionError:
        return
    assert len(out) <= 1 << 16


def test_zstd_stream_without_content_size_bound_and_decode():
    data = os.urandom(2000) * 200 + bytes(300_000)
    c = cramjam.zstd.Compressor()
    c.compress(data)
    frame = bytes(c.finish())
    assert not frame[4] & 0xC0 and not frame[4] & 0x20  # no Frame_Content_Size
    assert len(data) <= C._zstd_bound(frame) <= len(data) + 8 * 128 * 1024
    assert C.decompress(C.ZSTD, frame) == data
    assert C.decompress(C.ZSTD, frame + frame) == data + data  # concatenated frames
    with pytest.raises(C.DecompressedTooLarge):
        C.decompress(C.ZSTD, frame, max_size=len(data) - 1)


def test_lz4_linked_blocks_and_content_size():
    data = os.urandom(1000) * 300
    linked = bytes(cramjam.lz4.compress(data))  # librdkafka-style linked blocks
    assert not linked[4] & 0x20
    hc = C._lz4_header_end(linked)
    assert C._lz4_bound(linked, hc) >= len(data)
    assert C.decompress(C.LZ4, linked) == data
    with pytest.raises(C.DecompressedTooLarge):
        C.decompress(C.LZ4, linked, max_size=len(data) - 1)


def test_zstd_bound_on_cut_frames_terminates():
    frame = C.compress(C.ZSTD, DATA)
    for cut in range(4, 40):
        assert C._zstd_bound(frame[:cut]) >= 0
        with pytest.raises(C.CompressionError):
            C.decompress(C.ZSTD, frame[:cut])
    # no content size, cut inside the block headers
    c = cramjam.zstd.Compressor()
    c.compress(DATA)
    stream = bytes(c.finish())
    for cut in (6, 8, 9, 12):
        assert C._zstd_bound(stream[:cut]) >= 0


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(CODECS), cut=st.integers(0, 400), flips=st.binary(max_size=6), legacy=st.booleans())
def test_mutated_frames_give_data_or_compression_error(codec, cut, flips, legacy):
    frame = bytearray(C.compress(codec, DATA[:3000], legacy_lz4=legacy))
    for i, x in enumerate(flips):
        frame[(cut + 37 * i) % len(frame)] ^= x or 0x80
    for blob in (bytes(frame), bytes(frame[:cut])):
        try:
            out = C.decompress(codec, blob, max_size=1 << 16, legacy_lz4=True)
        except C.CompressionError:
            continue
        assert len(out) <= 1 << 16
