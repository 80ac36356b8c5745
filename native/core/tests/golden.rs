//! `kafkawire dissect`'s lines over every bundled sample, made by the core alone (files read
//! from disk, no Python), against the golden outputs the Python-era pipeline first wrote
//! (tests/golden/<sample>.<mode>.xz, the same files the Python test suite holds the CLI to).
mod common;

use std::path::{Path, PathBuf};

use common::{each_item, root};
use kafkawire_core::render::{Options, Render};

/// The lines of `dissect --port 29092` with the mode's options (tests/golden.py's DISSECT).
fn dissect(path: &Path, mode: &str) -> Vec<u8> {
    let mut render = Render::new();
    render.set_options(Options {
        records: matches!(mode, "raw" | "nopay"),
        raw: mode == "raw",
        no_payloads: mode == "nopay",
        filter: None,
    });
    let text = mode == "text";
    let mut out = Vec::new();
    each_item(path, &[29092], false, 5.0, |item| {
        if let Some(line) = render.line(text, item) {
            out.extend_from_slice(&line);
        }
    });
    out
}

fn golden(name: &str) -> Vec<u8> {
    let xz = std::fs::read(root().join("tests/golden").join(format!("{name}.xz"))).unwrap();
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut &xz[..], &mut out).unwrap();
    out
}

#[test]
fn every_sample_every_mode_is_its_golden_output() {
    let mut samples: Vec<PathBuf> = std::fs::read_dir(root().join("samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    samples.sort();
    assert!(samples.len() >= 15);
    let mut lines = 0;
    for path in &samples {
        let stem = path.file_stem().unwrap().to_string_lossy();
        for mode in ["text", "jsonl", "raw", "nopay"] {
            let got = dissect(path, mode);
            let want = golden(&format!("{stem}.{mode}"));
            if got != want {
                let (g, w) = (
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&want),
                );
                let at = g.lines().zip(w.lines()).position(|(a, b)| a != b);
                panic!(
                    "{stem}.{mode}: {} lines, golden {}; first difference at line {at:?}:\n{:?}\n{:?}",
                    g.lines().count(),
                    w.lines().count(),
                    at.and_then(|i| g.lines().nth(i)),
                    at.and_then(|i| w.lines().nth(i)),
                );
            }
            lines += got.iter().filter(|&&b| b == b'\n').count();
        }
    }
    // today 6,152 lines over the samples and modes
    assert!(lines > 6_000, "{lines}");
}
