"""What a replay learns from the target's answers and rewrites in the requests that follow.

The captured requests carry ids the captured broker handed out: group member ids and generations
(JoinGroup, ConsumerGroupHeartbeat), producer ids and epochs (InitProducerId), fetch session ids and
topic ids. The target hands out others, so each answer is paired with its captured answer to learn
captured value -> target value, and every later request is rewritten before it is sent. Each rewrite
is returned as one line for the report. Pure bookkeeping: no sockets, no files; `Session` is shared by
the sender's per-connection threads (one lock).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter

from protocol.codec import encode_request
from protocol.topic_ids import name_topic_ids
from protocol.records import read_record_set, rewrite_records

ZERO_UUID = uuid.UUID(int=0)
# Requests that may carry a value the target hands out; others are sent as planned, untouched.
REWRITTEN = frozenset(
    {
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "OffsetCommit",
        "OffsetFetch",
        "TxnOffsetCommit",
        "ConsumerGroupHeartbeat",
        "InitProducerId",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        "Produce",
        "Fetch",
        "DeleteTopics",
        "DescribeProducers",
        "ListOffsets",
        "OffsetForLeaderEpoch",
        "DeleteRecords",
        "ShareGroupHeartbeat",
        "Metadata",
        "DescribeTopicPartitions",
        "CreatePartitions",
    }
)
# Requests that name a group or producer: kept in captured order across connections (FindCoordinator
# before the JoinGroup it found the coordinator for).
KEYED = REWRITTEN | {"FindCoordinator", "DescribeGroups", "DeleteGroups", "DescribeTransactions"}
# Answers the session learns from (a later request that depends on them waits for them).
LEARNS = frozenset(
    {
        "JoinGroup",
        "ConsumerGroupHeartbeat",
        "ShareGroupHeartbeat",
        "InitProducerId",
        "EndTxn",
        "Metadata",
        "CreateTopics",
    }
)
# Same-connection requests wait for these answers too (the next request needs what they hand out).
WAITED_FOR = LEARNS | {"Fetch"}
GENERATION_FIELDS = ("GenerationId", "GenerationIdOrMemberEpoch", "MemberEpoch")


# Requests that create or remove topics: later requests naming those topics wait for their answers.
TOPIC_ADMIN = frozenset({"CreateTopics", "DeleteTopics", "CreatePartitions", "DeleteRecords"})


def captured_topic_ids(exchanges) -> dict:
    """Captured topic id -> name, from every captured answer that pairs them (Metadata, CreateTopics,
    and the names the dissector resolved into Fetch/OffsetCommit answers)."""
    out: dict = {}
    for e in exchanges:
        body = getattr(e, "response", None)
        if not isinstance(body, dict):
            continue
        for field in ("Topics", "Responses"):
            for t in body.get(field) or ():
                if isinstance(t, dict):
                    tid, name = t.get("TopicId"), t.get("Name") or t.get("TopicName")
                    if tid and tid != ZERO_UUID and isinstance(name, str):
                        out.setdefault(tid, name)
    return out


def creates_topics(api_name: str, body: dict) -> bool:
    """CreateTopics and the like, and a Metadata request that may auto-create the topics it names."""
    return api_name in TOPIC_ADMIN or (
        api_name == "Metadata" and bool(body.get("AllowAutoTopicCreation")) and bool(body.get("Topics"))
    )


def topic_names(body: dict, ids: dict | None = None) -> set:
    """Topic names a request body names in its top-level topic lists (topic ids through `ids`)."""
    out = set()
    for field in ("Topics", "TopicData", "TopicNames"):
        for t in body.get(field) or ():
            if isinstance(t, str):
                out.add(t)
            elif isinstance(t, dict):
                name = t.get("Name") or t.get("Topic") or t.get("TopicName")
                if not name and ids and t.get("TopicId") in ids:
                    name = ids[t["TopicId"]]
                if isinstance(name, str):
                    out.add(name)
    return out


def keys(exchange, body: dict | None, ids: dict | None = None) -> set:
    """The shared state a captured request touches: ('group', id), ('producer', captured pid),
    ('fetch', connection). Steps sharing a key are kept in captured order across connections."""
    out = set()
    if body is None:
        return out
    name = exchange.api_name
    for g in values(body, "GroupId"):
        out.add(("group", g))
    if name == "FindCoordinator":
        kind = "group" if body.get("KeyType", 0) == 0 else "transaction"
        for k in [body.get("Key")] + list(body.get("CoordinatorKeys") or []):
            if k:
                out.add((kind, k))
    for t in values(body, "TransactionalId"):
        out.add(("transaction", t))
    if name == "InitProducerId":
        pid = (exchange.response or {}).get("ProducerId", -1)
        if body.get("ProducerId", -1) >= 0:
            pid = body["ProducerId"]
        if pid is not None and pid >= 0:
            out.add(("producer", pid))
    for pid in values(body, "ProducerId"):
        if pid >= 0:
            out.add(("producer", pid))
    if name == "Produce":
        for pid in produce_pids(body):
            out.add(("producer", pid))
    out |= {("topic", t) for t in topic_names(body, ids)}
    # null asks for every topic (and [] did before v1)
    if name == "Metadata" and (body.get("Topics") is None or (exchange.api_version == 0 and not body["Topics"])):
        out.add(("topic", "*"))  # every topic: waits for any creation or deletion before it
    if name == "Fetch" and "SessionId" in body:
        out.add(("fetch", exchange.connection))
    return out


def values(obj, field: str):
    """Every (scalar) value of `field` anywhere in a decoded body."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == field and v is not None and not isinstance(v, (dict, list)):
                yield v
            elif isinstance(v, (dict, list)):
                yield from values(v, field)
    elif isinstance(obj, list):
        for v in obj:
            yield from values(v, field)


def produce_pids(body: dict) -> set:
    """Producer ids of the idempotent/transactional batches of a Produce body."""
    pids = set()
    for t in body.get("TopicData") or []:
        for p in t.get("PartitionData") or []:
            data = p.get("Records")
            if data:
                for b in read_record_set(data).batches:
                    if b.magic == 2 and b.producer_id >= 0:
                        pids.add(b.producer_id)
    return pids


class Session:
    """Captured -> target values learned so far, and which steps have finished (for the waits)."""

    def __init__(self, exchanges=()):
        self.cond = threading.Condition()
        self.members: dict[str, str] = {}
        self.own_members: set = set()  # captured member ids paired by the member's own answer
        self.generations: dict[tuple, int] = {}  # (group, captured generation/epoch) -> target's
        self.latest_generation: dict[str, int] = {}
        self.latest_member: dict[str, str] = {}
        self.joined: dict[tuple, str] = {}  # (group, captured connection) -> the target's member id
        self.producers: dict[int, tuple[int, int]] = {}  # captured pid -> (target pid, epoch)
        self.epochs: dict[tuple, int] = {}  # (captured pid, captured epoch) -> target epoch
        self.sequences: dict[tuple, int] = {}  # (target pid, epoch, topic, partition) -> next
        self.fetch_sessions: dict[int, int] = {}
        self.topic_names: dict[uuid.UUID, str] = {}  # captured topic id -> name
        self.topic_ids: dict[str, uuid.UUID] = {}  # name -> target topic id
        self.finished: set[int] = set()
        self.created: set[str] = set()  # topics this replay created (CreateTopics answered 0)
        self.counts: Counter = Counter()  # rewrites per kind, for the summary
        self.topic_names.update(captured_topic_ids(exchanges))
        # what the captured broker handed out: only those are replaced (a made-up member id or generation in
        # the capture, sent to provoke an error, stays as it was)
        self.handed_out: set = set()
        for e in exchanges:
            if getattr(e, "api_name", None) in ("JoinGroup", "ConsumerGroupHeartbeat") and isinstance(e.response, dict):
                group = (e.request or {}).get("GroupId") if isinstance(e.request, dict) else None
                r = e.response
                self.handed_out |= {
                    ("member", m)
                    for m in [r.get("MemberId")] + [x.get("MemberId") for x in r.get("Members") or []]
                    if m
                }
                for g in (r.get("GenerationId"), r.get("MemberEpoch")):
                    if isinstance(g, int) and g >= 0:
                        self.handed_out.add(("generation", group, g))

    def annotate(self, body) -> None:
        """Put TopicName beside the target's topic ids in an answer, as the dissector does in captured
        ones, so the two compare by name."""
        with self.cond:
            names = {v: k for k, v in self.topic_ids.items()}
        name_topic_ids(body, names)

    # -- waiting ----------------------------------------------------------------------------
    def finish(self, step) -> None:
        with self.cond:
            self.finished.add(id(step))
            self.cond.notify_all()

    def wait(self, steps, timeout: float) -> bool:
        """Until every step in `steps` has finished (answered, failed or given up); False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: all(id(s) in self.finished for s in steps), timeout)

    # -- learning from answers --------------------------------------------------------------
    def learn(self, exchange, request: dict | None, answer: dict) -> None:
        """Pair the target's answer with the captured one."""
        cap = exchange.response or {}
        name = exchange.api_name
        with self.cond:
            if name == "JoinGroup":
                group = (request or {}).get("GroupId")
                self._member(cap.get("MemberId"), answer.get("MemberId"), group)
                if cap.get("MemberId") and answer.get("MemberId"):
                    self.own_members.add(cap["MemberId"])
                if answer.get("MemberId"):
                    self.joined[(group, exchange.connection)] = answer["MemberId"]
                self._generation(group, cap.get("GenerationId"), answer.get("GenerationId"), floor=0)
                self._pair_members(cap.get("Members") or [], answer.get("Members") or [])
            elif name in ("ConsumerGroupHeartbeat", "ShareGroupHeartbeat"):
                group = (request or {}).get("GroupId")
                self._member(cap.get("MemberId"), answer.get("MemberId"), group)
                self._generation(group, cap.get("MemberEpoch"), answer.get("MemberEpoch"), floor=1)
            elif name == "InitProducerId" and not answer.get("ErrorCode"):
                cpid = cap.get("ProducerId", -1)
                if cpid is None or cpid < 0:
                    cpid = (request or {}).get("ProducerId", -1)
                self.learn_producer(cpid, cap.get("ProducerEpoch", -1), answer["ProducerId"], answer["ProducerEpoch"])
            elif name == "EndTxn" and not answer.get("ErrorCode") and answer.get("ProducerId", -1) >= 0:
                # transactions v2 (KIP-890): each EndTxn hands out the producer's next epoch
                self.learn_producer(
                    cap.get("ProducerId", -1),
                    cap.get("ProducerEpoch", -1),
                    answer["ProducerId"],
                    answer["ProducerEpoch"],
                )
            elif name == "Fetch":
                c, r = cap.get("SessionId"), answer.get("SessionId")
                if c and r is not None:
                    self.fetch_sessions[c] = r
            if name == "CreateTopics":
                self.created |= {t["Name"] for t in answer.get("Topics") or [] if not t.get("ErrorCode")}
            if name in ("Metadata", "CreateTopics"):
                for t in answer.get("Topics") or []:
                    tid = t.get("TopicId")
                    if t.get("Name") and tid and tid != ZERO_UUID:
                        self.topic_ids[t["Name"]] = tid
            self.cond.notify_all()

    def learn_producer(self, cpid: int, cepoch: int, pid: int, epoch: int) -> None:
        if cpid is None or cpid < 0:
            return
        self.producers[cpid] = (pid, epoch)
        if cepoch is not None and cepoch >= 0:
            self.epochs[(cpid, cepoch)] = epoch

    def _pair_members(self, captured: list, target: list) -> None:
        """The leader's member lists (captured, the target's): a member's own JoinGroup answer pairs it
        exactly, whichever comes first; a static member pairs by its GroupInstanceId; the rest by position."""
        taken = {self.members[c] for c in self.own_members if c in self.members}
        left = [r.get("MemberId") for r in target if r.get("MemberId") and r.get("MemberId") not in taken]
        by_instance = {r.get("GroupInstanceId"): r.get("MemberId") for r in target if r.get("GroupInstanceId")}
        unpaired = []
        for c in captured:
            cid = c.get("MemberId")
            if not cid or cid in self.own_members:
                continue
            r = by_instance.get(c.get("GroupInstanceId")) if c.get("GroupInstanceId") else None
            if r in left:
                self.members[cid] = r
                left.remove(r)
            else:
                unpaired.append(cid)
        if len(unpaired) == len(left):
            for cid, r in zip(unpaired, left, strict=True):
                self.members[cid] = r

    def _member(self, captured, target, group) -> None:
        if target:
            if captured:
                self.members[captured] = target
            if group is not None:
                self.latest_member[group] = target

    def _generation(self, group, captured, target, *, floor: int) -> None:
        if group is None or target is None or target < floor:
            return
        if captured is not None and captured >= floor:
            self.generations[(group, captured)] = target
        self.latest_generation[group] = target

    def learn_topic_ids(self, answer: dict) -> None:
        with self.cond:
            for t in answer.get("Topics") or []:
                if t.get("Name") and t.get("TopicId") and t["TopicId"] != ZERO_UUID:
                    self.topic_ids[t["Name"]] = t["TopicId"]

    # -- rewriting requests -----------------------------------------------------------------
    def unknown_producers(self, body: dict, api_name: str) -> set:
        """Captured producer ids in this request that no InitProducerId answer has mapped yet."""
        pids = produce_pids(body) if api_name == "Produce" else set()
        if api_name != "InitProducerId":
            pids |= {p for p in values(body, "ProducerId") if p >= 0}
        with self.cond:
            return {p for p in pids if p not in self.producers}

    def unknown_topic_names(self, body: dict) -> set:
        """Names of captured topic ids the target's id is not known for yet."""
        with self.cond:
            return {
                self.topic_names[t]
                for t in values(body, "TopicId")
                if isinstance(t, uuid.UUID)
                and t != ZERO_UUID
                and t in self.topic_names
                and self.topic_names[t] not in self.topic_ids
            }

    def rewrite(self, msg, api_name: str, connection=None) -> tuple[bytes | None, list[str]]:
        """The decoded planned request with every learned value put in: (frame to send, or None when
        nothing changed; one line per value changed)."""
        body, changes = msg.body, []
        with self.cond:
            if (
                api_name == "JoinGroup"
                and body.get("MemberId") == ""
                and (body.get("GroupId"), connection) in self.joined
            ):
                # the replay already joined for this connection (the target asked for a member id where
                # the captured broker had not): join again as that member, not as another one
                body["MemberId"] = self.joined[(body["GroupId"], connection)]
                changes.append(f"MemberId '' -> {body['MemberId']!r}")
            self._walk(body, api_name, body.get("GroupId"), "", changes)
            if api_name == "Produce":
                self._records(body, changes)
            for c in changes:
                self.counts[c.split(" ", 1)[0].rsplit(".", 1)[-1].split("[", 1)[0]] += 1
        if not changes:
            return None, []
        header = {k: v for k, v in msg.header.items() if k not in ("RequestApiKey", "RequestApiVersion")}
        return encode_request(msg.api_key, msg.api_version, header, body), changes

    def _walk(self, obj: dict, api: str, group, path: str, changes: list) -> None:
        group = obj.get("GroupId", group)
        captured = dict(obj)  # ProducerEpoch is looked up by the captured ProducerId beside it
        for k, v in captured.items():
            p = f"{path}{k}"
            if isinstance(v, list):
                for i, item in enumerate(v):
                    if isinstance(item, dict):
                        self._walk(item, api, group, f"{p}[{i}].", changes)
                continue
            if isinstance(v, dict):
                self._walk(v, api, group, f"{p}.", changes)
                continue
            new = self._mapped(k, v, captured, group, api)
            if new is not None and new != v:
                obj[k] = new
                changes.append(f"{p} {_show(v)} -> {_show(new)}")

    def _mapped(self, field: str, v, obj: dict, group, api: str):
        if field == "MemberId" and v:
            if v in self.members:
                return self.members[v]
            # handed out in an answer the replay left out (filtered, or before a midstream capture began)
            known = ("member", v) in self.handed_out or not self.handed_out
            return self.latest_member.get(group) if known and group is not None else None
        if field in GENERATION_FIELDS and isinstance(v, int) and group is not None:
            floor = 1 if field == "MemberEpoch" or api == "ConsumerGroupHeartbeat" else 0
            if v < floor:
                return None
            if (group, v) in self.generations:
                return self.generations[(group, v)]
            known = ("generation", group, v) in self.handed_out or not self.handed_out
            return self.latest_generation.get(group) if known else None
        if field == "ProducerId" and isinstance(v, int) and v >= 0 and v in self.producers:
            return self.producers[v][0]
        if field == "ProducerEpoch" and isinstance(v, int) and v >= 0:
            cpid = obj.get("ProducerId")
            if cpid in self.producers:
                return self.epochs.get((cpid, v), self.producers[cpid][1])
            return None
        if field == "SessionId" and api == "Fetch" and v:
            return self.fetch_sessions.get(v)
        if field == "SessionEpoch" and api == "Fetch" and isinstance(v, int) and v > 0:
            # the target opened no session where the captured broker did: the incremental fetches of that
            # session go as sessionless ones (id 0, epoch -1), as a client does after such an answer
            return -1 if self.fetch_sessions.get(obj.get("SessionId")) == 0 else None
        if field == "TopicId" and isinstance(v, uuid.UUID) and v != ZERO_UUID:
            name = self.topic_names.get(v)
            return self.topic_ids.get(name) if name else None
        return None

    def _records(self, body: dict, changes: list) -> None:
        """Idempotent batches: target producer id and epoch, base sequences renumbered per partition
        (so a replay that leaves some batches out still sends gap-free sequences); CRCs recomputed."""
        for t in body.get("TopicData") or []:
            topic = t.get("Name") or t.get("TopicId")
            for p in t.get("PartitionData") or []:
                data = p.get("Records")
                if not data:
                    continue
                batches = [b for b in read_record_set(data).batches if b.magic == 2 and b.producer_id >= 0]
                if not batches:
                    continue
                b0 = batches[0]
                if b0.producer_id not in self.producers:
                    continue
                pid, epoch = self.producers[b0.producer_id]
                epoch = self.epochs.get((b0.producer_id, b0.producer_epoch), epoch)
                key = (pid, epoch, topic, p.get("Index"))
                seq = self.sequences.get(key, 0)
                p["Records"], nxt = rewrite_records(data, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
                self.sequences[key] = nxt
                changes.append(
                    f"TopicData[{topic}].PartitionData[{p.get('Index')}].Records producer "
                    f"{b0.producer_id}/{b0.producer_epoch} seq {b0.base_sequence} -> "
                    f"{pid}/{epoch} seq {seq}"
                )


def _show(v) -> str:
    return str(v) if not isinstance(v, str) else repr(v)
