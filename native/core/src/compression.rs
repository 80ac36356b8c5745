//! Kafka's codecs (gzip, snappy in its three framings, lz4, zstd) with a hard cap on the
//! decompressed size.
//!
//! A corrupt stream is accepted or rejected, with the same message, as protocol/compression.py
//! does with cramjam 2.14 (tests/test_native_records.py compares them). cramjam's C backend
//! (libcramjam 0.9) decodes with flate2 (miniz_oxide), snap, liblz4 (lz4-sys) and libzstd (zstd,
//! legacy formats included), so this drives the same crates the same way: gzip, zstd and framed
//! snappy are read through their streaming decoders in std::io::copy's 8 KiB pieces, lz4 through
//! LZ4F_decompress in libcramjam's 256 KiB pieces, raw snappy blocks in one call each. Where the
//! reference writes those pieces into a buffer of at most cap + 1 bytes and decodes again into a
//! bigger one on overflow, this writes them into one buffer kept between calls and stops at the
//! piece that would overflow cap + 1: the same verdict (data, the decoder's error, or TooLarge)
//! without the retries.
use std::io::Read;

pub const NONE: i64 = 0;
pub const GZIP: i64 = 1;
pub const SNAPPY: i64 = 2;
pub const LZ4: i64 = 3;
pub const ZSTD: i64 = 4;
pub const DEFAULT_MAX_DECOMPRESSED: usize = 64 << 20;

/// The name of each value of the three codec attribute bits (5..7 are no codec: unknown(N)).
pub const CODEC_NAMES: [&str; 8] = [
    "none",
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "unknown(5)",
    "unknown(6)",
    "unknown(7)",
];

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: usize = 16;
const SNAPPY_FRAMED: &[u8] = b"\xff\x06\x00\x00sNaPpY";
const LZ4_MAGIC: &[u8] = b"\x04\x22\x4d\x18";
/// std::io::copy's buffer (DEFAULT_BUF_SIZE): the pieces cramjam reads a decoder in
const CHUNK: usize = 8 * 1024;
/// the output buffer kept between calls, at most
const KEEP: usize = 8 << 20;
/// libcramjam's lz4 output piece
const LZ4_PIECE: usize = 256 << 10;

/// Why a payload did not decompress: the decoder's error (its reason, which an error text puts
/// after codec_label's "codec: "), or more than the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Compression(String),
    TooLarge,
}

/// The output buffer, kept between calls: it only grows (never past the largest cap + 1 a
/// call was given), so decompressing many small batches allocates once.
#[derive(Default)]
pub struct Decompressor {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    piece: Vec<u8>,
    dctx: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl Decompressor {
    pub fn new() -> Self {
        Self::default()
    }

    /// `data` decompressed by `codec` (NONE: as it is), at most `cap` bytes of it, in the buffer
    /// kept. `legacy_lz4`: a magic 0/1 message's lz4, whose header checksum may be the one
    /// Kafka < 0.10 wrote.
    pub fn decompress<'a>(
        &'a mut self,
        codec: i64,
        data: &'a [u8],
        cap: usize,
        legacy_lz4: bool,
    ) -> Result<&'a [u8], Error> {
        if self.buf.len() > KEEP {
            self.buf = Vec::new(); // a bomb's cap-sized buffer is not kept for the next call
        }
        let n = match codec {
            GZIP => self.gzip(data, cap)?,
            SNAPPY => self.snappy(data, cap)?,
            LZ4 => self.lz4(data, cap, legacy_lz4)?,
            ZSTD => self.zstd(data, cap)?,
            NONE => {
                if data.len() > cap {
                    return Err(Error::TooLarge);
                }
                return Ok(data);
            }
            _ => return Err(Error::Compression("unknown compression codec".into())),
        };
        Ok(&self.buf[..n])
    }

    fn gzip(&mut self, data: &[u8], cap: usize) -> Result<usize, Error> {
        // libcramjam::gzip::decompress: flate2::read::MultiGzDecoder (every member), which is
        // the bufread one over a 32 KiB BufReader: the same reads, without that buffer
        drain(
            &mut self.buf,
            &mut flate2::bufread::MultiGzDecoder::new(Pieces::new(data, 32 * 1024)),
            cap,
        )
    }

    fn zstd(&mut self, data: &[u8], cap: usize) -> Result<usize, Error> {
        // libcramjam::zstd::decompress: zstd::stream::read::Decoder::new, concatenated frames
        // included: a BufReader of DCtx::in_size() over the input and a fresh context. Here
        // the same pieces of input, and one context kept (with_context resets its session;
        // a new one would have no dictionary and default parameters, as this one has).
        let dctx = self.dctx.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        let input = Pieces::new(data, zstd::zstd_safe::DCtx::in_size());
        let r = {
            let mut d = zstd::stream::read::Decoder::with_context(input, dctx);
            drain(&mut self.buf, &mut d, cap)
        };
        if self.dctx.as_ref().is_some_and(|c| c.sizeof() > KEEP) {
            self.dctx = None; // nor the window of a frame that asked for a big one
        }
        r
    }

    fn snappy(&mut self, data: &[u8], cap: usize) -> Result<usize, Error> {
        if data.starts_with(XERIAL_MAGIC) {
            return self.xerial(data, cap);
        }
        if data.starts_with(SNAPPY_FRAMED) {
            return drain(&mut self.buf, &mut snap::read::FrameDecoder::new(data), cap);
        }
        self.snappy_raw(data, cap, 0)
    }

    /// One raw snappy block into buf[used..]; returns the new length.
    fn snappy_raw(&mut self, block: &[u8], cap: usize, used: usize) -> Result<usize, Error> {
        let n = snap::raw::decompress_len(block).map_err(|e| Error::Compression(e.to_string()))?;
        if used.saturating_add(n) > cap {
            return Err(Error::TooLarge);
        }
        if self.buf.len() < used + n {
            self.buf.resize(used + n, 0);
        }
        let got = snap::raw::Decoder::new()
            .decompress(block, &mut self.buf[used..used + n])
            .map_err(|e| Error::Compression(e.to_string()))?;
        if got != n {
            return Err(Error::Compression(format!(
                "block decoded to {got} bytes, header says {n}"
            )));
        }
        Ok(used + n)
    }

    /// snappy-java's (xerial) stream: [int32 length][raw block]... after a 16-byte header.
    fn xerial(&mut self, data: &[u8], cap: usize) -> Result<usize, Error> {
        let (mut pos, end) = (XERIAL_HEADER, data.len());
        if end < pos {
            return Err(Error::Compression("truncated xerial header".into()));
        }
        let mut used = 0;
        while pos < end {
            if end - pos < 4 {
                return Err(Error::Compression(format!(
                    "truncated xerial block length at byte {pos}"
                )));
            }
            let n = u32::from_be_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
            pos += 4;
            if n > end - pos {
                return Err(Error::Compression(format!(
                    "xerial block of {n} bytes runs past the data at byte {pos}"
                )));
            }
            used = self.snappy_raw(&data[pos..pos + n], cap, used)?;
            pos += n;
        }
        Ok(used)
    }

    fn lz4(&mut self, data: &[u8], cap: usize, legacy: bool) -> Result<usize, Error> {
        let hc = lz4_header_end(data)?;
        if legacy {
            // Kafka < 0.10 hashed the magic too (KAFKA-3160); magic 0/1 readers accept it.
            let good = (xxh32(&data[4..hc], 0) >> 8) as u8;
            if data[hc] != good {
                self.scratch.clear();
                self.scratch.extend_from_slice(data);
                self.scratch[hc] = good;
                let fixed = std::mem::take(&mut self.scratch);
                let r = self.lz4_frame(&fixed, cap);
                self.scratch = fixed;
                return r;
            }
        }
        self.lz4_frame(data, cap)
    }

    /// libcramjam::lz4::decompress (its C backend, which cramjam 2.14 runs): LZ4F_decompress
    /// over the whole input in 256 KiB pieces of output, frame after frame until the input
    /// ends (so bytes after a frame must be another frame), "truncated frame" when the input
    /// ends inside one. Each piece is written whole or overflows, as into cramjam's buffer.
    ///
    /// unsafe: liblz4's frame API is C (lz4-sys, the binding cramjam uses); the lz4 crate's
    /// safe Decoder reads differently (it stops after the first frame).
    fn lz4_frame(&mut self, data: &[u8], cap: usize) -> Result<usize, Error> {
        use lz4::liblz4::{
            LZ4FDecompressionContext, LZ4F_createDecompressionContext, LZ4F_decompress,
            LZ4F_freeDecompressionContext, LZ4F_getErrorName, LZ4F_isError, LZ4F_VERSION,
        };
        struct Ctx(LZ4FDecompressionContext);
        impl Drop for Ctx {
            fn drop(&mut self) {
                if !self.0 .0.is_null() {
                    // SAFETY: a context LZ4F_createDecompressionContext made, freed once
                    unsafe { LZ4F_freeDecompressionContext(LZ4FDecompressionContext(self.0 .0)) };
                }
            }
        }
        fn check(code: usize) -> Result<usize, Error> {
            // SAFETY: LZ4F_getErrorName gives a static C string for any code
            if unsafe { LZ4F_isError(code) } != 0 {
                let name = unsafe { std::ffi::CStr::from_ptr(LZ4F_getErrorName(code)) };
                return Err(Error::Compression(format!(
                    "lz4: {}",
                    name.to_string_lossy()
                )));
            }
            Ok(code)
        }
        if data.is_empty() {
            return Err(Error::Compression("lz4: empty input".into()));
        }
        let mut ctx = Ctx(LZ4FDecompressionContext(std::ptr::null_mut()));
        // SAFETY: writes a new context into ctx.0
        check(unsafe { LZ4F_createDecompressionContext(&mut ctx.0, LZ4F_VERSION) })?;
        if self.piece.len() < LZ4_PIECE {
            self.piece.resize(LZ4_PIECE, 0);
        }
        let limit = cap.saturating_add(1);
        let (mut pos, mut n) = (0usize, 0usize);
        loop {
            let direct = limit - n >= LZ4_PIECE;
            if direct && self.buf.len() < n + LZ4_PIECE {
                let want = (self.buf.len() * 2).max(n + LZ4_PIECE).min(limit);
                self.buf.resize(want, 0);
            }
            let dst: &mut [u8] = if direct {
                &mut self.buf[n..n + LZ4_PIECE]
            } else {
                &mut self.piece[..LZ4_PIECE]
            };
            let mut src_size = data.len() - pos;
            let mut dst_size = LZ4_PIECE;
            // SAFETY: src and dst are live slices of at least the sizes passed; liblz4 writes
            // back how much of each it used (never more), and keeps no pointer into them
            // (no stableDst option: history it needs goes to its own buffers)
            let hint = check(unsafe {
                LZ4F_decompress(
                    LZ4FDecompressionContext(ctx.0 .0),
                    dst.as_mut_ptr(),
                    &mut dst_size,
                    data[pos..].as_ptr(),
                    &mut src_size,
                    std::ptr::null(),
                )
            })?;
            pos += src_size;
            if !direct {
                if dst_size > limit - n {
                    return Err(Error::TooLarge);
                }
                if self.buf.len() < n + dst_size {
                    self.buf.resize(n + dst_size, 0);
                }
                self.buf[n..n + dst_size].copy_from_slice(&self.piece[..dst_size]);
            }
            n += dst_size;
            if hint == 0 && pos == data.len() {
                break;
            }
            if pos == data.len() && dst_size == 0 {
                return Err(Error::Compression("lz4: truncated frame".into()));
            }
            if src_size == 0 && dst_size == 0 {
                // cramjam would call again forever; liblz4 always moves one side while input
                // is left, so this only keeps the loop bounded
                return Err(Error::Compression("lz4: no progress".into()));
            }
        }
        if n > cap {
            return Err(Error::TooLarge);
        }
        Ok(n)
    }
}

/// Reads `r` to its end into buf[..n]: TooLarge once more than cap bytes came out, the
/// decoder's error as Error::Compression.
fn drain<R: Read>(buf: &mut Vec<u8>, r: &mut R, cap: usize) -> Result<usize, Error> {
    let limit = cap.saturating_add(1);
    let mut n = 0usize;
    loop {
        let got = if limit - n >= CHUNK {
            if buf.len() < n + CHUNK {
                // grow geometrically but never past cap + 1: one byte past the cap tells TooLarge
                let want = (buf.len() * 2).max(n + CHUNK).max(1 << 16).min(limit);
                buf.resize(want, 0);
            }
            let k = read_once(r, &mut buf[n..n + CHUNK])?;
            n += k;
            k
        } else {
            // the last piece before the cap: read a whole chunk as io::copy does, keep
            // what fits
            let mut piece = [0u8; CHUNK];
            let k = read_once(r, &mut piece)?;
            if k > limit - n {
                return Err(Error::TooLarge);
            }
            if buf.len() < n + k {
                buf.resize(n + k, 0);
            }
            buf[n..n + k].copy_from_slice(&piece[..k]);
            n += k;
            k
        };
        if got == 0 {
            break;
        }
    }
    if n > cap {
        return Err(Error::TooLarge);
    }
    Ok(n)
}

/// A std BufReader of `cap` bytes over a slice, without its copy: fill_buf hands out the
/// next `cap` bytes (or what is left) once the previous piece is consumed, as BufReader does.
struct Pieces<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    cap: usize,
}

impl<'a> Pieces<'a> {
    fn new(data: &'a [u8], cap: usize) -> Self {
        Pieces {
            data,
            pos: 0,
            end: 0,
            cap: cap.max(1),
        }
    }
}

impl Read for Pieces<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        // BufReader::read: a read at least as large as its buffer, with nothing buffered,
        // bypasses the buffer
        if self.pos >= self.end && out.len() >= self.cap {
            let k = out.len().min(self.data.len() - self.pos);
            out[..k].copy_from_slice(&self.data[self.pos..self.pos + k]);
            self.pos += k;
            self.end = self.pos;
            return Ok(k);
        }
        let avail = self.fill_buf()?;
        let k = avail.len().min(out.len());
        out[..k].copy_from_slice(&avail[..k]);
        self.consume(k);
        Ok(k)
    }
}

impl std::io::BufRead for Pieces<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos >= self.end {
            self.end = (self.pos + self.cap).min(self.data.len());
        }
        Ok(&self.data[self.pos..self.end])
    }

    fn consume(&mut self, k: usize) {
        self.pos = (self.pos + k).min(self.end);
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::Compression(e.to_string())
}

/// One read of a decoder, as io::copy makes it (it retries ErrorKind::Interrupted, which none
/// of these decoders gives; here not forever).
fn read_once<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, Error> {
    for _ in 0..64 {
        match r.read(buf) {
            Ok(k) => return Ok(k),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e)),
        }
    }
    Err(Error::Compression(
        "decoder interrupted again and again".into(),
    ))
}

/// The index of an lz4 frame's header-checksum byte (after the magic, the flag and block bytes,
/// and the content size and dictionary id its flags announce).
fn lz4_header_end(data: &[u8]) -> Result<usize, Error> {
    if data.len() < 7 || &data[..4] != LZ4_MAGIC {
        return Err(Error::Compression("not an lz4 frame (bad magic)".into()));
    }
    let hc = 6 + if data[4] & 0x08 != 0 { 8 } else { 0 } + if data[4] & 0x01 != 0 { 4 } else { 0 };
    if data.len() <= hc {
        return Err(Error::Compression("truncated lz4 frame header".into()));
    }
    Ok(hc)
}

/// xxHash32, for the lz4 header checksum only.
pub fn xxh32(b: &[u8], seed: u32) -> u32 {
    const P1: u32 = 2654435761;
    const P2: u32 = 2246822519;
    const P3: u32 = 3266489917;
    const P4: u32 = 668265263;
    const P5: u32 = 374761393;
    let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let n = b.len();
    let mut i = 0;
    let mut h = if n >= 16 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while i + 16 <= n {
            for lane in v.iter_mut() {
                *lane = lane
                    .wrapping_add(word(i).wrapping_mul(P2))
                    .rotate_left(13)
                    .wrapping_mul(P1);
                i += 4;
            }
        }
        v[0].rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18))
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(n as u32);
    while i + 4 <= n {
        h = h
            .wrapping_add(word(i).wrapping_mul(P3))
            .rotate_left(17)
            .wrapping_mul(P4);
        i += 4;
    }
    while i < n {
        h = h
            .wrapping_add((b[i] as u32).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
        i += 1;
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^ (h >> 16)
}

/// A codec as error texts name it ("gzip: ..."): its name, or "codec N" past zstd.
pub fn codec_label(codec: i64) -> String {
    match codec {
        0..=4 => CODEC_NAMES[codec as usize].to_string(),
        _ => format!("codec {codec}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn text(n: usize) -> Vec<u8> {
        (0..n).map(|i| b"kafka records "[i % 14]).collect()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4_frame(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(data).unwrap();
        let (out, r) = e.finish();
        r.unwrap();
        out
    }

    fn every_codec(data: &[u8]) -> Vec<(i64, Vec<u8>)> {
        vec![
            (NONE, data.to_vec()),
            (GZIP, gzip(data)),
            (
                SNAPPY,
                snap::raw::Encoder::new().compress_vec(data).unwrap(),
            ),
            (LZ4, lz4_frame(data)),
            (ZSTD, zstd::bulk::compress(data, 3).unwrap()),
        ]
    }

    #[test]
    fn every_codec_round_trips_through_one_decompressor() {
        let data = text(100_000);
        let mut d = Decompressor::new();
        for (codec, packed) in every_codec(&data) {
            let out = d.decompress(codec, &packed, DEFAULT_MAX_DECOMPRESSED, false);
            assert_eq!(
                out.map(<[u8]>::to_vec),
                Ok(data.clone()),
                "{}",
                codec_label(codec)
            );
        }
    }

    #[test]
    fn the_cap_is_exact_for_every_codec() {
        let data = text(10_000);
        let mut d = Decompressor::new();
        for (codec, packed) in every_codec(&data) {
            assert!(
                d.decompress(codec, &packed, 10_000, false).is_ok(),
                "{codec}"
            );
            let over = d.decompress(codec, &packed, 9_999, false);
            assert_eq!(over, Err(Error::TooLarge), "{}", codec_label(codec));
        }
    }

    #[test]
    fn a_bomb_stops_at_the_cap_and_its_buffer_is_not_kept() {
        let bomb = zstd::bulk::compress(&vec![0u8; 200 << 20], 19).unwrap();
        assert!(bomb.len() < 100_000);
        let mut d = Decompressor::new();
        assert_eq!(
            d.decompress(ZSTD, &bomb, 64 << 20, false),
            Err(Error::TooLarge)
        );
        assert!(d.decompress(GZIP, &gzip(b"x"), 64 << 20, false).is_ok());
        assert!(d.buf.capacity() <= KEEP, "the bomb's buffer was kept");
    }

    #[test]
    fn corrupt_streams_are_compression_errors_never_panics() {
        let data = text(50_000);
        let mut d = Decompressor::new();
        for (codec, packed) in every_codec(&data) {
            if codec == NONE {
                continue;
            }
            for cut in [0, 1, 5, packed.len() / 2, packed.len() - 1] {
                let r = d.decompress(codec, &packed[..cut], DEFAULT_MAX_DECOMPRESSED, false);
                assert!(
                    matches!(r, Err(Error::Compression(_))),
                    "{codec} cut at {cut}: {r:?}"
                );
            }
            let mut flipped = packed.clone();
            let at = flipped.len() / 2;
            flipped[at] ^= 0xff;
            // a flipped byte may still decode (to other bytes); it must not panic or run away
            let _ = d.decompress(codec, &flipped, DEFAULT_MAX_DECOMPRESSED, false);
        }
    }

    #[test]
    fn the_error_texts_name_what_is_wrong() {
        let mut d = Decompressor::new();
        let lz4 = d.decompress(LZ4, b"not lz4 at all", 1 << 20, false);
        assert_eq!(
            lz4,
            Err(Error::Compression("not an lz4 frame (bad magic)".into()))
        );
        let unknown = d.decompress(7, b"", 1 << 20, false);
        assert_eq!(
            unknown,
            Err(Error::Compression("unknown compression codec".into()))
        );
        assert_eq!(codec_label(7), "codec 7");
        assert_eq!(CODEC_NAMES[3], "lz4");
    }

    #[test]
    fn xerial_snappy_and_framed_snappy() {
        let data = text(70_000);
        let block = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        xerial.extend_from_slice(&(block.len() as u32).to_be_bytes());
        xerial.extend_from_slice(&block);
        let mut d = Decompressor::new();
        assert_eq!(
            d.decompress(SNAPPY, &xerial, 1 << 20, false).unwrap(),
            &data[..]
        );
        let mut framed = snap::write::FrameEncoder::new(Vec::new());
        framed.write_all(&data).unwrap();
        let framed = framed.into_inner().unwrap();
        assert_eq!(
            d.decompress(SNAPPY, &framed, 1 << 20, false).unwrap(),
            &data[..]
        );
        let truncated = &xerial[..XERIAL_HEADER + 2];
        assert!(matches!(
            d.decompress(SNAPPY, truncated, 1 << 20, false),
            Err(Error::Compression(_))
        ));
    }

    #[test]
    fn xxh32_reference_values() {
        // the xxHash specification's test values
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(
            xxh32(b"Nobody inspects the spammish repetition", 0),
            0xE229_3B2F
        );
    }
}
