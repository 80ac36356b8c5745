//! A land run over a bundled sample with the core alone: the rows of every item, connections
//! numbered by stable ids, `land --filter`, and a carried state's guard.
mod common;

use common::{land_all, pipeline, root};
use kafkawire_core::engine::Quiet;
use kafkawire_core::exchanges::Item;
use kafkawire_core::filter::{Filter, FilterSpec};
use kafkawire_core::land::LandRun;
use kafkawire_core::rows::Rows;

/// (rows per table, the stable ids items came out with) of a land run over a sample.
fn land(sample: &str, filter: Option<FilterSpec>, rows: bool) -> ([usize; 6], Vec<u64>) {
    let mut p = pipeline(&root().join("samples").join(sample), &[], true, 0.0);
    let made = rows.then(|| {
        let mut r = Rows::new(kafkawire_core::compression::DEFAULT_MAX_DECOMPRESSED);
        r.set_options(true, true);
        r
    });
    let mut run = LandRun::new(made);
    run.filter = filter.map(Filter::new);
    let mut ids = Vec::new();
    land_all(&mut p, &mut run, |item, stable| {
        if let Item::Exchange(_) = item {
            ids.extend(stable);
        }
    });
    assert!(p.done);
    (run.rows.map(|(r, _)| r.counts).unwrap_or_default(), ids)
}

#[test]
fn the_rows_of_a_land_run() {
    let (counts, ids) = land("kafka-python-basic.pcap", None, true);
    // exchanges, errors, connections, anomalies, records: as `land --records` makes them
    assert_eq!(counts, [34, 1, 9, 0, 120, 4]);
    assert!(
        ids.is_empty(),
        "with rows, no exchange comes back to the caller"
    );
}

#[test]
fn without_rows_items_come_back_with_stable_ids() {
    let (_, ids) = land("kafka-python-basic.pcap", None, false);
    assert_eq!(ids.len(), 34);
    // 63-bit hashes, not the dissector's ordinals
    assert!(ids.iter().all(|&c| c > 1 << 20 && c < 1 << 63));
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 9);
}

#[test]
fn a_filter_keeps_its_exchanges_only() {
    let spec = FilterSpec {
        apis: vec!["produce".into()],
        ..Default::default()
    };
    let (counts, _) = land("kafka-python-basic.pcap", Some(spec), true);
    // two Produce exchanges, their 60 records; connections and anomalies are not exchanges
    assert_eq!(counts, [2, 0, 0, 0, 60, 2]);
}

#[test]
fn a_state_is_restored_only_before_the_first_packet() {
    let mut p = pipeline(
        &root().join("samples").join("kafka-python-basic.pcap"),
        &[],
        true,
        0.0,
    );
    let mut run = LandRun::new(None);
    let mut out = Vec::new();
    run.next_pass(&mut p, &mut out, &mut Quiet).unwrap();
    let err = run.restore(&mut p, b"anything").unwrap_err();
    assert!(err.0.contains("read nothing yet"), "{err}");
    let mut fresh = pipeline(
        &root().join("samples").join("kafka-python-basic.pcap"),
        &[],
        true,
        0.0,
    );
    let err = LandRun::new(None)
        .restore(&mut fresh, b"not a state")
        .unwrap_err();
    assert!(err.0.contains("damaged"), "{err}");
}
