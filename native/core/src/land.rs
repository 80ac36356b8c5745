//! A land run: the pipeline's items as they complete (tables are sets, so nothing is held for
//! order), each connection numbered by a stable id, kept or dropped by `land --filter`, and made
//! into the tables' rows; and the state an appended run hands the next.
//!
//! A dissector numbers connections in order of first appearance, which a Spark task seeing a
//! subset of the capture cannot know: here a connection is numbered by a 63-bit hash of its
//! client, broker and first packet time (rows::stable_id), the same in any split.
use std::collections::HashMap;

use crate::carry::{self, Dec, Enc};
use crate::engine::{Hooks, PacketSource, Pipeline};
use crate::exchanges::{AnomalyItem, Item};
use crate::filter::Filter;
use crate::packet::Rec;
use crate::render::Render;
use crate::rows::{stable_id, Rows};
use crate::stream::Event;

/// Items a pass gathers at most, and packets it reads at most, before it hands them back.
const PASS_ITEMS: usize = 256;
const PASS_PACKETS: usize = 1024;

#[derive(Default)]
pub struct LandRun {
    /// the pipeline's connection number -> its stable id
    ids: HashMap<u64, u64>,
    /// the tables' rows (a lander), with the renderer whose body JSON and clock they use
    pub rows: Option<(Rows, Render)>,
    pub filter: Option<Filter>,
    /// an appended run: after the last packet the state is taken, before the end of capture
    carry: bool,
    read: bool,
    state: Option<carry::R<Vec<u8>>>,
    restored: bool,
}

impl LandRun {
    pub fn new(rows: Option<Rows>) -> Self {
        LandRun {
            rows: rows.map(|r| (r, Render::new())),
            ..Default::default()
        }
    }

    /// An appended run (landing/carry.py): the state is taken after the last packet.
    pub fn set_carry(&mut self) {
        self.carry = true;
    }

    /// The state taken after the last packet, once it is (an error only when it could not be
    /// packed).
    pub fn carried(&self) -> Option<Result<&[u8], &carry::Damaged>> {
        self.state.as_ref().map(|s| s.as_deref())
    }

    /// Reads until PASS_ITEMS items completed, PASS_PACKETS packets were read, a live stream is
    /// idle, the capture ends or (carrying) its packets are all read; the items go to `out`,
    /// redacted, their stable connection ids beside them.
    pub fn next_pass<S: PacketSource>(
        &mut self,
        p: &mut Pipeline<S>,
        out: &mut Vec<(Item, Option<u64>)>,
        hooks: &mut impl Hooks<S::Error>,
    ) -> Result<(), S::Error> {
        let mut items: Vec<Item> = Vec::new();
        let mut packets = 0;
        loop {
            match p.reader.next_rec()? {
                Some(Rec::Anomaly(a)) => p.ex.capture_anomaly(a.ts, a.kind, a.detail, &mut items),
                // nothing is held for order: a live stream's idle moment just hands back the rows
                Some(Rec::Idle) => break,
                Some(Rec::Packet(pkt)) => {
                    let ids = &mut self.ids;
                    p.feed_packet(
                        &pkt,
                        |ev| {
                            if let Event::Open { conn, ts, .. } = ev {
                                let id =
                                    stable_id((&pkt.src, pkt.sport), (&pkt.dst, pkt.dport), *ts);
                                ids.insert(*conn, id);
                            }
                        },
                        &mut items,
                    );
                    if p.n & 4095 == 0 {
                        hooks.progress(p.n)?;
                    }
                    packets += 1;
                }
                None if self.carry && !self.read => {
                    // every packet fed: what follows is the end of capture, which a next run
                    // would not apply, so the state is taken here and the rows so far go out
                    // before the provisional ones
                    self.read = true;
                    self.state = Some(self.snapshot(p));
                    break;
                }
                None => p.end_of_capture(&mut items, hooks)?,
            }
            if p.done || items.len() >= PASS_ITEMS || packets >= PASS_PACKETS {
                break;
            }
        }
        for mut item in items {
            p.redact_item(&mut item);
            let conn = match &item {
                Item::Exchange(x) => Some(x.connection),
                Item::Anomaly(a) => a.connection,
                Item::Connection(k) => Some(k.connection),
            };
            let stable = conn.map(|c| self.ids.get(&c).copied().unwrap_or(c));
            out.push((item, stable));
        }
        Ok(())
    }

    /// An item of a pass: into the rows when the filter keeps it. What comes back is for the
    /// caller to see: every item without rows, and a file fault (`fault`) always (a row and
    /// the command's one-line error).
    pub fn take(
        &mut self,
        item: Item,
        stable: Option<u64>,
        fault: impl Fn(&AnomalyItem) -> bool,
    ) -> Option<Item> {
        let is_fault = matches!(&item, Item::Anomaly(a) if fault(a));
        if let (Some(f), Some((_, render))) = (&self.filter, &self.rows) {
            let keep = match &item {
                Item::Exchange(x) => f.keeps(&item, stable, || render.topics(x)),
                _ => f.keeps(&item, stable, Vec::new),
            };
            if !keep {
                return is_fault.then_some(item);
            }
        }
        let Some((rows, render)) = self.rows.as_mut() else {
            return Some(item);
        };
        match &item {
            Item::Anomaly(a) => rows.anomaly(a, stable),
            Item::Connection(k) => rows.connection(k, stable.unwrap_or(k.connection)),
            Item::Exchange(x) => {
                rows.exchange(x, stable.unwrap_or(x.connection), render);
            }
        }
        is_fault.then_some(item)
    }

    /// What a carrying run hands the next (restore reads it in this order).
    fn snapshot<S: PacketSource>(&self, p: &Pipeline<S>) -> carry::R<Vec<u8>> {
        let mut e = Enc::new();
        // not the packet count: progress counts each run's own packets
        e.opt_f64(p.now);
        let (index, warned) = p.reader.position();
        e.u64(index);
        e.seq(warned.iter(), |e, w| e.u32(*w));
        p.reasm.carry(&mut e);
        p.tls.carry(&mut e);
        p.ex.carry(&mut e);
        // the stable ids of the connections still open: the closed ones' are never asked again
        let mut open: Vec<u64> = p
            .reasm
            .open_ids()
            .chain(p.tls.open_ids())
            .chain(p.ex.open_ids())
            .collect();
        open.sort_unstable();
        open.dedup();
        let ids: Vec<(u64, u64)> = open
            .into_iter()
            .filter_map(|c| self.ids.get(&c).map(|s| (c, *s)))
            .collect();
        e.seq(ids.iter(), |e, (k, v)| {
            e.u64(*k);
            e.u64(*v);
        });
        e.bool(self.rows.is_some());
        if let Some((rows, _)) = &self.rows {
            rows.names.borrow().carry(&mut e);
            // sorted (a BTreeSet): equal states are equal bytes
            e.seq(rows.unresolved.borrow().iter(), |e, s| e.str(s));
        }
        e.finish()
    }

    /// Before the first packet of a run that continues an appended one: the open connections,
    /// their unframed bytes and unanswered requests, the names learned and the frame count go
    /// on as if the files were read in one run.
    pub fn restore<S: PacketSource>(&mut self, p: &mut Pipeline<S>, state: &[u8]) -> carry::R<()> {
        if p.n != 0 || p.done || self.restored {
            return Err(carry::Damaged(
                "restore() is for a lander that has read nothing yet".into(),
            ));
        }
        let raw = Dec::unpack(state)?;
        let mut d = Dec::new(&raw)?;
        p.now = d.opt_f64()?;
        let index = d.u64()?;
        let warned = d.vec(|d| d.u32())?;
        p.reader.resume(index, warned);
        p.reasm.restore(&mut d)?;
        p.tls.restore(&mut d)?;
        p.ex.restore(&mut d)?;
        for (k, v) in d.vec(|d| Ok((d.u64()?, d.u64()?)))? {
            self.ids.insert(k, v);
        }
        if d.bool()? {
            let (rows, _) = self
                .rows
                .as_mut()
                .ok_or_else(|| carry::Damaged("the state has rows, this lander none".into()))?;
            rows.names.borrow_mut().restore(&mut d)?;
            rows.unresolved.borrow_mut().extend(d.vec(|d| d.string())?);
        }
        d.done()?;
        self.restored = true;
        Ok(())
    }
}
