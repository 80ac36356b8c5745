//! Where a body's topics, partitions and record data sit, over decoded values. A plan per
//! (api key, version, direction) is built once from the schema segment (the spec's entity
//! types say which strings are topic names, groups and transactional ids), so finding the
//! topics of a body is a few lookups per topic.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::decode::Value;
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
