//! Where a body's topics, partitions and record data sit: a port of dissector/topics.py
//! over decoded values. A plan per (api key, version, direction) is built once from the
//! registry's schema segment (protocol.registry.schema, asked of Python: the entity types
//! live there), so finding the topics of a body is a few lookups per topic.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::decode::Value;
use crate::json::uuid_text;
use crate::schema::{key_id, Dir, K_TOPIC_ID};

pub const UNRESOLVED: &str = "topic-id:";
const PARTITION_KEYS: [&str; 4] = ["PartitionIndex", "Partition", "Index", "PartitionId"];

/// topics.Plan
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

fn active(f: &Bound<'_, PyDict>, version: i64) -> PyResult<bool> {
    let (lo, hi): (i64, i64) = match f.get_item("versions")? {
        Some(v) if !v.is_none() => v.extract()?,
        _ => (0, 32767),
    };
    Ok(lo <= version && version <= hi)
}

fn text(f: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<String>> {
    match f.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract()?)),
        _ => Ok(None),
    }
}

/// topics._build
fn build(fields: &Bound<'_, PyList>, version: i64, top: bool, under_topic: bool) -> PyResult<Plan> {
    let mut p = Plan::default();
    for f in fields.iter() {
        let f = f.cast::<PyDict>()?;
        if !active(f, version)? {
            continue;
        }
        let name: String = text(f, "name")?.unwrap_or_default();
        let entity = text(f, "entity")?;
        let ty = text(f, "type")?.unwrap_or_default();
        let array = f
            .get_item("array")?
            .is_some_and(|a| a.is_truthy().unwrap_or(false));
        let entity = entity.as_deref();
        if entity == Some("topicName") && ty == "string" && !array {
            p.topic.push(key_id(&name));
        } else if name == "TopicId" && ty == "uuid" {
            p.topic.push(key_id("TopicName")); // the dissector's resolution of the id
        } else if ty == "records" {
            p.records = Some(key_id(&name));
        } else if under_topic
            && p.partition.is_none()
            && PARTITION_KEYS.contains(&name.as_str())
            && ty == "int32"
        {
            p.partition = Some(key_id(&name));
        }
        if top && entity == Some("groupId") && ty == "string" && !array && p.group.is_none() {
            p.group = Some(key_id(&name));
        }
        if top && entity == Some("transactionalId") && ty == "string" && !array {
            p.txn = Some(key_id(&name));
        }
    }
    let named = !p.topic.is_empty();
    for f in fields.iter() {
        let f = f.cast::<PyDict>()?;
        if !active(f, version)? {
            continue;
        }
        if let Some(sub) = f.get_item("fields")? {
            let sub = sub.cast::<PyList>()?;
            if sub.is_empty() {
                continue;
            }
            let child = build(sub, version, false, under_topic || named)?;
            if child.useful() {
                let name: String = text(f, "name")?.unwrap_or_default();
                p.children.push((key_id(&name), child));
            }
        }
    }
    Ok(p)
}

/// topics.plan(), cached.
/// (api key, version, direction) -> its plan (None: the registry has no such schema)
type PlanCache = HashMap<(i16, i16, Dir), Option<Rc<Plan>>>;

#[derive(Default)]
pub struct Plans {
    cache: RefCell<PlanCache>,
}

impl Plans {
    pub fn get(
        &self,
        py: Python<'_>,
        api_key: i16,
        version: i16,
        dir: Dir,
    ) -> PyResult<Option<Rc<Plan>>> {
        if let Some(p) = self.cache.borrow().get(&(api_key, version, dir)) {
            return Ok(p.clone());
        }
        let registry = py.import("protocol.registry")?;
        let d = if dir == Dir::Request {
            "request"
        } else {
            "response"
        };
        let seg = registry.call_method1("schema", (api_key, version, d))?;
        let plan = if seg.is_none() {
            None
        } else {
            let fields = seg.get_item("fields")?;
            Some(Rc::new(build(
                fields.cast::<PyList>()?,
                version as i64,
                true,
                false,
            )?))
        };
        self.cache
            .borrow_mut()
            .insert((api_key, version, dir), plan.clone());
        Ok(plan)
    }
}

pub(crate) use crate::decode::get;

/// A str value (copied out of the frame when the decoder left it there), None for anything else.
pub fn text_of(v: &Value, frame: &[u8]) -> Option<Rc<str>> {
    match v {
        Value::Str(s) => Some(s.clone()),
        Value::Text { start, end } => std::str::from_utf8(&frame[*start..*end]).ok().map(Rc::from),
        _ => None,
    }
}

/// topics.topic_of: the struct's own topic, as a name, or `topic-id:<uuid>` when only its id
/// is known, or None.
pub fn topic_of(obj: &[(u32, Value)], plan: &Plan, frame: &[u8]) -> Option<Rc<str>> {
    for k in &plan.topic {
        if let Some(s) = get(obj, *k).and_then(|v| text_of(v, frame)) {
            return Some(s);
        }
    }
    if let Some(Value::Uuid(u)) = get(obj, K_TOPIC_ID) {
        if u.iter().any(|b| *b != 0) {
            return Some(Rc::from(format!("{UNRESOLVED}{}", uuid_text(u))));
        }
    }
    None
}

/// One partition-level place: (topic, partition value, records field).
pub type Found<'a> = (Option<Rc<str>>, Option<&'a Value>, Option<&'a Value>);

/// topics.visit
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
        // Python: topic_of(obj, plan) or topic - an empty name is falsy there too
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
