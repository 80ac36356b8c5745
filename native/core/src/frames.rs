//! One direction's bytes -> size-prefixed frames, and where the stream is out of sync (begun
//! midstream, after a gap or a bad size) a hunt for the next plausible frame boundary.
//!
//! Every byte fed is a frame's, counted in `dropped`, or lost in a gap. A frame inside one chunk
//! is a zero-copy slice of it, a frame spanning chunks is copied once into a growing buffer, and
//! the hunting tail is a `BytesMut` (amortised appends, O(1) drops from the front, frozen without a
//! copy when a boundary is found). tests/test_native_frames.py holds the outputs, their order,
//! their details and the accounting to the frozen oracle's splitter (tests/oracle/frames.py).
use crate::anomalies::kind;
use bytes::{Buf, Bytes, BytesMut};

pub const DEFAULT_MAX_FRAME_SIZE: i64 = 100 << 20;
pub const HUNT_WINDOW: usize = 8 << 20;

/// What plausible() says of a candidate boundary: not one, likely one (the frames after it must
/// agree), a whole frame that decodes, or a whole frame taken on the word of what came after it
/// (bytes, or what the other direction said); the callback returns None when it needs more bytes.
///
/// A Confirmed frame may have waited among the held bytes for that word: it, and what follows it
/// of the bytes held before the chunk at hand, keep the time those bytes came, as they would in
/// sync. A boundary found any other way stamps its frames with the time of the chunk at hand.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    No,
    Yes,
    Verified,
    Confirmed,
}

pub enum FrameOut {
    Frame {
        ts: f64,
        offset: i64,
        data: Bytes,
    },
    Anomaly {
        ts: f64,
        kind: &'static str,
        detail: String,
        head: Bytes,
    },
}

/// plausible(buf, pos, end, first): `first` is true only when the splitter was made with a
/// judge of its own for the stream's very first offset, and that offset is being judged.
pub type Plausible<'a> = dyn FnMut(&[u8], usize, usize, bool) -> Option<Verdict> + 'a;

/// How a hunt over one buffer ended.
enum Hunted {
    /// A frame starts at this offset of the buffer: carry on in sync from there (true: the
    /// boundary was Confirmed).
    Synced(usize, bool),
    /// Everything was scanned: hold buf[keep..] as the tail.
    Keep(usize),
}

const BAD_FRAME_SIZE: &str = "bad frame size";
const MIDSTREAM_START: &str = "midstream start";

fn be_i32(b: &[u8], at: usize) -> i64 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as i64
}

fn anomaly(ts: f64, kind: &'static str, detail: String, head: Bytes) -> FrameOut {
    FrameOut::Anomaly {
        ts,
        kind,
        detail,
        head,
    }
}

/// One direction's frame splitter.
pub struct FrameSplitter {
    pub dropped: u64,
    max_frame_size: i64,
    min_frame_size: i64,
    has_first: bool,
    offset: i64,   // stream position of the next byte fed
    head: [u8; 4], // partial size prefix: head[..head_len]
    head_len: usize,
    head_ts: f64,
    frame_offset: i64,
    want: i64,      // body size of the frame in progress, -1 between frames
    body: BytesMut, // the frame in progress's body so far
    skip: i64,      // bytes still to drop (rest of a frame damaged by a gap of known size)
    hunting: bool,
    first: bool,         // try the first offset with plausible_first
    tail: BytesMut,      // hunting: unscanned bytes that may hold a frame start
    waiting: Vec<usize>, // hunting: offsets in tail that plausible() has not decided yet
    tail_ts: f64,        // hunting: when the tail's last bytes came
    scan: usize,         // hunting: first offset in tail not scanned yet
    skipped: i64,        // hunting: bytes given up so far
    hunt_reason: &'static str,
}

impl FrameSplitter {
    pub fn new(max_frame_size: i64, min_frame_size: i64, hunting: bool, has_first: bool) -> Self {
        FrameSplitter {
            dropped: 0,
            max_frame_size,
            min_frame_size,
            has_first,
            offset: 0,
            head: [0; 4],
            head_len: 0,
            head_ts: 0.0,
            frame_offset: 0,
            want: -1,
            body: BytesMut::new(),
            skip: 0,
            hunting,
            first: hunting,
            tail: BytesMut::new(),
            waiting: Vec::new(),
            tail_ts: 0.0,
            scan: 0,
            skipped: 0,
            hunt_reason: MIDSTREAM_START,
        }
    }

    /// Bytes of the stream at time `ts`: the frames they complete and the anomalies they cause.
    pub fn feed(
        &mut self,
        data: &Bytes,
        ts: f64,
        plausible: &mut Plausible<'_>,
        out: &mut Vec<FrameOut>,
    ) {
        let mut data = data.clone();
        let mut n = data.len();
        let mut pos = 0usize;
        let mut base = self.offset;
        self.offset = self.offset.wrapping_add(n as i64);
        // data[..held] came before this chunk, at tail_ts (a Confirmed boundary among held bytes)
        let mut held = 0usize;
        // every pass consumes at least one byte, or ends the loop (hunting keeps the rest)
        while pos < n {
            let fts = if pos < held { self.tail_ts } else { ts };
            if self.skip > 0 {
                let take = (self.skip as u64).min((n - pos) as u64) as usize;
                self.skip -= take as i64;
                self.dropped += take as u64;
                pos += take;
            } else if self.hunting {
                match self.hunt(&data, pos, base, ts, plausible, out) {
                    Some((synced, at, bbase, h)) => {
                        data = synced;
                        n = data.len();
                        pos = at;
                        base = bbase;
                        held = h;
                    }
                    None => break,
                }
            } else if self.want < 0 {
                if self.head_len == 0 && pos + 4 <= n {
                    let size = be_i32(&data, pos);
                    if !(0..=self.max_frame_size).contains(&size)
                        && !self.size_ok(size, ts, out, data.slice(pos + 4..n.min(pos + 12)))
                    {
                        self.start_hunt(&[], BAD_FRAME_SIZE);
                        self.dropped += 1;
                        pos += 1;
                        continue;
                    }
                    let end = pos + 4 + size as usize;
                    if end <= n {
                        // the whole frame is in this chunk: one slice, no buffering
                        out.push(FrameOut::Frame {
                            ts: fts,
                            offset: base + pos as i64,
                            data: data.slice(pos + 4..end),
                        });
                        pos = end;
                        continue;
                    }
                    self.frame_offset = base + pos as i64;
                    self.head_ts = fts;
                    self.want = size;
                    pos += 4;
                    continue;
                }
                if self.head_len == 0 {
                    self.head_ts = fts;
                    self.frame_offset = base + pos as i64;
                }
                let take = (4 - self.head_len).min(n - pos);
                self.head[self.head_len..self.head_len + take]
                    .copy_from_slice(&data[pos..pos + take]);
                self.head_len += take;
                pos += take;
                if self.head_len == 4 {
                    let head = self.head;
                    self.head_len = 0;
                    let size = be_i32(&head, 0);
                    if !self.size_ok(size, ts, out, data.slice(pos..n.min(pos + 8))) {
                        // the 3 bytes after the bad prefix's first byte may start a frame
                        self.start_hunt(&head[1..], BAD_FRAME_SIZE);
                        self.dropped += 1;
                        continue;
                    }
                    self.want = size;
                    if size == 0 {
                        out.push(FrameOut::Frame {
                            ts: self.head_ts,
                            offset: self.frame_offset,
                            data: Bytes::new(),
                        });
                        self.want = -1;
                    }
                }
            } else {
                let need = (self.want as u64 - self.body.len() as u64) as usize;
                let take = need.min(n - pos);
                let frame = if self.body.is_empty() && take == need {
                    data.slice(pos..pos + take) // the rest of the body is in this chunk: no copy
                } else {
                    self.body.extend_from_slice(&data[pos..pos + take]);
                    if take < need {
                        pos += take;
                        continue;
                    }
                    std::mem::take(&mut self.body).freeze()
                };
                pos += take;
                out.push(FrameOut::Frame {
                    ts: self.head_ts,
                    offset: self.frame_offset,
                    data: frame,
                });
                self.want = -1;
            }
        }
    }

    /// The hunt asks plausible() again about the offsets it waits on, with no new bytes: what
    /// plausible() looks at besides them may have changed. The frames from a boundary found now
    /// come out with the time the held bytes' last chunk came.
    pub fn reconsider(&mut self, plausible: &mut Plausible<'_>, out: &mut Vec<FrameOut>) {
        if !self.hunting || self.tail.is_empty() || (self.waiting.is_empty() && !self.first) {
            return;
        }
        let mut tail = std::mem::take(&mut self.tail);
        let bbase = self.offset.wrapping_sub(tail.len() as i64);
        let ts = self.tail_ts;
        match self.hunt_in(&tail, bbase, self.scan, ts, plausible, out) {
            Hunted::Synced(at, _) => {
                self.hunting = false;
                // the rest is fed again from its own stream offset, now in sync
                self.offset = bbase.wrapping_add(at as i64);
                self.feed(&tail.freeze().slice(at..), ts, plausible, out);
            }
            Hunted::Keep(keep) => {
                tail.advance(keep);
                self.tail = tail;
            }
        }
    }

    /// `n` bytes of the stream that came before the first byte fed were dropped before this
    /// splitter was made (while its connection's roles were unknown): the hunt that this stream
    /// starts with skipped them, so they count in `dropped` and in what that hunt names.
    pub fn skipped_before_start(&mut self, n: u64) {
        debug_assert!(self.hunting && self.offset == 0 && self.tail.is_empty());
        self.offset = self.offset.wrapping_add(n as i64);
        self.skipped = self.skipped.wrapping_add(n as i64);
        self.dropped += n;
    }

    /// `size` bytes of the stream lost in a capture hole (0: how many is unknown).
    pub fn gap(&mut self, size: i64, ts: f64, out: &mut Vec<FrameOut>) {
        self.offset = self.offset.wrapping_add(size);
        if self.hunting {
            let held = self.tail.len();
            self.dropped += held as u64;
            self.skipped = self.skipped.wrapping_add(held as i64).wrapping_add(size);
            self.tail = BytesMut::new();
            self.waiting.clear();
            self.scan = 0;
            return;
        }
        if self.skip != 0 {
            if size != 0 && size <= self.skip {
                self.skip -= size;
                return;
            }
            self.skip = 0; // the damaged frame ended inside the gap: what follows is not its rest
            self.start_hunt(&[], "gap");
            return;
        }
        if self.want >= 0 {
            let (head, held, remaining, what) = self.abandon();
            if size != 0 && size <= remaining {
                self.skip = remaining - size;
                out.push(anomaly(
                    ts,
                    kind::GAP_IN_FRAME,
                    format!("{size} bytes lost inside a {what}; skipped the rest of it"),
                    head,
                ));
                return;
            }
            // the frame ended inside the gap: its size prefix and the body held were skipped,
            // and the hunt after the gap counts from its far side, so they are named here
            out.push(anomaly(
                ts,
                kind::GAP_IN_FRAME,
                format!(
                    "{} bytes lost inside a {what}; {}",
                    size_or_unknown(size),
                    skipped_before_gap(4 + held)
                ),
                head,
            ));
            self.start_hunt(&[], "gap");
            return;
        }
        if self.head_len > 0 {
            out.push(anomaly(
                ts,
                kind::GAP_IN_FRAME,
                format!(
                    "{} bytes lost inside a frame's size prefix; {}",
                    size_or_unknown(size),
                    skipped_before_gap(self.head_len)
                ),
                Bytes::new(),
            ));
            self.dropped += self.head_len as u64;
            self.head_len = 0;
        }
        self.start_hunt(&[], "gap");
    }

    /// The frame being read is given up: (its first bytes, bytes held, bytes still to come, its
    /// description); what was held counts as dropped, the rest is counted as it is skipped.
    fn abandon(&mut self) -> (Bytes, usize, i64, String) {
        let head = self.body_head();
        let held = self.body.len();
        self.dropped += 4 + held as u64;
        let what = format!(
            "{}-byte frame at stream offset {}",
            self.want, self.frame_offset
        );
        let rest = self.want - held as i64;
        self.body = BytesMut::new();
        self.want = -1;
        (head, held, rest, what)
    }

    /// The frame in progress is given up (the memory budget for partial frames ran out): the
    /// rest of it is skipped as it comes.
    pub fn drop_partial(&mut self, ts: f64, why: &str, out: &mut Vec<FrameOut>) {
        if self.want < 0 || self.body.is_empty() {
            return;
        }
        let (head, held, rest, what) = self.abandon();
        self.skip = rest;
        out.push(anomaly(
            ts,
            kind::FRAME_OVER_BUDGET,
            format!("{what} dropped after {held} bytes: {why}"),
            head,
        ));
    }

    /// The stream ended: a frame in progress is truncated, a hunt's unread tail is skipped.
    pub fn finish(&mut self, ts: f64, out: &mut Vec<FrameOut>) {
        if self.want >= 0 || self.head_len > 0 {
            let head = self.body_head();
            let got = self.body.len() + self.head_len;
            let want = if self.want >= 0 {
                format!("{}-byte", self.want)
            } else {
                "a".to_string()
            };
            out.push(anomaly(
                ts,
                kind::TRUNCATED_FRAME,
                format!(
                    "stream ended {got} bytes into {want} frame at stream offset {}",
                    self.frame_offset
                ),
                head,
            ));
        } else {
            // every hunt that ends without a boundary names what it skipped, the one begun at a
            // midstream start too: its bytes count in `dropped` like any other hunt's
            let lost = self.skipped.wrapping_add(self.tail.len() as i64);
            if self.hunting && lost != 0 {
                out.push(anomaly(ts, kind::RESYNC,
                                 format!("stream ended before a frame boundary was found ({lost} bytes skipped after {})",
                                         self.hunt_reason),
                                 Bytes::new()));
            }
        }
        self.dropped += self.buffered() + if self.want >= 0 { 4 } else { 0 };
        self.head_len = 0;
        self.body = BytesMut::new();
        self.want = -1;
        self.tail = BytesMut::new();
        self.waiting.clear();
        self.scan = 0;
    }

    pub fn hunting(&self) -> bool {
        self.hunting
    }

    /// Time of the frame in progress (its first byte), None between frames.
    pub fn partial_ts(&self) -> Option<f64> {
        if self.want >= 0 || self.head_len > 0 {
            Some(self.head_ts)
        } else {
            None
        }
    }

    /// Bytes held right now (for memory checks).
    pub fn buffered(&self) -> u64 {
        (self.head_len + self.body.len() + self.tail.len()) as u64
    }

    // -- internals --------------------------------------------------------

    /// The first 12 bytes of the frame in progress, for an anomaly's head.
    fn body_head(&self) -> Bytes {
        Bytes::copy_from_slice(&self.body[..self.body.len().min(12)])
    }

    // a size prefix taken in sync: any size >= 0 up to the limit (`head`: the bytes after it)
    fn size_ok(&self, size: i64, ts: f64, out: &mut Vec<FrameOut>, head: Bytes) -> bool {
        if size < 0 {
            // in sync any size >= 0 is taken (a SASL token may be empty); min_frame_size only guides hunting
            out.push(anomaly(
                ts,
                kind::BAD_FRAME_SIZE,
                format!("negative frame size {size}; resyncing"),
                head,
            ));
            return false;
        }
        if size > self.max_frame_size {
            out.push(anomaly(
                ts,
                kind::FRAME_TOO_LARGE,
                format!(
                    "frame size {size} above the {}-byte limit; resyncing",
                    self.max_frame_size
                ),
                head,
            ));
            return false;
        }
        true
    }

    // out of sync: hunt from here (tail: bytes that directly precede the next ones fed and may hold a frame start)
    fn start_hunt(&mut self, tail: &[u8], reason: &'static str) {
        self.hunting = true;
        self.first = false;
        self.hunt_reason = reason;
        self.skipped = if reason == BAD_FRAME_SIZE { 1 } else { 0 };
        self.tail = BytesMut::from(tail);
        self.tail_ts = self.head_ts; // a tail here is the rest of a size prefix begun at head_ts
        self.waiting.clear();
        self.scan = 0;
    }

    /// A hunt over what is held: Some((buffer, offset, its stream base, how many of its first
    /// bytes keep the tail's time)) to continue in sync with, or None when everything was
    /// consumed (the tail kept).
    fn hunt(
        &mut self,
        data: &Bytes,
        pos: usize,
        base: i64,
        ts: f64,
        plausible: &mut Plausible<'_>,
        out: &mut Vec<FrameOut>,
    ) -> Option<(Bytes, usize, i64, usize)> {
        if !self.tail.is_empty() {
            let mut tail = std::mem::take(&mut self.tail);
            let held = tail.len();
            tail.extend_from_slice(&data[pos..]);
            let bbase = base + data.len() as i64 - tail.len() as i64;
            let scan = self.scan;
            match self.hunt_in(&tail, bbase, scan, ts, plausible, out) {
                Hunted::Synced(at, confirmed) => {
                    self.hunting = false;
                    let held = if confirmed { held } else { 0 };
                    Some((tail.freeze(), at, bbase, held)) // frames are bytes; no copy here
                }
                Hunted::Keep(keep) => {
                    tail.advance(keep);
                    self.tail = tail;
                    self.tail_ts = ts;
                    None
                }
            }
        } else {
            let buf = data.slice(pos..);
            let bbase = base + pos as i64;
            match self.hunt_in(&buf, bbase, 0, ts, plausible, out) {
                Hunted::Synced(at, _) => {
                    self.hunting = false;
                    Some((buf, at, bbase, 0))
                }
                Hunted::Keep(keep) => {
                    self.tail = BytesMut::from(&buf[keep..]);
                    self.tail_ts = ts;
                    None
                }
            }
        }
    }

    /// A frame starts at buf[at]: what the hunt skipped before it is dropped and named.
    fn synced(
        &mut self,
        at: usize,
        confirmed: bool,
        bbase: i64,
        ts: f64,
        out: &mut Vec<FrameOut>,
    ) -> Hunted {
        let skipped = self.skipped.wrapping_add(at as i64);
        self.dropped += at as u64;
        if skipped != 0 {
            out.push(anomaly(
                ts,
                kind::RESYNC,
                format!(
                    "skipped {skipped} bytes after {}; frame boundary found at stream offset {}",
                    self.hunt_reason,
                    bbase + at as i64
                ),
                Bytes::new(),
            ));
        }
        self.skipped = 0;
        self.scan = 0;
        Hunted::Synced(at, confirmed)
    }

    /// The hunt over buf (the fed bytes or the tail), scanning from i.
    ///
    /// Offsets where plausible() cannot decide yet are remembered and re-asked as bytes
    /// arrive, while the scan goes on past them: a later offset that plausible() accepts
    /// outright wins, so one false candidate with a big size cannot stall the hunt.
    fn hunt_in(
        &mut self,
        buf: &[u8],
        bbase: i64,
        i: usize,
        ts: f64,
        plausible: &mut Plausible<'_>,
        out: &mut Vec<FrameOut>,
    ) -> Hunted {
        let end = buf.len();
        let (lo, hi) = (self.min_frame_size, self.max_frame_size);
        if self.first {
            let mut ok = if end < 4 { None } else { Some(Verdict::No) };
            if end >= 4 {
                let size = be_i32(buf, 0);
                if lo <= size && size <= hi {
                    ok = plausible(buf, 0, end, self.has_first);
                }
            }
            if ok.is_none() && end < HUNT_WINDOW {
                // too few bytes to judge the first offset yet
                self.scan = 0;
                return Hunted::Keep(0);
            }
            self.first = false;
            if matches!(
                ok,
                Some(Verdict::Yes | Verdict::Verified | Verdict::Confirmed)
            ) {
                return self.synced(0, ok == Some(Verdict::Confirmed), bbase, ts, out);
            }
        }
        // Verified or Confirmed wins at once (Some(true): Confirmed); a plain Yes only when no
        // earlier offset is still undecided
        fn decided(ok: Option<Verdict>, at: usize, waiting: &mut Vec<usize>) -> Option<bool> {
            match ok {
                Some(Verdict::Verified) => Some(false),
                Some(Verdict::Confirmed) => Some(true),
                Some(Verdict::Yes) if waiting.is_empty() => Some(false),
                Some(Verdict::No) => None,
                _ => {
                    waiting.push(at);
                    None
                }
            }
        }
        let asked_before = std::mem::take(&mut self.waiting);
        let mut waiting = Vec::new();
        let mut found = None;
        for &at in &asked_before {
            if let Some(confirmed) = decided(plausible(buf, at, end, false), at, &mut waiting) {
                found = Some((at, confirmed));
                break;
            }
        }
        if found.is_none() {
            // offsets from i whose 4 bytes are a size within limits
            let mut at = i;
            while at + 4 <= end {
                let size = be_i32(buf, at);
                if lo <= size && size <= hi {
                    if let Some(c) = decided(plausible(buf, at, end, false), at, &mut waiting) {
                        found = Some((at, c));
                        break;
                    }
                }
                at += 1;
            }
        }
        let i = i.max(end.saturating_sub(3));
        if let Some((at, confirmed)) = found {
            return self.synced(at, confirmed, bbase, ts, out);
        }
        let mut keep = waiting.first().map_or(i, |&w| w.min(i));
        if end - keep > HUNT_WINDOW {
            // plausible() may not make us hold more than HUNT_WINDOW bytes
            keep = end - HUNT_WINDOW;
            waiting.retain(|&w| w >= keep);
        }
        self.skipped = self.skipped.wrapping_add(keep as i64);
        self.dropped += keep as u64;
        for w in waiting.iter_mut() {
            *w -= keep;
        }
        self.waiting = waiting;
        self.scan = i - keep;
        Hunted::Keep(keep)
    }
}

/// What a gap_in_frame row says of the bytes of a frame (or of its size prefix) that came before
/// the gap and are skipped with it: every skipped byte is named.
fn skipped_before_gap(n: usize) -> String {
    format!("skipped the {n} bytes of it before the gap, resyncing")
}

fn size_or_unknown(size: i64) -> String {
    if size != 0 {
        size.to_string()
    } else {
        "unknown number of".to_string()
    }
}

// carried between land runs (carry.rs): the frame in progress, the hunt's tail and verdicts
impl FrameSplitter {
    pub fn carry(&self, e: &mut crate::carry::Enc) {
        e.u64(self.dropped);
        e.i64(self.max_frame_size);
        e.i64(self.min_frame_size);
        e.bool(self.has_first);
        e.i64(self.offset);
        e.bytes(&self.head[..self.head_len]);
        e.f64(self.head_ts);
        e.i64(self.frame_offset);
        e.i64(self.want);
        e.bytes(&self.body);
        e.i64(self.skip);
        e.bool(self.hunting);
        e.bool(self.first);
        e.bytes(&self.tail);
        e.seq(self.waiting.iter(), |e, w| e.usize(*w));
        e.f64(self.tail_ts);
        e.usize(self.scan);
        e.i64(self.skipped);
        e.str(self.hunt_reason);
    }

    pub fn restore(d: &mut crate::carry::Dec<'_>) -> crate::carry::R<Self> {
        let mut s = FrameSplitter::new(0, 0, false, false);
        s.dropped = d.u64()?;
        s.max_frame_size = d.i64()?;
        s.min_frame_size = d.i64()?;
        s.has_first = d.bool()?;
        s.offset = d.i64()?;
        let head = d.raw()?;
        s.head_len = head.len().min(4);
        s.head[..s.head_len].copy_from_slice(&head[..s.head_len]);
        s.head_ts = d.f64()?;
        s.frame_offset = d.i64()?;
        s.want = d.i64()?;
        s.body = BytesMut::from(d.raw()?);
        s.skip = d.i64()?;
        s.hunting = d.bool()?;
        s.first = d.bool()?;
        s.tail = BytesMut::from(d.raw()?);
        s.waiting = d.vec(|d| d.usize())?;
        s.tail_ts = d.f64()?;
        s.scan = d.usize()?;
        s.skipped = d.i64()?;
        s.hunt_reason = d.stat()?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    type Frames = Vec<(i64, Vec<u8>)>;

    /// The frames as (offset, body) and the anomalies as (kind, detail), in order.
    fn parts(out: Vec<FrameOut>) -> (Frames, Vec<(&'static str, String)>) {
        let (mut frames, mut anomalies) = (Vec::new(), Vec::new());
        for o in out {
            match o {
                FrameOut::Frame { offset, data, .. } => frames.push((offset, data.to_vec())),
                FrameOut::Anomaly { kind, detail, .. } => anomalies.push((kind, detail)),
            }
        }
        (frames, anomalies)
    }

    /// Frames as (offset, body) and anomalies as kinds, from feeding `pieces` then finishing.
    fn split(s: &mut FrameSplitter, pieces: &[&[u8]]) -> (Frames, Vec<&'static str>) {
        let mut out = Vec::new();
        let mut always = |_: &[u8], _: usize, _: usize, _: bool| Some(Verdict::Yes);
        for (i, p) in pieces.iter().enumerate() {
            s.feed(&Bytes::copy_from_slice(p), i as f64, &mut always, &mut out);
        }
        s.finish(9.0, &mut out);
        let (frames, anomalies) = parts(out);
        (frames, anomalies.into_iter().map(|a| a.0).collect())
    }

    #[test]
    fn frames_cut_anywhere_come_out_whole() {
        let mut stream = frame(b"first");
        stream.extend(frame(b""));
        stream.extend(frame(&[7u8; 3000]));
        for cut in [1, 3, 4, 5, 9, 10, 100, stream.len() - 1] {
            let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
            let (frames, kinds) = split(&mut s, &[&stream[..cut], &stream[cut..]]);
            let bodies: Vec<&[u8]> = frames.iter().map(|f| f.1.as_slice()).collect();
            assert_eq!(bodies, [&b"first"[..], b"", &[7u8; 3000]], "cut at {cut}");
            assert_eq!(frames.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 9, 13]);
            assert!(kinds.is_empty(), "{kinds:?}");
        }
    }

    #[test]
    fn a_frame_over_the_size_limit_is_named_and_not_buffered() {
        let mut s = FrameSplitter::new(1000, 0, false, false);
        let (frames, kinds) = split(&mut s, &[&frame(&[1u8; 5000])]);
        assert!(frames.is_empty());
        assert_eq!(kinds.first(), Some(&kind::FRAME_TOO_LARGE), "{kinds:?}");
        assert!(s.buffered() <= 1000, "{} bytes held", s.buffered());
    }

    #[test]
    fn a_negative_size_is_a_bad_frame_size() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
        let (frames, kinds) = split(&mut s, &[&(-5i32).to_be_bytes()]);
        assert!(frames.is_empty());
        assert_eq!(kinds.first(), Some(&kind::BAD_FRAME_SIZE), "{kinds:?}");
    }

    #[test]
    fn a_frame_cut_by_the_end_is_truncated() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
        let f = frame(b"0123456789");
        let (frames, kinds) = split(&mut s, &[&f[..8]]);
        assert!(frames.is_empty());
        assert_eq!(kinds, [kind::TRUNCATED_FRAME]);
    }

    #[test]
    fn a_gap_inside_a_frame_drops_that_frame_only() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
        let mut out = Vec::new();
        let mut always = |_: &[u8], _: usize, _: usize, _: bool| Some(Verdict::Yes);
        let f = frame(b"0123456789");
        s.feed(&Bytes::copy_from_slice(&f[..6]), 0.0, &mut always, &mut out);
        s.gap(4, 1.0, &mut out); // bytes 6..10 of the frame lost, its size known
        s.feed(
            &Bytes::copy_from_slice(&f[10..]),
            2.0,
            &mut always,
            &mut out,
        );
        s.feed(&Bytes::from(frame(b"next")), 3.0, &mut always, &mut out);
        s.finish(4.0, &mut out);
        let (frames, anomalies) = parts(out);
        let kinds: Vec<_> = anomalies.iter().map(|a| a.0).collect();
        let frames: Vec<_> = frames.into_iter().map(|f| f.1).collect();
        assert_eq!(kinds, [kind::GAP_IN_FRAME]);
        assert_eq!(frames, [b"next".to_vec()]);
    }

    #[test]
    fn a_gap_past_a_frames_end_names_the_bytes_of_it_skipped() {
        // every skipped byte is named: what came of the frame (or of its size prefix) before a
        // gap it ends in is dropped, and the hunt after the gap counts from the gap's far side
        let mut always = |_: &[u8], _: usize, _: usize, _: bool| Some(Verdict::Yes);
        let f = frame(b"0123456789");
        for (size, lost) in [(20, "20"), (0, "unknown number of")] {
            let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
            let mut out = Vec::new();
            s.feed(&Bytes::copy_from_slice(&f[..6]), 0.0, &mut always, &mut out);
            s.gap(size, 1.0, &mut out); // the frame's last 8 bytes, and more
            assert_eq!(s.dropped, 6);
            let (_, anomalies) = parts(out);
            assert_eq!(
                anomalies,
                [(
                    kind::GAP_IN_FRAME,
                    format!(
                        "{lost} bytes lost inside a 10-byte frame at stream offset 0; \
                         skipped the 6 bytes of it before the gap, resyncing"
                    )
                )]
            );
        }
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, false, false);
        let mut out = Vec::new();
        s.feed(&Bytes::copy_from_slice(&f[..3]), 0.0, &mut always, &mut out);
        s.gap(7, 1.0, &mut out);
        assert_eq!(s.dropped, 3);
        let (_, anomalies) = parts(out);
        assert_eq!(
            anomalies,
            [(
                kind::GAP_IN_FRAME,
                "7 bytes lost inside a frame's size prefix; skipped the 3 bytes of it before the gap, \
                 resyncing"
                    .to_owned()
            )]
        );
    }

    #[test]
    fn a_hunt_finds_the_next_plausible_boundary_and_names_what_it_skipped() {
        // a stream joined midway: junk, then frames whose bodies start with b"K"
        let mut stream = b"\xff\xff\xff\xffjunk".to_vec();
        stream.extend(frame(b"K-one"));
        stream.extend(frame(b"K-two"));
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 0, true, false);
        let mut out = Vec::new();
        let mut plausible = |b: &[u8], pos: usize, end: usize, _: bool| {
            if end < pos + 5 {
                return None;
            }
            let size = i32::from_be_bytes(b[pos..pos + 4].try_into().unwrap());
            Some(if size > 0 && size < 100 && b[pos + 4] == b'K' {
                Verdict::Yes
            } else {
                Verdict::No
            })
        };
        s.feed(&Bytes::from(stream), 0.0, &mut plausible, &mut out);
        s.finish(1.0, &mut out);
        let (frames, skipped) = parts(out);
        assert_eq!(frames, [(8, b"K-one".to_vec()), (17, b"K-two".to_vec())]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].0, kind::RESYNC);
        assert!(skipped[0].1.contains("8 bytes"), "{}", skipped[0].1);
        assert_eq!(s.dropped, 8);
    }

    /// The resyncs' details and the frames' (time, offset), feeding (time, bytes) then finishing.
    type Timed = Vec<(f64, i64)>;

    fn run(
        s: &mut FrameSplitter,
        chunks: &[(f64, &[u8])],
        plausible: &mut Plausible<'_>,
    ) -> (Timed, Vec<String>) {
        let mut out = Vec::new();
        for (ts, c) in chunks {
            s.feed(&Bytes::copy_from_slice(c), *ts, plausible, &mut out);
        }
        s.finish(9.0, &mut out);
        let (mut frames, mut resyncs) = (Vec::new(), Vec::new());
        for o in out {
            match o {
                FrameOut::Frame { ts, offset, .. } => frames.push((ts, offset)),
                FrameOut::Anomaly { kind, detail, .. } => {
                    assert_eq!(kind, kind::RESYNC, "{detail}");
                    resyncs.push(detail);
                }
            }
        }
        (frames, resyncs)
    }

    /// A candidate is a frame whose body starts with b"K".
    fn k_frames(b: &[u8], pos: usize, end: usize, _: bool) -> Option<Verdict> {
        if end < pos + 5 {
            return None;
        }
        Some(if b[pos + 4] == b'K' {
            Verdict::Verified
        } else {
            Verdict::No
        })
    }

    #[test]
    fn a_hunt_from_the_midstream_start_that_finds_nothing_names_what_it_skipped() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 4, true, false);
        let (frames, resyncs) = run(&mut s, &[(0.0, &[0x7f; 40])], &mut k_frames);
        assert!(frames.is_empty());
        assert_eq!(
            resyncs,
            ["stream ended before a frame boundary was found (40 bytes skipped after midstream start)"]
        );
        assert_eq!(s.dropped, 40);
    }

    #[test]
    fn bytes_dropped_before_the_splitter_was_made_are_the_hunts() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 4, true, false);
        s.skipped_before_start(100);
        let mut stream = vec![0xffu8; 5];
        stream.extend(frame(b"K-one"));
        let (frames, resyncs) = run(&mut s, &[(0.0, &stream)], &mut k_frames);
        assert_eq!(frames, [(0.0, 105)]);
        assert_eq!(
            resyncs,
            ["skipped 105 bytes after midstream start; frame boundary found at stream offset 105"]
        );
        assert_eq!(s.dropped, 105);
    }

    #[test]
    fn bytes_a_hole_took_while_the_first_offset_waited_are_named_at_its_boundary() {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 4, true, true);
        let mut out = Vec::new();
        s.feed(&Bytes::from_static(b"\0\0"), 0.0, &mut k_frames, &mut out);
        s.gap(10, 1.0, &mut out); // the 2 bytes held are dropped with it
        let (frames, resyncs) = run(&mut s, &[(2.0, &frame(b"K-one"))], &mut k_frames);
        assert!(out.is_empty());
        assert_eq!(frames, [(2.0, 12)]);
        assert_eq!(
            resyncs,
            ["skipped 12 bytes after midstream start; frame boundary found at stream offset 12"]
        );
        assert_eq!(s.dropped, 2);
    }

    /// A frame whose body starts with b"T" is Confirmed once `ok` is set, and waits before.
    fn waits_for<'a>(
        ok: &'a std::cell::Cell<bool>,
    ) -> impl FnMut(&[u8], usize, usize, bool) -> Option<Verdict> + 'a {
        move |b: &[u8], pos: usize, end: usize, first: bool| match b.get(pos + 4) {
            Some(b'T') if end >= pos + 4 + be_i32(b, pos) as usize => {
                ok.get().then_some(Verdict::Confirmed)
            }
            _ => k_frames(b, pos, end, first),
        }
    }

    /// A hunting splitter fed 3 bytes of garbage at 0.0, then a T frame at 1.0 that waits.
    fn candidate_waiting(plausible: &mut Plausible<'_>) -> (FrameSplitter, Vec<FrameOut>) {
        let mut s = FrameSplitter::new(DEFAULT_MAX_FRAME_SIZE, 4, true, false);
        let mut out = Vec::new();
        s.feed(
            &Bytes::from_static(b"\xff\xff\xff"),
            0.0,
            plausible,
            &mut out,
        );
        s.feed(&Bytes::from(frame(b"T-one")), 1.0, plausible, &mut out);
        (s, out)
    }

    #[test]
    fn a_candidate_confirmed_later_keeps_the_time_its_bytes_came() {
        let ok = std::cell::Cell::new(false);
        let mut plausible = waits_for(&ok);
        let (mut s, mut out) = candidate_waiting(&mut plausible);
        s.reconsider(&mut plausible, &mut out); // nothing changed: it still waits
        assert!(out.is_empty() && s.hunting());
        ok.set(true); // what it waited on came (the other direction's answer)
        s.reconsider(&mut plausible, &mut out);
        let found: Vec<_> = out
            .iter()
            .map(|o| match o {
                FrameOut::Frame { ts, offset, .. } => format!("frame {offset} at {ts}"),
                FrameOut::Anomaly { detail, .. } => detail.clone(),
            })
            .collect();
        assert_eq!(
            found,
            [
                "skipped 3 bytes after midstream start; frame boundary found at stream offset 3",
                "frame 3 at 1", // the time T-one's bytes came, not that of the confirmation
            ]
        );
        let (frames, resyncs) = run(&mut s, &[(3.0, &frame(b"K-two"))], &mut plausible);
        assert_eq!(frames, [(3.0, 12)]);
        assert!(resyncs.is_empty());
    }

    #[test]
    fn a_candidate_confirmed_by_the_next_chunk_keeps_its_own_time() {
        let ok = std::cell::Cell::new(false);
        let mut plausible = waits_for(&ok);
        let (mut s, _) = candidate_waiting(&mut plausible);
        ok.set(true); // the next chunk is what confirms it
        let mut next = frame(b"K-two");
        next.extend(frame(b"K-three"));
        let (frames, resyncs) = run(&mut s, &[(2.0, &next)], &mut plausible);
        // T-one came at 1.0, the frames after it in the chunk at 2.0
        assert_eq!(frames, [(1.0, 3), (2.0, 12), (2.0, 21)]);
        assert_eq!(
            resyncs,
            ["skipped 3 bytes after midstream start; frame boundary found at stream offset 3"]
        );
    }
}
