//! One direction's bytes -> size-prefixed frames: a port of dissector/frames.py.
use bytes::Bytes;
use pyo3::prelude::*;

pub const DEFAULT_MAX_FRAME_SIZE: i64 = 100 << 20;
pub const PROBE_MAX: usize = 4 + 10 + 1024;
pub const HUNT_WINDOW: usize = 8 << 20;

/// What plausible() said of a candidate boundary (frames.py: False / True / VERIFIED);
/// the callback returns None when it needs more bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    No,
    Yes,
    Verified,
}

pub enum FrameOut {
    Frame { ts: f64, offset: i64, data: Bytes },
    Anomaly { ts: f64, kind: &'static str, detail: String, head: Bytes },
}

/// plausible(buf, pos, end, first): `first` is true only where frames.py would call
/// `plausible_first` (the splitter was made with one, and it judges the very first offset).
pub type Plausible<'a> = dyn FnMut(&[u8], usize, usize, bool) -> Option<Verdict> + 'a;

pub struct FrameSplitter {
    pub dropped: u64,
}

impl FrameSplitter {
    pub fn new(_max_frame_size: i64, _min_frame_size: i64, _hunting: bool, _has_first: bool) -> Self {
        todo!("frames.rs")
    }

    pub fn feed(&mut self, _data: &Bytes, _ts: f64, _plausible: &mut Plausible<'_>, _out: &mut Vec<FrameOut>) {
        todo!("frames.rs")
    }

    pub fn gap(&mut self, _size: i64, _ts: f64, _out: &mut Vec<FrameOut>) {
        todo!("frames.rs")
    }

    /// frames.py's drop(): the memory budget for partial frames ran out.
    pub fn drop_partial(&mut self, _ts: f64, _why: &str, _out: &mut Vec<FrameOut>) {
        todo!("frames.rs")
    }

    pub fn finish(&mut self, _ts: f64, _out: &mut Vec<FrameOut>) {
        todo!("frames.rs")
    }

    pub fn hunting(&self) -> bool {
        todo!("frames.rs")
    }

    pub fn partial_ts(&self) -> Option<f64> {
        todo!("frames.rs")
    }

    pub fn buffered(&self) -> u64 {
        todo!("frames.rs")
    }
}

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
