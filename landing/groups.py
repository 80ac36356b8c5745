"""Consumer-group rebalances as data: the `group_generations` and `group_assignments` tables.

A pure function of the group APIs' exchanges (rows of the `exchanges` table, in any order),
so that every engine derives them the same way from what it landed: the local engine from its
own rows, Spark from the exchanges it wrote, the report from a capture's exchanges. A group's
members talk over connections of their own, which Spark lands in different buckets: the tables
are made once all of a group's exchanges are in, not per connection.

Two protocols:

- classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup; consumer, connect and other
  protocol types): one row per generation. The rebalance began with the first event after the
  previous generation settled that asks for one: a JoinGroup, a LeaveGroup, or an answer that
  tells a member to rejoin (REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); it
  settled with the last successful SyncGroup answer of the generation. Assignments come from
  the leader's SyncGroup request (decoded consumer-protocol Assignments), else from each
  member's SyncGroup answer.
- KIP-848 groups (ConsumerGroupHeartbeat; ShareGroupHeartbeat and StreamsGroupHeartbeat alike):
  one row per epoch the members were moved to. The rebalance began with the heartbeat that
  asked for it (a member joining with epoch 0, leaving with -1 or -2, a new subscription, or an
  answer FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID) and settled with the last heartbeat answer of
  that epoch that delivered an assignment. Streams groups assign tasks, not partitions: they
  have generation rows and no assignment rows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["GROUP_APIS", "day", "rebalances", "write_tables"]

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 11, 12, 13, 14
CONSUMER_HEARTBEAT, SHARE_HEARTBEAT, STREAMS_HEARTBEAT = 68, 76, 88
# the answers that send a classic member back to JoinGroup, by name
_REJOIN = {27: "rebalance_in_progress", 25: "unknown_member_id", 22: "illegal_generation"}
_FENCED = {110: "fenced_member_epoch", 25: "unknown_member_id"}
_PROTOCOL = {CONSUMER_HEARTBEAT: "consumer", SHARE_HEARTBEAT: "share", STREAMS_HEARTBEAT: "streams"}
# a classic group's APIs, and the other API a classic member may be told to rejoin by
_CLASSIC = (JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, OFFSET_COMMIT)
# what the tables are made from
GROUP_APIS = (*_CLASSIC, *_PROTOCOL)
# the column whose UTC day is a row's `date` partition
_WHEN = {"group_generations": "began", "group_assignments": "ts"}


@dataclass
class _Gen:
    group: str
    protocol: str
    generation: int
    began: object = None
    settled: object = None
    trigger: str | None = None
    trigger_detail: str | None = None
    reason: str | None = None  # the client's own words (KIP-800), where the protocol carries them
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict = field(default_factory=dict)  # member id -> {client_id, client, instance_id}
    owned: dict = field(default_factory=dict)  # member id -> [(topic, partition), ...]


def _body(text):
    if not text:
        return {}
    try:
        v = json.loads(text)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _host(client: str | None) -> str | None:
    return client.rsplit(":", 1)[0] if client else None


def _ts_key(row):
    return (row.get("ts") or row.get("response_ts"), row.get("correlation_id") or 0)


def _partitions(assignment: dict) -> list[tuple[str, int]]:
    """(topic, partition) of a decoded ConsumerProtocolAssignment or a KIP-848 Assignment."""
    out = []
    for t in assignment.get("AssignedPartitions") or assignment.get("TopicPartitions") or []:
        topic = t.get("Topic") or t.get("TopicName") or t.get("TopicId")
        out += [(topic, int(p)) for p in t.get("Partitions") or []]
    return out


def rebalances(rows: Iterable[dict]) -> tuple[list[dict], list[dict]]:
    """(group_generations rows, group_assignments rows) from exchange rows: dicts with the
    exchanges table's ts, response_ts, client, client_id, api_key, status, error_codes,
    group_id, correlation_id, request_json and response_json (others are ignored)."""
    by_group: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("api_key") in GROUP_APIS and r.get("group_id"):
            by_group[r["group_id"]].append(r)
    gens: list[_Gen] = []
    for group, events in sorted(by_group.items()):
        events.sort(key=_ts_key)
        if any(e["api_key"] in (JOIN_GROUP, SYNC_GROUP) for e in events):
            gens += _classic(group, [e for e in events if e["api_key"] in _CLASSIC])
        for key, protocol in _PROTOCOL.items():
            beats = [e for e in events if e["api_key"] == key]
            if beats:
                gens += _heartbeats(group, protocol, beats)
    return _rows(gens)


def _when(e: dict):
    """When an exchange acts on a classic group: a JoinGroup or LeaveGroup when it is asked; a
    SyncGroup, Heartbeat or OffsetCommit when its answer settles the group or tells a member to
    rejoin (a heartbeat sent before another member's JoinGroup can be answered after it)."""
    if e["api_key"] in (JOIN_GROUP, LEAVE_GROUP) or e.get("response_ts") is None:
        return e.get("ts") or e.get("response_ts")
    return e["response_ts"]


def _classic(group: str, events: list[dict]) -> list[_Gen]:
    events = sorted(events, key=lambda e: (_when(e), e.get("correlation_id") or 0))
    gens: dict[int, _Gen] = {}
    begin = trigger = detail = why = None  # the rebalance asked for since the last one settled
    subscriptions: dict[str, list] = {}  # member id -> topics it last subscribed to
    noop: set = set()  # members given a settled generation again, whose next SyncGroup settles nothing
    for e in events:
        req, resp = _body(e.get("request_json")), _body(e.get("response_json"))
        key, ts = e["api_key"], e.get("ts")
        code = resp.get("ErrorCode")
        if key == JOIN_GROUP:
            said = req.get("Reason") or None  # JoinGroup v8+
            if begin is None:
                begin = ts
                trigger = "member_joined" if not req.get("MemberId") else "member_rejoined"
                detail = req.get("MemberId") or e.get("client_id")
                why = said
            if code != 0 or "GenerationId" not in resp:
                continue
            g = gens.setdefault(resp["GenerationId"], _Gen(group, "classic", resp["GenerationId"]))
            if g.settled is not None:
                # a member rejoining a stable group with the same subscription is given the current
                # generation again: no rebalance, and its SyncGroup that follows settles nothing
                noop.add(resp.get("MemberId"))
                begin = trigger = detail = why = None
                continue
            if g.began is None:
                g.began, g.trigger, g.trigger_detail, g.reason = begin, trigger, detail, why
            # begun by an answer (told to rejoin): the first member that says why, in its JoinGroup
            g.reason = g.reason or said
            g.protocol_type = resp.get("ProtocolType") or req.get("ProtocolType") or g.protocol_type
            g.protocol_name = resp.get("ProtocolName") or g.protocol_name
            g.leader = resp.get("Leader") or g.leader
            me = resp.get("MemberId")
            if me:
                g.members[me] = {
                    "member_id": me,
                    "client_id": e.get("client_id"),
                    "host": _host(e.get("client")),
                    "instance_id": req.get("GroupInstanceId"),
                }
            for m in resp.get("Members") or []:  # the leader's answer: everyone's subscription
                topics = (m.get("MetadataDecoded") or {}).get("Topics")
                if topics is not None:
                    before = subscriptions.get(m.get("MemberId"))
                    if before is not None and sorted(before) != sorted(topics) and g.trigger == "member_rejoined":
                        g.trigger, g.trigger_detail = "subscription_changed", m.get("MemberId")
                    subscriptions[m.get("MemberId")] = topics
        elif key == SYNC_GROUP:
            g = gens.get(req.get("GenerationId"))
            if g is None:
                continue
            for a in req.get("Assignments") or []:  # the leader's: what every member gets
                decoded = a.get("AssignmentDecoded")
                if isinstance(decoded, dict) and "_error" not in decoded:
                    g.owned[a.get("MemberId")] = _partitions(decoded)
            decoded = resp.get("AssignmentDecoded")
            me = req.get("MemberId")
            if isinstance(decoded, dict) and "_error" not in decoded and me not in g.owned:
                g.owned[me] = _partitions(decoded)
            if code == 0:
                if me in noop:
                    noop.discard(me)
                else:
                    g.settled = max(filter(None, (g.settled, e.get("response_ts"))), default=None)
                begin = trigger = detail = why = None
            elif code in _REJOIN and begin is None:
                begin, trigger, detail, why = e.get("response_ts") or ts, _REJOIN[code], me, None
        elif key == LEAVE_GROUP:
            if begin is None:
                members = req.get("Members") or []
                left = [m.get("MemberId") for m in members] or [req.get("MemberId")]
                said = [m.get("Reason") for m in members if m.get("Reason")]  # LeaveGroup v5+
                begin, trigger, detail = ts, "member_left", ",".join(filter(None, left))
                why = said[0] if said else None
        elif begin is None:  # Heartbeat, OffsetCommit: told to rejoin
            codes = [c for c in e.get("error_codes") or [] if c in _REJOIN]
            if codes:
                begin, trigger, detail, why = _when(e), _REJOIN[codes[0]], req.get("MemberId"), None
    return sorted(gens.values(), key=lambda g: g.generation)


def _heartbeats(group: str, protocol: str, beats: list[dict]) -> list[_Gen]:
    """KIP-848 rows. The broker moves a group by epochs, each member at its own heartbeat: a
    member that must give partitions up is sent its smaller assignment at its old epoch (a
    revocation, part of the move to the next epoch) and is bumped to the new epoch once it has;
    a member bumped to an epoch with no assignment in the answer keeps what it holds. A row per
    epoch, holding what each member held at that epoch; a rebalance asked for (a join, a leave,
    a fencing) belongs to the next epoch the members are moved to."""
    gens: dict[int, _Gen] = {}
    subscribed: dict[str, list] = {}
    held: dict[str, list] = {}  # member id -> the partitions it holds
    revoked: dict[str, list] = {}  # member id -> what it keeps once its revocation is done
    at: dict[str, int] = {}  # member id -> its epoch
    known: dict[str, dict] = {}  # member id -> its member columns
    top = -1  # the newest epoch any member was given
    begin = trigger = detail = None
    for e in beats:
        req, resp = _body(e.get("request_json")), _body(e.get("response_json"))
        ts, code = e.get("ts"), resp.get("ErrorCode")
        member, asked = req.get("MemberId") or resp.get("MemberId"), req.get("MemberEpoch")
        topics = req.get("SubscribedTopicNames")
        if begin is None:
            if asked == 0:
                begin, trigger, detail = ts, "member_joined", e.get("client_id")
            elif asked is not None and asked < 0:
                begin, trigger, detail = ts, "member_left", member
            elif code in _FENCED:
                begin, trigger, detail = ts, _FENCED[code], member
            elif topics is not None and member in subscribed and sorted(subscribed[member]) != sorted(topics):
                begin, trigger, detail = ts, "subscription_changed", member
        if topics is not None and member:
            subscribed[member] = topics
        if code == 0 and asked is not None and asked < 0:  # left: it holds nothing now
            for d in (held, revoked, at, known):
                d.pop(member, None)
        epoch = resp.get("MemberEpoch")
        if code != 0 or epoch is None or epoch < 0:
            continue
        me = resp.get("MemberId") or member
        known[me] = {"member_id": me, "client_id": e.get("client_id"), "host": _host(e.get("client"))}
        known[me]["instance_id"] = req.get("InstanceId")
        assignment = resp.get("Assignment")
        parts = _partitions(assignment) if isinstance(assignment, dict) and protocol != "streams" else None
        bumped = at.get(me) != epoch
        if parts is not None and not bumped and set(parts) < set(held.get(me, ())):
            revoked[me] = parts  # given up on the way to the next epoch
            continue
        if bumped:
            at[me] = epoch
            if me in revoked:
                held[me] = revoked.pop(me)
        if parts is not None:
            held[me] = parts
        if epoch > top:  # a new epoch: the rebalance asked for, if any, is this one
            top = epoch
            g = gens[epoch] = _Gen(group, protocol, epoch)
            g.began = begin if begin is not None else ts
            g.trigger, g.trigger_detail = (trigger, detail) if begin is not None else ("epoch_bumped", me)
            begin = trigger = detail = None
        elif epoch < top or begin is not None:
            continue  # a member still on its way, or the next rebalance already asked for
        g = gens[epoch]
        if bumped or parts is not None:
            g.settled = max(filter(None, (g.settled, e.get("response_ts"))), default=None)
        g.members[me] = known[me]
        if protocol != "streams":
            g.owned[me] = list(held.get(me, []))
    return sorted(gens.values(), key=lambda g: g.generation)


def _rows(gens: list[_Gen]) -> tuple[list[dict], list[dict]]:
    out, assigned = [], []
    previous: dict[tuple[str, str], dict] = {}  # (group, protocol) -> (topic, partition) -> member
    for g in gens:
        owner = {tp: m for m, tps in g.owned.items() for tp in tps}
        before = previous.get((g.group, g.protocol))
        moved = None if before is None else sum(1 for tp, m in owner.items() if before.get(tp) not in (None, m))
        if g.owned:
            previous[(g.group, g.protocol)] = owner
        stopped = None
        if g.began is not None and g.settled is not None:
            stopped = max(0.0, (g.settled - g.began).total_seconds() * 1000.0)
        out.append(
            {
                "group_id": g.group,
                "protocol": g.protocol,
                "protocol_type": g.protocol_type if g.protocol == "classic" else g.protocol,
                "protocol_name": g.protocol_name,
                "generation": g.generation,
                "leader": g.leader,
                "members": sorted(g.members.values(), key=lambda m: m["member_id"]),
                "member_count": len(g.members),
                "began": g.began,
                "settled": g.settled,
                "stopped_ms": stopped,
                "trigger": g.trigger,
                "trigger_detail": g.trigger_detail,
                "reason": g.reason,
                "partitions": len(owner) if g.owned else None,
                "moved": moved,
            }
        )
        for m, tps in sorted(g.owned.items(), key=lambda kv: str(kv[0])):
            cid = g.members.get(m, {}).get("client_id")
            for topic, partition in tps:
                was = None if before is None else before.get((topic, partition))
                assigned.append(
                    {
                        "group_id": g.group,
                        "protocol": g.protocol,
                        "generation": g.generation,
                        "member_id": m,
                        "client_id": cid,
                        "topic": topic,
                        "partition": partition,
                        "ts": g.settled or g.began,
                        "previous_member": was if was != m else None,
                    }
                )
    return out, assigned


def day(row: dict, table: str) -> str | None:
    """A row's `date` partition: the UTC day a generation began, or an assignment was delivered."""
    import datetime

    when = row[_WHEN[table]]
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%d") if when else None


def write_tables(rows: Iterable[dict], out, name: str) -> dict[str, int]:
    """rebalances(rows) written as the two tables under `out` (out/<table>/date=YYYY-MM-DD/<name>,
    by day()); rows per table."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from landing import pyrows
    from landing.schemas import DERIVED, PARTITION, SCHEMAS

    counts = {}
    for table, data in zip(DERIVED, rebalances(rows), strict=True):
        counts[table] = len(data)
        by_date: dict = {}
        for r in data:
            by_date.setdefault(day(r, table) or "__HIVE_DEFAULT_PARTITION__", []).append(r)
        for d, part in by_date.items():
            folder = Path(out) / table / f"{PARTITION}={d}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(pyrows.table(part, SCHEMAS[table]), folder / name)
    return counts
