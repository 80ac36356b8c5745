//! The tables' rows made by the core alone from a bundled sample's items: the counts per table
//! that tests/test_landing.py holds `land` to, and every column a valid Arrow array of the
//! table's length.
mod common;

use common::{each_item, root};
use kafkawire_core::exchanges::Item;
use kafkawire_core::render::Render;
use kafkawire_core::rows::{Rows, TABLES};

fn land(sample: &str, records: bool) -> Rows {
    let mut rows = Rows::new(kafkawire_core::compression::DEFAULT_MAX_DECOMPRESSED);
    rows.set_options(records, true);
    let mut render = Render::new();
    let path = root().join("samples").join(sample);
    each_item(&path, &[], true, 0.0, |item| match item {
        Item::Exchange(x) => {
            rows.exchange(x, x.connection, &mut render);
        }
        Item::Anomaly(a) => rows.anomaly(a, a.connection),
        Item::Connection(k) => rows.connection(k, k.connection),
    });
    rows
}

#[test]
fn a_samples_rows_per_table() {
    let mut rows = land("kafka-python-basic.pcap", true);
    // exchanges, errors, connections, anomalies, records, batches (two produced, two fetched)
    assert_eq!(rows.counts, [34, 1, 9, 0, 120, 4]);
    for (i, table) in TABLES.iter().enumerate() {
        let taken = rows.take(i);
        let n = rows.counts[i];
        assert_eq!(taken.date.len(), n, "{table}");
        for (c, col) in taken.columns.into_iter().enumerate() {
            let ty = col.default_type();
            let data = col
                .into_data(&ty)
                .unwrap_or_else(|e| panic!("{table} column {c}: {e}"));
            assert_eq!(data.len(), n, "{table} column {c}");
        }
        assert!(rows.pending(i) == 0);
    }
    // every topic is named in the capture: no placeholder is left
    assert!(rows.unresolved.borrow().is_empty());
}

#[test]
fn without_records_the_records_table_stays_empty() {
    let rows = land("confluent-codecs.pcap", false);
    assert_eq!(rows.counts[4], 0);
    assert!(rows.counts[0] > 0);
}
