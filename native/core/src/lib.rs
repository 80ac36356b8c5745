//! kafkawire's core: Kafka traffic from capture files to exchanges, lines and table rows, in pure
//! Rust. The Python bindings (the `kafkawire-py` crate, module `dissector._native`) convert at the
//! edge and hold no logic of their own.
//!
//! One module per layer, in the order the data flows:
//!
//!   packet       what a capture's reader yields: TCP packets and the file's anomalies
//!   tcp          packets -> per-direction byte-stream events (reassembly, gaps, closes)
//!   tls          TLS connections' records -> their decrypted bytes, with a key log
//!   frames       a direction's bytes -> size-prefixed frames (resync by plausibility)
//!   compression  Kafka's codecs with a hard cap on the decompressed size
//!   carry        the binary form of the state an append carries to the next run
//!   anomalies    the anomaly kinds every layer names
//!   printable    the code points a text field shows escaped
pub mod anomalies;
pub mod carry;
pub mod compression;
pub mod frames;
pub mod packet;
pub mod printable;
pub mod tcp;
pub mod tls;
