//! kafkawire's core: Kafka traffic from capture files to exchanges, lines and table rows, in pure
//! Rust. The Python bindings (the `kafkawire-py` crate, module `dissector._native`) convert at the
//! edge and hold no logic of their own.
//!
//! One module per layer, in the order the data flows:
//!
//!   capture      capture files (pcap, pcapng; sets, ranges, packet batches) -> packets
//!   ranges       a file cut into ranges read alone; a range's packets bucketed per connection
//!   packet       what a capture's reader yields: TCP packets and the file's anomalies
//!   stream       the events of a connection's byte streams (data, gaps, open, close, TLS facts)
//!   tcp          packets -> per-direction byte-stream events (reassembly, gaps, closes)
//!   tls          TLS connections' records -> their decrypted bytes, with a key log
//!   frames       a direction's bytes -> size-prefixed frames (resync by plausibility)
//!   spec         the registry's schema data, embedded (data/registry.json, generated)
//!   schema       that data -> decode plans per (api key, version, direction)
//!   decode       frames -> decoded values by those plans, and the walk over a body
//!   lenient      the frames the fast decoder refuses: lenient decoding, fallbacks, error texts
//!   redact       secrets out of bodies and raw frames
//!   exchanges    frames -> exchanges paired by correlation id, and the anomalies on the way
//!   order        exchanges and anomalies -> request-time order, within a window
//!   render       the text and JSON lines of exchanges and anomalies
//!   filter       which items `dissect` and `land` keep
//!   rows         the tables' rows (exchanges, errors, connections, anomalies, records)
//!   columns      those rows' columns, built in Arrow's layout
//!   engine       the pipeline: packets through every layer, items out in order
//!   land         a land run: items as they complete, stable connection ids, filter, rows, carry
//!   parallel     the local engine on every core: packets to their connection's bucket, a
//!                pipeline per bucket on a thread of its own
//!   json         JSON in orjson's layout, byte for byte
//!   records      record sets: scans, summaries, the records and their columns
//!   record_sets  --records: a records field written out whole, records decoded
//!   nested       payloads inside bytes fields (consumer protocol, Envelope), decoded beside them
//!   internal     the records of Kafka's internal topics, decoded with Kafka's schemas for them
//!   topics       where a body's topics, partitions and record data sit
//!   api          the API keys the core names
//!   compression  Kafka's codecs with a hard cap on the decompressed size
//!   carry        the binary form of the state an append carries to the next run
//!   anomalies    the anomaly kinds every layer names
//!   printable    the code points a text field shows escaped
//!   fuzz         the fuzz targets (native/fuzz runs them under libFuzzer, cargo test on stable)
pub mod anomalies;
pub mod api;
pub mod capture;
pub mod carry;
pub mod columns;
pub mod compression;
pub mod decode;
pub mod engine;
pub mod exchanges;
pub mod filter;
pub mod frames;
pub mod fuzz;
pub mod internal;
pub mod json;
pub mod land;
pub mod lenient;
pub mod nested;
pub mod order;
pub mod packet;
pub mod parallel;
pub mod printable;
pub mod ranges;
pub mod record_sets;
pub mod records;
pub mod redact;
pub mod render;
pub mod rows;
pub mod schema;
pub mod spec;
pub mod stream;
pub mod tcp;
pub mod tls;
pub mod topics;
