"""Kafka compression codecs over cramjam, with a hard cap on decompressed size.

Codec ids are the low three attribute bits of a record batch / message:
0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Every decompressor writes into a buffer that is never larger than
``max_size + 1`` bytes: cramjam's ``decompress_into`` fails instead of growing
the buffer, so a decompression bomb costs at most the cap, never its full size.
The buffer starts at a size guessed from the codec's own framing (gzip ISIZE,
zstd/lz4 frame content size, snappy block lengths) and grows by 4x on overflow.
"""

from __future__ import annotations

import struct

import cramjam

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "CODEC_IDS",
    "DEFAULT_MAX_DECOMPRESSED",
    "CompressionError",
    "DecompressedTooLarge",
    "compress",
    "decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {v: k for k, v in CODEC_NAMES.items()}
DEFAULT_MAX_DECOMPRESSED = 64 << 20

_MIN_GUESS = 1 << 16
_OVERFLOW = "failed to write whole buffer"  # cramjam's message when the output buffer is full
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic + int32 version + int32 compatible version
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_U32 = struct.Struct(">I")
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")


class CompressionError(ValueError):
    """Compressed data that cannot be decoded (corrupt, truncated, unknown codec)."""

    def __init__(self, codec: int, reason: str):
        self.codec = codec
        self.reason = reason
        super().__init__(f"{CODEC_NAMES.get(codec, f'codec {codec}')}: {reason}")


class DecompressedTooLarge(CompressionError):
    """The data decompresses to more than the configured cap; nothing past it was kept."""

    def __init__(self, codec: int, limit: int):
        self.limit = limit
        super().__init__(codec, f"decompressed size exceeds the {limit}-byte cap")


def _bounded(codec, into, data, guess, cap):
    size = min(max(guess, _MIN_GUESS), cap + 1)
    while True:
        buf = bytearray(size)
        try:
            n = into(data, buf)
        except (cramjam.DecompressionError, OSError) as e:
            if _OVERFLOW not in str(e):
                raise CompressionError(codec, str(e)) from None
            if size > cap:
                raise DecompressedTooLarge(codec, cap) from None
            size = min(size * 4, cap + 1)
            continue
        if n > cap:
            raise DecompressedTooLarge(codec, cap)
        del buf[n:]
        return buf


def _gzip(data, cap):
    guess = _U32LE.unpack_from(data, len(data) - 4)[0] if len(data) >= 18 else 0
    return _bounded(GZIP, cramjam.gzip.decompress_into, data, guess, cap)


def _zstd(data, cap):
    return _bounded(ZSTD, cramjam.zstd.decompress_into, data, _zstd_bound(data), cap)


def _zstd_bound(data):
    """Upper bound of the decompressed size from frame and block headers (no decoding).

    Frame_Content_Size is exact when present (cramjam writes it, zstd-jni streams do not);
    otherwise raw/RLE blocks give their size and compressed blocks at most 128 KiB.
    Unparsable framing falls back to a guess; decompression then reports the fault.
    """
    total, pos, n = 0, 0, len(data)
    try:
        while pos < n:
            magic = _U32LE.unpack_from(data, pos)[0]
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
                pos += 8 + _U32LE.unpack_from(data, pos + 4)[0]
                continue
            if magic != 0xFD2FB528:
                break
            fhd = data[pos + 4]
            fcs_code, single, did_code = fhd >> 6, (fhd >> 5) & 1, fhd & 3
            p = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[did_code]
            width = (1 if single else 0, 2, 4, 8)[fcs_code]
            if width:
                total += int.from_bytes(data[p : p + width], "little") + (256 if width == 2 else 0)
            p += width
            while True:
                if p + 3 > n:
                    raise IndexError("block header past the end")
                h = int.from_bytes(data[p : p + 3], "little")
                size, kind = h >> 3, (h >> 1) & 3
                p += 3 + (1 if kind == 1 else size)
                if not width:
                    total += size if kind < 2 else 128 * 1024
                if h & 1:
                    break
            pos = p + (4 if fhd & 0x04 else 0)
    except (IndexError, struct.error):
        pass
    return total or 4 * n


def _snappy(data, cap):
    if data[:8] == _XERIAL_MAGIC:
        return _xerial(data, cap)
    if data[:10] == b"\xff\x06\x00\x00sNaPpY":  # snappy framing format; not Kafka's, but cheap to accept
        return _bounded(SNAPPY, cramjam.snappy.decompress_into, data, 4 * len(data), cap)
    return _snappy_raw(data, cap, 0)


def _snappy_raw(block, cap, used):
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except (cramjam.DecompressionError, OSError) as e:
        raise CompressionError(SNAPPY, str(e)) from None
    if used + n > cap:
        raise DecompressedTooLarge(SNAPPY, cap)
    out = bytearray(n)
    try:
        got = cramjam.snappy.decompress_raw_into(block, out)
    except (cramjam.DecompressionError, OSError) as e:
        raise CompressionError(SNAPPY, str(e)) from None
    if got != n:
        raise CompressionError(SNAPPY, f"block decoded to {got} bytes, header says {n}")
    return out


def _xerial(data, cap):
    # Kafka's snappy stream (snappy-java): 16-byte header, then [int32 length][raw block]...
    mv = memoryview(data)
    out = bytearray()
    pos, end = _XERIAL_HEADER, len(data)
    if end < pos:
        raise CompressionError(SNAPPY, "truncated xerial header")
    while pos < end:
        if end - pos < 4:
            raise CompressionError(SNAPPY, f"truncated xerial block length at byte {pos}")
        n = _U32.unpack_from(mv, pos)[0]
        pos += 4
        if n > end - pos:
            raise CompressionError(SNAPPY, f"xerial block of {n} bytes runs past the data at byte {pos}")
        out += _snappy_raw(mv[pos : pos + n], cap, len(out))
        pos += n
    return out


# xxHash32, only for the lz4 frame header checksum (a few bytes), so plain Python is fine.
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(b: bytes, seed: int = 0) -> int:
    n, i = len(b), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 16 <= n:
            for k in range(4):
                w = _U32LE.unpack_from(b, i)[0]
                v[k] = (_rotl((v[k] + w * _P2) & _M, 13) * _P1) & _M
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        h = (_rotl((h + _U32LE.unpack_from(b, i)[0] * _P3) & _M, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (_rotl((h + b[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    return h ^ (h >> 16)


def _lz4_header_end(data):
    """Index of the header-checksum byte of an lz4 frame, or raise."""
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        raise CompressionError(LZ4, "not an lz4 frame (bad magic)")
    hc = 6 + (8 if data[4] & 0x08 else 0) + (4 if data[4] & 0x01 else 0)
    if len(data) <= hc:
        raise CompressionError(LZ4, "truncated lz4 frame header")
    return hc


def _lz4(data, cap, legacy):
    data = bytes(data)
    hc = _lz4_header_end(data)
    if legacy:
        # Kafka < 0.10 hashed the magic too (KAFKA-3160); magic 0/1 readers accept it.
        good = (xxh32(data[4:hc]) >> 8) & 0xFF
        if data[hc] != good:
            data = data[:hc] + bytes((good,)) + data[hc + 1 :]
    return _bounded(LZ4, cramjam.lz4.decompress_into, data, _lz4_bound(data, hc), cap)


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_bound(data, hc):
    """Upper bound of the decompressed size: content size if given, else per-block maxima."""
    flg = data[4]
    if flg & 0x08:
        return _U64LE.unpack_from(data, 6)[0]
    block_max = _LZ4_BLOCK_MAX.get((data[5] >> 4) & 7, 4 << 20)
    extra = 4 if flg & 0x10 else 0
    total, pos, n = 0, hc + 1, len(data)
    while pos + 4 <= n:
        size = _U32LE.unpack_from(data, pos)[0]
        if size == 0:
            break
        stored = size & 0x7FFFFFFF
        total += stored if size & 0x80000000 else block_max
        pos += 4 + stored + extra
    return total or 4 * n


def decompress(codec: int, data, *, max_size: int = DEFAULT_MAX_DECOMPRESSED, legacy_lz4: bool = False) -> bytearray:
    """Decompress one batch payload; raises CompressionError / DecompressedTooLarge.

    ``legacy_lz4`` accepts the broken lz4 header checksum written for magic 0/1.
    """
    if codec == GZIP:
        return _gzip(data, max_size)
    if codec == SNAPPY:
        return _snappy(data, max_size)
    if codec == LZ4:
        return _lz4(data, max_size, legacy_lz4)
    if codec == ZSTD:
        return _zstd(data, max_size)
    if codec == NONE:
        if len(data) > max_size:
            raise DecompressedTooLarge(codec, max_size)
        return bytearray(data)
    raise CompressionError(codec, "unknown compression codec")


def compress(
    codec: int, data, *, level: int | None = None, legacy_lz4: bool = False, snappy_framing: str = "xerial"
) -> bytes:
    """Compress a batch payload the way Kafka's Java producer frames it.

    snappy_framing: "xerial" (Java clients) or "raw" (librdkafka).
    legacy_lz4: write the broken header checksum of magic 0 messages.
    """
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        if snappy_framing == "raw":
            return bytes(cramjam.snappy.compress_raw(data))
        out = bytearray(_XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
        mv = memoryview(data)
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK])
            out += _U32.pack(len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        # Independent blocks and no content checksum, like KafkaLZ4BlockOutputStream (cramjam
        # always adds block checksums, which Kafka readers accept).
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(data)
        out = bytes(c.finish())
        if legacy_lz4:
            hc = _lz4_header_end(out)
            out = out[:hc] + bytes(((xxh32(out[:hc]) >> 8) & 0xFF,)) + out[hc + 1 :]
        return out
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    if codec == NONE:
        return bytes(data)
    raise CompressionError(codec, "unknown compression codec")
