//! Where a body's topics, partitions and record data sit, over decoded values. A plan per
//! (api key, version, direction) is built once from the schema segment (the spec's entity
//! types say which strings are topic names, groups and transactional ids), so finding the
//! topics of a body is a few lookups per topic.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::api::{FETCH, PRODUCE, SHARE_FETCH};
use crate::decode::Value;
use crate::exchanges::{Body, ExchangeItem};
use crate::json::uuid_text;
use crate::schema::{Dir, Fixed, RawField, Ty, K_TOPIC_ID, K_TOPIC_NAME};

pub const UNRESOLVED: &str = "topic-id:";
const PARTITION_KEYS: [&str; 4] = ["PartitionIndex", "Partition", "Index", "PartitionId"];

/// Where one struct's facts sit, by field key: its topic (the first of `topic` that has a
/// name), partition and records field, the children that lead to more, and (in a body's top
/// struct only) its group and transactional ids.
#[derive(Default)]
pub struct Plan {
    pub topic: Vec<u32>,
    pub partition: Option<u32>,
    pub records: Option<u32>,
    pub children: Vec<(u32, Plan)>,
    pub group: Option<u32>,
    pub txn: Option<u32>,
}

impl Plan {
    fn useful(&self) -> bool {
        !self.topic.is_empty()
            || self.partition.is_some()
            || self.records.is_some()
            || !self.children.is_empty()
    }
}

fn active(f: &RawField, version: i64) -> bool {
    let (lo, hi) = f.versions.unwrap_or((0, 32767));
    lo <= version && version <= hi
}

/// The plan of a struct's fields at `version`. `top`: the body itself; `under_topic`: a struct
/// above names a topic, so a partition-like int32 here is that topic's partition.
fn build(fields: &[RawField], version: i64, top: bool, under_topic: bool) -> Plan {
    let mut p = Plan::default();
    for f in fields.iter().filter(|f| active(f, version)) {
        let name = f.name.as_str();
        let entity = f.entity.as_deref();
        let (string, array) = (f.ty == Ty::Str, f.array);
        if entity == Some("topicName") && string && !array {
            p.topic.push(f.key);
        } else if name == "TopicId" && f.ty == Ty::Fixed(Fixed::Uuid) {
            p.topic.push(K_TOPIC_NAME); // the dissector's resolution of the id
        } else if f.ty == Ty::Records {
            p.records = Some(f.key);
        } else if under_topic
            && p.partition.is_none()
            && PARTITION_KEYS.contains(&name)
            && f.ty == Ty::Fixed(Fixed::I32)
        {
            p.partition = Some(f.key);
        }
        if top && entity == Some("groupId") && string && !array && p.group.is_none() {
            p.group = Some(f.key);
        }
        if top && entity == Some("transactionalId") && string && !array {
            p.txn = Some(f.key);
        }
    }
    let named = !p.topic.is_empty();
    for f in fields.iter().filter(|f| active(f, version)) {
        if f.fields.is_empty() {
            continue;
        }
        let child = build(&f.fields, version, false, under_topic || named);
        if child.useful() {
            p.children.push((f.key, child));
        }
    }
    p
}

/// (api key, version, direction) -> its plan (None: the registry has no such schema)
type PlanCache = HashMap<(i16, i16, Dir), Option<Rc<Plan>>>;

#[derive(Default)]
pub struct Plans {
    cache: RefCell<PlanCache>,
}

impl Plans {
    /// The plan of a body's schema (None: the registry has no such schema).
    pub fn get(&self, api_key: i16, version: i16, dir: Dir) -> Option<Rc<Plan>> {
        if let Some(p) = self.cache.borrow().get(&(api_key, version, dir)) {
            return p.clone();
        }
        let reg = crate::spec::shared();
        let plan = reg
            .segment(api_key, version, dir)
            .map(|seg| Rc::new(build(&seg.fields, version as i64, true, false)));
        self.cache
            .borrow_mut()
            .insert((api_key, version, dir), plan.clone());
        plan
    }
}

pub use crate::decode::get;

/// A str value (copied out of the frame when the decoder left it there), None for anything else.
pub fn text_of(v: &Value, frame: &[u8]) -> Option<Rc<str>> {
    match v {
        Value::Str(s) => Some(s.clone()),
        Value::Text { start, end } => std::str::from_utf8(&frame[*start..*end]).ok().map(Rc::from),
        _ => None,
    }
}

/// The struct's own topic, as a name, or `topic-id:<uuid>` when only its id
/// is known, or None.
pub fn topic_of(obj: &[(u32, Value)], plan: &Plan, frame: &[u8]) -> Option<Rc<str>> {
    for k in &plan.topic {
        if let Some(s) = get(obj, *k).and_then(|v| text_of(v, frame)) {
            return Some(s);
        }
    }
    id_placeholder(obj)
}

/// `topic-id:<uuid>` of the struct's TopicId, or None (no id, or the null one).
pub fn id_placeholder(obj: &[(u32, Value)]) -> Option<Rc<str>> {
    match get(obj, K_TOPIC_ID) {
        Some(Value::Uuid(u)) if u.iter().any(|b| *b != 0) => {
            Some(Rc::from(format!("{UNRESOLVED}{}", uuid_text(u))))
        }
        _ => None,
    }
}

/// One partition-level place: (topic, partition value, records field).
pub type Found<'a> = (Option<Rc<str>>, Option<&'a Value>, Option<&'a Value>);

/// Each partition-level place under `obj` (and each topic named with nothing under it) into
/// `found`, with the topic named above it; records fields only when `with_records`.
pub fn visit<'a>(
    obj: &'a [(u32, Value)],
    plan: &Plan,
    topic: Option<Rc<str>>,
    found: &mut Vec<Found<'a>>,
    with_records: bool,
    frame: &[u8],
) {
    let mut topic = topic;
    if !plan.topic.is_empty() {
        // an empty name does not replace the topic named above
        if let Some(t) = topic_of(obj, plan, frame) {
            if !t.is_empty() {
                topic = Some(t);
            }
        }
        if plan.children.is_empty() && plan.partition.is_none() && plan.records.is_none() {
            found.push((topic.clone(), None, None));
        }
    }
    if plan.partition.is_some() || plan.records.is_some() {
        let part = plan.partition.and_then(|k| get(obj, k));
        let recs = if with_records {
            plan.records.and_then(|k| get(obj, k))
        } else {
            None
        };
        found.push((topic.clone(), part, recs));
    }
    for (key, child) in &plan.children {
        match get(obj, *key) {
            Some(Value::List(items)) => {
                for x in items {
                    if let Value::Struct(s) = x {
                        visit(s, child, topic.clone(), found, with_records, frame);
                    }
                }
            }
            Some(Value::Struct(s)) => visit(s, child, topic.clone(), found, with_records, frame),
            _ => {}
        }
    }
}

/// An error found in a body: (path, topic, partition, code)
pub type ErrorAt = (String, Option<Rc<str>>, Option<i64>, i64);

/// rows._error_rows (the errors table): (path, topic, partition, code) for every non-zero *ErrorCode, wherever it is
pub fn error_rows(
    obj: &[(u32, Value)],
    path: &str,
    topic: Option<Rc<str>>,
    partition: Option<i64>,
    out: &mut Vec<ErrorAt>,
    plan: Option<&Plan>,
    frame: &[u8],
) {
    let mut topic = topic;
    let mut partition = partition;
    if let Some(p) = plan {
        if !p.topic.is_empty() {
            if let Some(t) = topic_of(obj, p, frame) {
                if !t.is_empty() {
                    topic = Some(t);
                }
            }
        }
        if let Some(k) = p.partition {
            if let Some(Value::Int(v)) = get(obj, k) {
                partition = Some(*v);
            }
        }
    }
    for (k, v) in obj {
        let name = crate::schema::key_name(*k);
        match v {
            Value::Int(i) if *i != 0 && name.ends_with("ErrorCode") => {
                out.push((format!("{path}{name}"), topic.clone(), partition, *i));
            }
            Value::List(items) => {
                let sub =
                    plan.and_then(|p| p.children.iter().find(|(ck, _)| ck == k).map(|(_, c)| c));
                for (i, x) in items.iter().enumerate() {
                    if let Value::Struct(s) = x {
                        error_rows(
                            s,
                            &format!("{path}{name}[{i}]."),
                            topic.clone(),
                            partition,
                            out,
                            sub,
                            frame,
                        );
                    }
                }
            }
            Value::Struct(s) if !name.starts_with('_') => {
                let sub =
                    plan.and_then(|p| p.children.iter().find(|(ck, _)| ck == k).map(|(_, c)| c));
                error_rows(
                    s,
                    &format!("{path}{name}."),
                    topic.clone(),
                    partition,
                    out,
                    sub,
                    frame,
                );
            }
            _ => {}
        }
    }
}

/// One topic of an exchange: (its name, the record bytes its request carried, the record bytes
/// its answer carried, its error codes).
pub type ByTopic = (Rc<str>, u64, u64, Vec<i64>);

fn native_body(b: &Option<Body>) -> Option<&[(u32, Value)]> {
    match b {
        Some(Body::Native(Value::Struct(s))) => Some(s.as_slice()),
        _ => None,
    }
}

fn records_len(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::View { start, end }) => (end - start) as u64,
        _ => 0,
    }
}

/// What an exchange did per topic it names. Its topics are the request's, else the answer's (the
/// exchanges table's `topics`), and any topic the answer carries records of (a Fetch in an
/// incremental session names no topic and gets records). Record bytes are the records fields'
/// lengths (a Produce's request, a Fetch's or ShareFetch's answer), as the batches table's
/// `bytes` sums them. An error the errors table puts under a topic is that topic's; one above
/// every topic (a top-level ErrorCode) is each of its topics'. Empty when it names no topic.
pub fn by_topic(x: &ExchangeItem, plans: &Plans) -> Vec<ByTopic> {
    let (Some(api), Some(version)) = (x.api_key, x.api_version) else {
        return Vec::new();
    };
    let (req, resp) = (native_body(&x.request), native_body(&x.response));
    let req_frame = x.request_raw.as_deref().unwrap_or(&[]);
    let resp_frame = x.response_raw.as_deref().unwrap_or(&[]);
    let mut out: Vec<ByTopic> = Vec::new();
    let add = |out: &mut Vec<ByTopic>, t: Rc<str>, sent: u64, answered: u64| match out
        .iter_mut()
        .find(|o| o.0 == t)
    {
        Some(o) => {
            o.1 += sent;
            o.2 += answered;
        }
        None => out.push((t, sent, answered, Vec::new())),
    };
    let mut found: Vec<Found> = Vec::new();
    if let (Some(req), Some(plan)) = (req, plans.get(api, version, Dir::Request)) {
        visit(req, &plan, None, &mut found, api == PRODUCE, req_frame);
    }
    for (t, _, recs) in found.drain(..) {
        if let Some(t) = t {
            add(&mut out, t, records_len(recs), 0);
        }
    }
    let named = !out.is_empty();
    let resp_plan =
        resp.and_then(|_| plans.get(api, x.response_version.unwrap_or(version), Dir::Response));
    let fetch = api == FETCH || api == SHARE_FETCH;
    if let (Some(resp), Some(plan)) = (resp, &resp_plan) {
        if !named || fetch {
            visit(resp, plan, None, &mut found, fetch, resp_frame);
        }
    }
    for (t, _, recs) in found {
        let n = records_len(recs);
        if let Some(t) = t.filter(|_| n > 0 || !named) {
            add(&mut out, t, 0, n);
        }
    }
    if !out.is_empty() && !x.error_codes.is_empty() {
        if let Some(resp) = resp {
            let mut errors: Vec<ErrorAt> = Vec::new();
            error_rows(
                resp,
                "",
                None,
                None,
                &mut errors,
                resp_plan.as_deref(),
                resp_frame,
            );
            let mut above = Vec::new();
            for (_, topic, _, code) in errors {
                match topic.and_then(|t| out.iter_mut().find(|o| o.0 == t)) {
                    Some(o) => o.3.push(code),
                    None => above.push(code),
                }
            }
            for o in &mut out {
                o.3.extend_from_slice(&above);
            }
        }
    }
    out
}
