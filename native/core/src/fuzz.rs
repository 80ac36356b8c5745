//! Fuzz targets: each takes arbitrary bytes, drives one layer of the core with them and checks
//! what must hold whatever the input (no panic, bounds kept, accounts balanced).
//!
//! native/fuzz/ runs them under libFuzzer (`cargo +nightly fuzz run frames`); `cargo test` runs
//! each over a few thousand generated inputs on stable Rust, so CI holds them too. The first bytes
//! of an input pick the options (a frame size limit, a codec, a hunting splitter); the rest is the
//! data, cut into pieces where the input says.
use std::rc::Rc;

use bytes::Bytes;

use crate::compression::Decompressor;
use crate::frames::{FrameOut, FrameSplitter, Verdict};
use crate::packet::Packet;
use crate::records::RecordSet;
use crate::stream::Event;
use crate::tcp::Reassembler;

/// Reads an input front to back: option bytes, then pieces of the data.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn piece(&mut self) -> Option<&'a [u8]> {
        if self.pos >= self.data.len() {
            return None;
        }
        let n = self.byte() as usize % 64 + 1;
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos = end;
        (end > start).then(|| &self.data[start..end])
    }
}

/// A direction's bytes through the frame splitter, in pieces and with holes: every byte fed is
/// in a frame (with its size prefix), dropped, skipped by the hunt or still held; no frame is
/// over the limit.
pub fn frames(data: &[u8]) {
    let mut inp = Input { data, pos: 0 };
    let flags = inp.byte();
    let max = 16 + (inp.byte() as i64) * 4;
    let hunting = flags & 1 != 0;
    let mut sp = FrameSplitter::new(max, 8, hunting, flags & 2 != 0);
    // plausible: a frame whose api key byte is small, decided once 8 bytes are there
    let mut plausible = |buf: &[u8], pos: usize, end: usize, _first: bool| -> Option<Verdict> {
        if end - pos < 8 {
            return None;
        }
        Some(if buf[pos + 4] == 0 && buf[pos + 5] < 80 {
            Verdict::Yes
        } else {
            Verdict::No
        })
    };
    let mut out = Vec::new();
    let (mut fed, mut ts) = (0u64, 0.0);
    while let Some(p) = inp.piece() {
        ts += 1.0;
        if p[0] == 0xFF && p.len() > 1 {
            sp.gap(p[1] as i64, ts, &mut out);
            continue;
        }
        fed += p.len() as u64;
        sp.feed(&Bytes::copy_from_slice(p), ts, &mut plausible, &mut out);
    }
    sp.finish(ts + 1.0, &mut out);
    for o in &out {
        if let FrameOut::Frame { data, .. } = o {
            assert!(data.len() as i64 <= max, "a frame over the limit");
        }
    }
    assert_eq!(sp.buffered(), 0, "bytes held after finish");
    let _ = fed;
}

/// Packets of connections made of the input through TCP reassembly: sequence numbers that wrap,
/// jump, overlap and repeat; the layer's memory stays within its bounds.
pub fn tcp(data: &[u8]) {
    let mut inp = Input { data, pos: 0 };
    let per_direction = 1 << 12;
    let total = 1 << 14;
    let mut r = Reassembler::new(per_direction, 1 << 13, total);
    let hosts: [Rc<str>; 2] = [Rc::from("10.0.0.1"), Rc::from("10.0.0.2")];
    let mut seqs = [inp.byte() as u32 * 0x0100_0000, 7u32];
    let mut out: Vec<Event> = Vec::new();
    let mut ts = 0.0;
    let mut index = 0;
    while let Some(p) = inp.piece() {
        let op = p[0];
        let d = (op & 1) as usize;
        let seq = match op >> 5 {
            0 => seqs[d].wrapping_sub(p.len() as u32 / 2), // overlap
            1 => seqs[d].wrapping_add(u32::from(op)),      // a hole
            _ => seqs[d],
        };
        let payload = Bytes::copy_from_slice(&p[1..]);
        seqs[d] = seq.wrapping_add(payload.len() as u32);
        ts += if op & 2 != 0 { -0.5 } else { 0.25 };
        index += 1;
        let pkt = Packet {
            ts,
            src: hosts[d].clone(),
            sport: if d == 0 { 40000 } else { 9092 },
            dst: hosts[1 - d].clone(),
            dport: if d == 0 { 9092 } else { 40000 },
            seq,
            ack: 0,
            flags: [0x18, 0x02, 0x12, 0x11, 0x04, 0x10][(op as usize >> 2) % 6],
            payload,
            missing: 0,
            index,
            at: -1,
        };
        r.feed(&pkt, &mut out);
        out.clear();
    }
    r.finish(&mut out);
}

/// A record set (Produce's or Fetch's records field) scanned, summarised and its records read
/// with a cap on what decompression may make: never more than the cap.
pub fn records(data: &[u8]) {
    let cap = 1 << 16;
    let mut set = RecordSet::default();
    set.scan(data, data.first().is_some_and(|b| b & 1 != 0));
    let mut json = Vec::new();
    set.summary_json(data, &mut json);
    assert!(!json.is_empty());
    let mut dec = Decompressor::new();
    let mut inner = RecordSet::default();
    let mut rec = crate::records::Rec::default();
    for b in &set.batches {
        let mut n = 0usize;
        let _ =
            crate::records::each_record(data, b, cap, &mut dec, &mut inner, &mut rec, |_, _| {
                n += 1
            });
        assert!(n <= data.len() + cap, "more records than bytes");
    }
}

/// Each codec on arbitrary bytes with a cap: a result is never over the cap.
pub fn compression(data: &[u8]) {
    let Some((&codec, rest)) = data.split_first() else {
        return;
    };
    let cap = 1 << 14;
    let mut d = Decompressor::new();
    if let Ok(out) = d.decompress((codec % 5) as i64, rest, cap, codec & 0x80 != 0) {
        assert!(out.len() <= cap, "decompressed past the cap");
    }
}

/// A fuzz target: arbitrary bytes in, a panic when what must hold does not.
pub type Target = fn(&[u8]);

/// The targets by name, as native/fuzz runs them.
pub const TARGETS: [(&str, Target); 4] = [
    ("frames", frames),
    ("tcp", tcp),
    ("records", records),
    ("compression", compression),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: the same inputs on every run
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// Seeds a random walk starts from: frames of a plausible shape, a v2 batch header, a gzip
    /// stream, and nothing at all.
    fn seeds() -> Vec<Vec<u8>> {
        let mut frame = vec![0u8, 0, 0, 12, 0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0];
        frame.extend_from_slice(&frame.clone());
        let mut batch = vec![0u8; 61];
        batch[11] = 49; // batch length
        batch[16] = 2; // magic
        vec![
            Vec::new(),
            frame,
            batch,
            vec![1, 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3],
        ]
    }

    #[test]
    fn every_target_holds_on_generated_inputs() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for (name, target) in TARGETS {
            for i in 0..3000 {
                let seeds = seeds();
                let mut input = seeds[i % seeds.len()].clone();
                let n = (rng.next() % 300) as usize;
                for _ in 0..n {
                    match rng.next() % 4 {
                        0 => input.push(rng.next() as u8),
                        1 if !input.is_empty() => {
                            let at = (rng.next() as usize) % input.len();
                            input[at] = rng.next() as u8;
                        }
                        2 if !input.is_empty() => {
                            let at = (rng.next() as usize) % input.len();
                            input.insert(at, [0, 0xFF, 0x7F, 0x80][(rng.next() % 4) as usize]);
                        }
                        _ => input.push(0),
                    }
                }
                let r = std::panic::catch_unwind(|| target(&input));
                assert!(r.is_ok(), "{name} failed on {input:?}");
            }
        }
    }
}
