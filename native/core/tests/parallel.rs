//! A land run over buckets with the core alone: the packets fanned out to their connection's
//! bucket, each bucket's run on its own thread, the rows gathered: as many rows per table as one
//! run makes, whatever the number of buckets, and every column whole.
mod common;

use std::sync::Arc;

use common::{land_all, pipeline, root};
use kafkawire_core::engine::{Quiet, Setup};
use kafkawire_core::land::{land_bucket, BucketSetup, Gathered, LandRun};
use kafkawire_core::parallel::{Pool, Pumped};
use kafkawire_core::rows::{Rows, TABLES};

const MAX: usize = kafkawire_core::compression::DEFAULT_MAX_DECOMPRESSED;

fn one_thread(sample: &str) -> [usize; 6] {
    let mut p = pipeline(&root().join("samples").join(sample), &[], true, 0.0);
    let mut rows = Rows::new(MAX);
    rows.set_options(true, true);
    let mut run = LandRun::new(Some(rows));
    land_all(&mut p, &mut run, |_, _| {});
    run.rows.unwrap().0.counts
}

/// (rows gathered per table, each table's rows taken) of a run over `n` buckets.
fn buckets(sample: &str, n: usize) -> ([usize; 6], Vec<usize>) {
    let mut reader = pipeline(&root().join("samples").join(sample), &[], true, 0.0).reader;
    let cfg = BucketSetup {
        setup: Setup {
            connections: true,
            max_frame_size: 100 << 20,
            // the limits common::pipeline gives one run
            max_buffer_per_direction: 16 << 20,
            lost_after: 1 << 20,
            max_buffer_total: 256 << 20,
            max_items: 20000,
            max_bytes: 64 << 20,
            ..Setup::default()
        },
        rows: (MAX, true, true),
        filter: None,
        carry: false,
        faults: Vec::new(),
        states: Vec::new(),
    };
    let mut pool = Pool::start(
        n,
        Arc::new(move |b, inlet, tx| land_bucket(&cfg, b, inlet, tx)),
    )
    .unwrap();
    let mut g = Gathered::new(n, Default::default());
    let mut backs = Vec::new();
    let mut sent = false;
    for _ in 0..1_000_000 {
        if !sent {
            sent = pool.pump(&mut reader, &mut backs, &mut Quiet).unwrap() == Pumped::AllSent;
        }
        if sent && backs.is_empty() {
            match pool.receiver().recv() {
                Ok(b) => backs.push(b),
                Err(_) => break,
            }
        }
        for b in backs.drain(..) {
            assert!(g.take_back(b).is_none(), "no file fault in a sample");
        }
        if g.done == n {
            break;
        }
    }
    assert_eq!(g.done, n);
    let taken = (0..TABLES.len())
        .map(|t| {
            // each bucket's batches as they came, until an empty one
            let mut n = 0;
            for _ in 0..1_000_000 {
                let rows = g.take(t);
                if rows.is_empty() {
                    break;
                }
                for c in &rows.columns {
                    assert_eq!(
                        c.len(),
                        rows.len(),
                        "{}: a column as long as its batch",
                        TABLES[t]
                    );
                }
                n += rows.len();
            }
            n
        })
        .collect();
    (g.counts, taken)
}

#[test]
fn buckets_make_the_rows_one_run_makes() {
    for sample in [
        "kafka-python-basic.pcap",
        "java-codecs-ak.pcap",
        "java-txn-ak.pcap",
    ] {
        let one = one_thread(sample);
        assert!(one[0] > 0 && one[4] > 0, "{sample}: {one:?}");
        for n in [1, 2, 5] {
            let (counts, taken) = buckets(sample, n);
            assert_eq!(counts, one, "{sample} over {n} buckets");
            assert_eq!(taken, one.to_vec(), "{sample} over {n} buckets");
        }
    }
}
