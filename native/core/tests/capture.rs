//! The capture reader over the bundled samples, read from disk (FsFiles).
use std::path::{Path, PathBuf};

use kafkawire_core::capture::{FsFiles, PacketReader};
use kafkawire_core::packet::{CaptureAnomaly, Packet, Rec};

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

fn read(paths: &[PathBuf]) -> (Vec<Packet>, Vec<CaptureAnomaly>, Vec<u8>) {
    let files = paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned().into_bytes())
        .collect();
    let mut r = PacketReader::new(files, FsFiles);
    let (mut packets, mut anomalies) = (Vec::new(), Vec::new());
    // bounded: a sample has a few thousand packets
    for _ in 0..10_000_000 {
        match r.next_rec().expect("plain files raise nothing") {
            Some(Rec::Packet(p)) => packets.push(p),
            Some(Rec::Anomaly(a)) => anomalies.push(a),
            Some(Rec::Idle) => panic!("a file is never idle"),
            None => break,
        }
    }
    (packets, anomalies, r.secrets)
}

fn pcaps() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(samples())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_sample_reads_whole() {
    let all = pcaps();
    assert!(all.len() >= 15, "{all:?}");
    for p in all {
        let (packets, anomalies, _) = read(std::slice::from_ref(&p));
        assert!(!packets.is_empty(), "{p:?}");
        assert!(
            anomalies
                .iter()
                .all(|a| a.kind != "truncated_file" && a.kind != "corrupt_file"),
            "{p:?}: {anomalies:?}"
        );
        assert!(packets.windows(2).all(|w| w[0].index < w[1].index));
        assert!(packets.iter().any(|x| !x.payload.is_empty()));
    }
}

#[test]
fn a_pcapng_with_its_key_log_is_the_pcap_and_the_keys() {
    let tls = samples().join("tls");
    let (ng, ng_anomalies, secrets) = read(&[tls.join("tls-kafka-python-ak-dsb.pcapng")]);
    let (pcap, _, none) = read(&[tls.join("tls-kafka-python-ak.pcap")]);
    assert!(ng_anomalies.is_empty(), "{ng_anomalies:?}");
    assert!(none.is_empty());
    let keys = std::fs::read(tls.join("tls-kafka-python-ak.keys")).unwrap();
    // the Decryption Secrets Block holds the key log's secrets (its comment lines aside)
    let lines = |b: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(b)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(lines(&secrets), lines(&keys));
    assert_eq!(ng.len(), pcap.len());
    for (a, b) in ng.iter().zip(&pcap) {
        assert_eq!(
            (&a.src, a.sport, &a.dst, a.dport, a.seq, &a.payload),
            (&b.src, b.sport, &b.dst, b.dport, b.seq, &b.payload)
        );
        assert!((a.ts - b.ts).abs() < 1e-6);
    }
}

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kafkawire-core-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn a_cut_file_keeps_its_packets_and_names_the_cut() {
    let whole = samples().join("kafka-python-basic.pcap");
    let bytes = std::fs::read(&whole).unwrap();
    let (all, ..) = read(std::slice::from_ref(&whole));
    let cut = scratch("cut.pcap", &bytes[..bytes.len() - 5]);
    let (packets, anomalies, _) = read(std::slice::from_ref(&cut));
    assert_eq!(packets.len(), all.len() - 1);
    assert_eq!(anomalies.len(), 1);
    let a = &anomalies[0];
    assert_eq!(a.kind, "truncated_file");
    assert!(a.detail.contains("cut ("), "{}", a.detail);
    assert!(a.detail.ends_with(" bytes)"), "{}", a.detail);
}

#[test]
fn files_that_are_not_captures() {
    let cases: [(&str, &[u8], &str, &str); 4] = [
        ("empty.pcap", b"", "empty_file", "empty file (0 bytes)"),
        (
            "three.pcap",
            b"\xd4\xc3\xb2",
            "truncated_file",
            "3 bytes, not a capture",
        ),
        (
            "text.pcap",
            b"hello world",
            "corrupt_file",
            "unknown file magic 68656c6c",
        ),
        (
            "header.pcap",
            b"\xd4\xc3\xb2\xa1\x02\x00",
            "truncated_file",
            "pcap header cut",
        ),
    ];
    for (name, bytes, kind, detail) in cases {
        let p = scratch(name, bytes);
        let (packets, anomalies, _) = read(std::slice::from_ref(&p));
        assert!(packets.is_empty());
        assert_eq!(anomalies.len(), 1, "{name}: {anomalies:?}");
        assert_eq!(anomalies[0].kind, kind, "{name}");
        assert!(
            anomalies[0].detail.contains(detail),
            "{name}: {}",
            anomalies[0].detail
        );
    }
    let (_, anomalies, _) = read(&[samples().join("no-such-capture.pcap")]);
    assert_eq!(anomalies[0].kind, "corrupt_file");
    assert!(anomalies[0].detail.contains("FileNotFoundError: [Errno 2]"));
}

#[test]
fn a_set_of_files_is_merged_by_time() {
    let set = [
        samples().join("kafka-python-basic.pcap"),
        samples().join("aiokafka.pcap"),
        samples().join("errors.pcap"),
    ];
    let each: usize = set
        .iter()
        .map(|p| read(std::slice::from_ref(p)).0.len())
        .sum();
    let (packets, anomalies, _) = read(&set);
    assert!(anomalies.is_empty());
    assert_eq!(packets.len(), each);
    assert!(packets.windows(2).all(|w| w[0].ts <= w[1].ts));
}

/// A file cut into ranges (kafkawire_core::ranges::split), each read alone with the frames before
/// it counted, gives the whole file's packets and frame numbers.
#[test]
fn ranges_read_alone_make_the_whole_file() {
    use kafkawire_core::capture::RangeSpec;
    use kafkawire_core::ranges::split;

    let mut cut_somewhere = 0;
    for path in pcaps() {
        let (whole, _, _) = read(std::slice::from_ref(&path));
        let cuts = split(&path.to_string_lossy(), 4096)
            .unwrap()
            .expect("an uncompressed pcap is cut");
        cut_somewhere += (cuts.len() > 1) as usize;
        let (mut got, mut before) = (Vec::new(), 0u64);
        for (start, end, frames, preamble) in cuts {
            let (start, end) = (start.unwrap(), end.unwrap());
            let prefix = if start == 0 { Vec::new() } else { preamble };
            let spec = RangeSpec { start, end, prefix };
            let name = path.to_string_lossy().into_owned();
            let mut r = PacketReader::range(name, Some(spec), 0, before, FsFiles);
            while let Some(rec) = r.next_rec().unwrap() {
                if let Rec::Packet(p) = rec {
                    got.push(p);
                }
            }
            assert_eq!(Some(r.frames() - before), frames, "{}", path.display());
            before = r.frames();
        }
        let key = |p: &Packet| (p.ts.to_bits(), p.index, p.payload.clone());
        assert_eq!(
            got.iter().map(key).collect::<Vec<_>>(),
            whole.iter().map(key).collect::<Vec<_>>(),
            "{}",
            path.display()
        );
    }
    assert!(cut_somewhere >= 10, "{cut_somewhere}");
}

/// Every packet lands in its connection's bucket, both directions alike, and the buckets' chunks
/// hold every record once; the bucket is zlib.crc32 of the ends' repr, as landing.spark's.
#[test]
fn buckets_keep_a_connection_together() {
    use kafkawire_core::ranges::{bucket, Buckets};

    assert_eq!(bucket(("10.0.0.1", 40000), ("10.0.0.2", 9092), 7), 1);
    assert_eq!(bucket(("10.0.0.2", 9092), ("10.0.0.1", 40000), 7), 1);
    let path = samples().join("java-codecs-ak.pcap");
    let (packets, anomalies, _) = read(std::slice::from_ref(&path));
    let mut b = Buckets::new(3, None, 64, 1 << 20, false).unwrap();
    let (mut rows, mut chunks) = (0, 0);
    let mut take = |b: &mut Buckets| {
        // as the scan does: a ready chunk leaves before the next record is read
        while let Some((bucket_no, _, n, cols)) = b.next_chunk() {
            assert!(bucket_no < 3 && n > 0 && cols.iter().all(|c| c.len() == n));
            rows += n;
            chunks += 1;
        }
    };
    for a in &anomalies {
        b.push(Rec::Anomaly(a.clone()));
        take(&mut b);
    }
    for p in &packets {
        b.push(Rec::Packet(p.clone()));
        take(&mut b);
    }
    b.finish();
    take(&mut b);
    assert_eq!(rows, packets.len() + anomalies.len());
    assert!(chunks > 3);
    assert_eq!(b.top, packets.iter().map(|p| p.ts).reduce(f64::max));
}
