//! The pipeline: a capture's packets through reassembly, TLS, pairing and order, the items it
//! releases pushed to the caller, who writes them (lines: render.rs; rows: the bindings' rows).
//!
//! `Pipeline::next_ordered` is `dissect`'s loop: items come out in request-time order within the
//! window, as soon as nothing still open can precede them. A land run reads packets itself
//! (`Pipeline::feed_packet`) and keeps completion order.
use std::time::Instant;

use crate::capture::{Files, PacketReader};
use crate::decode::SharedNames;
use crate::exchanges::{Ctx, Exchanges, Item};
use crate::order::Reorder;
use crate::packet::{Packet, Rec};
use crate::stream::Event;
use crate::tcp::Reassembler;
use crate::tls::{KeyLog, Tls};

/// What a pipeline is made of, in a form that crosses threads: each of the local engine's
/// buckets makes its own pipeline from it on its own thread (a pipeline holds Rc throughout).
#[derive(Clone, Default)]
pub struct Setup {
    /// Exchanges::new's ports, largest frame and whether closed connections give items
    pub ports: Vec<u16>,
    pub max_frame_size: i64,
    pub connections: bool,
    /// the reassembler's bounds: per direction, the bytes after which a hole is lost, in all
    pub max_buffer_per_direction: u64,
    pub lost_after: u64,
    pub max_buffer_total: u64,
    /// the order's window (seconds), items and bytes held
    pub window: f64,
    pub max_items: usize,
    pub max_bytes: u64,
    pub keys: KeyLog,
    /// secrets out of every exchange before anything is made of it
    pub redact: bool,
}

impl Setup {
    /// The exchanges layer (the core's registry and a names table of its own).
    pub fn exchanges(&self) -> Exchanges {
        let ctx = Ctx::new(crate::spec::shared(), SharedNames::default());
        Exchanges::new(ctx, &self.ports, self.max_frame_size, self.connections)
    }

    pub fn pipeline<S: PacketSource>(&self, source: S) -> Pipeline<S> {
        let mut p = Pipeline::new(
            source,
            Reassembler::new(
                self.max_buffer_per_direction,
                self.lost_after,
                self.max_buffer_total,
            ),
            Tls::new(self.keys.clone()),
            self.exchanges(),
            Reorder::new(self.window, self.max_items, self.max_bytes),
        );
        p.redact = self.redact;
        p
    }
}

/// Where packets come from: capture files (`PacketReader`), or what the caller read already.
pub trait PacketSource {
    type Error;
    /// The next packet, capture anomaly or idle mark; None at the end.
    fn next_rec(&mut self) -> Result<Option<Rec>, Self::Error>;
    /// Key log text the capture itself carried so far (pcapng Decryption Secrets Blocks), taken.
    fn take_secrets(&mut self) -> Vec<u8>;
    /// Where an appended land run stands in its files (frames read, link types warned of), for
    /// the next run to go on numbering from; packets handed over already read have none.
    fn position(&self) -> (u64, Vec<u32>) {
        (0, Vec::new())
    }
    fn resume(&mut self, _index: u64, _warned: Vec<u32>) {}
}

impl<F: Files> PacketSource for PacketReader<F> {
    type Error = F::Error;

    fn next_rec(&mut self) -> Result<Option<Rec>, F::Error> {
        PacketReader::next_rec(self)
    }

    fn take_secrets(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.secrets)
    }

    fn position(&self) -> (u64, Vec<u32>) {
        PacketReader::position(self)
    }

    fn resume(&mut self, index: u64, warned: Vec<u32>) {
        PacketReader::resume(self, index, warned)
    }
}

/// What the caller is told as the pipeline runs.
pub trait Hooks<E> {
    /// The packets read so far: every 4096, and once at the end.
    fn progress(&mut self, _packets: u64) -> Result<(), E> {
        Ok(())
    }

    /// After the last packet, when the capture is part of a set: the set's last packet time and
    /// latest packet time, where the connections still open are closed.
    fn end(&mut self) -> Result<Option<(f64, Option<f64>)>, E> {
        Ok(None)
    }
}

/// No progress to tell, no set.
pub struct Quiet;

impl<E> Hooks<E> for Quiet {}

/// A live stream: held items come out at every packet, and when the stream is idle capture time
/// moves on with the wall clock since the last packet; `arrival`: each item as it completes.
pub struct Live {
    pub arrival: bool,
    pub last: Instant,
}

pub struct Pipeline<S: PacketSource> {
    pub reader: S,
    pub reasm: Reassembler,
    pub tls: Tls,
    pub ex: Exchanges,
    pub held: Reorder,
    /// the latest packet time read
    pub now: Option<f64>,
    /// packets read
    pub n: u64,
    pub done: bool,
    pub live: Option<Live>,
    /// secrets out of every exchange before anything is made of it
    pub redact: bool,
    events: Vec<Event>,
}

impl<S: PacketSource> Pipeline<S> {
    pub fn new(reader: S, reasm: Reassembler, tls: Tls, ex: Exchanges, held: Reorder) -> Self {
        Pipeline {
            reader,
            reasm,
            tls,
            ex,
            held,
            now: None,
            n: 0,
            done: false,
            live: None,
            redact: true,
            events: Vec::new(),
        }
    }

    /// The time of the oldest thing still open that may precede what is held: a request awaiting
    /// its answer, a half-received frame, data behind a TCP hole.
    pub fn oldest_open(&mut self) -> Option<f64> {
        let mut oldest = self.ex.oldest_open();
        if let Some(stuck) = self.reasm.oldest_held() {
            if oldest.is_none_or(|o| stuck < o) {
                oldest = Some(stuck);
            }
        }
        oldest
    }

    /// A packet through the TCP and TLS layers, each event to `event` before pairing takes it
    /// (the items pairing makes of them into `out`).
    pub fn feed_packet(
        &mut self,
        pkt: &Packet,
        mut event: impl FnMut(&Event),
        out: &mut Vec<Item>,
    ) {
        self.n += 1;
        if self.now.is_none_or(|now| pkt.ts > now) {
            self.now = Some(pkt.ts);
        }
        // key log text the capture carried is the TLS layer's before the packets after it
        let secrets = self.reader.take_secrets();
        if !secrets.is_empty() {
            self.tls.add_keys(&secrets);
        }
        self.reasm.feed(pkt, &mut self.events);
        self.tls.pass(&mut self.events);
        for ev in std::mem::take(&mut self.events) {
            event(&ev);
            self.ex.feed(ev, out);
        }
    }

    /// Secrets out of an item (unless `redact` is off: --show-secrets).
    pub fn redact_item(&self, item: &mut Item) {
        if self.redact {
            if let Item::Exchange(x) = item {
                x.redact(self.ex.registry());
            }
        }
    }

    /// Reads until items are released in request-time order (into `out`, redacted), the stream
    /// is idle, or the capture ends (then `done`).
    pub fn next_ordered(
        &mut self,
        out: &mut Vec<Item>,
        hooks: &mut impl Hooks<S::Error>,
    ) -> Result<(), S::Error> {
        let start = out.len();
        self.ordered(out, hooks)?;
        for item in &mut out[start..] {
            self.redact_item(item);
        }
        Ok(())
    }

    fn ordered(
        &mut self,
        out: &mut Vec<Item>,
        hooks: &mut impl Hooks<S::Error>,
    ) -> Result<(), S::Error> {
        if self.done {
            return Ok(());
        }
        loop {
            match self.reader.next_rec()? {
                Some(Rec::Anomaly(a)) => {
                    let mut items = Vec::new();
                    self.ex.capture_anomaly(a.ts, a.kind, a.detail, &mut items);
                    self.held.add(items);
                }
                Some(Rec::Idle) => {
                    // nothing to read on a live stream: capture time moves on with the wall clock
                    if let (Some(now), Some(live)) = (self.now, &self.live) {
                        let est = now + live.last.elapsed().as_secs_f64();
                        let oldest = self.oldest_open();
                        self.held.release(est, oldest, out);
                    }
                    return Ok(()); // back to the caller, which writes what came out and may stop
                }
                Some(Rec::Packet(pkt)) => {
                    let arrival = self.live.as_ref().is_some_and(|l| l.arrival);
                    let mut items = Vec::new();
                    self.feed_packet(&pkt, |_| {}, &mut items);
                    let grew = !arrival && !items.is_empty();
                    if arrival {
                        out.extend(items);
                    } else if grew {
                        self.held.add(items);
                    }
                    if let Some(live) = self.live.as_mut() {
                        live.last = Instant::now();
                    }
                    if arrival && !out.is_empty() {
                        return Ok(());
                    }
                    let n = self.n;
                    if n & 31 == 0 || grew && (self.held.over() || self.live.is_some()) {
                        if n & 4095 == 0 {
                            hooks.progress(n)?;
                        }
                        if !self.held.is_empty() {
                            let oldest = self.oldest_open();
                            self.held.release(self.now.unwrap_or(0.0), oldest, out);
                            if !out.is_empty() {
                                return Ok(());
                            }
                        }
                    }
                }
                None => {
                    let mut items = Vec::new();
                    self.end_of_capture(&mut items, hooks)?;
                    self.held.add(items);
                    self.held.flush(out);
                    return Ok(());
                }
            }
        }
    }

    /// After the last packet: the set's end applied, the reassembler's last events fed, the
    /// connections still open closed (their items into `out`, in that order), progress told the
    /// packet count; the capture is done.
    pub fn end_of_capture(
        &mut self,
        out: &mut Vec<Item>,
        hooks: &mut impl Hooks<S::Error>,
    ) -> Result<(), S::Error> {
        if let Some((last, top)) = hooks.end()? {
            self.reasm.last_ts = last;
            self.now = top;
        }
        let mut evs = Vec::new();
        self.reasm.finish(&mut evs);
        self.tls.pass(&mut evs);
        for ev in evs {
            self.ex.feed(ev, out);
        }
        self.ex.finish(self.now, out);
        hooks.progress(self.n)?;
        self.done = true;
        Ok(())
    }
}
