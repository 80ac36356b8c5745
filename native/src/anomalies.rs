//! The kinds of anomaly an item can name, as dissector/anomalies.py's AnomalyKind has them: the
//! engine's configuration carries the Python enum's values and `check` refuses a configuration
//! whose list differs from this one, so the two sides cannot drift apart unnoticed.

macro_rules! kinds {
    ($($variant:ident = $text:literal,)*) => {
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
                    $(AnomalyKind::$variant => $text,)*
                }
            }
        }
    };
}

kinds! {
    // the capture files (capture.rs)
    CorruptFile = "corrupt_file",
    TruncatedFile = "truncated_file",
    EmptyFile = "empty_file",
    UnknownLinktype = "unknown_linktype",
    TruncatedPacket = "truncated_packet",
    // TCP reassembly (tcp.rs)
    OverlapConflict = "overlap_conflict",
    // frame splitting (frames.rs)
    GapInFrame = "gap_in_frame",
    FrameTooLarge = "frame_too_large",
    BadFrameSize = "bad_frame_size",
    Resync = "resync",
    TruncatedFrame = "truncated_frame",
    FrameOverBudget = "frame_over_budget",
    // pairing and decoding (exchanges.rs)
    ShortRequest = "short_request",
    ShortResponse = "short_response",
    TrailingBytes = "trailing_bytes",
    VersionMismatch = "version_mismatch",
    TooManyOutstanding = "too_many_outstanding",
    UnrecognisedConnection = "unrecognised_connection",
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
        "anomaly kinds differ between dissector.anomalies.AnomalyKind and native/src/anomalies.rs: \
         only in Python {only_python:?}, only in the native core {only_native:?}"
    ))
}
