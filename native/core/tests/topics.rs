//! What an exchange did per topic (topics::by_topic, `top`'s topic grouping) over bundled
//! samples: the record bytes each way are the sizes of the batches the producers sent (the
//! batches table counts the same bytes from each batch's own header), and an error found
//! under a topic stays that topic's.
mod common;

use std::collections::BTreeMap;

use common::{each_item, root};
use kafkawire_core::exchanges::Item;
use kafkawire_core::topics::{by_topic, Plans};

/// topic -> (exchanges naming it, record bytes sent, record bytes answered, error codes)
type PerTopic = BTreeMap<String, (usize, u64, u64, Vec<i64>)>;

fn per_topic(sample: &str) -> (PerTopic, usize) {
    let plans = Plans::default();
    let mut out = PerTopic::new();
    let mut unnamed = 0;
    each_item(
        &root().join("samples").join(sample),
        &[],
        true,
        0.0,
        |item| {
            if let Item::Exchange(x) = item {
                let found = by_topic(x, &plans);
                unnamed += found.is_empty() as usize;
                for (t, sent, answered, codes) in found {
                    let e = out.entry(t.to_string()).or_default();
                    e.0 += 1;
                    e.1 += sent;
                    e.2 += answered;
                    e.3.extend(codes);
                }
            }
        },
    );
    (out, unnamed)
}

#[test]
fn record_bytes_each_way_per_topic() {
    // one batch per codec produced by confluent-kafka and fetched back whole by its consumer
    let (topics, unnamed) = per_topic("confluent-codecs.pcap");
    let bytes: Vec<(&str, u64, u64)> = topics.iter().map(|(t, v)| (t.as_str(), v.1, v.2)).collect();
    assert_eq!(
        bytes,
        [
            ("ck-gzip", 423, 423),
            ("ck-lz4", 504, 504),
            ("ck-snappy", 635, 635),
            ("ck-zstd", 447, 447)
        ]
    );
    assert!(unnamed > 0); // ApiVersions, FindCoordinator, ... name none
}

#[test]
fn errors_stay_with_their_topic() {
    let (topics, _) = per_topic("errors.pcap");
    let codes = |t: &str| topics[t].3.clone();
    assert_eq!(codes("no-such-topic"), [3]); // DeleteTopics of a topic that is not there
    assert_eq!(codes("missing-topic"), [3]); // Metadata of one
    let mut err_topic = codes("err-topic");
    err_topic.sort();
    assert_eq!(err_topic, [25, 36]); // OffsetCommit of an unknown member, CreateTopics of an existing topic
    assert!(codes("err-rf3").is_empty());
}
