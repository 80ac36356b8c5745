"""Where an exchange's topics, partitions and record data sit, found with the registry's facts.

The specs mark the fields that name a topic (entityType topicName); the
dissector puts a TopicName beside each TopicId it can resolve. A plan per
(api key, version, direction) lists the keys to follow, so finding the topics
of a body is a few dict lookups per topic, not a walk over the whole body.
Used by the text output, the filters and the tables.
"""

from __future__ import annotations

from functools import cache
from uuid import UUID

__all__ = ["Plan", "plan", "visit", "topic_of", "topics", "UNRESOLVED", "RECORD_APIS"]

UNRESOLVED = "topic-id:"  # prefix of a topic known only by its id
RECORD_APIS = frozenset((0, 1, 59, 78))  # Produce, Fetch, FetchSnapshot, ShareFetch: the ones with records fields
PARTITION_KEYS = ("PartitionIndex", "Partition", "Index", "PartitionId")


class Plan:
    """Where the topic names, partitions and record data of one message version live."""

    __slots__ = ("topic", "partition", "records", "children", "group", "txn")

    def __init__(self):
        self.topic: tuple = ()  # keys in this struct that name its topic
        self.partition: str | None = None  # key of this struct's partition index
        self.records: str | None = None  # key of a records field
        self.children: dict = {}  # key -> Plan of a nested struct (or array of them)
        self.group = self.txn = None  # top level only

    def useful(self) -> bool:
        return bool(self.topic or self.partition or self.records or self.children)


@cache
def plan(api_key: int, version: int, direction: str) -> Plan | None:
    from protocol import registry

    seg = registry.schema(api_key, version, direction)
    if seg is None:
        return None
    return _build(seg["fields"], version, top=True, under_topic=False)


def _active(f: dict, version: int) -> bool:
    lo, hi = f.get("versions") or (0, 32767)
    return lo <= version <= hi


def _build(fields: list, version: int, top: bool, under_topic: bool) -> Plan:
    p = Plan()
    topic = []
    for f in fields:
        if not _active(f, version):
            continue
        name, entity = f["name"], f.get("entity")
        if entity == "topicName" and f["type"] == "string" and not f.get("array"):
            topic.append(name)
        elif name == "TopicId" and f["type"] == "uuid":
            topic.append("TopicName")  # the dissector's resolution of the id
        elif f["type"] == "records":
            p.records = name
        elif under_topic and p.partition is None and name in PARTITION_KEYS and f["type"] == "int32":
            p.partition = name
        if top and entity == "groupId" and f["type"] == "string" and not f.get("array") and p.group is None:
            p.group = name
        if top and entity == "transactionalId" and f["type"] == "string" and not f.get("array"):
            p.txn = name
    p.topic = tuple(topic)
    for f in fields:
        if _active(f, version) and f.get("fields"):
            child = _build(f["fields"], version, top=False, under_topic=under_topic or bool(topic))
            if child.useful():
                p.children[f["name"]] = child
    return p


def topic_of(obj: dict, plan: Plan):
    for k in plan.topic:
        v = obj.get(k)
        if type(v) is str:
            return v
    tid = obj.get("TopicId")
    if type(tid) is UUID and tid.int:
        return UNRESOLVED + str(tid)  # named later in the capture set, or never: see Rows.unresolved
    return None


def visit(obj, plan: Plan, topic, found: list, with_records: bool) -> None:
    """found gets (topic, partition, records-or-None) for every partition-level struct."""
    if plan.topic:
        topic = topic_of(obj, plan) or topic
        if not plan.children and plan.partition is None and plan.records is None:
            found.append((topic, None, None))
    if plan.partition is not None or plan.records is not None:
        part = obj.get(plan.partition) if plan.partition is not None else None
        found.append((topic, part, obj.get(plan.records) if with_records and plan.records else None))
    for key, child in plan.children.items():
        v = obj.get(key)
        if type(v) is list:
            for x in v:
                if type(x) is dict:
                    visit(x, child, topic, found, with_records)
        elif type(v) is dict:
            visit(v, child, topic, found, with_records)


def topics(x) -> list[str]:
    """The topics an exchange names: its request's, else its response's (Metadata for all topics),
    as names where known, else `topic-id:<uuid>`."""
    api, version = x.api_key, x.api_version
    if api is None or version is None:
        return []
    found: list = []
    for body, direction, v in (
        (x.request, "request", version),
        (x.response, "response", x.response_version if x.response_version is not None else version),
    ):
        if type(body) is dict and "_decode_error" not in body and "_raw_body" not in body:
            p = plan(api, v, direction)
            if p is not None:
                visit(body, p, None, found, False)
        if found:
            break
    out: list = []
    for t, _, _ in found:
        if t is not None and t not in out:
            out.append(t)
    return out
