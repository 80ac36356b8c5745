//! The local engine on every core: one reader hands each connection's packets to the bucket of
//! its 4-tuple (Spark's stage 1, `ranges::ConnBuckets`), and each bucket runs a pipeline of its
//! own on a thread of its own (Spark's stage 2: reassembly, TLS, pairing, decoding, rows),
//! without a JVM or a shuffle through files.
//!
//! A pipeline holds Rc throughout, so none of it crosses threads: packets travel as `Sent`
//! records (their addresses Arc), and what a bucket gives back is made to cross (rows as Arrow
//! columns, file faults as plain fields). The channels are bounded both ways; the reader never
//! blocks on a full bucket while that bucket waits for it to take what it gave back
//! (`Pool::pump` waits on both at once), so a slow bucket slows the reader, never deadlocks it.
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Select, Sender, TrySendError};

use crate::engine::{Hooks, PacketSource};
use crate::packet::{CaptureAnomaly, Packet, Rec};
use crate::ranges::ConnBuckets;

/// The set's last packet time and latest packet time, once the reader tells them.
type End = Rc<std::cell::Cell<Option<(f64, Option<f64>)>>>;

/// Records a bucket's batch holds at most before it is sent; batches waiting per bucket: enough
/// for a bucket to go on through a Parquet flush on the reading thread (tens of ms).
const BATCH: usize = 1024;
const QUEUED: usize = 64;

/// A record on its way to its bucket.
pub enum Sent {
    Packet(Packet<Arc<str>>),
    Anomaly(CaptureAnomaly),
}

/// What the reader sends a bucket, in capture order.
pub enum Input {
    Recs(Vec<Sent>),
    /// key log text the capture carried (every bucket gets it, in its place among the packets)
    Secrets(Vec<u8>),
    /// every packet is sent: the set's last packet time and latest packet time, where the
    /// connections still open are closed (as one pipeline over every packet closes them)
    End(Option<f64>, Option<f64>),
}

/// The reader's side of the fan-out: records to their buckets' batches, batches to the queue of
/// inputs to send, in the order they were made (so each bucket's stay in capture order).
pub struct Fanout {
    buckets: ConnBuckets,
    batches: Vec<Vec<Sent>>,
    pub queue: VecDeque<(usize, Input)>,
    /// one Arc per address text, by the reader's Rc (its address cache keeps them alive)
    arcs: HashMap<usize, (Rc<str>, Arc<str>)>,
    /// the last packet's time and the latest packet time read
    pub last: Option<f64>,
    pub top: Option<f64>,
}

impl Fanout {
    pub fn new(n: u32) -> Self {
        Fanout {
            buckets: ConnBuckets::new(n),
            batches: (0..n).map(|_| Vec::new()).collect(),
            queue: VecDeque::new(),
            arcs: HashMap::new(),
            last: None,
            top: None,
        }
    }

    fn arc(&mut self, s: &Rc<str>) -> Arc<str> {
        let key = Rc::as_ptr(s) as *const u8 as usize;
        if let Some((_, a)) = self.arcs.get(&key) {
            return a.clone();
        }
        if self.arcs.len() > 65536 {
            self.arcs.clear();
        }
        let a: Arc<str> = Arc::from(&**s);
        self.arcs.insert(key, (s.clone(), a.clone()));
        a
    }

    /// One record of the capture (a capture anomaly goes to bucket 0, as on Spark).
    pub fn push(&mut self, rec: Rec) {
        let (b, sent) = match rec {
            Rec::Idle => return,
            Rec::Anomaly(a) => (0, Sent::Anomaly(a)),
            Rec::Packet(p) => {
                self.last = Some(p.ts);
                if self.top.is_none_or(|t| p.ts > t) {
                    self.top = Some(p.ts);
                }
                let b = self.buckets.of(&p) as usize;
                let p = p.with_hosts(|h| self.arc(&h));
                (b, Sent::Packet(p))
            }
        };
        self.batches[b].push(sent);
        if self.batches[b].len() >= BATCH {
            self.queue
                .push_back((b, Input::Recs(std::mem::take(&mut self.batches[b]))));
        }
    }

    /// Every bucket's batch so far to the queue.
    pub fn flush(&mut self) {
        for (b, batch) in self.batches.iter_mut().enumerate() {
            if !batch.is_empty() {
                self.queue
                    .push_back((b, Input::Recs(std::mem::take(batch))));
            }
        }
    }

    /// Key log text the capture carried: to every bucket, after the packets before it.
    pub fn secrets(&mut self, text: Vec<u8>) {
        self.flush();
        for b in 0..self.batches.len() {
            self.queue.push_back((b, Input::Secrets(text.clone())));
        }
    }

    /// The end of the capture: to every bucket, after its last packets.
    pub fn end(&mut self, last: Option<f64>, top: Option<f64>) {
        self.flush();
        for b in 0..self.batches.len() {
            self.queue.push_back((b, Input::End(last, top)));
        }
    }
}

/// The reader stopped before the end (the run was cut short): a bucket's pipeline stops.
#[derive(Debug)]
pub struct Gone;

/// A bucket's packet source: the batches its reader sends, back as packets (one Rc per address
/// text again); an idle mark after each batch, so the bucket hands back what it made.
pub struct Inlet {
    rx: Receiver<Input>,
    batch: std::vec::IntoIter<Sent>,
    pause: bool,
    hosts: HashMap<usize, (Arc<str>, Rc<str>)>,
    secrets: Vec<u8>,
    /// the set's end once told (End), for the pipeline's hooks
    pub end: End,
    ended: bool,
}

impl Inlet {
    pub fn new(rx: Receiver<Input>) -> Self {
        Inlet {
            rx,
            batch: Vec::new().into_iter(),
            pause: false,
            hosts: HashMap::new(),
            secrets: Vec::new(),
            end: Default::default(),
            ended: false,
        }
    }

    fn host(&mut self, s: Arc<str>) -> Rc<str> {
        let key = Arc::as_ptr(&s) as *const u8 as usize;
        if let Some((_, r)) = self.hosts.get(&key) {
            return r.clone();
        }
        if self.hosts.len() > 65536 {
            self.hosts.clear();
        }
        let r: Rc<str> = Rc::from(&*s);
        self.hosts.insert(key, (s, r.clone()));
        r
    }
}

impl PacketSource for Inlet {
    type Error = Gone;

    fn next_rec(&mut self) -> Result<Option<Rec>, Gone> {
        loop {
            if self.ended {
                return Ok(None);
            }
            match self.batch.next() {
                Some(Sent::Anomaly(a)) => return Ok(Some(Rec::Anomaly(a))),
                Some(Sent::Packet(p)) => {
                    return Ok(Some(Rec::Packet(p.with_hosts(|h| self.host(h)))));
                }
                None => {}
            }
            if self.pause {
                self.pause = false;
                return Ok(Some(Rec::Idle));
            }
            match self.rx.recv().map_err(|_| Gone)? {
                Input::Recs(v) => {
                    self.batch = v.into_iter();
                    self.pause = true;
                }
                Input::Secrets(s) => self.secrets.extend(s),
                Input::End(last, top) => {
                    self.end.set(last.map(|l| (l, top)));
                    self.ended = true;
                }
            }
        }
    }

    fn take_secrets(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.secrets)
    }
}

/// A bucket pipeline's hooks: no progress of its own (the reader tells it), the set's end as
/// the reader saw it.
pub struct BucketHooks(pub End);

impl Hooks<Gone> for BucketHooks {
    fn end(&mut self) -> Result<Option<(f64, Option<f64>)>, Gone> {
        Ok(self.0.get())
    }
}

/// The buckets' threads, the channels to them and the one back.
pub struct Pool<O> {
    tx: Vec<Sender<Input>>,
    rx: Receiver<O>,
    handles: Vec<JoinHandle<()>>,
    pub fanout: Fanout,
    /// the reader's packets read, and whether it is at its end
    pub read: u64,
    read_all: bool,
}

/// What `Pool::pump` did: read more, or stopped because output came back or everything was
/// read and sent.
#[derive(PartialEq, Eq, Debug)]
pub enum Pumped {
    Output,
    AllSent,
}

impl<O: Send + 'static> Pool<O> {
    /// `n` buckets, each `work(bucket, its inlet, the channel back)` on a thread of its own.
    pub fn start(
        n: usize,
        work: Arc<dyn Fn(usize, Inlet, Sender<O>) + Send + Sync>,
    ) -> std::io::Result<Self> {
        let (otx, rx) = bounded::<O>(QUEUED * n.max(1) * 2);
        let mut tx = Vec::new();
        let mut handles = Vec::new();
        for b in 0..n {
            let (itx, irx) = bounded::<Input>(QUEUED);
            let (work, otx) = (work.clone(), otx.clone());
            let h = std::thread::Builder::new()
                .name(format!("kafkawire-bucket-{b}"))
                .spawn(move || work(b, Inlet::new(irx), otx))?;
            tx.push(itx);
            handles.push(h);
        }
        Ok(Pool {
            tx,
            rx,
            handles,
            fanout: Fanout::new(n as u32),
            read: 0,
            read_all: false,
        })
    }

    /// Reads records from `reader` into the buckets until something came back (into `out`) or
    /// every record is read and sent; progress is told every 4096 packets.
    pub fn pump<S: PacketSource>(
        &mut self,
        reader: &mut S,
        out: &mut Vec<O>,
        hooks: &mut impl Hooks<S::Error>,
    ) -> Result<Pumped, S::Error> {
        loop {
            while let Ok(o) = self.rx.try_recv() {
                out.push(o);
            }
            if !out.is_empty() {
                return Ok(Pumped::Output);
            }
            if let Some((b, input)) = self.fanout.queue.pop_front() {
                match self.tx[b].try_send(input) {
                    Ok(()) => continue,
                    Err(TrySendError::Disconnected(_)) => continue, // a bucket that ended early (its error came back)
                    Err(TrySendError::Full(input)) => {
                        // wait for room in that bucket or for something back, whichever comes first
                        let mut sel = Select::new();
                        let s = sel.send(&self.tx[b]);
                        sel.recv(&self.rx);
                        let op = sel.select();
                        if op.index() == s {
                            let _ = op.send(&self.tx[b], input);
                        } else {
                            self.fanout.queue.push_front((b, input));
                            if let Ok(o) = op.recv(&self.rx) {
                                out.push(o);
                            }
                        }
                        continue;
                    }
                }
            }
            if self.read_all {
                return Ok(Pumped::AllSent);
            }
            // read until a batch is queued
            while self.fanout.queue.is_empty() {
                match reader.next_rec()? {
                    Some(rec) => {
                        if matches!(rec, Rec::Packet(_)) {
                            self.read += 1;
                            if self.read & 4095 == 0 {
                                hooks.progress(self.read)?;
                            }
                        }
                        self.fanout.push(rec);
                        let secrets = reader.take_secrets();
                        if !secrets.is_empty() {
                            self.fanout.secrets(secrets);
                        }
                    }
                    None => {
                        hooks.progress(self.read)?;
                        let (last, top) = (self.fanout.last, self.fanout.top);
                        self.fanout.end(last, top);
                        self.read_all = true;
                        break;
                    }
                }
            }
        }
    }

    /// The channel back, to wait on once everything is sent (recv: None when every bucket has
    /// ended).
    pub fn receiver(&self) -> Receiver<O> {
        self.rx.clone()
    }
}

impl<O> Drop for Pool<O> {
    /// A run cut short (an error, Ctrl-C): the buckets see their reader gone at their next
    /// receive, or the channel back gone at their next send, and end; nobody waits for them.
    fn drop(&mut self) {
        self.tx.clear();
        self.handles.clear();
    }
}

/// The threads the machine offers (the default number of buckets).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
