//! The kinds of anomaly an item can name, registered once (as Wireshark registers its expert
//! info) in native/core/anomalies.tsv: kind, severity, group, layer and summary. build.rs makes
//! the core's table of it; the Python package's is generated from the same file, and `check`
//! refuses a configuration whose table differs from this one.

include!(concat!(env!("OUT_DIR"), "/anomalies_table.rs"));

/// How much an anomaly matters, as Wireshark's expert info grades it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Severity {
    Error,
    Warn,
    Note,
    Chat,
}

impl Severity {
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warn => "warn",
            Severity::Note => "note",
            Severity::Chat => "chat",
        }
    }
}

impl AnomalyKind {
    /// The kind's text, as items and tables name it (anomalies.tsv's first column)
    pub const fn as_str(self) -> &'static str {
        self.row().0
    }

    pub const fn severity(self) -> Severity {
        self.row().1
    }

    /// Its group (malformed, sequence, reassemble, protocol, undecoded, decryption)
    pub const fn group(self) -> &'static str {
        self.row().2
    }

    /// The layer that names it (capture, tcp, frames, exchanges, tls)
    pub const fn layer(self) -> &'static str {
        self.row().3
    }

    pub const fn summary(self) -> &'static str {
        self.row().4
    }
}

/// The whole table, in anomalies.tsv's order: (kind, severity, group, layer, summary).
pub fn table() -> Vec<[&'static str; 5]> {
    AnomalyKind::ALL
        .iter()
        .map(|k| {
            [
                k.as_str(),
                k.severity().as_str(),
                k.group(),
                k.layer(),
                k.summary(),
            ]
        })
        .collect()
}

/// Err (the kinds only one side has, or the first row that differs) unless `python`
/// (dissector.anomalies.TABLE) is this table, row for row.
pub fn check(python: &[Vec<String>]) -> Result<(), String> {
    let mine = table();
    let kinds: Vec<&str> = python
        .iter()
        .map(|r| r.first().map_or("", String::as_str))
        .collect();
    let only_python: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| !mine.iter().any(|r| r[0] == *k))
        .collect();
    let only_native: Vec<&str> = mine
        .iter()
        .map(|r| r[0])
        .filter(|k| !kinds.contains(k))
        .collect();
    if !only_python.is_empty() || !only_native.is_empty() {
        return Err(format!(
            "anomaly kinds differ between dissector.anomalies and native/core/anomalies.tsv: \
             only in Python {only_python:?}, only in the native core {only_native:?}"
        ));
    }
    for (p, m) in python.iter().zip(&mine) {
        if p.iter().map(String::as_str).ne(m.iter().copied()) {
            return Err(format!(
                "anomaly table differs from native/core/anomalies.tsv: Python has {p:?}, the native core {m:?} \
                 (python native/tools/gen_anomalies.py writes Python's from it)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_row_and_the_table_checks_itself() {
        assert_eq!(kind::RESYNC, "resync");
        assert_eq!(AnomalyKind::FrameOverBudget.severity(), Severity::Error);
        assert_eq!(AnomalyKind::TlsEncrypted.group(), "decryption");
        let rows: Vec<Vec<String>> = table()
            .iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect();
        assert_eq!(check(&rows), Ok(()));
        let mut other = rows.clone();
        other[0][1] = "note".into();
        assert!(check(&other).unwrap_err().contains("corrupt_file"));
        assert!(check(&rows[1..])
            .unwrap_err()
            .contains("only in the native core"));
    }
}
