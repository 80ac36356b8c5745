//! What the integration tests share: a sample's path and the pipeline over it, with the
//! dissector's limits.
// each test crate includes this module and uses a part of it
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kafkawire_core::capture::{FsFiles, PacketReader};
use kafkawire_core::decode::SharedNames;
use kafkawire_core::engine::{Pipeline, Quiet};
use kafkawire_core::exchanges::{Ctx, Exchanges, Item};
use kafkawire_core::land::LandRun;
use kafkawire_core::order::Reorder;
use kafkawire_core::tcp::Reassembler;
use kafkawire_core::tls::{KeyLog, Tls};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every item of one capture file, in request-time order over `window` seconds, to `each`:
/// Kafka on `ports` (and wherever the heuristic finds it), connection items with `connections`.
pub fn each_item(
    path: &Path,
    ports: &[u16],
    connections: bool,
    window: f64,
    mut each: impl FnMut(&Item),
) {
    let mut p = pipeline(path, ports, connections, window);
    // bounded: each pass reads at least one packet or ends the capture
    for _ in 0..10_000_000 {
        if p.done {
            return;
        }
        let mut items: Vec<Item> = Vec::new();
        p.next_ordered(&mut items, &mut Quiet).expect("plain files");
        items.iter().for_each(&mut each);
    }
    panic!("{}: the pipeline never ended", path.display());
}

pub fn pipeline(
    path: &Path,
    ports: &[u16],
    connections: bool,
    window: f64,
) -> Pipeline<PacketReader<FsFiles>> {
    let reader = PacketReader::new(
        vec![path.to_string_lossy().into_owned().into_bytes()],
        FsFiles,
    );
    let ctx = Ctx::new(kafkawire_core::spec::shared(), SharedNames::default());
    Pipeline::new(
        reader,
        Reassembler::new(16 << 20, 1 << 20, 256 << 20),
        Tls::new(KeyLog::default()),
        Exchanges::new(ctx, ports, 100 << 20, connections),
        Reorder::new(window, 20000, 64 << 20),
    )
}

/// A land run to the end of its capture, each item `take` gives back to `each` with its stable id.
pub fn land_all(
    p: &mut Pipeline<PacketReader<FsFiles>>,
    run: &mut LandRun,
    mut each: impl FnMut(Item, Option<u64>),
) {
    // bounded: each pass reads at least one packet or ends the capture
    for _ in 0..1_000_000 {
        if p.done {
            return;
        }
        let mut out = Vec::new();
        run.next_pass(p, &mut out, &mut Quiet).expect("plain files");
        for (item, stable) in out {
            if let Some(item) = run.take(item, stable, |_| false) {
                each(item, stable);
            }
        }
    }
    panic!("the land run never ended");
}
