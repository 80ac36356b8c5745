//! The API keys the core names (checked against the registry's names when the bindings build a
//! configuration: a Protocol whose api_names differ is refused).
/// Produce, Fetch, FetchSnapshot, ShareFetch: the APIs whose bodies carry record sets
/// (dissector.topics.RECORD_APIS, checked when a config is built)
pub const RECORD_APIS: [i16; 4] = [0, 1, 59, 78];
pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const JOIN_GROUP: i16 = 11;
pub const SYNC_GROUP: i16 = 14;
pub const DESCRIBE_GROUPS: i16 = 15;
pub const SASL_HANDSHAKE: i16 = 17;
pub const INIT_PRODUCER_ID: i16 = 22;
pub const ENVELOPE: i16 = 58;
pub const FETCH_SNAPSHOT: i16 = 59;
pub const SHARE_FETCH: i16 = 78;

/// Those keys by the names the registry gives them: a Protocol whose api_names differ is refused.
pub const API_KEYS: [(i16, &str); 10] = [
    (PRODUCE, "Produce"),
    (FETCH, "Fetch"),
    (JOIN_GROUP, "JoinGroup"),
    (SYNC_GROUP, "SyncGroup"),
    (DESCRIBE_GROUPS, "DescribeGroups"),
    (SASL_HANDSHAKE, "SaslHandshake"),
    (INIT_PRODUCER_ID, "InitProducerId"),
    (ENVELOPE, "Envelope"),
    (FETCH_SNAPSHOT, "FetchSnapshot"),
    (SHARE_FETCH, "ShareFetch"),
];
