//! The kinds of anomaly an item can name, as dissector/anomalies.py's AnomalyKind has them: the
//! engine's configuration carries the Python enum's values and `check` refuses a configuration
//! whose list differs from this one, so the two sides cannot drift apart unnoticed.

macro_rules! kinds {
    ($($variant:ident $text_const:ident = $text:literal,)*) => {
        /// An anomaly's kind (dissector.anomalies.AnomalyKind)
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum AnomalyKind {
            $($variant,)*
        }

        impl AnomalyKind {
            pub const ALL: &'static [AnomalyKind] = &[$(AnomalyKind::$variant,)*];

            /// The kind's text (the Python member's value)
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(AnomalyKind::$variant => kind::$text_const,)*
                }
            }
        }

        /// Each kind's text, as the layers write it into their anomalies (and match on it).
        pub mod kind {
            $(pub const $text_const: &str = $text;)*
        }
    };
}

kinds! {
    // the capture files (capture.rs)
    CorruptFile CORRUPT_FILE = "corrupt_file",
    TruncatedFile TRUNCATED_FILE = "truncated_file",
    EmptyFile EMPTY_FILE = "empty_file",
    UnknownLinktype UNKNOWN_LINKTYPE = "unknown_linktype",
    TruncatedPacket TRUNCATED_PACKET = "truncated_packet",
    // TCP reassembly (tcp.rs)
    OverlapConflict OVERLAP_CONFLICT = "overlap_conflict",
    // frame splitting (frames.rs)
    GapInFrame GAP_IN_FRAME = "gap_in_frame",
    FrameTooLarge FRAME_TOO_LARGE = "frame_too_large",
    BadFrameSize BAD_FRAME_SIZE = "bad_frame_size",
    Resync RESYNC = "resync",
    TruncatedFrame TRUNCATED_FRAME = "truncated_frame",
    FrameOverBudget FRAME_OVER_BUDGET = "frame_over_budget",
    // pairing and decoding (exchanges.rs)
    ShortRequest SHORT_REQUEST = "short_request",
    ShortResponse SHORT_RESPONSE = "short_response",
    TrailingBytes TRAILING_BYTES = "trailing_bytes",
    VersionMismatch VERSION_MISMATCH = "version_mismatch",
    TooManyOutstanding TOO_MANY_OUTSTANDING = "too_many_outstanding",
    UnrecognisedConnection UNRECOGNISED_CONNECTION = "unrecognised_connection",
    // TLS (tls.rs): one of each per connection, with counts, when it closes
    TlsEncrypted TLS_ENCRYPTED = "tls_encrypted",
    TlsDecryptFailed TLS_DECRYPT_FAILED = "tls_decrypt_failed",
    TlsRecordLost TLS_RECORD_LOST = "tls_record_lost",
}

/// The kinds' texts, in this module's order
pub fn names() -> Vec<&'static str> {
    AnomalyKind::ALL.iter().map(|k| k.as_str()).collect()
}

/// Err (the kinds only one side has) unless `python` (AnomalyKind's values) names exactly these kinds.
pub fn check(python: &[String]) -> Result<(), String> {
    let mine = names();
    let only_python: Vec<&str> = python
        .iter()
        .map(String::as_str)
        .filter(|k| !mine.contains(k))
        .collect();
    let only_native: Vec<&str> = mine
        .iter()
        .copied()
        .filter(|k| !python.iter().any(|p| p == k))
        .collect();
    if only_python.is_empty() && only_native.is_empty() && python.len() == mine.len() {
        return Ok(());
    }
    Err(format!(
        "anomaly kinds differ between dissector.anomalies.AnomalyKind and native/core/src/anomalies.rs: \
         only in Python {only_python:?}, only in the native core {only_native:?}"
    ))
}
