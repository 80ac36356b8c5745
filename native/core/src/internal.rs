//! The records of Kafka's internal topics, decoded with Kafka's own schemas for them.
//!
//! Brokers replicate their own topics between themselves, and a capture carries the records:
//! - `__cluster_metadata`, the KRaft metadata log: each value is a metadata record framed as
//!   (frame version, record type, version) unsigned varints, then the record (its schemas
//!   from the `kafka-metadata` jar);
//! - `__consumer_offsets`, `__transaction_state`, `__share_group_state`: each key is an int16
//!   record type then the key type at version 0, each value an int16 version then the value
//!   type the key's record type names (the coordinators' jars); a null value is a tombstone.
//!
//! Control records (transaction markers, and KRaft's LeaderChange, SnapshotHeader/Footer,
//! KRaftVersion and Voters) are decoded in every topic: their key says the type.
//!
//! A decoded key or value is JSON: `{"type", "type_id" | "version", "data": {...}}`, or
//! `{"_error": why}` when its bytes do not decode. The secrets the metadata log holds (SCRAM
//! salts and keys, delegation token ids) are written as `<redacted>`.
use std::cell::OnceCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::compression::DEFAULT_MAX_DECOMPRESSED;
use crate::decode::{decode_at, decode_data, get, Names, Value};
use crate::json::{json_bytes, json_int, json_str, leaf_json};
use crate::records::{each_record, Rec, Records, Span};
use crate::schema::{
    key_id, key_name, known_key, Registry, K_ERROR, K_NAME, K_TOPIC_ID, K_TOPIC_NAME,
};

pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// The topic id KRaft gives `__cluster_metadata` (Uuid(0, 1)), which its Fetches name it by.
pub const METADATA_TOPIC_ID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// The topics whose records are decoded (their schemas: crate::spec::internal()).
pub const TOPICS: [&str; 4] = [
    METADATA_TOPIC,
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// Control record types (their key's second int16) and the data type of their value.
const CONTROL: [(&str, &str); 7] = [
    ("ABORT", "EndTxnMarker"),
    ("COMMIT", "EndTxnMarker"),
    ("LEADER_CHANGE", "LeaderChangeMessage"),
    ("SNAPSHOT_HEADER", "SnapshotHeaderRecord"),
    ("SNAPSHOT_FOOTER", "SnapshotFooterRecord"),
    ("KRAFT_VERSION", "KRaftVersionRecord"),
    ("KRAFT_VOTERS", "VotersRecord"),
];

/// Record types whose fields hold secrets, and those fields (the rule for a secret: what
/// would let a reader log in or forge a token).
const SECRETS: [(&str, &[&str]); 2] = [
    (
        "UserScramCredentialRecord",
        &["Salt", "StoredKey", "ServerKey"],
    ),
    ("DelegationTokenRecord", &["TokenId"]),
];

const TOPIC_RECORD: &str = "TopicRecord";
const GROUP_METADATA: &str = "GroupMetadataValue";

pub fn is_internal(topic: &str) -> bool {
    TOPICS.contains(&topic)
}

enum Kind {
    /// record type -> the data type
    Metadata(HashMap<i64, &'static str>),
    /// record type -> (key type, value type)
    Coordinator(HashMap<i64, (&'static str, &'static str)>),
}

/// The decoder: the registry's data types (the internal ones among them) and each topic's kind.
pub struct Internal {
    reg: Registry,
    topics: HashMap<&'static str, Kind>,
}

thread_local! {
    static DECODER: OnceCell<Rc<Internal>> = const { OnceCell::new() };
}

/// The decoder, made on first use from the embedded schemas (crate::spec).
pub fn decoder() -> Rc<Internal> {
    DECODER.with(|cell| cell.get_or_init(|| Rc::new(Internal::from_spec())).clone())
}

// Type names live as long as the process: the plans' cache is keyed by &'static str.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl Internal {
    fn from_spec() -> Self {
        let (reg, tables) = crate::spec::internal();
        let mut topics = HashMap::new();
        for (topic, t) in tables {
            let Some(&topic) = TOPICS.iter().find(|n| **n == topic) else {
                continue;
            };
            let names = |m: HashMap<i64, String>| -> HashMap<i64, &'static str> {
                m.into_iter().map(|(k, v)| (k, leak(v))).collect()
            };
            let kind = if t.kind == "metadata" {
                Kind::Metadata(names(t.records))
            } else {
                let values = names(t.values);
                Kind::Coordinator(
                    names(t.keys)
                        .into_iter()
                        .filter_map(|(k, key)| Some((k, (key, *values.get(&k)?))))
                        .collect(),
                )
            };
            topics.insert(topic, kind);
        }
        Internal { reg, topics }
    }

    /// A control record as `--records` writes its `control`: type, type_id, key_version, then
    /// the value's version and data, or `error` where it fails.
    pub fn control_json(&self, out: &mut Vec<u8>, key: Option<&[u8]>, value: Option<&[u8]>) {
        let Some(k) = key.filter(|k| k.len() >= 4) else {
            out.extend_from_slice(b"{\"error\":");
            let n = key.map_or(0, <[u8]>::len);
            json_str(
                out,
                &format!("ValueError: control key of {n} bytes (need 4)"),
            );
            out.push(b'}');
            return;
        };
        let key_version = i16::from_be_bytes([k[0], k[1]]) as i64;
        let t = i16::from_be_bytes([k[2], k[3]]);
        let known = usize::try_from(t).ok().and_then(|i| CONTROL.get(i));
        out.extend_from_slice(b"{\"type\":");
        match known {
            Some(c) => json_str(out, c.0),
            None => json_str(out, &format!("UNKNOWN({t})")),
        }
        out.extend_from_slice(b",\"type_id\":");
        json_int(out, t as i64);
        out.extend_from_slice(b",\"key_version\":");
        json_int(out, key_version);
        if let (Some(&(_, name)), Some(v)) = (known, value) {
            // transaction markers carry a version prefix; KRaft's payloads start with their
            // own Version field, which is part of their data
            let skip = if name == "EndTxnMarker" { 2 } else { 0 };
            if v.len() < 2 {
                out.extend_from_slice(b",\"error\":");
                json_str(out, &format!("{name}: {} bytes, no version", v.len()));
            } else {
                let version = i16::from_be_bytes([v[0], v[1]]) as i64;
                out.extend_from_slice(b",\"version\":");
                json_int(out, version);
                match decode_at(&self.reg, name, version, v, skip, v.len()) {
                    Ok(fields) => {
                        out.extend_from_slice(b",\"data\":");
                        struct_json(out, &fields, v, &[]);
                    }
                    Err(why) => {
                        out.extend_from_slice(b",\"error\":");
                        json_str(out, &format!("DecodeError: {why}"));
                    }
                }
            }
        }
        out.push(b'}');
    }

    /// What the topics' schemas hold, for `kafkawire apis --internal`: (topic, record type id,
    /// key type, value type); a metadata record has no key type.
    pub fn listing(&self) -> Vec<(String, i64, Option<String>, String)> {
        let mut out = Vec::new();
        for topic in TOPICS {
            let mut rows: Vec<_> = match self.topics.get(topic) {
                Some(Kind::Metadata(m)) => m
                    .iter()
                    .map(|(t, v)| (topic.to_string(), *t, None, v.to_string()))
                    .collect(),
                Some(Kind::Coordinator(m)) => m
                    .iter()
                    .map(|(t, (k, v))| (topic.to_string(), *t, Some(k.to_string()), v.to_string()))
                    .collect(),
                None => Vec::new(),
            };
            rows.sort_by_key(|r| r.1);
            out.extend(rows);
        }
        for (t, (_, value)) in CONTROL.iter().enumerate() {
            out.push((
                "(control batches, any topic)".to_string(),
                t as i64,
                Some("ControlRecordTypeSchema".to_string()),
                value.to_string(),
            ));
        }
        out
    }

    /// A record's key and value decoded as JSON (None: nothing to say of it, such as a
    /// metadata record's null key or a tombstone), and the record's type name.
    pub fn decode(
        &self,
        topic: Option<&str>,
        control: bool,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Decoded {
        if control {
            return self.control(key, value);
        }
        match topic.and_then(|t| self.topics.get(t)) {
            Some(Kind::Metadata(types)) => {
                let mut d = Decoded::default();
                if let Some(v) = value {
                    d.value = Some(self.metadata(types, v, &mut d.type_name));
                }
                d
            }
            Some(Kind::Coordinator(types)) => self.coordinator(types, key, value),
            None => Decoded::default(),
        }
    }

    fn control(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> Decoded {
        let mut d = Decoded::default();
        let Some(k) = key.filter(|k| k.len() >= 4) else {
            d.key = Some(error(&format!(
                "a control key of {} bytes (4 needed)",
                key.map_or(0, <[u8]>::len)
            )));
            return d;
        };
        let version = i16::from_be_bytes([k[0], k[1]]) as i64;
        let t = i16::from_be_bytes([k[2], k[3]]) as i64;
        let known = usize::try_from(t).ok().and_then(|i| CONTROL.get(i));
        let mut out = Vec::new();
        out.extend_from_slice(b"{\"type\":");
        json_str(&mut out, known.map_or("UNKNOWN", |c| c.0));
        out.extend_from_slice(b",\"type_id\":");
        json_int(&mut out, t);
        out.extend_from_slice(b",\"version\":");
        json_int(&mut out, version);
        out.push(b'}');
        d.key = Some(out);
        let (Some(&(_, name)), Some(v)) = (known, value) else {
            return d;
        };
        d.type_name = Some(name);
        d.value = Some(if name == "EndTxnMarker" {
            // transaction markers carry a version prefix
            match decode_data(&self.reg, name, v, 0, v.len()) {
                Ok(mut fields) => {
                    let version = match fields.first() {
                        Some((_, Value::Int(n))) => *n,
                        _ => 0,
                    };
                    fields.remove(0);
                    typed(name, "version", version, &fields, v)
                }
                Err(why) => error(&why),
            }
        } else if v.len() < 2 {
            error(&format!("{name}: {} bytes", v.len()))
        } else {
            // KRaft's control payloads start with their own Version field, which says their layout
            let version = i16::from_be_bytes([v[0], v[1]]) as i64;
            match decode_at(&self.reg, name, version, v, 0, v.len()) {
                Ok(fields) => typed(name, "version", version, &fields, v),
                Err(why) => error(&why),
            }
        });
        d
    }

    /// A metadata record: (frame version, type, version) varints, then the record.
    fn metadata(
        &self,
        types: &HashMap<i64, &'static str>,
        v: &[u8],
        type_name: &mut Option<&'static str>,
    ) -> Vec<u8> {
        let mut pos = 0;
        let (Some(_frame), Some(t), Some(version)) = (
            uvarint(v, &mut pos),
            uvarint(v, &mut pos),
            uvarint(v, &mut pos),
        ) else {
            return error("a metadata record cut inside its (frame version, type, version) header");
        };
        let Some(&name) = types.get(&t) else {
            return error(&format!("metadata record type {t} is not in the registry"));
        };
        *type_name = Some(name);
        match decode_at(&self.reg, name, version, v, pos, v.len()) {
            Ok(fields) => typed(name, "version", version, &fields, v),
            Err(why) => error(&why),
        }
    }

    /// A coordinator record: the key (int16 type, key at v0) and value (int16 version, value).
    fn coordinator(
        &self,
        types: &HashMap<i64, (&'static str, &'static str)>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Decoded {
        let mut d = Decoded::default();
        let Some(k) = key.filter(|k| k.len() >= 2) else {
            d.key = Some(error("a coordinator record needs a key of 2 bytes or more"));
            return d;
        };
        let t = i16::from_be_bytes([k[0], k[1]]) as i64;
        let Some(&(key_type, value_type)) = types.get(&t) else {
            d.key = Some(error(&format!("record type {t} is not in the registry")));
            return d;
        };
        d.type_name = Some(key_type);
        d.key = Some(match decode_at(&self.reg, key_type, 0, k, 2, k.len()) {
            Ok(fields) => typed(key_type, "type_id", t, &fields, k),
            Err(why) => error(&why),
        });
        if let Some(v) = value {
            d.value = Some(if v.len() < 2 {
                error(&format!(
                    "{value_type}: {} bytes, no version prefix",
                    v.len()
                ))
            } else {
                let version = i16::from_be_bytes([v[0], v[1]]) as i64;
                match decode_at(&self.reg, value_type, version, v, 2, v.len()) {
                    Ok(mut fields) => {
                        if value_type == GROUP_METADATA {
                            self.member_payloads(&mut fields, v);
                        }
                        typed(value_type, "version", version, &fields, v)
                    }
                    Err(why) => error(&why),
                }
            });
        }
        d
    }

    /// A classic group's members hold the consumer protocol's Subscription and Assignment as
    /// bytes: decoded beside them (`subscriptionDecoded`, `assignmentDecoded`) when the group's
    /// protocol type is `consumer`, as the JoinGroup and SyncGroup bodies have them.
    fn member_payloads(&self, fields: &mut [(u32, Value)], v: &[u8]) {
        if known_key("protocolType").and_then(|k| text(get(fields, k), v)) != Some("consumer") {
            return;
        }
        let Some(members) = known_key("members") else {
            return;
        };
        let Some((_, Value::List(items))) = fields.iter_mut().find(|(k, _)| *k == members) else {
            return;
        };
        for m in items {
            let Value::Struct(m) = m else { continue };
            for (field, ty) in [
                ("subscription", "ConsumerProtocolSubscription"),
                ("assignment", "ConsumerProtocolAssignment"),
            ] {
                let span = match known_key(field).and_then(|k| get(m, k)) {
                    Some(Value::View { start, end }) if start < end => (*start, *end),
                    _ => continue,
                };
                let decoded = match decode_data(&self.reg, ty, v, span.0, span.1) {
                    Ok(d) => Value::Struct(d),
                    Err(why) => Value::Struct(vec![(K_ERROR, Value::Str(why.into()))]),
                };
                m.push((key_id(&format!("{field}Decoded")), decoded));
            }
        }
    }

    /// The metadata record type a `__cluster_metadata` value holds (its header alone).
    pub fn metadata_type(&self, v: &[u8]) -> Option<&'static str> {
        let Some(Kind::Metadata(types)) = self.topics.get(METADATA_TOPIC) else {
            return None;
        };
        let mut pos = 0;
        uvarint(v, &mut pos)?;
        types.get(&uvarint(v, &mut pos)?).copied()
    }

    /// Each TopicRecord's (TopicId, Name) in a `__cluster_metadata` records field.
    pub fn topic_records(&self, field: &[u8], mut f: impl FnMut([u8; 16], Rc<str>)) {
        each(field, |control, _, value| {
            if let (false, Some(v)) = (control, value) {
                if let Some((id, name)) = self.topic_record(v) {
                    f(id, name);
                }
            }
        });
    }

    /// A TopicRecord's (TopicId, Name): how a capture of the metadata log names topic ids.
    fn topic_record(&self, v: &[u8]) -> Option<([u8; 16], Rc<str>)> {
        if self.metadata_type(v)? != TOPIC_RECORD {
            return None;
        }
        let mut pos = 0;
        uvarint(v, &mut pos)?;
        uvarint(v, &mut pos)?;
        let version = uvarint(v, &mut pos)?;
        let fields = decode_at(&self.reg, TOPIC_RECORD, version, v, pos, v.len()).ok()?;
        let id = match get(&fields, K_TOPIC_ID)? {
            Value::Uuid(u) => *u,
            _ => return None,
        };
        let name: Rc<str> = match get(&fields, K_NAME)? {
            Value::Str(s) => s.clone(),
            Value::Text { start, end } => Rc::from(std::str::from_utf8(v.get(*start..*end)?).ok()?),
            _ => return None,
        };
        Some((id, name))
    }
}

/// A record's decoded key and value (JSON) and its type (the key type for coordinator records).
#[derive(Default)]
pub struct Decoded {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub type_name: Option<&'static str>,
}

impl Decoded {
    /// Whether its raw bytes hold a secret (a SCRAM credential, a delegation token).
    pub fn secret(&self) -> bool {
        self.type_name
            .is_some_and(|n| SECRETS.iter().any(|(t, _)| *t == n))
    }
}

fn error(why: &str) -> Vec<u8> {
    let mut out = b"{\"_error\":".to_vec();
    json_str(&mut out, why);
    out.push(b'}');
    out
}

/// {"type": name, <tag>: n, "data": {fields}}
fn typed(name: &str, tag: &str, n: i64, fields: &[(u32, Value)], buf: &[u8]) -> Vec<u8> {
    let secret = SECRETS
        .iter()
        .find(|(t, _)| *t == name)
        .map_or(&[][..], |(_, f)| *f);
    let mut out = Vec::with_capacity(64 + buf.len() * 2);
    out.extend_from_slice(b"{\"type\":");
    json_str(&mut out, name);
    out.push(b',');
    json_str(&mut out, tag);
    out.push(b':');
    json_int(&mut out, n);
    out.extend_from_slice(b",\"data\":");
    struct_json(&mut out, fields, buf, secret);
    out.push(b'}');
    out
}

fn struct_json(out: &mut Vec<u8>, fields: &[(u32, Value)], buf: &[u8], secret: &[&str]) {
    out.push(b'{');
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let name = key_name(*k);
        json_str(out, name);
        out.push(b':');
        if secret.contains(&name) && !matches!(v, Value::None) {
            json_str(out, "<redacted>");
        } else {
            value_json(out, v, buf, secret);
        }
    }
    out.push(b'}');
}

/// A decoded value as the jsonl writes one (bytes as text or {"hex": ...}, UUIDs as text).
fn value_json(out: &mut Vec<u8>, v: &Value, buf: &[u8], secret: &[&str]) {
    match v {
        Value::View { start, end } => json_bytes(out, buf.get(*start..*end).unwrap_or_default()),
        Value::Bytes(b) => json_bytes(out, b),
        Value::List(items) => {
            out.push(b'[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value_json(out, x, buf, secret);
            }
            out.push(b']');
        }
        Value::Struct(fields) => struct_json(out, fields, buf, secret),
        leaf => {
            leaf_json(out, leaf, buf);
        }
    }
}

/// An unsigned varint as Kafka's ByteUtils reads one (at most 5 bytes for an int).
fn uvarint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut v: i64 = 0;
    for shift in (0..35).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7F) as i64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Each record of a records field: (control batch, key, value).
fn each(field: &[u8], mut f: impl FnMut(bool, Option<&[u8]>, Option<&[u8]>)) {
    each_in(field, |control, buf, key, value| {
        f(
            control,
            key.map(|(a, z)| &buf[a..z]),
            value.map(|(a, z)| &buf[a..z]),
        )
    });
}

/// Each record of a records field: (control batch, the buffer it is in, key and value spans).
fn each_in(field: &[u8], mut f: impl FnMut(bool, &[u8], Option<Span>, Option<Span>)) {
    let mut r = Records::new();
    let mut rec = Rec::default();
    r.set.scan(field, true);
    let Records {
        set, inner, dec, ..
    } = &mut r;
    for b in &set.batches {
        let control = b.control();
        let _ = each_record(
            field,
            b,
            DEFAULT_MAX_DECOMPRESSED,
            dec,
            inner,
            &mut rec,
            |buf, x| f(control, buf, x.key, x.value),
        );
    }
}

// -- Fetches of the metadata log ---------------------------------------------------------

fn text<'a>(v: Option<&'a Value>, frame: &'a [u8]) -> Option<&'a str> {
    match v? {
        Value::Str(s) => Some(s),
        Value::Text { start, end } => std::str::from_utf8(frame.get(*start..*end)?).ok(),
        _ => None,
    }
}

fn list<'a>(d: &'a [(u32, Value)], name: &str) -> &'a [Value] {
    match known_key(name).and_then(|k| get(d, k)) {
        Some(Value::List(items)) => items,
        _ => &[],
    }
}

fn is_metadata_topic(t: &[(u32, Value)], frame: &[u8]) -> bool {
    matches!(get(t, K_TOPIC_ID), Some(Value::Uuid(u)) if *u == METADATA_TOPIC_ID)
        || [K_TOPIC_NAME, K_NAME]
            .into_iter()
            .chain(known_key("Topic"))
            .any(|k| text(get(t, k), frame) == Some(METADATA_TOPIC))
}

/// Each records field of a Fetch response's `__cluster_metadata` partitions.
fn metadata_fields<'a>(body: &'a Value, frame: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let Value::Struct(d) = body else { return };
    for t in list(d, "Responses") {
        let Value::Struct(t) = t else { continue };
        if !is_metadata_topic(t, frame) {
            continue;
        }
        for p in list(t, "Partitions") {
            let Value::Struct(p) = p else { continue };
            if let Some(Value::View { start, end }) = known_key("Records").and_then(|k| get(p, k)) {
                if let Some(field) = frame.get(*start..*end) {
                    f(field);
                }
            }
        }
    }
}

/// Before a Fetch's walk: `__cluster_metadata`'s fixed id is named when a Fetch asks for it by
/// id, and a response's TopicRecords name the topics they create (replication Fetches of the
/// other internal topics ask for them by id, and no client may ever have asked their names).
pub fn learn(response: bool, body: &Value, frame: &[u8], names: &mut Names) {
    let Value::Struct(d) = body else { return };
    let topics = list(d, if response { "Responses" } else { "Topics" });
    let asks = topics.iter().any(|t| match t {
        Value::Struct(t) => is_metadata_topic(t, frame),
        _ => false,
    });
    if !asks {
        return;
    }
    if names.get(&METADATA_TOPIC_ID).is_none() {
        names.insert(METADATA_TOPIC_ID, Rc::from(METADATA_TOPIC));
    }
    if !response {
        return;
    }
    let dec = decoder();
    metadata_fields(body, frame, |field| {
        dec.topic_records(field, |id, name| names.insert(id, name))
    });
}

/// Where a Fetch answer's frame holds the metadata log's secrets (the values of SCRAM
/// credential and delegation token records), for --raw to star. Compressed batches hide them.
pub fn secret_spans(response: &Value, frame: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let dec = decoder();
    let base = frame.as_ptr() as usize;
    metadata_fields(response, frame, |field| {
        each_in(field, |control, buf, _, value| {
            let Some((a, z)) = value.filter(|_| !control) else {
                return;
            };
            let secret = dec
                .metadata_type(&buf[a..z])
                .is_some_and(|n| SECRETS.iter().any(|(t, _)| *t == n));
            let at = (buf.as_ptr() as usize).wrapping_sub(base);
            if secret && at < frame.len() && at + z <= frame.len() {
                spans.push((at + a, at + z));
            }
        });
    });
    spans
}

/// The text line's summary of a Fetch answer from the metadata log: the record types it
/// carried, in order of first sight, with their counts (`TopicRecord x1, PartitionRecord x6`).
pub fn summary(response: &Value, frame: &[u8]) -> Option<String> {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    let mut seen = false;
    metadata_fields(response, frame, |field| {
        if field.is_empty() {
            return;
        }
        let dec = decoder();
        seen = true;
        each(field, |control, key, value| {
            let name = if control {
                key.filter(|k| k.len() >= 4)
                    .and_then(|k| CONTROL.get(i16::from_be_bytes([k[2], k[3]]) as usize))
                    .map(|c| c.1)
            } else {
                value.and_then(|v| dec.metadata_type(v))
            };
            let name = name.unwrap_or("?");
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        });
    });
    if !seen || counts.is_empty() {
        return None;
    }
    let parts: Vec<String> = counts.iter().map(|(n, c)| format!("{n} x{c}")).collect();
    Some(format!("metadata={}", parts.join(", ")))
}
