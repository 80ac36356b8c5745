//! TLS, between the TCP streams and the frames: stream events in, stream events out.
//!
//! A connection whose first bytes are a TLS record is TLS on any port, and its records never reach
//! the frames layer. With its secrets in a key log (the NSS format: browsers, Python's
//! `SSLContext.keylog_filename`, OpenSSL's SSLKEYLOGFILE, Java agents; or a pcapng's Decryption
//! Secrets Block), its records are decrypted and the application data goes on as the stream's
//! bytes, stamped with the time of the packet that completed each record. Without them the
//! connection is one `tls_encrypted` anomaly when it closes, saying what the hellos told.
//!
//! Keys are found by the ClientHello's random. TLS 1.3 moves from the handshake secrets to the
//! traffic secrets at each side's Finished and on to the next at a KeyUpdate; TLS 1.2 derives the
//! key block from the master secret (RFC 5246's PRF) and starts it at ChangeCipherSpec. The AEADs
//! are RustCrypto's (aes-gcm, chacha20poly1305), the key schedule hkdf/hmac over sha2.
//!
//! A direction that loses bytes to a capture hole resynchronises on the next record that
//! authenticates under the sequence numbers just ahead (a TLS 1.3 record carries no sequence number
//! of its own); records that fail authentication, bytes lost, bytes that could not be decrypted
//! are counted and each becomes one anomaly per connection when it closes.
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm};
use bytes::Bytes;
use chacha20poly1305::ChaCha20Poly1305;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha384};

use crate::anomalies::kind;
use crate::carry::{Dec, Enc, R};
pub use crate::stream::Facts;
use crate::stream::{Addr, Event};

const CCS: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APP_DATA: u8 = 23;
/// RFC 8446 5.2: a ciphertext record's fragment is at most 2^14 + 256 bytes; TLS 1.2 allows 2^14 +
/// 2048. Anything larger is not a TLS record.
const MAX_RECORD: usize = (1 << 14) + 2048;
/// handshake messages spanning records (certificate chains) are held up to this
const MAX_HANDSHAKE: usize = 1 << 20;
/// after a hole: how many sequence numbers past the expected one a record may sit at
const RESYNC_SEQS: u64 = 64;
/// after a hole: how far into the bytes a record boundary is searched for
const RESYNC_SCAN: usize = 64 << 10;
/// the ServerHello random that marks a HelloRetryRequest (RFC 8446 4.1.3)
const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hash {
    Sha256,
    Sha384,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AeadKind {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20,
}

impl AeadKind {
    fn key_len(self) -> usize {
        match self {
            AeadKind::Aes128Gcm => 16,
            _ => 32,
        }
    }
    fn tag(self) -> u8 {
        self as u8
    }
    fn from_tag(t: u8) -> Option<Self> {
        [AeadKind::Aes128Gcm, AeadKind::Aes256Gcm, AeadKind::ChaCha20]
            .into_iter()
            .find(|k| *k as u8 == t)
    }
}

/// The cipher suites decrypted: TLS 1.3's three, and TLS 1.2's AEAD suites (ECDHE, DHE, RSA key
/// exchange: the master secret in the key log makes the exchange irrelevant).
const SUITES: &[(u16, &str, AeadKind, Hash)] = &[
    (
        0x1301,
        "TLS_AES_128_GCM_SHA256",
        AeadKind::Aes128Gcm,
        Hash::Sha256,
    ),
    (
        0x1302,
        "TLS_AES_256_GCM_SHA384",
        AeadKind::Aes256Gcm,
        Hash::Sha384,
    ),
    (
        0x1303,
        "TLS_CHACHA20_POLY1305_SHA256",
        AeadKind::ChaCha20,
        Hash::Sha256,
    ),
    (
        0xc02f,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        AeadKind::Aes128Gcm,
        Hash::Sha256,
    ),
    (
        0xc030,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        AeadKind::Aes256Gcm,
        Hash::Sha384,
    ),
    (
        0xcca8,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        AeadKind::ChaCha20,
        Hash::Sha256,
    ),
    (
        0xc02b,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        AeadKind::Aes128Gcm,
        Hash::Sha256,
    ),
    (
        0xc02c,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        AeadKind::Aes256Gcm,
        Hash::Sha384,
    ),
    (
        0xcca9,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        AeadKind::ChaCha20,
        Hash::Sha256,
    ),
    (
        0x009e,
        "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
        AeadKind::Aes128Gcm,
        Hash::Sha256,
    ),
    (
        0x009f,
        "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
        AeadKind::Aes256Gcm,
        Hash::Sha384,
    ),
    (
        0xccaa,
        "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        AeadKind::ChaCha20,
        Hash::Sha256,
    ),
    (
        0x009c,
        "TLS_RSA_WITH_AES_128_GCM_SHA256",
        AeadKind::Aes128Gcm,
        Hash::Sha256,
    ),
    (
        0x009d,
        "TLS_RSA_WITH_AES_256_GCM_SHA384",
        AeadKind::Aes256Gcm,
        Hash::Sha384,
    ),
];

/// Names of suites seen but not decrypted (CBC, CCM), so the anomaly can say which it was.
const OTHER_SUITES: &[(u16, &str)] = &[
    (0x1304, "TLS_AES_128_CCM_SHA256"),
    (0x1305, "TLS_AES_128_CCM_8_SHA256"),
    (0xc013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
    (0xc014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
    (0xc027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"),
    (0xc028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"),
    (0x002f, "TLS_RSA_WITH_AES_128_CBC_SHA"),
    (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA"),
];

fn suite(id: u16) -> Option<(&'static str, AeadKind, Hash)> {
    SUITES.iter().find(|s| s.0 == id).map(|s| (s.1, s.2, s.3))
}

pub fn suite_name(id: u16) -> String {
    match suite(id) {
        Some((n, _, _)) => n.to_string(),
        None => match OTHER_SUITES.iter().find(|s| s.0 == id) {
            Some(s) => s.1.to_string(),
            None => format!("0x{id:04x}"),
        },
    }
}

pub fn version_name(v: u16) -> String {
    match v {
        0x0300 => "SSLv3".into(),
        0x0301 => "TLSv1.0".into(),
        0x0302 => "TLSv1.1".into(),
        0x0303 => "TLSv1.2".into(),
        0x0304 => "TLSv1.3".into(),
        _ => format!("0x{v:04x}"),
    }
}

// -- the key log --------------------------------------------------------------------------------

#[derive(Default, Clone, PartialEq)]
struct Secrets {
    /// TLS 1.2: CLIENT_RANDOM
    master: Option<Vec<u8>>,
    /// TLS 1.3: CLIENT_/SERVER_HANDSHAKE_TRAFFIC_SECRET, CLIENT_/SERVER_TRAFFIC_SECRET_0
    handshake: [Option<Vec<u8>>; 2],
    traffic: [Option<Vec<u8>>; 2],
}

/// Secrets by client random, from NSS key log text (any number of files and DSBs added).
///
/// A key log is parsed once, where it is read (the bindings' KeyLog), and each engine made with
/// it takes a clone: the maps are shared, copied only if that engine adds keys of its own (a DSB).
#[derive(Default, Clone)]
pub struct KeyLog {
    clients: Arc<HashMap<[u8; 32], Secrets>>,
    /// TLS 1.2 master secrets by session id: the `RSA Session-ID:<id> Master-Key:<secret>` lines
    /// Java's key log agents (and old NSS) write
    sessions: Arc<HashMap<Vec<u8>, Vec<u8>>>,
    /// a key log was given at all (a connection without keys then says that its were missing)
    pub given: bool,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl KeyLog {
    /// Adds a key log's lines; returns (lines taken, lines not understood). Labels this does not
    /// use (early traffic, exporter secrets) count as taken.
    pub fn add(&mut self, text: &[u8]) -> (usize, usize) {
        self.given = true;
        let (mut ok, mut bad) = (0, 0);
        for line in text.split(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("RSA Session-ID:") {
                let mut parts = rest.split_ascii_whitespace();
                let id = parts.next().and_then(unhex);
                let master = parts
                    .next()
                    .and_then(|m| m.strip_prefix("Master-Key:"))
                    .and_then(unhex);
                match (id, master) {
                    (Some(id), Some(master)) if !id.is_empty() => {
                        Arc::make_mut(&mut self.sessions).insert(id, master);
                        ok += 1;
                    }
                    _ => bad += 1,
                }
                continue;
            }
            let mut parts = line.split_ascii_whitespace();
            let (Some(label), Some(random), Some(secret), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                bad += 1;
                continue;
            };
            let (Some(random), Some(secret)) = (unhex(random), unhex(secret)) else {
                bad += 1;
                continue;
            };
            let Ok(random) = <[u8; 32]>::try_from(random.as_slice()) else {
                // RSA lines carry an encrypted pre-master secret's prefix, not a random
                if label != "RSA" {
                    bad += 1;
                }
                continue;
            };
            let s = Arc::make_mut(&mut self.clients).entry(random).or_default();
            match label {
                "CLIENT_RANDOM" => s.master = Some(secret),
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => s.handshake[0] = Some(secret),
                "SERVER_HANDSHAKE_TRAFFIC_SECRET" => s.handshake[1] = Some(secret),
                "CLIENT_TRAFFIC_SECRET_0" => s.traffic[0] = Some(secret),
                "SERVER_TRAFFIC_SECRET_0" => s.traffic[1] = Some(secret),
                _ => {}
            }
            ok += 1;
        }
        (ok, bad)
    }

    /// Adds what another key log holds, as if its text were added after this one's: a client
    /// random's secrets from `other` replace those it repeats, the others stay.
    pub fn extend(&mut self, other: &KeyLog) {
        self.given |= other.given;
        if self.is_empty() {
            self.clients = Arc::clone(&other.clients);
            self.sessions = Arc::clone(&other.sessions);
            return;
        }
        if !other.clients.is_empty() {
            let clients = Arc::make_mut(&mut self.clients);
            for (random, o) in other.clients.iter() {
                let s = clients.entry(*random).or_default();
                let ([h0, h1], [t0, t1]) = (&mut s.handshake, &mut s.traffic);
                let slots = [&mut s.master, h0, h1, t0, t1];
                let [o_h0, o_h1] = &o.handshake;
                let [o_t0, o_t1] = &o.traffic;
                let fields = [&o.master, o_h0, o_h1, o_t0, o_t1];
                for (slot, field) in slots.into_iter().zip(fields) {
                    if field.is_some() {
                        slot.clone_from(field);
                    }
                }
            }
        }
        if !other.sessions.is_empty() {
            let sessions = Arc::make_mut(&mut self.sessions);
            for (id, master) in other.sessions.iter() {
                sessions.insert(id.clone(), master.clone());
            }
        }
    }

    pub fn len(&self) -> usize {
        self.clients.len() + self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, random: &[u8; 32]) -> Option<&Secrets> {
        self.clients.get(random)
    }
}

// -- key schedule -------------------------------------------------------------------------------

/// RFC 8446 7.1: HKDF-Expand-Label(secret, label, "", len)
fn expand_label(hash: Hash, secret: &[u8], label: &str, len: usize) -> Option<Vec<u8>> {
    let mut info = Vec::with_capacity(10 + label.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push((6 + label.len()) as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label.as_bytes());
    info.push(0);
    let mut out = vec![0u8; len];
    match hash {
        Hash::Sha256 => hkdf::Hkdf::<Sha256>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .ok()?,
        Hash::Sha384 => hkdf::Hkdf::<Sha384>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .ok()?,
    }
    Some(out)
}

/// RFC 5246 5: P_hash(secret, label + seed), `len` bytes
fn prf12(hash: Hash, secret: &[u8], label: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    fn p<M: Mac + KeyInit>(secret: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
        let mac = |parts: &[&[u8]]| {
            let mut m = <M as KeyInit>::new_from_slice(secret).expect("HMAC takes any key size");
            for part in parts {
                m.update(part);
            }
            m.finalize().into_bytes().to_vec()
        };
        let mut out = Vec::with_capacity(len + 48);
        let mut a = mac(&[seed]);
        while out.len() < len {
            out.extend_from_slice(&mac(&[&a, seed]));
            a = mac(&[&a]);
        }
        out.truncate(len);
        out
    }
    let mut full = label.to_vec();
    full.extend_from_slice(seed);
    match hash {
        Hash::Sha256 => p::<Hmac<Sha256>>(secret, &full, len),
        Hash::Sha384 => p::<Hmac<Sha384>>(secret, &full, len),
    }
}

enum Cipher {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
    Cha(Box<ChaCha20Poly1305>),
}

/// One direction's record protection: the AEAD, its IV (TLS 1.2 GCM: the 4-byte salt) and the next
/// record's sequence number.
struct Keys {
    kind: AeadKind,
    key: Vec<u8>,
    iv: Vec<u8>,
    seq: u64,
    tls13: bool,
    cipher: Cipher,
}

impl Keys {
    fn new(kind: AeadKind, key: Vec<u8>, iv: Vec<u8>, tls13: bool) -> Option<Keys> {
        let cipher = match kind {
            AeadKind::Aes128Gcm => Cipher::A128(Box::new(Aes128Gcm::new_from_slice(&key).ok()?)),
            AeadKind::Aes256Gcm => Cipher::A256(Box::new(Aes256Gcm::new_from_slice(&key).ok()?)),
            AeadKind::ChaCha20 => {
                Cipher::Cha(Box::new(ChaCha20Poly1305::new_from_slice(&key).ok()?))
            }
        };
        Some(Keys {
            kind,
            key,
            iv,
            seq: 0,
            tls13,
            cipher,
        })
    }

    /// TLS 1.3 traffic keys from a traffic secret
    fn tls13(kind: AeadKind, hash: Hash, secret: &[u8]) -> Option<Keys> {
        let key = expand_label(hash, secret, "key", kind.key_len())?;
        let iv = expand_label(hash, secret, "iv", 12)?;
        Keys::new(kind, key, iv, true)
    }

    /// The plaintext of a record protected at sequence number `seq` (header: the record's 5 bytes),
    /// or None when it does not authenticate.
    fn open_at(&self, seq: u64, header: &[u8], frag: &[u8]) -> Option<Vec<u8>> {
        let explicit = !self.tls13 && self.kind != AeadKind::ChaCha20;
        let (nonce, body) = if explicit {
            if frag.len() < 8 + 16 {
                return None;
            }
            let mut n = [0u8; 12];
            n[..4].copy_from_slice(self.iv.get(..4)?);
            n[4..].copy_from_slice(&frag[..8]);
            (n, &frag[8..])
        } else {
            if frag.len() < 16 {
                return None;
            }
            let mut n = [0u8; 12];
            n.copy_from_slice(self.iv.get(..12)?);
            for (i, b) in seq.to_be_bytes().iter().enumerate() {
                n[4 + i] ^= b;
            }
            (n, frag)
        };
        let (ct, tag) = body.split_at(body.len() - 16);
        let aad_buf;
        let aad: &[u8] = if self.tls13 {
            header
        } else {
            let mut a = [0u8; 13];
            a[..8].copy_from_slice(&seq.to_be_bytes());
            a[8..11].copy_from_slice(&header[..3]);
            a[11..].copy_from_slice(&(ct.len() as u16).to_be_bytes());
            aad_buf = a;
            &aad_buf
        };
        let mut buf = ct.to_vec();
        let ok = match &self.cipher {
            Cipher::A128(c) => c
                .decrypt_in_place_detached(&nonce.into(), aad, &mut buf, tag.into())
                .is_ok(),
            Cipher::A256(c) => c
                .decrypt_in_place_detached(&nonce.into(), aad, &mut buf, tag.into())
                .is_ok(),
            Cipher::Cha(c) => c
                .decrypt_in_place_detached(&nonce.into(), aad, &mut buf, tag.into())
                .is_ok(),
        };
        ok.then_some(buf)
    }

    fn carry(&self, e: &mut Enc) {
        e.u8(self.kind.tag());
        e.bytes(&self.key);
        e.bytes(&self.iv);
        e.u64(self.seq);
        e.bool(self.tls13);
    }

    fn restore(d: &mut Dec<'_>) -> R<Option<Keys>> {
        let kind = AeadKind::from_tag(d.u8()?);
        let key = d.bytes()?.to_vec();
        let iv = d.bytes()?.to_vec();
        let seq = d.u64()?;
        let tls13 = d.bool()?;
        Ok(kind
            .and_then(|k| Keys::new(k, key, iv, tls13))
            .map(|mut k| {
                k.seq = seq;
                k
            }))
    }
}

// -- connections --------------------------------------------------------------------------------

/// One direction of a TLS connection.
#[derive(Default)]
struct Dir {
    /// an incomplete record's bytes
    buf: Vec<u8>,
    keys: Option<Keys>,
    /// TLS 1.3: the traffic secret now in use (KeyUpdate derives the next from it), and the one
    /// the handshake's Finished moves to
    secret: Option<Vec<u8>>,
    next: Option<Vec<u8>>,
    /// TLS 1.2: the keys ChangeCipherSpec starts
    pending: Option<Keys>,
    /// handshake messages spanning records
    hs: Vec<u8>,
    /// bytes lost before the next record boundary: hunting for it
    lost: bool,
    /// the record stream cannot be read on (a malformed record): the rest is counted only
    dead: bool,
    records: u64,
    bytes: u64,
    decrypted_bytes: u64,
    failed: u64,
    lost_bytes: i64,
    undecrypted_bytes: u64,
    resyncs: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Keyed {
    /// before the ServerHello
    Unknown,
    Yes,
    /// no key log, or none for this client random, or a suite not decrypted
    No,
}

struct Session {
    /// the ClientHello's sender (the SYN's sender when the hello was not seen)
    client: Option<Addr>,
    dirs: [Dir; 2],
    client_random: Option<[u8; 32]>,
    server_random: Option<[u8; 32]>,
    suite: Option<u16>,
    version: Option<u16>,
    sni: Option<String>,
    /// the ServerHello's session id (TLS 1.2 key logs may name the master secret by it)
    session_id: Vec<u8>,
    keyed: Keyed,
    why: String,
    malformed: Option<String>,
    facts_sent: bool,
    /// begun mid-connection, before the handshake: its records are counted, not read
    blind: bool,
}

enum Mode {
    /// no data yet (the Open's client, when it had one)
    Undecided(Option<Addr>),
    Plain,
    Tls(Box<Session>),
}

/// Counts over a run, for the summaries: TLS connections seen, decrypted, and those left encrypted
/// (with their bytes) as they close.
#[derive(Default, Clone, Copy)]
pub struct Stats {
    pub connections: u64,
    pub decrypted: u64,
    pub undecrypted: u64,
    pub undecrypted_bytes: u64,
}

/// Connection ids are the engine's own small integers, not attacker-chosen: a multiplicative hash
/// (Fibonacci hashing) spreads them at a fraction of SipHash's cost per packet.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Ids = std::hash::BuildHasherDefault<IdHasher>;

/// The TLS layer of one run.
pub struct Tls {
    pub keys: KeyLog,
    conns: HashMap<u64, Mode, Ids>,
    /// the last connection whose data passed through as plaintext: bulk traffic is runs of one
    /// connection's packets, which then cost no lookup (plaintext captures are not made slower)
    last_plain: Option<u64>,
    pub stats: Stats,
    /// pass()'s spare event buffer
    scratch: Vec<Event>,
}

/// What a connection's first bytes say: a ClientHello from the client of a connection whose SYN was
/// seen (Hello); else, in a capture begun mid-connection, TLS records, the first of them whole or at
/// least followed by another, starting in the first record's length of bytes (Midstream: the data
/// may begin inside a record). Kafka can't be taken for either: a frame size with a first byte of
/// 20-23 is over 335 MB, and two record headers a record apart do not occur in Kafka's bodies by chance.
#[derive(PartialEq, Eq)]
enum Start {
    Hello,
    Midstream,
    Plain,
}

fn start_of(data: &[u8], syn_client: bool) -> Start {
    let header = |d: &[u8]| {
        d.len() >= 5
            && (CCS..=APP_DATA).contains(&d[0])
            && d[1] == 3
            && d[2] <= 4
            && (u16::from_be_bytes([d[3], d[4]]) as usize) <= MAX_RECORD
    };
    let hello = header(data) && data[0] == HANDSHAKE && data.get(5).is_none_or(|t| *t == 1);
    if syn_client || hello {
        return if hello { Start::Hello } else { Start::Plain };
    }
    let chained = |i: usize| {
        let end = i + 5 + u16::from_be_bytes([data[i + 3], data[i + 4]]) as usize;
        (i == 0 && end == data.len()) || (end < data.len() && header(&data[end..]))
    };
    let reach = data.len().saturating_sub(5).min(MAX_RECORD + 5);
    if (0..=reach).any(|i| header(&data[i..]) && chained(i)) {
        Start::Midstream
    } else {
        Start::Plain
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// A ClientHello body's random and server name.
fn client_hello(b: &[u8]) -> Option<([u8; 32], Option<String>)> {
    let random: [u8; 32] = b.get(2..34)?.try_into().ok()?;
    let mut i = 34;
    i += 1 + *b.get(i)? as usize; // session id
    i += 2 + u16_at(b, i)? as usize; // cipher suites
    i += 1 + *b.get(i)? as usize; // compression methods
    let mut sni = None;
    if let Some(n) = u16_at(b, i) {
        let exts = b.get(i + 2..i + 2 + n as usize)?;
        let mut j = 0;
        while j + 4 <= exts.len() {
            let (t, l) = (u16_at(exts, j)?, u16_at(exts, j + 2)? as usize);
            let body = exts.get(j + 4..j + 4 + l)?;
            if t == 0 && body.len() >= 5 && body[2] == 0 {
                let nl = u16_at(body, 3)? as usize;
                sni = body
                    .get(5..5 + nl)
                    .map(|s| String::from_utf8_lossy(s).into_owned());
            }
            j += 4 + l;
        }
    }
    Some((random, sni))
}

/// A ServerHello body's random, cipher suite, version (supported_versions' when given) and session id.
fn server_hello(b: &[u8]) -> Option<([u8; 32], u16, u16, Vec<u8>)> {
    let mut version = u16_at(b, 0)?;
    let random: [u8; 32] = b.get(2..34)?.try_into().ok()?;
    let mut i = 34;
    let session = b.get(i + 1..i + 1 + *b.get(i)? as usize)?.to_vec();
    i += 1 + session.len();
    let suite = u16_at(b, i)?;
    i += 3;
    if let Some(n) = u16_at(b, i) {
        let exts = b.get(i + 2..i + 2 + n as usize)?;
        let mut j = 0;
        while j + 4 <= exts.len() {
            let (t, l) = (u16_at(exts, j)?, u16_at(exts, j + 2)? as usize);
            if t == 43 && l == 2 {
                version = u16_at(exts, j + 4)?;
            }
            j += 4 + l;
        }
    }
    Some((random, suite, version, session))
}

impl Session {
    fn new(client: Option<Addr>) -> Self {
        Session {
            client,
            dirs: Default::default(),
            client_random: None,
            server_random: None,
            suite: None,
            version: None,
            sni: None,
            session_id: Vec::new(),
            keyed: Keyed::Unknown,
            why: String::new(),
            malformed: None,
            facts_sent: false,
            blind: false,
        }
    }

    fn tls13(&self) -> bool {
        self.version == Some(0x0304)
    }

    fn facts(&self) -> Facts {
        Facts {
            version: self
                .version
                .map(version_name)
                .unwrap_or_else(|| "unknown".into()),
            cipher_suite: self
                .suite
                .map(suite_name)
                .unwrap_or_else(|| "unknown".into()),
            sni: self.sni.clone(),
            decrypted: self.keyed == Keyed::Yes,
        }
    }

    /// After the ServerHello: the keys the key log gives this connection, or why there are none.
    fn key_up(&mut self, log: &KeyLog) {
        let (Some(cr), Some(sr), Some(id), Some(v)) = (
            self.client_random,
            self.server_random,
            self.suite,
            self.version,
        ) else {
            return;
        };
        self.keyed = Keyed::No;
        let Some((_, aead, hash)) = suite(id) else {
            self.why = format!(
                "cipher suite {} is not one kafkawire decrypts",
                suite_name(id)
            );
            return;
        };
        let by_session = (v != 0x0304 && !self.session_id.is_empty())
            .then(|| log.sessions.get(&self.session_id))
            .flatten();
        let fallback;
        let s = match (log.get(&cr), by_session) {
            (Some(s), _) if v == 0x0304 || s.master.is_some() => Some(s),
            (_, Some(master)) => {
                fallback = Secrets {
                    master: Some(master.clone()),
                    ..Default::default()
                };
                Some(&fallback)
            }
            (s, None) => s,
        };
        let Some(s) = s else {
            self.why = if log.given {
                format!(
                    "the key log (secrets of {} connections) has none for client random {}",
                    log.len(),
                    hex_short(&cr)
                )
            } else {
                "no key log given (--tls-keylog)".into()
            };
            return;
        };
        if v == 0x0304 {
            let [ct, st] = &s.traffic;
            let [ch, sh] = &s.handshake;
            if ct.is_none() || st.is_none() {
                self.why = format!(
                    "the key log has no TLS 1.3 traffic secrets for client random {}",
                    hex_short(&cr)
                );
                return;
            }
            for (d, (hs, app)) in [(ch, ct), (sh, st)].into_iter().enumerate() {
                let dir = &mut self.dirs[d];
                match hs {
                    Some(h) => {
                        dir.keys = Keys::tls13(aead, hash, h);
                        dir.next = app.clone();
                    }
                    // without the handshake secret the handshake's records are skipped and the
                    // traffic keys are tried on each record until one opens
                    None => dir.next = app.clone(),
                }
            }
            self.keyed = Keyed::Yes;
        } else {
            let Some(master) = &s.master else {
                self.why = format!(
                    "the key log has no CLIENT_RANDOM master secret for client random {}",
                    hex_short(&cr)
                );
                return;
            };
            let (klen, ivlen) = (
                aead.key_len(),
                if aead == AeadKind::ChaCha20 { 12 } else { 4 },
            );
            let mut seed = sr.to_vec();
            seed.extend_from_slice(&cr);
            let block = prf12(hash, master, b"key expansion", &seed, 2 * (klen + ivlen));
            let (ck, rest) = block.split_at(klen);
            let (sk, rest) = rest.split_at(klen);
            let (civ, siv) = rest.split_at(ivlen);
            self.dirs[0].pending = Keys::new(aead, ck.to_vec(), civ.to_vec(), false);
            self.dirs[1].pending = Keys::new(aead, sk.to_vec(), siv.to_vec(), false);
            self.keyed = Keyed::Yes;
        }
    }
}

fn hex_short(b: &[u8]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}…", &h[..16])
}

/// What a direction's record gave: application data, a record that failed authentication (its
/// plaintext's length, about: a hole the frames layer must know of, or it would join the bytes on
/// either side into garbage frames), or nothing for the stream.
enum Opened {
    Data(Vec<u8>),
    Failed(usize),
    Nothing,
}

impl Tls {
    pub fn new(keys: KeyLog) -> Self {
        Tls {
            keys,
            conns: HashMap::default(),
            last_plain: None,
            stats: Stats::default(),
            scratch: Vec::new(),
        }
    }

    /// Key log text learned during the run (a pcapng's Decryption Secrets Block): it serves the
    /// connections whose ServerHello comes after it.
    pub fn add_keys(&mut self, text: &[u8]) {
        self.keys.add(text);
    }

    /// The TCP layer's events in `evs` replaced by what the frames layer sees.
    pub fn pass(&mut self, evs: &mut Vec<Event>) {
        // the common case, a plaintext connection's run of packets, is left where it is
        let last = self.last_plain;
        if last.is_some()
            && evs
                .iter()
                .all(|e| matches!(e, Event::Data { conn, .. } if Some(*conn) == last))
        {
            return;
        }
        let mut input = std::mem::take(&mut self.scratch);
        std::mem::swap(evs, &mut input);
        for ev in input.drain(..) {
            self.feed(ev, evs);
        }
        self.scratch = input;
    }

    /// One stream event in; the events the frames layer sees out (a TLS connection's data
    /// decrypted or withheld, its anomalies when it closes).
    pub fn feed(&mut self, ev: Event, out: &mut Vec<Event>) {
        match ev {
            Event::Open {
                conn, ref client, ..
            } => {
                self.conns
                    .entry(conn)
                    .or_insert_with(|| Mode::Undecided(client.clone()));
                out.push(ev);
            }
            Event::Data { conn, .. } if self.last_plain == Some(conn) => out.push(ev),
            Event::Data {
                conn,
                sender,
                receiver,
                ts,
                data,
            } => {
                let mode = self.conns.entry(conn).or_insert(Mode::Undecided(None));
                if let Mode::Undecided(client) = mode {
                    let syn_client = client.as_ref() == Some(&sender);
                    *mode = match start_of(&data, syn_client) {
                        Start::Hello => {
                            self.stats.connections += 1;
                            Mode::Tls(Box::new(Session::new(Some(sender.clone()))))
                        }
                        Start::Midstream => {
                            self.stats.connections += 1;
                            // neither side is known: the first sender stands for the client, only so
                            // that each direction keeps its count (without the ClientHello's random no
                            // key can be found, and the records are not read)
                            let mut s =
                                Session::new(client.clone().or_else(|| Some(sender.clone())));
                            s.blind = true;
                            Mode::Tls(Box::new(s))
                        }
                        Start::Plain => Mode::Plain,
                    };
                }
                match mode {
                    Mode::Tls(s) => {
                        let mut made = Vec::new();
                        records(s, &self.keys, &sender, &data, &mut made);
                        if !s.facts_sent && s.keyed != Keyed::Unknown {
                            s.facts_sent = true;
                            if s.keyed == Keyed::Yes {
                                self.stats.decrypted += 1;
                            }
                            out.push(Event::Tls {
                                conn,
                                facts: Rc::new(s.facts()),
                            });
                        }
                        for o in made {
                            out.push(match o {
                                Opened::Failed(size) => Event::Gap {
                                    conn,
                                    sender: sender.clone(),
                                    receiver: receiver.clone(),
                                    ts,
                                    size: size as i64,
                                },
                                Opened::Data(plain) => Event::Data {
                                    conn,
                                    sender: sender.clone(),
                                    receiver: receiver.clone(),
                                    ts,
                                    data: Bytes::from(plain),
                                },
                                Opened::Nothing => continue,
                            });
                        }
                    }
                    _ => {
                        self.last_plain = Some(conn);
                        out.push(Event::Data {
                            conn,
                            sender,
                            receiver,
                            ts,
                            data,
                        })
                    }
                }
            }
            Event::Gap {
                conn,
                sender,
                receiver,
                ts,
                size,
            } => {
                if let Some(Mode::Tls(s)) = self.conns.get_mut(&conn) {
                    let d = usize::from(s.client.as_ref() != Some(&sender));
                    let dir = &mut s.dirs[d];
                    dir.lost_bytes += size;
                    dir.buf.clear();
                    dir.hs.clear();
                    dir.lost = true;
                }
                out.push(Event::Gap {
                    conn,
                    sender,
                    receiver,
                    ts,
                    size,
                });
            }
            Event::Close { conn, ts, .. } => {
                if self.last_plain == Some(conn) {
                    self.last_plain = None;
                }
                if let Some(Mode::Tls(s)) = self.conns.remove(&conn) {
                    if s.keyed != Keyed::Yes {
                        self.stats.undecrypted += 1;
                        self.stats.undecrypted_bytes += s.dirs.iter().map(|d| d.bytes).sum::<u64>();
                    }
                    close_anomalies(conn, ts, &s, out);
                } else {
                    self.conns.remove(&conn);
                }
                out.push(ev);
            }
            other => out.push(other),
        }
    }

    pub fn open_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.conns.keys().copied()
    }
}

/// The anomalies a TLS connection leaves when it closes: one per fault, with its counts.
fn close_anomalies(conn: u64, ts: f64, s: &Session, out: &mut Vec<Event>) {
    let records: u64 = s.dirs.iter().map(|d| d.records).sum();
    let bytes: u64 = s.dirs.iter().map(|d| d.bytes).sum();
    let f = s.facts();
    let mut hello = format!("{} {}", f.version, f.cipher_suite);
    if let Some(n) = &s.sni {
        hello.push_str(&format!(", server name {n}"));
    }
    let mut push = |k: &'static str, detail: String| {
        out.push(Event::StreamAnomaly {
            conn,
            ts,
            kind: k,
            detail,
        })
    };
    if s.keyed != Keyed::Yes {
        let why = match s.keyed {
            Keyed::Unknown if s.client_random.is_none() => {
                "the handshake was not captured (the capture began after it)".to_string()
            }
            Keyed::Unknown => "the ServerHello was not captured".to_string(),
            _ => s.why.clone(),
        };
        push(
            kind::TLS_ENCRYPTED,
            format!(
                "TLS connection ({hello}): {records} records, {bytes} bytes not decrypted: {why}"
            ),
        );
        return;
    }
    let failed: u64 = s.dirs.iter().map(|d| d.failed).sum();
    if failed > 0 {
        let undecrypted: u64 = s.dirs.iter().map(|d| d.undecrypted_bytes).sum();
        push(
            kind::TLS_DECRYPT_FAILED,
            format!(
                "{failed} of {records} TLS records ({undecrypted} bytes) failed authentication \
                 ({hello}): the key log's secrets are not this connection's, or the records are damaged"
            ),
        );
    }
    // losses, one anomaly: holes, a record cut where the connection (or capture) ended, a broken stream
    let mut lost = Vec::new();
    let gap: i64 = s.dirs.iter().map(|d| d.lost_bytes).sum();
    if gap > 0 {
        let resyncs: u64 = s.dirs.iter().map(|d| d.resyncs).sum();
        let hunting = s.dirs.iter().filter(|d| d.lost).count();
        lost.push(format!(
            "{gap} bytes of TLS records lost in capture holes; resynchronised {resyncs} times{}",
            if hunting > 0 {
                format!(", {hunting} direction(s) still hunting for a record at the end")
            } else {
                String::new()
            }
        ));
    }
    let cut: usize = s.dirs.iter().filter(|d| !d.lost).map(|d| d.buf.len()).sum();
    if cut > 0 {
        lost.push(format!(
            "a record cut where the connection ended ({cut} bytes of it)"
        ));
    }
    if let Some(m) = &s.malformed {
        lost.push(format!("the record stream broken: {m}"));
    }
    if !lost.is_empty() {
        push(
            kind::TLS_RECORD_LOST,
            format!("{} ({hello})", lost.join("; ")),
        );
    }
}

/// A direction's bytes: its complete records read, the rest kept for the next bytes.
fn records(s: &mut Session, log: &KeyLog, sender: &Addr, data: &[u8], made: &mut Vec<Opened>) {
    let d = usize::from(s.client.as_ref() != Some(sender));
    s.dirs[d].bytes += data.len() as u64;
    if s.dirs[d].dead || s.blind {
        s.dirs[d].undecrypted_bytes += data.len() as u64;
        return;
    }
    let mut buf = std::mem::take(&mut s.dirs[d].buf);
    buf.extend_from_slice(data);
    let mut at = 0;
    if s.dirs[d].lost {
        match resync(&s.dirs[d], &buf) {
            Some((i, seq)) => {
                let dir = &mut s.dirs[d];
                dir.lost = false;
                dir.resyncs += 1;
                if let Some(k) = dir.keys.as_mut() {
                    k.seq = seq;
                }
                at = i;
            }
            None => {
                // keep only the tail a record header could start in
                let keep = buf.len().min(RESYNC_SCAN);
                s.dirs[d].undecrypted_bytes += (buf.len() - keep) as u64;
                buf.drain(..buf.len() - keep);
                s.dirs[d].buf = buf;
                return;
            }
        }
    }
    while buf.len() - at >= 5 {
        let len = u16::from_be_bytes([buf[at + 3], buf[at + 4]]) as usize;
        let typ = buf[at];
        if !(CCS..=24).contains(&typ) || buf[at + 1] != 3 || len > MAX_RECORD {
            let dir = &mut s.dirs[d];
            dir.dead = true;
            dir.undecrypted_bytes += (buf.len() - at) as u64;
            s.malformed = Some(format!(
                "a record header {:02x?} that is no TLS record, after {} records",
                &buf[at..at + 5],
                dir.records
            ));
            return;
        }
        if buf.len() - at < 5 + len {
            break;
        }
        let rec = &buf[at..at + 5 + len];
        match record(s, log, d, rec) {
            Opened::Nothing => {}
            o => made.push(o),
        }
        at += 5 + len;
    }
    buf.drain(..at);
    s.dirs[d].buf = buf;
}

/// After a hole: the first record boundary (and its sequence number) at which a record authenticates
/// under the keys in use, at most RESYNC_SEQS records ahead.
fn resync(dir: &Dir, buf: &[u8]) -> Option<(usize, u64)> {
    let keys = dir.keys.as_ref()?;
    let end = buf.len().saturating_sub(5).min(RESYNC_SCAN);
    for i in 0..end {
        let h = &buf[i..i + 5];
        if h[0] != APP_DATA || h[1] != 3 || h[2] != 3 {
            continue;
        }
        let len = u16::from_be_bytes([h[3], h[4]]) as usize;
        if len > MAX_RECORD || buf.len() < i + 5 + len {
            continue;
        }
        let frag = &buf[i + 5..i + 5 + len];
        for seq in keys.seq..keys.seq + RESYNC_SEQS {
            if keys.open_at(seq, h, frag).is_some() {
                return Some((i, seq));
            }
        }
    }
    None
}

/// One whole record of direction `d`.
fn record(s: &mut Session, log: &KeyLog, d: usize, rec: &[u8]) -> Opened {
    let (header, frag) = rec.split_at(5);
    let typ = header[0];
    let tls13 = s.tls13();
    s.dirs[d].records += 1;
    if s.dirs[d].keys.is_none() {
        match typ {
            HANDSHAKE => {
                handshake(s, log, d, frag);
                return Opened::Nothing;
            }
            CCS => {
                let dir = &mut s.dirs[d];
                if let Some(k) = dir.pending.take() {
                    dir.keys = Some(k);
                }
                return Opened::Nothing;
            }
            _ => {}
        }
        // TLS 1.3 without the handshake secret: the traffic secret is tried on each record until one
        // opens (the handshake's records are then skipped, not failed)
        if tls13 && typ == APP_DATA && s.keyed == Keyed::Yes {
            if let Some(next) = s.dirs[d].next.clone() {
                if let Some((_, aead, hash)) = s.suite.and_then(suite) {
                    if let Some(k) = Keys::tls13(aead, hash, &next) {
                        if k.open_at(0, header, frag).is_some() {
                            let dir = &mut s.dirs[d];
                            dir.keys = Some(k);
                            dir.secret = Some(next);
                            dir.next = None;
                            dir.records -= 1;
                            return record(s, log, d, rec);
                        }
                    }
                }
            }
        }
        let dir = &mut s.dirs[d];
        if s.keyed == Keyed::Yes && typ == APP_DATA && !tls13 {
            dir.failed += 1;
        }
        dir.undecrypted_bytes += frag.len() as u64;
        return Opened::Nothing;
    }
    if tls13 && typ == CCS {
        return Opened::Nothing; // middlebox compatibility, never protected
    }
    let dir = &mut s.dirs[d];
    let keys = dir.keys.as_mut().unwrap();
    let seq = keys.seq;
    keys.seq += 1;
    let Some(mut plain) = keys.open_at(seq, header, frag) else {
        dir.failed += 1;
        dir.undecrypted_bytes += frag.len() as u64;
        // the tag, and TLS 1.3's type byte or TLS 1.2 GCM's explicit nonce, are not plaintext
        let overhead = match (tls13, keys.kind) {
            (true, _) => 17,
            (false, AeadKind::ChaCha20) => 16,
            _ => 24,
        };
        let size = frag.len().saturating_sub(overhead);
        return if typ == APP_DATA && size > 0 {
            Opened::Failed(size)
        } else {
            Opened::Nothing
        };
    };
    let inner = if tls13 {
        // RFC 8446 5.4: content, then the real type, then zero padding
        let Some(last) = plain.iter().rposition(|b| *b != 0) else {
            dir.failed += 1;
            return Opened::Nothing;
        };
        let t = plain[last];
        plain.truncate(last);
        t
    } else {
        typ
    };
    match inner {
        APP_DATA => {
            s.dirs[d].decrypted_bytes += plain.len() as u64;
            Opened::Data(plain)
        }
        HANDSHAKE => {
            handshake(s, log, d, &plain);
            Opened::Nothing
        }
        // alerts (close_notify) end nothing the TCP layer does not end itself
        ALERT => Opened::Nothing,
        _ => Opened::Nothing,
    }
}

/// Handshake bytes of direction `d` (plaintext, or decrypted in TLS 1.3).
fn handshake(s: &mut Session, log: &KeyLog, d: usize, bytes: &[u8]) {
    let mut hs = std::mem::take(&mut s.dirs[d].hs);
    hs.extend_from_slice(bytes);
    let mut at = 0;
    let mut switch = false;
    while hs.len() - at >= 4 {
        let typ = hs[at];
        let len = u32::from_be_bytes([0, hs[at + 1], hs[at + 2], hs[at + 3]]) as usize;
        if len > MAX_HANDSHAKE {
            s.malformed = Some(format!("a handshake message of {len} bytes"));
            s.dirs[d].dead = true;
            return;
        }
        if hs.len() - at < 4 + len {
            break;
        }
        let body = &hs[at + 4..at + 4 + len];
        match typ {
            1 => {
                if let Some((random, sni)) = client_hello(body) {
                    s.client_random = Some(random);
                    s.sni = sni;
                }
            }
            2 => {
                if let Some((random, suite, version, session)) = server_hello(body) {
                    if random != HRR_RANDOM {
                        s.session_id = session;
                        s.server_random = Some(random);
                        s.suite = Some(suite);
                        s.version = Some(version);
                        s.key_up(log);
                    }
                }
            }
            // Finished: TLS 1.3 moves this side to its traffic keys after this record
            20 if s.tls13() && s.dirs[d].next.is_some() => switch = true,
            // KeyUpdate: the next generation of this side's traffic secret
            24 if s.tls13() => {
                if let (Some(secret), Some((_, _, hash))) =
                    (s.dirs[d].secret.clone(), s.suite.and_then(suite))
                {
                    let len = secret.len();
                    if let Some(next) = expand_label(hash, &secret, "traffic upd", len) {
                        s.dirs[d].next = Some(next);
                        switch = true;
                    }
                }
            }
            _ => {}
        }
        at += 4 + len;
    }
    hs.drain(..at);
    if hs.len() > MAX_HANDSHAKE {
        hs.clear();
    }
    s.dirs[d].hs = hs;
    if switch {
        if let (Some(next), Some((_, aead, hash))) =
            (s.dirs[d].next.take(), s.suite.and_then(suite))
        {
            s.dirs[d].keys = Keys::tls13(aead, hash, &next);
            s.dirs[d].secret = Some(next);
        }
    }
}

// -- carry: an appended land run picks up the TLS connections still open ------------------------

impl Tls {
    pub fn carry(&self, e: &mut Enc) {
        let mut ids: Vec<&u64> = self.conns.keys().collect();
        ids.sort_unstable();
        e.seq(ids.iter(), |e, id| {
            e.u64(**id);
            match &self.conns[*id] {
                Mode::Undecided(c) => {
                    e.u8(0);
                    e.opt(c, |e, a| e.addr(a));
                }
                Mode::Plain => e.u8(1),
                Mode::Tls(s) => {
                    e.u8(2);
                    s.carry(e);
                }
            }
        });
    }

    pub fn restore(&mut self, d: &mut Dec<'_>) -> R<()> {
        let conns = d.vec(|d| {
            let id = d.u64()?;
            let mode = match d.u8()? {
                0 => Mode::Undecided(d.opt(|d| d.addr())?),
                1 => Mode::Plain,
                _ => Mode::Tls(Box::new(Session::restore(d)?)),
            };
            Ok((id, mode))
        })?;
        self.conns.extend(conns);
        Ok(())
    }
}

impl Session {
    fn carry(&self, e: &mut Enc) {
        e.opt(&self.client, |e, a| e.addr(a));
        for dir in &self.dirs {
            e.bytes(&dir.buf);
            e.opt(&dir.keys, |e, k| k.carry(e));
            e.opt(&dir.secret, |e, s| e.bytes(s));
            e.opt(&dir.next, |e, s| e.bytes(s));
            e.opt(&dir.pending, |e, k| k.carry(e));
            e.bytes(&dir.hs);
            e.bool(dir.lost);
            e.bool(dir.dead);
            for n in [
                dir.records,
                dir.bytes,
                dir.decrypted_bytes,
                dir.failed,
                dir.undecrypted_bytes,
                dir.resyncs,
            ] {
                e.u64(n);
            }
            e.i64(dir.lost_bytes);
        }
        e.opt(&self.client_random, |e, r| e.bytes(r));
        e.opt(&self.server_random, |e, r| e.bytes(r));
        e.opt(&self.suite, |e, v| e.u16(*v));
        e.opt(&self.version, |e, v| e.u16(*v));
        e.opt(&self.sni, |e, v| e.str(v));
        e.bytes(&self.session_id);
        e.u8(match self.keyed {
            Keyed::Unknown => 0,
            Keyed::Yes => 1,
            Keyed::No => 2,
        });
        e.str(&self.why);
        e.opt(&self.malformed, |e, v| e.str(v));
        e.bool(self.facts_sent);
        e.bool(self.blind);
    }

    fn restore(d: &mut Dec<'_>) -> R<Session> {
        let mut s = Session::new(d.opt(|d| d.addr())?);
        for i in 0..2 {
            let dir = &mut s.dirs[i];
            dir.buf = d.bytes()?.to_vec();
            dir.keys = d.opt(|d| Keys::restore(d))?.flatten();
            dir.secret = d.opt(|d| Ok(d.bytes()?.to_vec()))?;
            dir.next = d.opt(|d| Ok(d.bytes()?.to_vec()))?;
            dir.pending = d.opt(|d| Keys::restore(d))?.flatten();
            dir.hs = d.bytes()?.to_vec();
            dir.lost = d.bool()?;
            dir.dead = d.bool()?;
            dir.records = d.u64()?;
            dir.bytes = d.u64()?;
            dir.decrypted_bytes = d.u64()?;
            dir.failed = d.u64()?;
            dir.undecrypted_bytes = d.u64()?;
            dir.resyncs = d.u64()?;
            dir.lost_bytes = d.i64()?;
        }
        let random = |d: &mut Dec<'_>| -> R<Option<[u8; 32]>> {
            Ok(d.opt(|d| d.bytes())?
                .and_then(|b| b.as_ref().try_into().ok()))
        };
        s.client_random = random(d)?;
        s.server_random = random(d)?;
        s.suite = d.opt(|d| d.u16())?;
        s.version = d.opt(|d| d.u16())?;
        s.sni = d.opt(|d| d.string())?;
        s.session_id = d.bytes()?.to_vec();
        s.keyed = match d.u8()? {
            0 => Keyed::Unknown,
            1 => Keyed::Yes,
            _ => Keyed::No,
        };
        s.why = d.string()?;
        s.malformed = d.opt(|d| d.string())?;
        s.facts_sent = d.bool()?;
        s.blind = d.bool()?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hkdf_expand_label_rfc8448() {
        // RFC 8448 3: the client's handshake traffic secret gives this key and iv
        let secret =
            unhex("b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21").unwrap();
        let key = expand_label(Hash::Sha256, &secret, "key", 16).unwrap();
        let iv = expand_label(Hash::Sha256, &secret, "iv", 12).unwrap();
        assert_eq!(key, unhex("dbfaa693d1762c5b666af5d950258d01").unwrap());
        assert_eq!(iv, unhex("5bd3c71b836e0b76bb73265f").unwrap());
    }

    #[test]
    fn keylog_lines() {
        let mut k = KeyLog::default();
        let r = "11".repeat(32);
        let text = format!(
            "# comment\nCLIENT_RANDOM {r} {m}\nCLIENT_TRAFFIC_SECRET_0 {r} {t}\nbad line\nEXPORTER_SECRET {r} {t}\n",
            m = "22".repeat(48),
            t = "33".repeat(32)
        );
        assert_eq!(k.add(text.as_bytes()), (3, 1));
        let s = k.get(&[0x11; 32]).unwrap();
        assert_eq!(s.master.as_deref(), Some(&[0x22; 48][..]));
        assert_eq!(s.traffic[0].as_deref(), Some(&[0x33; 32][..]));
    }

    #[test]
    fn key_logs_parsed_apart_extend_as_their_texts_add() {
        let (r, q, id) = ("11".repeat(32), "44".repeat(32), "55".repeat(32));
        let a = format!(
            "CLIENT_RANDOM {r} {}\nCLIENT_TRAFFIC_SECRET_0 {q} {}\nRSA Session-ID:{id} Master-Key:{}\n",
            "22".repeat(48),
            "33".repeat(32),
            "66".repeat(48)
        );
        let b = format!(
            "CLIENT_RANDOM {r} {}\nSERVER_TRAFFIC_SECRET_0 {q} {}\nRSA Session-ID:{id} Master-Key:{}\n",
            "77".repeat(48),
            "88".repeat(32),
            "99".repeat(48)
        );
        let mut whole = KeyLog::default();
        whole.add(a.as_bytes());
        whole.add(b.as_bytes());
        let (mut pa, mut pb) = (KeyLog::default(), KeyLog::default());
        pa.add(a.as_bytes());
        pb.add(b.as_bytes());
        let mut merged = KeyLog::default();
        merged.extend(&pa);
        // one key log is shared with the engine that takes it, not copied
        assert!(Arc::ptr_eq(&merged.clients, &pa.clients));
        merged.extend(&pb);
        assert!(*merged.clients == *whole.clients && *merged.sessions == *whole.sessions);
        assert!(merged.given && !Arc::ptr_eq(&merged.clients, &pa.clients));
        let s = merged.get(&[0x44; 32]).unwrap();
        assert!(s.traffic[0].is_some() && s.traffic[1].is_some());
        // what an engine adds (a DSB) leaves the key log it was made with as it was
        let mut engine = pa.clone();
        engine.add(b.as_bytes());
        assert_eq!(
            pa.get(&[0x11; 32]).unwrap().master.as_deref(),
            Some(&[0x22; 48][..])
        );
        assert!(!KeyLog::default().given && KeyLog::default().is_empty());
    }

    // -- a TLS 1.3 connection made here: AES-128-GCM-SHA256, a KeyUpdate, a lost record ----------

    use aes_gcm::aead::{Aead, Payload};

    const CLIENT: (&str, u16) = ("10.0.0.1", 50000);
    const SERVER: (&str, u16) = ("10.0.0.2", 9093);

    fn addr(a: (&str, u16)) -> Addr {
        (Rc::from(a.0), a.1)
    }

    fn record(typ: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![typ, 3, 3];
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    fn handshake_msg(typ: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![typ];
        m.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend_from_slice(body);
        m
    }

    /// One direction's record protection under a traffic secret, as RFC 8446 5.2-5.3 has it.
    struct Sealer {
        key: Vec<u8>,
        iv: Vec<u8>,
        seq: u64,
    }

    impl Sealer {
        fn new(secret: &[u8]) -> Self {
            Sealer {
                key: expand_label(Hash::Sha256, secret, "key", 16).unwrap(),
                iv: expand_label(Hash::Sha256, secret, "iv", 12).unwrap(),
                seq: 0,
            }
        }
        fn seal(&mut self, inner: u8, content: &[u8]) -> Vec<u8> {
            let mut nonce = self.iv.clone();
            for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
                *n ^= s;
            }
            self.seq += 1;
            let mut plain = content.to_vec();
            plain.push(inner);
            let aad = [APP_DATA, 3, 3, 0, 0];
            let mut aad = aad.to_vec();
            aad[3..].copy_from_slice(&((plain.len() + 16) as u16).to_be_bytes());
            let cipher = Aes128Gcm::new_from_slice(&self.key).unwrap();
            let sealed = cipher
                .encrypt(
                    aes_gcm::Nonce::from_slice(&nonce),
                    Payload {
                        msg: &plain,
                        aad: &aad,
                    },
                )
                .unwrap();
            record(APP_DATA, &sealed)
        }
    }

    struct Conn {
        tls: Tls,
        out: Vec<Event>,
        t: f64,
    }

    impl Conn {
        fn new(keylog: &str) -> Self {
            let mut keys = KeyLog::default();
            keys.add(keylog.as_bytes());
            let mut c = Conn {
                tls: Tls::new(keys),
                out: Vec::new(),
                t: 0.0,
            };
            c.tls.feed(
                Event::Open {
                    conn: 1,
                    client: Some(addr(CLIENT)),
                    server: Some(addr(SERVER)),
                    ts: 0.0,
                    syn_seen: true,
                },
                &mut c.out,
            );
            c
        }
        fn send(&mut self, from_client: bool, bytes: Vec<u8>) {
            let (a, b) = if from_client {
                (CLIENT, SERVER)
            } else {
                (SERVER, CLIENT)
            };
            self.t += 1.0;
            let ev = Event::Data {
                conn: 1,
                sender: addr(a),
                receiver: addr(b),
                ts: self.t,
                data: Bytes::from(bytes),
            };
            self.tls.feed(ev, &mut self.out);
        }
        fn lose(&mut self, from_client: bool, size: usize) {
            let (a, b) = if from_client {
                (CLIENT, SERVER)
            } else {
                (SERVER, CLIENT)
            };
            let ev = Event::Gap {
                conn: 1,
                sender: addr(a),
                receiver: addr(b),
                ts: self.t,
                size: size as i64,
            };
            self.tls.feed(ev, &mut self.out);
        }
        fn close(mut self) -> Vec<Event> {
            let ev = Event::Close {
                conn: 1,
                ts: self.t + 1.0,
                reason: "fin",
                retransmissions: 0,
                out_of_order: 0,
            };
            self.tls.feed(ev, &mut self.out);
            self.out
        }
    }

    /// (client bytes, server bytes, anomaly kinds) as the frames layer would see them.
    fn seen(evs: &[Event]) -> (Vec<u8>, Vec<u8>, Vec<&'static str>) {
        let (mut c, mut s, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
        for e in evs {
            match e {
                Event::Data { sender, data, .. } if *sender == addr(CLIENT) => {
                    c.extend_from_slice(data)
                }
                Event::Data { data, .. } => s.extend_from_slice(data),
                Event::StreamAnomaly { kind, .. } => kinds.push(*kind),
                _ => {}
            }
        }
        (c, s, kinds)
    }

    fn tls13_connection(lose_a_record: bool) -> (Vec<u8>, Vec<u8>, Vec<&'static str>) {
        let random = [0x42u8; 32];
        let secret = |b: u8| vec![b; 32];
        let keylog: String = [
            ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", 1),
            ("SERVER_HANDSHAKE_TRAFFIC_SECRET", 2),
            ("CLIENT_TRAFFIC_SECRET_0", 3),
            ("SERVER_TRAFFIC_SECRET_0", 4),
        ]
        .iter()
        .map(|(label, b)| {
            let hex = |v: &[u8]| v.iter().map(|x| format!("{x:02x}")).collect::<String>();
            format!("{label} {} {}\n", hex(&random), hex(&secret(*b)))
        })
        .collect();
        let mut c = Conn::new(&keylog);
        let mut hello = vec![3, 3];
        hello.extend_from_slice(&random);
        hello.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0, 0, 0]);
        c.send(true, record(HANDSHAKE, &handshake_msg(1, &hello)));
        let mut sh = vec![3, 3];
        sh.extend_from_slice(&[0x24; 32]);
        sh.extend_from_slice(&[0, 0x13, 0x01, 0, 0, 6, 0, 43, 0, 2, 3, 4]);
        c.send(false, record(HANDSHAKE, &handshake_msg(2, &sh)));
        let (mut server_hs, mut client_hs) = (Sealer::new(&secret(2)), Sealer::new(&secret(1)));
        c.send(
            false,
            server_hs.seal(HANDSHAKE, &handshake_msg(20, &[0; 32])),
        );
        c.send(
            true,
            client_hs.seal(HANDSHAKE, &handshake_msg(20, &[0; 32])),
        );
        let (mut client, mut server) = (Sealer::new(&secret(3)), Sealer::new(&secret(4)));
        c.send(true, client.seal(APP_DATA, b"request-1;"));
        c.send(false, server.seal(APP_DATA, b"answer-1;"));
        // the client moves to its next traffic secret (RFC 8446 7.2)
        c.send(true, client.seal(HANDSHAKE, &handshake_msg(24, &[0])));
        let next = expand_label(Hash::Sha256, &secret(3), "traffic upd", 32).unwrap();
        let mut client = Sealer::new(&next);
        let lost = client.seal(APP_DATA, b"request-2;");
        if lose_a_record {
            c.lose(true, lost.len());
        } else {
            c.send(true, lost);
        }
        c.send(true, client.seal(APP_DATA, b"request-3;"));
        c.send(false, server.seal(APP_DATA, b"answer-3;"));
        seen(&c.close())
    }

    #[test]
    fn tls13_decrypts_across_a_key_update() {
        let (client, server, kinds) = tls13_connection(false);
        assert_eq!(client, b"request-1;request-2;request-3;");
        assert_eq!(server, b"answer-1;answer-3;");
        assert!(kinds.is_empty(), "{kinds:?}");
    }

    #[test]
    fn tls13_resynchronises_after_a_lost_record() {
        // the lost record took sequence number 1 of the new keys: the next one authenticates at 2
        let (client, server, kinds) = tls13_connection(true);
        assert_eq!(client, b"request-1;request-3;");
        assert_eq!(server, b"answer-1;answer-3;");
        assert_eq!(kinds, [kind::TLS_RECORD_LOST], "{kinds:?}");
    }

    #[test]
    fn without_its_keys_a_tls_connection_is_one_encrypted_anomaly() {
        let mut c = Conn::new("");
        let mut hello = vec![3, 3];
        hello.extend_from_slice(&[7; 32]);
        hello.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0, 0, 0]);
        c.send(true, record(HANDSHAKE, &handshake_msg(1, &hello)));
        c.send(true, record(APP_DATA, &[9; 40]));
        let (client, server, kinds) = seen(&c.close());
        assert!(client.is_empty() && server.is_empty());
        assert_eq!(kinds, [kind::TLS_ENCRYPTED]);
    }
}
