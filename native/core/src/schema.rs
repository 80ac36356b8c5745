//! The registry's schema data -> one decode plan per (api key, version, direction).
//!
//! Registry::new() takes the schema tree (crate::spec builds it from the embedded schema data);
//! a (key, version, direction)'s plan is built from it the first time a frame needs it. The
//! rules that pick a plan (header versions, ApiVersions' fallback layouts, flexible versions) are
//! Kafka's, as protocol/codec.py and protocol/headers.py apply them too: the differential tests
//! (tests/test_native_decode.py) hold the two sides to the same decoding.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Dir {
    Request,
    Response,
}

const API_VERSIONS: i64 = 18;
const CONTROLLED_SHUTDOWN: i64 = 7;

// -- field names --------------------------------------------------------------
//
// A decoded struct keys its values by a small number standing for the field's name,
// so that nothing on the hot path hashes or compares strings. The numbers are
// process-wide (decode::field_int and the bindings' caches need no registry to read
// them); the names are the registry's, leaked once each: a few thousand bytes.

pub const K_UNKNOWN_TAGGED: u32 = 0;
pub const K_TOPIC_NAME: u32 = 1;
pub const K_TOPIC_ID: u32 = 2;
pub const K_NAME: u32 = 3;
pub const K_CORRELATION_ID: u32 = 4;
pub const K_CLIENT_ID: u32 = 5;
// The keys of nested payloads decoded beside their bytes (nested.rs). Fixed here, not
// made on first use, because carried state (carry.rs) stores keys by number.
pub const K_ERROR: u32 = 6;
pub const K_VERSION: u32 = 7;
pub const K_API_KEY: u32 = 8;
pub const K_API_VERSION: u32 = 9;
pub const K_HEADER: u32 = 10;
pub const K_BODY: u32 = 11;
const FIXED_KEYS: [&str; 19] = [
    "_unknown_tagged_fields",
    "TopicName",
    "TopicId",
    "Name",
    "CorrelationId",
    "ClientId",
    "_error",
    "Version",
    "api_key",
    "api_version",
    "header",
    "body",
    "MetadataDecoded",
    "AssignmentDecoded",
    "MemberMetadataDecoded",
    "MemberAssignmentDecoded",
    "RequestDataDecoded",
    "ResponseDataDecoded",
    "RequestPrincipalDecoded",
];

struct Keys {
    ids: HashMap<&'static str, u32>,
    names: Vec<&'static str>,
}

fn keys() -> &'static Mutex<Keys> {
    static KEYS: OnceLock<Mutex<Keys>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut k = Keys {
            ids: HashMap::new(),
            names: Vec::new(),
        };
        for name in FIXED_KEYS {
            k.ids.insert(name, k.names.len() as u32);
            k.names.push(name);
        }
        Mutex::new(k)
    })
}

pub fn key_id(name: &str) -> u32 {
    let mut k = keys().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = k.ids.get(name) {
        return id;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let id = k.names.len() as u32;
    k.ids.insert(leaked, id);
    k.names.push(leaked);
    id
}

/// The id of a name already seen, else None (nothing decoded can carry it).
pub fn known_key(name: &str) -> Option<u32> {
    keys()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .ids
        .get(name)
        .copied()
}

pub fn key_name(id: u32) -> &'static str {
    let k = keys().lock().unwrap_or_else(|e| e.into_inner());
    k.names.get(id as usize).copied().unwrap_or("")
}

// -- the schema tree, as the schema data has it -----------------------------------

pub type Range = (i64, i64);

/// Whether `v` is in the inclusive range (None: in no version).
pub fn in_range(rng: Option<Range>, v: i64) -> bool {
    matches!(rng, Some((lo, hi)) if lo <= v && v <= hi)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fixed {
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    F64,
    Bool,
    Uuid,
}

impl Fixed {
    const ALL: [Fixed; 9] = [
        Fixed::I8,
        Fixed::I16,
        Fixed::U16,
        Fixed::I32,
        Fixed::U32,
        Fixed::I64,
        Fixed::F64,
        Fixed::Bool,
        Fixed::Uuid,
    ];

    /// Its number in a carried state (carry.rs).
    pub fn code(self) -> u8 {
        Fixed::ALL.iter().position(|f| *f == self).unwrap_or(0) as u8
    }

    pub fn from_code(c: u8) -> Option<Fixed> {
        Fixed::ALL.get(c as usize).copied()
    }

    pub fn size(self) -> usize {
        match self {
            Fixed::I8 | Fixed::Bool => 1,
            Fixed::I16 | Fixed::U16 => 2,
            Fixed::I32 | Fixed::U32 => 4,
            Fixed::I64 | Fixed::F64 => 8,
            Fixed::Uuid => 16,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ty {
    Fixed(Fixed),
    Str,
    Bytes,
    Records,
    Struct,
}

pub struct RawField {
    pub key: u32,
    pub name: String,
    pub versions: Option<Range>,
    pub ty: Ty,
    pub array: bool,
    pub nullable: Option<Range>,
    pub tagged: Option<Range>,
    pub has_tag: bool,
    pub tag: i64,
    /// Some(range) when the field says which versions it is flexible in (the
    /// header's ClientId says None: never compact).
    pub flexible: Option<Option<Range>>,
    /// The spec's entity type (topicName, groupId, transactionalId, ...), where it gives one
    pub entity: Option<String>,
    pub fields: Vec<RawField>,
}

pub struct RawSeg {
    pub flexible: Option<Range>,
    pub fields: Rc<Vec<RawField>>,
}

// -- decode plans ---------------------------------------------------------------

/// One struct's plan at one version: what the decoder reads, in order.
pub struct StructPlan {
    /// Regular fields, in schema order.
    pub fields: Vec<FieldPlan>,
    /// Tagged fields by tag (flexible versions only).
    pub tagged: Vec<(u64, FieldPlan)>,
    /// The version is flexible: a tag section follows the fields, lengths are compact.
    pub flex: bool,
}

pub struct FieldPlan {
    pub key: u32,
    pub kind: Kind,
    /// The schema's type: what a decode error names (`records length ...`, `array of 3 int32`).
    pub ty: Ty,
}

pub enum Kind {
    Fixed(Fixed),
    /// A string, or bytes/records (left in the frame); compact: by the version's flexibility
    /// unless the field says otherwise.
    Blob {
        string: bool,
        compact: bool,
    },
    /// An array of fixed-width numbers (Value::Numbers).
    Numbers(Fixed),
    Uuids,
    Blobs {
        string: bool,
    },
    Structs {
        plan: Box<StructPlan>,
        least: i64,
    },
    Struct {
        plan: Box<StructPlan>,
        nullable: bool,
    },
}

/// The fewest bytes a struct of these fields takes at `version` (a null or empty length or
/// count, the tag section's byte): what bounds an array's count before its structs are read.
fn min_size(fields: &[RawField], version: i64, flex: bool) -> i64 {
    let mut total = if flex { 1 } else { 0 };
    for f in fields {
        if !in_range(f.versions, version) || (flex && in_range(f.tagged, version)) {
            continue;
        }
        if f.array || matches!(f.ty, Ty::Str | Ty::Bytes | Ty::Records) {
            total += if flex {
                1
            } else if f.ty == Ty::Str && !f.array {
                2
            } else {
                4
            };
        } else if f.ty == Ty::Struct {
            total += if in_range(f.nullable, version) {
                1
            } else {
                min_size(&f.fields, version, flex)
            };
        } else if let Ty::Fixed(t) = f.ty {
            total += t.size() as i64;
        }
    }
    total
}

fn struct_plan(fields: &[RawField], version: i64, flex: bool) -> StructPlan {
    let mut regular = Vec::new();
    let mut tagged: Vec<(u64, FieldPlan)> = Vec::new();
    for f in fields {
        if !in_range(f.versions, version) {
            continue;
        }
        let plan = FieldPlan {
            key: f.key,
            kind: field_kind(f, version, flex),
            ty: f.ty,
        };
        if flex && in_range(f.tagged, version) {
            tagged.push((f.tag.max(0) as u64, plan));
        } else {
            regular.push(plan);
        }
    }
    // a stable sort: of two fields with one tag, the first in the schema wins (tag_section
    // takes the first match)
    tagged.sort_by_key(|(t, _)| *t);
    StructPlan {
        fields: regular,
        tagged,
        flex,
    }
}

fn field_kind(f: &RawField, version: i64, flex: bool) -> Kind {
    let compact = match f.flexible {
        Some(rng) => flex && in_range(rng, version),
        None => flex,
    };
    if f.array {
        return match f.ty {
            Ty::Fixed(Fixed::Uuid) => Kind::Uuids,
            Ty::Fixed(t) => Kind::Numbers(t),
            Ty::Struct => Kind::Structs {
                plan: Box::new(struct_plan(&f.fields, version, flex)),
                least: min_size(&f.fields, version, flex),
            },
            Ty::Str => Kind::Blobs { string: true },
            Ty::Bytes | Ty::Records => Kind::Blobs { string: false },
        };
    }
    match f.ty {
        Ty::Struct => Kind::Struct {
            plan: Box::new(struct_plan(&f.fields, version, flex)),
            nullable: in_range(f.nullable, version),
        },
        Ty::Fixed(t) => Kind::Fixed(t),
        Ty::Str => Kind::Blob {
            string: true,
            compact,
        },
        Ty::Bytes | Ty::Records => Kind::Blob {
            string: false,
            compact,
        },
    }
}

/// A message's plan for the fast decoder: its header's and its body's.
pub struct Plan {
    pub header: Rc<StructPlan>,
    pub body: StructPlan,
}

// -- walk plans -------------------------------------------------------------------
// A walk plan follows only the schema paths that lead to an error code or a topic id, so the
// walk of a decoded body (decode::walk) skips the rest of it.

/// The walk of one struct: its error codes and the children that lead to more.
pub struct WalkStruct {
    /// Both TopicId and Name are live: learn the pair (responses).
    pub learn: bool,
    pub steps: Vec<WalkStep>,
    /// TopicId is live: annotate a bare one.
    pub annotate: bool,
}

pub enum WalkStep {
    Error(u32),
    Child {
        key: u32,
        array: bool,
        sub: WalkStruct,
    },
}

pub enum WalkPlan {
    /// The registry lacks the version: the body is walked whole (decode::generic_walk).
    NoSchema,
    /// No error code or topic id anywhere in the version: nothing to do.
    Nothing,
    Walk(WalkStruct),
}

/// The fields present in `version`, in decoded order: regular first, then tagged by tag.
fn live(fields: &[RawField], version: i64) -> Vec<&RawField> {
    let mut regular = Vec::new();
    let mut tagged = Vec::new();
    for f in fields {
        let (lo, hi) = f.versions.unwrap_or((0, 32767));
        if !(lo <= version && version <= hi) {
            continue;
        }
        if f.has_tag && (f.tagged.is_none() || in_range(f.tagged, version)) {
            tagged.push(f);
        } else {
            regular.push(f);
        }
    }
    tagged.sort_by_key(|f| f.tag);
    regular.extend(tagged);
    regular
}

fn is_error_code(f: &RawField) -> bool {
    // error codes are integers of any width
    f.name.ends_with("ErrorCode")
        && matches!(
            f.ty,
            Ty::Fixed(Fixed::I8 | Fixed::I16 | Fixed::I32 | Fixed::I64 | Fixed::U16 | Fixed::U32)
        )
}

/// Whether a version's fields hold an error code or a topic id, at any depth.
fn interesting(fields: &[RawField], version: i64) -> bool {
    live(fields, version).iter().any(|f| {
        f.name == "TopicId"
            || is_error_code(f)
            || (!f.fields.is_empty() && interesting(&f.fields, version))
    })
}

/// The walk plan of one struct's fields.
fn walk_struct(fields: &[RawField], version: i64) -> WalkStruct {
    let live = live(fields, version);
    let has = |n: &str| live.iter().any(|f| f.name == n);
    let mut steps = Vec::new();
    for f in &live {
        if is_error_code(f) {
            steps.push(WalkStep::Error(f.key));
        } else if !f.fields.is_empty() && interesting(&f.fields, version) {
            steps.push(WalkStep::Child {
                key: f.key,
                array: f.array,
                sub: walk_struct(&f.fields, version),
            });
        }
    }
    WalkStruct {
        learn: has("TopicId") && has("Name"),
        steps,
        annotate: has("TopicId"),
    }
}

// -- the registry -------------------------------------------------------------------

type PlanKey = (i16, i16, Dir);
/// A nested type's plan, by (name, version).
type DataPlans = HashMap<(&'static str, i64), Option<Rc<StructPlan>>>;

/// One multiply: the plan maps are read once per frame, SipHash cost more than the lookup.
#[derive(Default, Clone, Copy)]
pub struct FastHash(u64);

impl std::hash::Hasher for FastHash {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.0 = (self.0 << 8) ^ n as u64;
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0 << 16) ^ n as u64;
    }
    fn write_i16(&mut self, n: i16) {
        self.write_u16(n as u16);
    }
    fn write_isize(&mut self, n: isize) {
        self.0 = (self.0 << 8) ^ n as u64;
    }
}

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHash>>;

/// A schema segment and the versions it covers.
pub type Segment = (RawSeg, Vec<i64>);

pub struct Registry {
    segs: Vec<RawSeg>,
    /// (api key, direction, version) -> segment (of segments that overlap, the last one wins).
    index: HashMap<(i64, Dir, i64), usize>,
    /// The last request version listed for each key.
    newest: HashMap<i64, i64>,
    request_header: RawSeg,
    response_header: RawSeg,
    /// The version-prefixed types carried inside bytes fields, by name
    data: HashMap<String, Vec<(Vec<i64>, RawSeg)>>,
    data_plans: RefCell<DataPlans>,
    plans: RefCell<FastMap<PlanKey, Option<Rc<Plan>>>>,
    header_plans: RefCell<HashMap<(Dir, i64), Rc<StructPlan>>>,
    /// A body's plan alone, for every message the registry has (ApiVersions too): the general path
    bodies: RefCell<FastMap<PlanKey, Option<Rc<StructPlan>>>>,
    walks: RefCell<FastMap<PlanKey, Rc<WalkPlan>>>,
    /// Each key's request versions, in the schema data's order
    request_versions: HashMap<i64, Vec<i64>>,
    /// API key -> name (empty unless with_api_names() gives them: Unknown(N) for all)
    api_names: HashMap<i16, String>,
}

/// "request" / "response" -> Dir.
pub fn direction(s: &str) -> Option<Dir> {
    match s {
        "request" => Some(Dir::Request),
        "response" => Some(Dir::Response),
        _ => None,
    }
}

impl Registry {
    /// The registry from its schema data: per (api key, direction) its segments (each with the
    /// versions it covers), the request and response headers' first segments, and the data types
    /// carried inside bytes fields by name (none: no nested payload is decoded).
    pub fn new(
        messages: Vec<(i64, Dir, Vec<Segment>)>,
        request_header: RawSeg,
        response_header: RawSeg,
        data: HashMap<String, Vec<(Vec<i64>, RawSeg)>>,
    ) -> Self {
        let mut segs = Vec::new();
        let mut index = HashMap::new();
        let mut newest = HashMap::new();
        let mut request_versions: HashMap<i64, Vec<i64>> = HashMap::new();
        for (api_key, dir, segments) in messages {
            for (raw, versions) in segments {
                let i = segs.len();
                segs.push(raw);
                for &v in &versions {
                    index.insert((api_key, dir, v), i);
                    if dir == Dir::Request {
                        newest.insert(api_key, v);
                        request_versions.entry(api_key).or_default().push(v);
                    }
                }
            }
        }
        Registry {
            segs,
            index,
            newest,
            request_header,
            response_header,
            data,
            data_plans: RefCell::new(HashMap::new()),
            plans: RefCell::new(FastMap::default()),
            header_plans: RefCell::new(HashMap::new()),
            bodies: RefCell::new(FastMap::default()),
            walks: RefCell::new(FastMap::default()),
            request_versions,
            api_names: HashMap::new(),
        }
    }

    /// The same registry without the data types (no nested payload is decoded with it).
    pub fn without_data(mut self) -> Self {
        self.data.clear();
        self
    }

    /// The same registry naming its APIs (what error texts and anomalies call them).
    pub fn with_api_names(mut self, names: HashMap<i16, String>) -> Self {
        self.api_names = names;
        self
    }

    /// The segment that defines this version, if any.
    pub fn segment(&self, api_key: i16, api_version: i16, dir: Dir) -> Option<&RawSeg> {
        let i = *self.index.get(&(api_key as i64, dir, api_version as i64))?;
        self.segs.get(i)
    }

    /// The API's name in Kafka's specs, or Unknown(N).
    pub fn api_name(&self, api_key: i16) -> String {
        match self.api_names.get(&api_key) {
            Some(n) => n.clone(),
            None => format!("Unknown({api_key})"),
        }
    }

    /// The key's request versions, in the schema data's order.
    pub fn request_versions(&self, api_key: i16) -> &[i64] {
        self.request_versions
            .get(&(api_key as i64))
            .map_or(&[], Vec::as_slice)
    }

    /// The lowest and highest request version the registry has for the key: what a plausible
    /// request may carry.
    pub fn request_version_range(&self, api_key: i16) -> Option<(i16, i16)> {
        let vs = self.request_versions(api_key);
        let lo = vs.iter().min()?;
        let hi = vs.iter().max()?;
        Some((*lo as i16, *hi as i16))
    }

    /// Whether the registry has this message.
    pub fn has(&self, api_key: i16, api_version: i16, dir: Dir) -> bool {
        self.seg(api_key as i64, dir, api_version as i64).is_some()
    }

    /// The layouts to try for a body, in order. An ApiVersions newer
    /// than the registry is tried as each known layout, newest first, as it must be readable
    /// before the peers agree on versions.
    pub fn body_versions(&self, api_key: i16, api_version: i16) -> Vec<i16> {
        if api_key as i64 == API_VERSIONS {
            if let Some(&newest) = self.newest.get(&API_VERSIONS) {
                if api_version as i64 > newest {
                    return self
                        .request_versions(api_key)
                        .iter()
                        .rev()
                        .map(|&v| v as i16)
                        .collect();
                }
            }
        }
        vec![api_version]
    }

    /// A message's body plan alone, for every message the registry has (ApiVersions too, which
    /// plan() leaves to the general path).
    pub fn body_plan(&self, api_key: i16, api_version: i16, dir: Dir) -> Option<Rc<StructPlan>> {
        let k = (api_key, api_version, dir);
        if let Some(p) = self.bodies.borrow().get(&k) {
            return p.clone();
        }
        let (key, v) = (api_key as i64, api_version as i64);
        let plan = self
            .seg(key, dir, v)
            .map(|seg| Rc::new(struct_plan(&seg.fields, v, in_range(seg.flexible, v))));
        self.bodies.borrow_mut().insert(k, plan.clone());
        plan
    }

    fn seg(&self, api_key: i64, dir: Dir, version: i64) -> Option<&RawSeg> {
        self.index
            .get(&(api_key, dir, version))
            .map(|&i| &self.segs[i])
    }

    /// Whether the message's version is flexible (compact lengths, tag sections).
    fn is_flexible(&self, api_key: i64, version: i64, dir: Dir) -> bool {
        self.seg(api_key, dir, version)
            .is_some_and(|s| in_range(s.flexible, version))
    }

    /// A request's header version: 2 for a flexible version, else 1 (ControlledShutdown v0: 0).
    pub fn request_header_version(&self, api_key: i16, api_version: i16) -> i16 {
        let (key, mut v) = (api_key as i64, api_version as i64);
        if key == CONTROLLED_SHUTDOWN && v == 0 {
            return 0;
        }
        if let Some(&newest) = self.newest.get(&key) {
            if v > newest {
                // flexible ranges are open-ended: newer than the registry is as flexible as its newest
                v = newest;
            }
        }
        if self.is_flexible(key, v, Dir::Request) {
            2
        } else {
            1
        }
    }

    /// A response's header version: 1 for a flexible version, else 0. ApiVersions' is always 0,
    /// so that a client can read it before the peers agree on versions.
    pub fn response_header_version(&self, api_key: i16, api_version: i16) -> i16 {
        if api_key as i64 == API_VERSIONS {
            return 0;
        }
        if self.is_flexible(api_key as i64, api_version as i64, Dir::Response) {
            1
        } else {
            0
        }
    }

    /// The header's plan at header version `hv`: always the header's first segment, flexible by
    /// the header version.
    pub fn header_plan(&self, dir: Dir, hv: i64) -> Rc<StructPlan> {
        if let Some(p) = self.header_plans.borrow().get(&(dir, hv)) {
            return p.clone();
        }
        let seg = if dir == Dir::Request {
            &self.request_header
        } else {
            &self.response_header
        };
        let plan = Rc::new(struct_plan(&seg.fields, hv, in_range(seg.flexible, hv)));
        self.header_plans
            .borrow_mut()
            .insert((dir, hv), plan.clone());
        plan
    }

    /// A message's plan for the fast decoder: None for ApiVersions (its fallback layouts are the
    /// general path's) and for versions the registry lacks.
    pub fn plan(&self, api_key: i16, api_version: i16, dir: Dir) -> Option<Rc<Plan>> {
        let k = (api_key, api_version, dir);
        if let Some(p) = self.plans.borrow().get(&k) {
            return p.clone();
        }
        let plan = self.build_plan(api_key, api_version, dir).map(Rc::new);
        self.plans.borrow_mut().insert(k, plan.clone());
        plan
    }

    fn build_plan(&self, api_key: i16, api_version: i16, dir: Dir) -> Option<Plan> {
        if api_key as i64 == API_VERSIONS {
            return None;
        }
        let hv = match dir {
            Dir::Request => self.request_header_version(api_key, api_version),
            Dir::Response => self.response_header_version(api_key, api_version),
        };
        let (key, v) = (api_key as i64, api_version as i64);
        let seg = self.seg(key, dir, v)?;
        let body = struct_plan(&seg.fields, v, in_range(seg.flexible, v));
        Some(Plan {
            header: self.header_plan(dir, hv as i64),
            body,
        })
    }

    /// The versions the registry has for a nested type: (oldest, newest).
    pub fn data_versions(&self, name: &str) -> Option<(i64, i64)> {
        let all = self
            .data
            .get(name)?
            .iter()
            .flat_map(|(v, _)| v.iter().copied());
        let (lo, hi) = all.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        (lo <= hi).then_some((lo, hi))
    }

    /// A nested type's plan at `version`: the struct after the version prefix.
    pub fn data_plan(&self, name: &'static str, version: i64) -> Option<Rc<StructPlan>> {
        if let Some(p) = self.data_plans.borrow().get(&(name, version)) {
            return p.clone();
        }
        let plan = self.data.get(name).and_then(|segs| {
            let (_, seg) = segs.iter().find(|(v, _)| v.contains(&version))?;
            Some(Rc::new(struct_plan(
                &seg.fields,
                version,
                in_range(seg.flexible, version),
            )))
        });
        self.data_plans
            .borrow_mut()
            .insert((name, version), plan.clone());
        plan
    }

    /// The walk plan of a message's body (what decode::walk visits), made once.
    pub fn walk_plan(&self, api_key: i16, version: i16, dir: Dir) -> Rc<WalkPlan> {
        let k = (api_key, version, dir);
        if let Some(p) = self.walks.borrow().get(&k) {
            return p.clone();
        }
        let plan = Rc::new(match self.seg(api_key as i64, dir, version as i64) {
            None => WalkPlan::NoSchema,
            Some(seg) if !interesting(&seg.fields, version as i64) => WalkPlan::Nothing,
            Some(seg) => WalkPlan::Walk(walk_struct(&seg.fields, version as i64)),
        });
        self.walks.borrow_mut().insert(k, plan.clone());
        plan
    }
}
