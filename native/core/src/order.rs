//! Completed items -> request-time order within a bounded window: an item is released once
//! nothing still open can precede it, or when the window (capture time), the item count or the
//! bytes held run over. Past a bound the oldest go early, so an item may come out after items
//! with later times; none is dropped.
use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::exchanges::Item;

// window, max_items and max_bytes come from the engine's Limits
const OVERHEAD: u64 = 512; // rough bytes of one held item besides its frames

/// A held item by its place (time or -inf, connection or -1, arrival) with its size; arrival
/// is unique, so entries never compare past it.
struct Entry {
    ts: f64,
    conn: i64,
    seq: u64,
    size: u64,
    item: Item,
}

impl Entry {
    fn key(&self) -> (f64, i64, u64) {
        (self.ts, self.conn, self.seq)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so that BinaryHeap (which pops its greatest) pops the least place first.
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2))
    }
}

/// An item's time (an exchange's request time, else its answer's; a connection row's last
/// time; -inf when unknown) and connection (-1 for none), and its size for the bytes bound
fn place(item: &Item) -> (f64, i64, u64) {
    match item {
        Item::Exchange(x) => {
            let ts = x.ts.or(x.response_ts);
            let size =
                OVERHEAD + x.request_size.unwrap_or(0) as u64 + x.response_size.unwrap_or(0) as u64;
            (ts.unwrap_or(f64::NEG_INFINITY), x.connection as i64, size)
        }
        Item::Anomaly(a) => (a.ts, a.connection.map_or(-1, |c| c as i64), OVERHEAD),
        Item::Connection(k) => (
            k.last_ts.unwrap_or(f64::NEG_INFINITY),
            k.connection as i64,
            OVERHEAD,
        ),
    }
}

pub struct Reorder {
    window: f64,
    max_items: usize,
    max_bytes: u64,
    heap: BinaryHeap<Entry>,
    seq: u64,
    bytes: u64,
}

impl Reorder {
    pub fn new(window: f64, max_items: usize, max_bytes: u64) -> Self {
        Reorder {
            window,
            max_items,
            max_bytes,
            heap: BinaryHeap::new(),
            seq: 0,
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn add(&mut self, items: Vec<Item>) {
        for item in items {
            let (ts, conn, size) = place(&item);
            self.seq += 1;
            self.bytes += size;
            self.heap.push(Entry {
                ts,
                conn,
                seq: self.seq,
                size,
                item,
            });
        }
    }

    pub fn over(&self) -> bool {
        self.heap.len() > self.max_items || self.bytes > self.max_bytes
    }

    /// Items below the watermark for capture time `now`, plus the oldest ones past the bounds.
    pub fn release(&mut self, now: f64, oldest_open: Option<f64>, out: &mut Vec<Item>) {
        let bound = match oldest_open {
            None => now,
            Some(o) if o > now => now,
            Some(o) => o.max(now - self.window),
        };
        while let Some(top) = self.heap.peek() {
            if !(top.ts < bound || self.heap.len() > self.max_items || self.bytes > self.max_bytes)
            {
                break;
            }
            let e = self.heap.pop().unwrap();
            self.bytes -= e.size;
            out.push(e.item);
        }
    }

    pub fn flush(&mut self, out: &mut Vec<Item>) {
        let heap = std::mem::take(&mut self.heap);
        // into_sorted_vec is ascending by Ord, which is reversed: greatest Ord = least key first... so reverse
        let mut v = heap.into_sorted_vec();
        v.reverse();
        out.extend(v.into_iter().map(|e| e.item));
        self.bytes = 0;
    }
}
