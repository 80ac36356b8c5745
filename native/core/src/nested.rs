//! Payloads Kafka carries inside `bytes` fields, decoded beside them.
//!
//! A decoded payload is added to the struct that holds its bytes, as `<Field>Decoded`, and
//! the bytes stay as they were (the jsonl's hex, replay's re-encoding, the frame offsets
//! redaction stars). Decoded here:
//! - the consumer protocol's Subscription (JoinGroup `Protocols[].Metadata` and
//!   `Members[].Metadata`, DescribeGroups `Members[].MemberMetadata`) and Assignment
//!   (SyncGroup `Assignments[].Assignment` and `Assignment`, DescribeGroups
//!   `Members[].MemberAssignment`), when the group's protocol type is `consumer`: other
//!   types (`connect`, streams' own) keep their bytes alone;
//! - Envelope's `RequestData` and `ResponseData` as the messages they are (header and body
//!   at their own API and version), and its `RequestPrincipal` (DefaultPrincipalData).
//!
//! A payload that does not decode gets `{"_error": why}`. The exception is a SyncGroup
//! before v5, which does not say its protocol type: its assignment is tried as the
//! consumer protocol's and left alone if it is not one.
//!
//! tests/test_nested.py checks each row of PAYLOADS against the sample captures.
use crate::api::{DESCRIBE_GROUPS, ENVELOPE, JOIN_GROUP, SYNC_GROUP};
use crate::decode::{decode_data, decode_inner, get, Value};
use crate::schema::{key_id, known_key, Registry, K_API_KEY, K_API_VERSION, K_ERROR};

const SUBSCRIPTION: &str = "ConsumerProtocolSubscription";
const ASSIGNMENT: &str = "ConsumerProtocolAssignment";
const PRINCIPAL: &str = "DefaultPrincipalData";
const CONSUMER: &str = "consumer";

/// What is decoded where, for `kafkawire apis --nested`: (type, API, direction, the bytes
/// field's path).
pub const PAYLOADS: [(&str, &str, &str, &str); 9] = [
    (SUBSCRIPTION, "JoinGroup", "request", "Protocols[].Metadata"),
    (SUBSCRIPTION, "JoinGroup", "response", "Members[].Metadata"),
    (
        ASSIGNMENT,
        "SyncGroup",
        "request",
        "Assignments[].Assignment",
    ),
    (ASSIGNMENT, "SyncGroup", "response", "Assignment"),
    (
        SUBSCRIPTION,
        "DescribeGroups",
        "response",
        "Groups[].Members[].MemberMetadata",
    ),
    (
        ASSIGNMENT,
        "DescribeGroups",
        "response",
        "Groups[].Members[].MemberAssignment",
    ),
    (
        "the request it carries",
        "Envelope",
        "request",
        "RequestData",
    ),
    (
        "the answer it carries",
        "Envelope",
        "response",
        "ResponseData",
    ),
    (PRINCIPAL, "Envelope", "request", "RequestPrincipal"),
];

/// The APIs whose bodies may hold a nested payload: a cheap test before any work.
pub fn has_nested(api_key: i16) -> bool {
    matches!(
        api_key,
        JOIN_GROUP | SYNC_GROUP | DESCRIBE_GROUPS | ENVELOPE
    )
}

fn field<'a>(d: &'a [(u32, Value)], name: &str) -> Option<&'a Value> {
    get(d, known_key(name)?)
}

fn fields_of(v: &Value) -> &[(u32, Value)] {
    match v {
        Value::Struct(d) => d,
        _ => &[],
    }
}

/// A string field's text, wherever it was left (in the frame, or copied out).
fn text<'a>(v: Option<&'a Value>, frame: &'a [u8]) -> Option<&'a str> {
    match v? {
        Value::Str(s) => Some(s),
        Value::Text { start, end } => std::str::from_utf8(frame.get(*start..*end)?).ok(),
        _ => None,
    }
}

/// A bytes field's place in the frame (None when null or not bytes).
fn span(v: Option<&Value>) -> Option<(usize, usize)> {
    match v? {
        Value::View { start, end } => Some((*start, *end)),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Failed {
    /// {"_error": why} beside the bytes
    Say,
    /// nothing beside the bytes
    Quiet,
}

/// holder[name + "Decoded"] = decode(the bytes of holder[name]).
fn attach(
    holder: &mut Vec<(u32, Value)>,
    name: &str,
    skip_empty: bool,
    failed: Failed,
    decode: impl Fn(usize, usize) -> Result<Vec<(u32, Value)>, String>,
) {
    let Some((a, z)) = span(field(holder, name)) else {
        return;
    };
    if skip_empty && a == z {
        return;
    }
    let value = match decode(a, z) {
        Ok(d) => Value::Struct(d),
        Err(_) if failed == Failed::Quiet => return,
        Err(why) => Value::Struct(vec![(K_ERROR, Value::Str(why.into()))]),
    };
    // every `<Field>Decoded` is one of schema.rs' fixed keys: the same number in every process
    holder.push((key_id(&format!("{name}Decoded")), value));
}

/// Each struct of the array field `name` of `d`.
fn each_item(d: &mut [(u32, Value)], name: &str, mut f: impl FnMut(&mut Vec<(u32, Value)>)) {
    let Some(key) = known_key(name) else {
        return;
    };
    if let Some((_, Value::List(items))) = d.iter_mut().find(|(k, _)| *k == key) {
        for item in items {
            if let Value::Struct(holder) = item {
                f(holder);
            }
        }
    }
}

/// How a SyncGroup's assignment is judged: by the consumer protocol's rules when the
/// protocol type says `consumer`, quietly when it says nothing, not at all otherwise.
fn sync_group(protocol_type: Option<&str>) -> Option<Failed> {
    match protocol_type {
        Some(CONSUMER) => Some(Failed::Say),
        None => Some(Failed::Quiet),
        Some(_) => None,
    }
}

/// The nested payloads of a request, decoded in place (frame: the request's frame).
pub fn expand_request(reg: &Registry, frame: &[u8], api_key: i16, body: &mut Value) {
    let Value::Struct(d) = body else {
        return;
    };
    let sub = |a, z| decode_data(reg, SUBSCRIPTION, frame, a, z);
    let asg = |a, z| decode_data(reg, ASSIGNMENT, frame, a, z);
    match api_key {
        JOIN_GROUP if text(field(d, "ProtocolType"), frame) == Some(CONSUMER) => {
            each_item(d, "Protocols", |p| {
                attach(p, "Metadata", false, Failed::Say, sub)
            });
        }
        SYNC_GROUP => {
            if let Some(failed) = sync_group(text(field(d, "ProtocolType"), frame)) {
                each_item(d, "Assignments", |m| {
                    attach(m, "Assignment", true, failed, asg)
                });
            }
        }
        ENVELOPE => {
            attach(d, "RequestData", false, Failed::Say, |a, z| {
                decode_inner(reg, frame, a, z, None)
            });
            attach(d, "RequestPrincipal", false, Failed::Say, |a, z| {
                decode_data(reg, PRINCIPAL, frame, a, z)
            });
        }
        _ => {}
    }
}

/// The nested payloads of a response, decoded in place (frame: the response's frame;
/// request: the request's body and frame, which say what a response alone does not).
pub fn expand_response(
    reg: &Registry,
    frame: &[u8],
    api_key: i16,
    request: Option<(&Value, &[u8])>,
    body: &mut Value,
) {
    let Value::Struct(d) = body else {
        return;
    };
    let (req, req_frame) = match request {
        Some((v, f)) => (fields_of(v), f),
        None => (&[][..], &[][..]),
    };
    // the response's own protocol type (JoinGroup v7+, SyncGroup v5+), else the request's
    let protocol_type = text(field(d, "ProtocolType"), frame)
        .or_else(|| text(field(req, "ProtocolType"), req_frame))
        .map(str::to_owned);
    let sub = |a, z| decode_data(reg, SUBSCRIPTION, frame, a, z);
    let asg = |a, z| decode_data(reg, ASSIGNMENT, frame, a, z);
    match api_key {
        JOIN_GROUP if protocol_type.as_deref() == Some(CONSUMER) => {
            each_item(d, "Members", |m| {
                attach(m, "Metadata", false, Failed::Say, sub)
            });
        }
        SYNC_GROUP => {
            if let Some(failed) = sync_group(protocol_type.as_deref()) {
                attach(d, "Assignment", true, failed, asg);
            }
        }
        DESCRIBE_GROUPS => {
            each_item(d, "Groups", |g| {
                if text(field(g, "ProtocolType"), frame) != Some(CONSUMER) {
                    return;
                }
                each_item(g, "Members", |m| {
                    attach(m, "MemberMetadata", true, Failed::Say, sub);
                    attach(m, "MemberAssignment", true, Failed::Say, asg);
                });
            });
        }
        ENVELOPE => {
            let inner = span(field(req, "RequestData"))
                .and_then(|(a, z)| req_frame.get(a..z))
                .filter(|b| b.len() >= 4)
                .map(|b| {
                    (
                        i16::from_be_bytes([b[0], b[1]]),
                        i16::from_be_bytes([b[2], b[3]]),
                    )
                });
            attach(d, "ResponseData", false, Failed::Say, |a, z| match inner {
                Some(kv) => decode_inner(reg, frame, a, z, Some(kv)),
                None => Err("the request it answers is not decoded".into()),
            });
        }
        _ => {}
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn count(v: Option<&Value>) -> usize {
    match v {
        Some(Value::List(items)) => items.len(),
        Some(Value::Numbers { count, .. }) => *count,
        _ => 0,
    }
}

/// Partitions in a decoded ConsumerProtocolAssignment.
fn assigned(d: &[(u32, Value)]) -> Option<usize> {
    let Some(Value::List(topics)) = field(d, "AssignedPartitions") else {
        return None;
    };
    Some(
        topics
            .iter()
            .map(|t| count(field(fields_of(t), "Partitions")))
            .sum(),
    )
}

/// What the text line says of an exchange's nested payloads (None: nothing):
/// `assigned=N` (the partitions a SyncGroup answer gave its member), `members=N` (the
/// members a JoinGroup answer gave the leader), `inner=<API> vN` (what an Envelope carried).
pub fn summary(
    api_key: Option<i16>,
    request: Option<&Value>,
    response: Option<&Value>,
    api_name: impl Fn(i16) -> Option<String>,
) -> Option<String> {
    let req = request.map(fields_of).unwrap_or_default();
    let resp = response.map(fields_of).unwrap_or_default();
    let decoded = |d, name: &str| field(d, &format!("{name}Decoded")).map(fields_of);
    match api_key? {
        SYNC_GROUP => Some(format!(
            "assigned={}",
            assigned(decoded(resp, "Assignment")?)?
        )),
        JOIN_GROUP => match count(field(resp, "Members")) {
            0 => None,
            n => Some(format!("members={n}")),
        },
        ENVELOPE => {
            let d = decoded(req, "RequestData")?;
            let (k, v) = (int(get(d, K_API_KEY))?, int(get(d, K_API_VERSION))?);
            Some(inner(k as i16, v, api_name))
        }
        _ => None,
    }
}

/// An Envelope's summary, `inner=<API> vN`, from its inner message's key and version.
pub fn inner(api_key: i16, version: i64, api_name: impl Fn(i16) -> Option<String>) -> String {
    let name = api_name(api_key).unwrap_or_else(|| format!("api{api_key}"));
    format!("inner={name} v{version}")
}
