//! A land run: the pipeline's items as they complete (tables are sets, so nothing is held for
//! order), each connection numbered by a stable id, kept or dropped by `land --filter`, and made
//! into the tables' rows; and the state an appended run hands the next.
//!
//! A dissector numbers connections in order of first appearance, which a Spark task seeing a
//! subset of the capture cannot know: here a connection is numbered by a 63-bit hash of its
//! client, broker and first packet time (rows::stable_id), the same in any split.
use std::collections::HashMap;

use crossbeam_channel::Sender;

use crate::carry::{self, Dec, Enc};
use crate::decode::SharedNames;
use crate::engine::{Hooks, PacketSource, Pipeline, Setup};
use crate::exchanges::{AnomalyItem, Item};
use crate::filter::Filter;
use crate::packet::Rec;
use crate::parallel::{BucketHooks, Inlet};
use crate::render::Render;
use crate::rows::{stable_id, Pending, Rows, Taken};
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

    pub fn carrying(&self) -> bool {
        self.carry
    }

    /// Whether a carried state was restored into this run.
    pub fn was_restored(&self) -> bool {
        self.restored
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

// ---------------------------------------------------------------- on every core

/// A land run over buckets (parallel.rs): what each bucket's run is made with. Every bucket
/// lands its connections' items as a LandRun does; the rows come back to be written together.
#[derive(Clone)]
pub struct BucketSetup {
    pub setup: Setup,
    /// Rows::new's cap on decompressed record sets, --records, and whether rows keep payloads
    pub rows: (usize, bool, bool),
    pub filter: Option<Filter>,
    pub carry: bool,
    /// the anomaly kinds that are file faults (they come back as items too)
    pub faults: Vec<String>,
    /// each bucket's carried state, continuing an appended run
    pub states: Vec<Vec<u8>>,
}

/// What a bucket's run has learned: the topic names its rows know, the placeholders they hold.
#[derive(Default)]
pub struct Learned {
    pub names: Vec<([u8; 16], String)>,
    pub unresolved: Vec<String>,
}

/// A names map's pairs, to cross threads.
fn pairs_of(names: &SharedNames) -> Vec<([u8; 16], String)> {
    names
        .borrow()
        .iter()
        .map(|(id, n)| (*id, n.to_string()))
        .collect()
}

impl Learned {
    fn of(rows: &Rows) -> Self {
        Learned {
            names: pairs_of(&rows.names),
            unresolved: rows.unresolved.borrow().iter().cloned().collect(),
        }
    }
}

/// What a bucket gives back.
pub enum Back {
    /// a bucket's rows so far, per table in TABLES' order
    Rows(usize, Vec<Taken>),
    /// a file fault (a row too): the command's one-line error
    Fault(AnomalyItem),
    /// a carrying run has read every packet: the bucket's state, what it learned
    Carried(usize, carry::R<Vec<u8>>, Learned),
    /// the bucket is done (or could not start: its message)
    Done(usize, Learned, Option<String>),
}

/// Rows a bucket holds before it sends them, and their bytes.
const SEND_ROWS: usize = 8192;
const SEND_HELD: usize = 8 << 20;

fn take_all(rows: &mut Rows) -> Vec<Taken> {
    (0..crate::rows::TABLES.len())
        .map(|t| rows.take(t))
        .collect()
}

/// One bucket's land run, on its own thread: until the reader is gone or the bucket is done.
pub fn land_bucket(cfg: &BucketSetup, b: usize, inlet: Inlet, tx: Sender<Back>) {
    let end = inlet.end.clone();
    let mut p = cfg.setup.pipeline(inlet);
    let mut rows = Rows::new(cfg.rows.0);
    rows.set_options(cfg.rows.1, cfg.rows.2);
    let mut run = LandRun::new(Some(rows));
    run.filter = cfg.filter.clone();
    if cfg.carry {
        run.set_carry();
    }
    if let Some(state) = cfg.states.get(b) {
        if let Err(e) = run.restore(&mut p, state) {
            let _ = tx.send(Back::Done(b, Learned::default(), Some(e.0)));
            return;
        }
    }
    let mut hooks = BucketHooks(end);
    let mut out = Vec::new();
    let mut carried = false;
    let is_fault = |a: &AnomalyItem| a.is_file_fault(&cfg.faults);
    loop {
        if run.next_pass(&mut p, &mut out, &mut hooks).is_err() {
            return; // the reader is gone: the run was stopped
        }
        for (item, stable) in out.drain(..) {
            if let Some(Item::Anomaly(a)) = run.take(item, stable, is_fault) {
                if tx.send(Back::Fault(a)).is_err() {
                    return;
                }
            }
        }
        let now_carried = !carried && run.carried().is_some();
        let (rows, _) = run.rows.as_mut().expect("a bucket's run has rows");
        let full = rows.pending_all();
        let send = now_carried
            || p.done
            || full.rows.iter().sum::<usize>() >= SEND_ROWS
            || full.held >= SEND_HELD;
        if send && tx.send(Back::Rows(b, take_all(rows))).is_err() {
            return;
        }
        if now_carried {
            carried = true;
            let state = run
                .carried()
                .unwrap()
                .map(<[u8]>::to_vec)
                .map_err(Clone::clone);
            let learned = Learned::of(&run.rows.as_ref().unwrap().0);
            if tx.send(Back::Carried(b, state, learned)).is_err() {
                return;
            }
        }
        if p.done {
            let learned = Learned::of(&run.rows.as_ref().unwrap().0);
            let _ = tx.send(Back::Done(b, learned, None));
            return;
        }
    }
}

/// The composite state of an appended run over buckets: its mark, then (zstd) the reader's
/// place and the set's times, the names and placeholders of every bucket, and each bucket's
/// own state. A next run goes on with as many buckets.
const COMPOSITE: &[u8; 8] = b"kwbucket";

/// The reader's side of a carried run over buckets.
pub struct Composite {
    pub now: Option<f64>,
    pub last: Option<f64>,
    pub index: u64,
    pub warned: Vec<u32>,
    pub names: Vec<([u8; 16], String)>,
    pub unresolved: Vec<String>,
    pub states: Vec<Vec<u8>>,
}

impl Composite {
    pub fn is_one(state: &[u8]) -> bool {
        state.starts_with(COMPOSITE)
    }

    pub fn pack(&self) -> carry::R<Vec<u8>> {
        let mut e = Enc::new();
        e.opt_f64(self.now);
        e.opt_f64(self.last);
        e.u64(self.index);
        e.seq(self.warned.iter(), |e, w| e.u32(*w));
        e.seq(self.names.iter(), |e, (id, n)| {
            e.bytes(id);
            e.str(n);
        });
        e.seq(self.unresolved.iter(), |e, u| e.str(u));
        e.seq(self.states.iter(), |e, s| e.bytes(s));
        let mut out = COMPOSITE.to_vec();
        out.extend(e.finish()?);
        Ok(out)
    }

    pub fn unpack(state: &[u8]) -> carry::R<Self> {
        let raw = Dec::unpack(&state[COMPOSITE.len()..])?;
        let mut d = Dec::new(&raw)?;
        let c = Composite {
            now: d.opt_f64()?,
            last: d.opt_f64()?,
            index: d.u64()?,
            warned: d.vec(|d| d.u32())?,
            names: d.vec(|d| {
                let id: [u8; 16] = d
                    .raw()?
                    .try_into()
                    .map_err(|_| carry::Damaged("carried state is damaged (topic id)".into()))?;
                Ok((id, d.string()?))
            })?,
            unresolved: d.vec(|d| d.string())?,
            states: d.vec(|d| Ok(d.raw()?.to_vec()))?,
        };
        d.done()?;
        if c.states.is_empty() {
            return Err(carry::Damaged(
                "carried state is damaged (no buckets)".into(),
            ));
        }
        Ok(c)
    }
}

/// The reader's side of a land run over buckets: the rows back from them, queued per table for
/// the writer (each bucket's batch as it came: joining them would copy every body once more);
/// what they learned; the carried states.
pub struct Gathered {
    tables: Vec<std::collections::VecDeque<Taken>>,
    held: usize,
    /// rows gathered per table since the start
    pub counts: [usize; 6],
    /// every bucket's names and placeholders, merged (shared with the writer's view)
    pub names: SharedNames,
    pub unresolved: std::collections::BTreeSet<String>,
    states: Vec<Option<Vec<u8>>>,
    /// a bucket's rows after its state was taken: the end of capture's, held until the writer
    /// has taken every row before every bucket's state
    parked: Vec<Vec<Taken>>,
    pub done: usize,
    pub failed: Option<String>,
    /// the state's fault (not packable): the one line
    pub damaged: Option<String>,
}

impl Gathered {
    /// `names`: the map the writer already holds (the run's own rows').
    pub fn new(buckets: usize, names: SharedNames) -> Self {
        Gathered {
            tables: (0..crate::rows::TABLES.len())
                .map(|_| Default::default())
                .collect(),
            held: 0,
            counts: [0; 6],
            names,
            unresolved: Default::default(),
            states: vec![None; buckets],
            parked: Vec::new(),
            done: 0,
            failed: None,
            damaged: None,
        }
    }

    /// What the runs before this one learned (a continued state's).
    pub fn restored(&mut self, names: Vec<([u8; 16], String)>, unresolved: Vec<String>) {
        self.learn(Learned { names, unresolved });
    }

    pub fn buckets(&self) -> usize {
        self.states.len()
    }

    pub fn names_list(&self) -> Vec<([u8; 16], String)> {
        pairs_of(&self.names)
    }

    fn learn(&mut self, l: Learned) {
        let mut names = self.names.borrow_mut();
        for (id, n) in l.names {
            if !names.contains(&id) {
                names.insert(id, std::rc::Rc::from(n));
            }
        }
        self.unresolved.extend(l.unresolved);
    }

    fn rows(&mut self, taken: Vec<Taken>) {
        for (t, rows) in taken.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            self.counts[t] += rows.len();
            self.held += rows.held(t);
            self.tables[t].push_back(rows);
        }
    }

    /// A bucket's message; file faults come back out.
    pub fn take_back(&mut self, back: Back) -> Option<AnomalyItem> {
        match back {
            Back::Rows(b, taken) => {
                if self.states[b].is_some() {
                    self.parked.push(taken);
                } else {
                    self.rows(taken);
                }
            }
            Back::Fault(a) => return Some(a),
            Back::Carried(b, state, learned) => {
                self.learn(learned);
                match state {
                    Ok(s) => self.states[b] = Some(s),
                    Err(e) => self.damaged = Some(e.0),
                }
            }
            Back::Done(_, learned, failed) => {
                self.learn(learned);
                self.done += 1;
                if failed.is_some() && self.failed.is_none() {
                    self.failed = failed;
                }
            }
        }
        None
    }

    /// Every bucket's state, once all are taken.
    pub fn states(&self) -> Option<Vec<Vec<u8>>> {
        self.states.iter().cloned().collect()
    }

    /// After the writer took the rows before the states: the rows after them are the writer's.
    pub fn unpark(&mut self) {
        for taken in std::mem::take(&mut self.parked) {
            self.rows(taken);
        }
        self.states.iter_mut().for_each(|s| *s = None);
    }

    pub fn pending(&self) -> Pending {
        Pending {
            rows: self
                .tables
                .iter()
                .map(|t| t.iter().map(Taken::len).sum())
                .collect(),
            held: self.held,
        }
    }

    /// A table's next batch of rows (empty when none is left), taken.
    pub fn take(&mut self, table: usize) -> Taken {
        let taken = match self.tables[table].pop_front() {
            Some(t) => t,
            None => Rows::new(0).take(table),
        };
        self.held -= taken.held(table).min(self.held);
        taken
    }
}
