//! The registry's schema data, embedded: `data/registry.json`, generated from the files
//! protocol.codegen writes out of Kafka's message specs (native/tools/gen_registry.py), so the
//! core decodes on its own and every engine reads the same schemas.
//!
//! The file is parsed once per process on first use (a few milliseconds); each registry is built
//! from that parse.
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::OnceLock;

use serde_json::Value as Json;

use crate::schema::{direction, key_id, Fixed, RawField, RawSeg, Registry, Segment, Ty};

const DATA: &str = include_str!("../data/registry.json");

/// A record type table of an internal topic.
pub struct InternalTopic {
    /// "metadata" (the KRaft log) or "coordinator" (offsets, transactions, share groups)
    pub kind: String,
    /// record type id -> the type of a metadata record
    pub records: HashMap<i64, String>,
    /// record type id -> the key and value types of a coordinator record
    pub keys: HashMap<i64, String>,
    pub values: HashMap<i64, String>,
}

fn doc() -> &'static Json {
    static DOC: OnceLock<Json> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(DATA).expect("data/registry.json is generated JSON"))
}

fn range(v: Option<&Json>) -> Option<(i64, i64)> {
    let a = v?.as_array()?;
    Some((a.first()?.as_i64()?, a.get(1)?.as_i64()?))
}

fn ty(name: &str) -> Option<Ty> {
    Some(match name {
        "int8" => Ty::Fixed(Fixed::I8),
        "int16" => Ty::Fixed(Fixed::I16),
        "uint16" => Ty::Fixed(Fixed::U16),
        "int32" => Ty::Fixed(Fixed::I32),
        "uint32" => Ty::Fixed(Fixed::U32),
        "int64" => Ty::Fixed(Fixed::I64),
        "float64" => Ty::Fixed(Fixed::F64),
        "bool" => Ty::Fixed(Fixed::Bool),
        "uuid" => Ty::Fixed(Fixed::Uuid),
        "string" => Ty::Str,
        "bytes" => Ty::Bytes,
        "records" => Ty::Records,
        "struct" => Ty::Struct,
        _ => return None,
    })
}

/// The fields of a segment. A type the core does not know is a generator bug: it panics in the
/// core's own tests (spec_loads) long before a user sees it.
pub fn fields(list: Option<&Json>) -> Vec<RawField> {
    let Some(list) = list.and_then(Json::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap_or_default().to_owned();
            let t = f["type"].as_str().unwrap_or_default();
            let ty = ty(t).unwrap_or_else(|| panic!("field {name}: unknown type {t:?}"));
            let tag = f.get("tag");
            RawField {
                key: key_id(&name),
                versions: range(f.get("versions")),
                ty,
                array: f.get("array").and_then(Json::as_bool).unwrap_or(false),
                nullable: range(f.get("nullable")),
                tagged: range(f.get("tagged")),
                has_tag: tag.is_some(),
                tag: tag.and_then(Json::as_i64).unwrap_or(-1),
                flexible: f.get("flexible").map(|r| range(Some(r))),
                entity: f.get("entity").and_then(Json::as_str).map(str::to_owned),
                fields: fields(f.get("fields")),
                name,
            }
        })
        .collect()
}

fn segment(seg: &Json) -> Segment {
    let versions = seg["versions"]
        .as_array()
        .map(|v| v.iter().filter_map(Json::as_i64).collect())
        .unwrap_or_default();
    let raw = RawSeg {
        flexible: range(seg.get("flexible")),
        fields: Rc::new(fields(seg.get("fields"))),
    };
    (raw, versions)
}

fn data_types(
    out: &mut HashMap<String, Vec<(Vec<i64>, RawSeg)>>,
    types: Option<&serde_json::Map<String, Json>>,
) {
    for (name, segs) in types.into_iter().flatten() {
        let list = segs
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let (raw, versions) = segment(s);
                (versions, raw)
            })
            .collect();
        out.insert(name.clone(), list);
    }
}

fn header(doc: &Json, name: &str) -> RawSeg {
    // a header's plan reads its first segment, whatever the header version (header_plan)
    segment(&doc["headers"][name][0]).0
}

/// API key -> name, as Kafka's specs name them (made once per process).
pub fn api_names() -> &'static HashMap<i16, String> {
    static NAMES: OnceLock<HashMap<i16, String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        doc()["api_names"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_owned())))
            .collect()
    })
}

/// Kafka's error table: code -> (name, retriable) (made once per process).
pub fn errors() -> &'static HashMap<i64, (String, bool)> {
    static ERRORS: OnceLock<HashMap<i64, (String, bool)>> = OnceLock::new();
    ERRORS.get_or_init(|| {
        doc()["errors"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let name = v.get(0)?.as_str()?.to_owned();
                Some((k.parse().ok()?, (name, v.get(1)?.as_bool()?)))
            })
            .collect()
    })
}

/// Kafka's messages, headers and data types (nested payloads), naming its APIs.
pub fn registry() -> Registry {
    let doc = doc();
    let mut messages = Vec::new();
    for m in doc["messages"].as_array().into_iter().flatten() {
        let (Some(key), Some(dir)) = (m[0].as_i64(), m[1].as_str().and_then(direction)) else {
            continue;
        };
        let segs = m[2].as_array().into_iter().flatten().map(segment).collect();
        messages.push((key, dir, segs));
    }
    let mut data = HashMap::new();
    data_types(&mut data, doc["data"].as_object());
    Registry::new(
        messages,
        header(doc, "RequestHeader"),
        header(doc, "ResponseHeader"),
        data,
    )
    .with_api_names(api_names().clone())
}

thread_local! {
    static SHARED: std::cell::OnceCell<Rc<Registry>> = const { std::cell::OnceCell::new() };
}

/// registry(), one per thread: its plans are made once for every engine the thread runs.
pub fn shared() -> Rc<Registry> {
    SHARED.with(|cell| cell.get_or_init(|| Rc::new(registry())).clone())
}

/// The data types of Kafka's internal topics' records (with the specs' own data types, which
/// control records carry), and each internal topic's record type table.
pub fn internal() -> (Registry, HashMap<String, InternalTopic>) {
    let doc = doc();
    let mut data = HashMap::new();
    data_types(&mut data, doc["data"].as_object());
    data_types(&mut data, doc["internal_data"].as_object());
    // only data types are decoded with it: the messages' index stays empty
    let reg = Registry::new(
        Vec::new(),
        header(doc, "RequestHeader"),
        header(doc, "ResponseHeader"),
        data,
    );
    let table = |entry: &Json, name: &str| -> HashMap<i64, String> {
        entry
            .get(name)
            .and_then(Json::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_owned())))
            .collect()
    };
    let topics = doc["internal_topics"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(topic, entry)| {
            let t = InternalTopic {
                kind: entry["kind"].as_str().unwrap_or_default().to_owned(),
                records: table(entry, "records"),
                keys: table(entry, "keys"),
                values: table(entry, "values"),
            };
            (topic.clone(), t)
        })
        .collect();
    (reg, topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Dir;

    #[test]
    fn spec_loads() {
        let reg = registry();
        assert_eq!(reg.api_name(0), "Produce");
        assert_eq!(reg.api_name(18), "ApiVersions");
        assert!(reg.has(18, 3, Dir::Request));
        assert!(reg.has(3, 12, Dir::Response));
        assert!(reg.segment(0, 9, Dir::Request).is_some());
        let (_, topics) = internal();
        assert_eq!(topics["__cluster_metadata"].kind, "metadata");
        assert!(topics["__consumer_offsets"].keys.contains_key(&1));
        assert_eq!(
            errors()[&3],
            ("UNKNOWN_TOPIC_OR_PARTITION".to_string(), true)
        );
    }
}
