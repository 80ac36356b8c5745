//! What an engine carries from one appended land run into the next: the state of its open
//! connections, encoded as bytes that the landing package keeps between the runs.
//!
//! The encoding is written by hand rather than derived with serde: the state is made of types
//! that serde cannot derive for without wrapping (`&'static str` kinds and flags, `Rc<str>`
//! shared endpoints, `bytes::Bytes`, bodies an older build left out, decoded again on
//! restore), and the crates needed (serde, a binary format) are not among the core's
//! dependencies, while a dozen primitives below cover every field. The blob is versioned and
//! zstd-compressed (zstd is already linked for Kafka's codecs): most of it is Kafka frames and
//! delivered TCP tails, which compress well.
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use bytes::Bytes;

/// Bumped whenever a field is added, moved or reinterpreted: a state written by another build
/// is refused rather than misread.
// 2: nested payloads' fixed keys moved every other key's number (schema.rs)
// 3: the TLS layer's connections (tls.rs), and a connection's TLS facts
// 4: a hunting frame splitter's time of its held bytes (frames.rs)
pub const VERSION: u32 = 4;
const MAGIC: &[u8; 8] = b"kwcarry\0";

pub struct Enc {
    pub buf: Vec<u8>,
}

impl Default for Enc {
    fn default() -> Self {
        Self::new()
    }
}

impl Enc {
    pub fn new() -> Self {
        let mut e = Enc { buf: Vec::new() };
        e.buf.extend_from_slice(MAGIC);
        e.u32(VERSION);
        e
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    pub fn u64(&mut self, mut v: u64) {
        // LEB128: counters and lengths are small, so the state stays small
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(b);
                return;
            }
            self.buf.push(b | 0x80);
        }
    }
    pub fn i64(&mut self, v: i64) {
        self.u64(((v << 1) ^ (v >> 63)) as u64);
    }
    pub fn u32(&mut self, v: u32) {
        self.u64(v as u64);
    }
    pub fn usize(&mut self, v: usize) {
        self.u64(v as u64);
    }
    pub fn i32(&mut self, v: i32) {
        self.i64(v as i64);
    }
    pub fn i16(&mut self, v: i16) {
        self.i64(v as i64);
    }
    pub fn u16(&mut self, v: u16) {
        self.u64(v as u64);
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.usize(v.len());
        self.buf.extend_from_slice(v);
    }
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub fn opt<T>(&mut self, v: &Option<T>, f: impl FnOnce(&mut Self, &T)) {
        match v {
            Some(x) => {
                self.u8(1);
                f(self, x);
            }
            None => self.u8(0),
        }
    }
    pub fn opt_f64(&mut self, v: Option<f64>) {
        self.opt(&v, |e, x| e.f64(*x));
    }
    pub fn opt_i64(&mut self, v: Option<i64>) {
        self.opt(&v, |e, x| e.i64(*x));
    }
    pub fn addr(&mut self, a: &(Rc<str>, u16)) {
        self.str(&a.0);
        self.u16(a.1);
    }
    pub fn seq<'a, T: 'a>(
        &mut self,
        items: impl ExactSizeIterator<Item = &'a T>,
        mut f: impl FnMut(&mut Self, &T),
    ) {
        self.usize(items.len());
        for x in items {
            f(self, x);
        }
    }
    pub fn finish(self) -> R<Vec<u8>> {
        zstd::bulk::compress(&self.buf, 3).map_err(|e| Damaged(format!("carry: {e}")))
    }
}

pub struct Dec<'a> {
    b: &'a [u8],
    at: usize,
    strings: HashMap<String, Rc<str>>,
}

/// Carried state that cannot be restored: its message is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

pub type R<T> = Result<T, Damaged>;

fn bad(what: &str) -> Damaged {
    Damaged(format!("carried state is damaged ({what})"))
}

thread_local! {
    /// The engine's kinds, flags and reasons are `&'static str`; a restored one is looked up
    /// here, so each distinct text is leaked once per process however many runs restore it.
    static STATICS: std::cell::RefCell<HashSet<&'static str>> = Default::default();
}

impl<'a> Dec<'a> {
    /// The decompressed blob: the caller keeps it alive while decoding.
    pub fn unpack(blob: &[u8]) -> R<Vec<u8>> {
        let raw = zstd::stream::decode_all(blob).map_err(|_| bad("not zstd"))?;
        Ok(raw)
    }

    pub fn new(raw: &'a [u8]) -> R<Self> {
        if raw.len() < MAGIC.len() || &raw[..MAGIC.len()] != MAGIC {
            return Err(bad("no carry header"));
        }
        let mut d = Dec {
            b: raw,
            at: MAGIC.len(),
            strings: HashMap::new(),
        };
        let v = d.u32()?;
        if v != VERSION {
            return Err(Damaged(format!(
                "carried state is version {v}, this build reads {VERSION}: land the set again"
            )));
        }
        Ok(d)
    }

    pub fn done(&self) -> R<()> {
        if self.at != self.b.len() {
            return Err(bad("bytes left over"));
        }
        Ok(())
    }

    pub fn u8(&mut self) -> R<u8> {
        let v = *self.b.get(self.at).ok_or_else(|| bad("short"))?;
        self.at += 1;
        Ok(v)
    }
    pub fn bool(&mut self) -> R<bool> {
        Ok(self.u8()? != 0)
    }
    pub fn u64(&mut self) -> R<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift > 63 {
                return Err(bad("varint"));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }
    pub fn i64(&mut self) -> R<i64> {
        let u = self.u64()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    pub fn u32(&mut self) -> R<u32> {
        u32::try_from(self.u64()?).map_err(|_| bad("u32"))
    }
    pub fn usize(&mut self) -> R<usize> {
        usize::try_from(self.u64()?).map_err(|_| bad("usize"))
    }
    pub fn i32(&mut self) -> R<i32> {
        i32::try_from(self.i64()?).map_err(|_| bad("i32"))
    }
    pub fn i16(&mut self) -> R<i16> {
        i16::try_from(self.i64()?).map_err(|_| bad("i16"))
    }
    pub fn u16(&mut self) -> R<u16> {
        u16::try_from(self.u64()?).map_err(|_| bad("u16"))
    }
    pub fn f64(&mut self) -> R<f64> {
        let s = self
            .b
            .get(self.at..self.at + 8)
            .ok_or_else(|| bad("short"))?;
        self.at += 8;
        Ok(f64::from_bits(u64::from_le_bytes(s.try_into().unwrap())))
    }
    pub fn raw(&mut self) -> R<&'a [u8]> {
        let n = self.usize()?;
        // a damaged length must not overflow: checked, then sliced
        let end = self.at.checked_add(n).ok_or_else(|| bad("length"))?;
        let s = self.b.get(self.at..end).ok_or_else(|| bad("short"))?;
        self.at = end;
        Ok(s)
    }
    pub fn bytes(&mut self) -> R<Bytes> {
        Ok(Bytes::copy_from_slice(self.raw()?))
    }
    pub fn string(&mut self) -> R<String> {
        String::from_utf8(self.raw()?.to_vec()).map_err(|_| bad("utf-8"))
    }
    /// Equal texts come back as one Rc, as the reader's host cache shares them.
    pub fn rc(&mut self) -> R<Rc<str>> {
        let s = self.string()?;
        if let Some(r) = self.strings.get(&s) {
            return Ok(r.clone());
        }
        let r: Rc<str> = Rc::from(s.as_str());
        self.strings.insert(s, r.clone());
        Ok(r)
    }
    pub fn stat(&mut self) -> R<&'static str> {
        let s = self.string()?;
        Ok(STATICS.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(k) = m.get(s.as_str()) {
                return *k;
            }
            let k: &'static str = Box::leak(s.into_boxed_str());
            m.insert(k);
            k
        }))
    }
    pub fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<Option<T>> {
        Ok(if self.u8()? != 0 {
            Some(f(self)?)
        } else {
            None
        })
    }
    pub fn opt_f64(&mut self) -> R<Option<f64>> {
        self.opt(|d| d.f64())
    }
    pub fn opt_i64(&mut self) -> R<Option<i64>> {
        self.opt(|d| d.i64())
    }
    pub fn addr(&mut self) -> R<(Rc<str>, u16)> {
        Ok((self.rc()?, self.u16()?))
    }
    pub fn vec<T>(&mut self, mut f: impl FnMut(&mut Self) -> R<T>) -> R<Vec<T>> {
        let n = self.usize()?;
        let mut v = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }
    pub fn deque<T>(&mut self, f: impl FnMut(&mut Self) -> R<T>) -> R<VecDeque<T>> {
        Ok(self.vec(f)?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(7);
        e.bool(true);
        e.u64(u64::MAX);
        e.i64(-5);
        e.i16(-300);
        e.f64(1.5);
        e.str("broker-1");
        e.str("broker-1");
        e.bytes(b"\x00\xff");
        e.opt_i64(None);
        e.opt_f64(Some(2.25));
        e.addr(&(Rc::from("10.0.0.1"), 9092));
        e.seq([1u64, 2, 3].iter(), |e, v| e.u64(*v));
        e.finish().unwrap()
    }

    #[test]
    fn what_is_written_reads_back_and_equal_texts_share_one_rc() {
        let raw = Dec::unpack(&sample()).unwrap();
        let mut d = Dec::new(&raw).unwrap();
        assert_eq!(d.u8().unwrap(), 7);
        assert!(d.bool().unwrap());
        assert_eq!(d.u64().unwrap(), u64::MAX);
        assert_eq!(d.i64().unwrap(), -5);
        assert_eq!(d.i16().unwrap(), -300);
        assert_eq!(d.f64().unwrap(), 1.5);
        let (a, b) = (d.rc().unwrap(), d.rc().unwrap());
        assert!(Rc::ptr_eq(&a, &b) && &*a == "broker-1");
        assert_eq!(&d.bytes().unwrap()[..], b"\x00\xff");
        assert_eq!(d.opt_i64().unwrap(), None);
        assert_eq!(d.opt_f64().unwrap(), Some(2.25));
        assert_eq!(d.addr().unwrap(), (Rc::from("10.0.0.1"), 9092));
        assert_eq!(d.vec(|d| d.u64()).unwrap(), vec![1, 2, 3]);
        d.done().unwrap();
    }

    #[test]
    fn damage_is_an_error_with_one_line_never_a_panic() {
        assert_eq!(
            Dec::unpack(b"plain bytes").unwrap_err().0,
            "carried state is damaged (not zstd)"
        );
        assert_eq!(
            Dec::new(b"short").err().unwrap().0,
            "carried state is damaged (no carry header)"
        );
        let mut old = MAGIC.to_vec();
        old.extend_from_slice(&2u32.to_le_bytes());
        let e = Dec::new(&old).err().unwrap().0;
        assert!(
            e.starts_with("carried state is version") && e.ends_with("land the set again"),
            "{e}"
        );
        let raw = Dec::unpack(&sample()).unwrap();
        for cut in MAGIC.len() + 4..raw.len() {
            // every prefix either reads to a damaged error or stops early: nothing panics
            let mut d = Dec::new(&raw[..cut]).unwrap();
            let all = (|| -> R<()> {
                d.u8()?;
                d.bool()?;
                d.u64()?;
                d.i64()?;
                d.i16()?;
                d.f64()?;
                d.rc()?;
                d.rc()?;
                d.bytes()?;
                d.opt_i64()?;
                d.opt_f64()?;
                d.addr()?;
                d.vec(|d| d.u64())?;
                d.done()
            })();
            assert!(all.is_err(), "a prefix of {cut} bytes read as whole");
        }
    }

    #[test]
    fn a_huge_length_is_damage_not_an_allocation() {
        let mut e = Enc::new();
        e.usize(usize::MAX / 2);
        let raw = e.buf.clone();
        let mut d = Dec::new(&raw).unwrap();
        assert!(d.raw().is_err());
        let mut d = Dec::new(&raw).unwrap();
        assert!(d.vec(|d| d.u8()).is_err());
    }
}
