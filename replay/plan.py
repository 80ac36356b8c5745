"""Replay planning: which captured requests to send, at which version, and why others are skipped.

Pure functions over the dissector's exchanges (no sockets, no files): `plan()` takes the exchanges and
the target's ApiVersions ranges and returns one `Conn` per captured connection.
"""

from __future__ import annotations

import fnmatch
import uuid
from dataclasses import dataclass, field

from protocol import registry
from protocol.codec import decode_request, encode_request
from protocol.records import Record, build_batch, read_record_set
from protocol.secrets import SECRET_REQUESTS

# Requests that change the broker's state; skipped unless allow_writes (issue 8's guard list).
WRITE_APIS = frozenset(
    {
        "Produce",
        "CreateTopics",
        "DeleteTopics",
        "DeleteRecords",
        "CreatePartitions",
        "AlterConfigs",
        "IncrementalAlterConfigs",
        "CreateAcls",
        "DeleteAcls",
        "AlterClientQuotas",
        "AlterUserScramCredentials",
        "OffsetCommit",
        "TxnOffsetCommit",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        "InitProducerId",
        "WriteTxnMarkers",
        "DeleteGroups",
        "OffsetDelete",
        "AlterPartitionReassignments",
        "ElectLeaders",
        "AlterReplicaLogDirs",
        "CreateDelegationToken",
        "RenewDelegationToken",
        "ExpireDelegationToken",
        "UnregisterBroker",
        "UpdateFeatures",
    }
)
# Brokers' and controllers' own requests (a capture on a broker's port sees them too): never replayed.
INTER_BROKER = frozenset(
    {
        "LeaderAndIsr",
        "StopReplica",
        "UpdateMetadata",
        "ControlledShutdown",
        "WriteTxnMarkers",
        "Vote",
        "BeginQuorumEpoch",
        "EndQuorumEpoch",
        "AlterPartition",
        "Envelope",
        "FetchSnapshot",
        "BrokerRegistration",
        "BrokerHeartbeat",
        "AllocateProducerIds",
        "ControllerRegistration",
        "AddRaftVoter",
        "RemoveRaftVoter",
        "UpdateRaftVoter",
        "AssignReplicasToDirs",
    }
)
# Captured SASL tokens are never re-sent: with credentials the sender logs in afresh in their place.
SASL_APIS = frozenset({"SaslHandshake", "SaslAuthenticate"})


@dataclass
class Step:
    """One captured request and what the replay does with it."""

    exchange: object  # the dissector's Exchange
    action: str  # "send" or "skip"
    version: int | None = None  # the version sent
    frame: bytes | None = None  # the request frame to send (no size prefix)
    changes: list = field(default_factory=list)  # version rewrite notes, one string each
    reason: str = ""  # why skipped
    expect_response: bool = True
    login: str = ""  # "handshake"/"authenticate": replaced by the sender's fresh SASL login
    keys: set = field(default_factory=set)  # shared state touched (session.keys)
    deps: list = field(default_factory=list)  # earlier steps whose answers this one must wait for


@dataclass
class Conn:
    connection: int
    client: str
    broker: str
    steps: list
    inflight: int = 1  # most requests the client had in flight at once
    login_first: bool = False  # log in (SASL) right after connecting: the capture had no login


def _type_default(f: dict, version: int):
    t = f["type"]
    if f.get("array") or t.startswith("[]"):
        return []
    if "default" in f and f["default"] not in ("", None):
        d = f["default"]
        if t.startswith("int") or t == "uint16":
            return int(d, 0) if isinstance(d, str) else int(d)
        if t == "bool":
            return d in (True, "true")
        if t == "float64":
            return float(d)
        return d
    if t.startswith("int") or t.startswith("uint"):
        return 0
    if t == "float64":
        return 0.0
    if t == "bool":
        return False
    if t == "uuid":
        return uuid.UUID(int=0)  # Kafka's zero uuid (its JSON default "AAAAAAAAAAAAAAAAAAAAAA", base64)
    if t in ("bytes", "records"):
        return None if _in(f.get("nullable"), version) or t == "records" else b""
    if t == "string":
        return None if _in(f.get("nullable"), version) else ""
    return {} if f.get("fields") else None


def _in(rng, v: int) -> bool:
    return bool(rng) and rng[0] <= v <= rng[1]


def adapt_body(fields: list, body: dict, old: int, new: int, path: str = "") -> tuple[dict, list]:
    """Body decoded at `old` reshaped for `new`: fields absent at `new` dropped, new ones defaulted.
    Returns (body, changes)."""
    out, changes = {}, []
    for f in fields:
        name, here, there = f["name"], _in(f["versions"], old), _in(f["versions"], new)
        p = f"{path}{name}"
        if here and not there:
            if name in body:
                changes.append(f"dropped {p}={body[name]!r}")
            continue
        if not there:
            continue
        if here and name in body:
            v = body[name]
            if f.get("fields") and isinstance(v, list):
                items = []
                for i, item in enumerate(v):
                    b, c = adapt_body(f["fields"], item, old, new, f"{p}[{i}].")
                    items.append(b)
                    changes += c
                v = items
            elif f.get("fields") and isinstance(v, dict):
                v, c = adapt_body(f["fields"], v, old, new, f"{p}.")
                changes += c
            out[name] = v
        else:
            out[name] = _type_default(f, new)
            changes.append(f"added {p}={out[name]!r}")
    return out, changes


def choose_version(api_key: int, version: int, ranges: dict) -> int | None:
    """The captured version if the target supports it, else the nearest one it supports (and we encode)."""
    rng = ranges.get(api_key)
    if rng is None:
        return None
    lo, hi = rng
    # Kafka 4 (KIP-896; its Fetch floor is 4) still advertises Produce v0-2 but closes the connection
    # on them, so behind that floor the versions Kafka 4 removed count as unsupported.
    kip896 = ranges.get(1, (0, 0))[0] >= 4
    usable = [
        v
        for v in range(lo, hi + 1)
        if registry.has(api_key, v) and not (kip896 and registry.removed_in_kafka4(api_key, v))
    ]
    if version in usable or (lo <= version <= hi and not registry.has(api_key, version)):
        return version
    ok = usable
    return min(ok, key=lambda v: (abs(v - version), -v)) if ok else None


def rewrite(exchange, ranges: dict) -> Step:
    """The step for one exchange: send as captured, re-encode at another version, or skip."""
    key, ver = exchange.api_key, exchange.api_version
    if key in SECRET_REQUESTS:
        # the dissector starred the HMAC or SCRAM credentials in it: sending that would renew nothing, or
        # set a credential nobody knows
        return Step(exchange, "skip", reason=f"{exchange.api_name}: carries secrets, redacted in the capture")
    new = choose_version(key, ver, ranges)
    if new is None:
        rng = ranges.get(key)
        why = "target does not support this API" if rng is None else f"target supports v{rng[0]}-{rng[1]} only"
        return Step(exchange, "skip", reason=f"{exchange.api_name} v{ver}: {why}")
    msg = decode_request(exchange.request_raw)
    expect = not (exchange.api_name == "Produce" and msg.body.get("Acks") == 0)
    if new == ver:
        return Step(exchange, "send", ver, bytes(exchange.request_raw), expect_response=expect)
    old_seg = registry.schema(key, ver, "request")
    body, changes = adapt_body(old_seg["fields"] if old_seg else [], msg.body, ver, new)
    if key == 0 and ver < 3 <= new:
        try:
            _to_batches(body, changes)
        except Exception as e:  # noqa: BLE001 - a message set we cannot read does not survive
            return Step(exchange, "skip", reason=f"Produce v{ver}->v{new}: message set not convertible: {e}")
    header = {k: v for k, v in msg.header.items() if k not in ("RequestApiKey", "RequestApiVersion")}
    try:
        frame = encode_request(key, new, header, body)
        decode_request(frame)  # what we send must read back as the target version
    except Exception as e:  # noqa: BLE001 - any encoder failure means the body does not survive
        return Step(exchange, "skip", reason=f"{exchange.api_name} v{ver}->v{new} does not re-encode: {e}")
    return Step(exchange, "send", new, frame, [f"v{ver}->v{new}"] + changes, expect_response=expect)


def _to_batches(body: dict, changes: list) -> None:
    """Produce v3+ carries only magic 2 batches: turn legacy message sets (Produce v0-2) into one
    uncompressed batch per partition, keeping keys, values and timestamps."""
    for t in body.get("TopicData", []):
        for p in t.get("PartitionData", []):
            data = p.get("Records")
            if not data:
                continue
            rs = read_record_set(data)
            magics = {b.magic for b in rs.batches}
            if magics <= {2}:
                continue
            recs = [
                Record(offset=i, timestamp=r.timestamp if r.timestamp is not None else -1, key=r.key, value=r.value)
                for i, r in enumerate(rs.records())
            ]
            p["Records"] = build_batch(recs)
            changes.append(
                f"TopicData[{t.get('Name')}].PartitionData[{p.get('Index')}].Records: message set "
                f"magic {'/'.join(map(str, sorted(magics)))} -> batch v2, {len(recs)} records, "
                f"uncompressed"
            )


def _inflight(exchanges: list) -> int:
    most = 1
    for i, e in enumerate(exchanges):
        if e.ts is None:
            continue
        n = sum(1 for p in exchanges[:i] if p.response_ts is not None and p.response_ts > e.ts) + 1
        most = max(most, n)
    return most


def plan(
    exchanges,
    ranges: dict,
    *,
    apis=(),
    client_id: str | None = None,
    connection: int | None = None,
    allow_writes: bool = False,
    sasl=None,
    keep=None,
) -> list[Conn]:
    """Per captured connection (captured order), the steps of a replay against a target with `ranges`
    ({api_key: (min, max)}). Exchanges the filters leave out are not listed at all; `keep` is one more
    filter (a dissector.filters.Filter or any predicate on exchanges). `sasl`: replay.sasl.Credentials."""
    wanted = {a.lower() for a in apis}
    conns: dict[int, Conn] = {}
    by_conn: dict[int, list] = {}
    logins: dict[int, list] = {}
    for e in exchanges:
        if getattr(e, "type", "") != "exchange" or e.api_key is None or e.request_raw is None:
            continue
        if connection is not None and e.connection != connection:
            continue
        if wanted and e.api_name.lower() not in wanted:
            continue
        if client_id is not None and not fnmatch.fnmatchcase(e.client_id or "", client_id):
            continue
        if keep is not None and not keep(e):
            # a login is kept wherever something else on its connection is (it comes before it)
            if e.api_name in SASL_APIS:
                logins.setdefault(e.connection, []).append(e)
            continue
        by_conn.setdefault(e.connection, []).append(e)
    for cid, xs in logins.items():
        if cid in by_conn:
            by_conn[cid] += xs
    for cid, xs in sorted(by_conn.items()):
        xs.sort(key=lambda e: e.ts if e.ts is not None else float("inf"))
        steps = []
        for e in xs:
            if e.api_name in SASL_APIS and sasl is not None:
                first = e.api_name == "SaslHandshake"
                steps.append(
                    Step(
                        e,
                        "send",
                        e.api_version,
                        login="handshake" if first else "authenticate",
                        changes=[
                            f"captured SASL {'login' if first else 'token'} replaced by a fresh {sasl.mechanism} login"
                        ],
                    )
                )
            elif e.api_name in SASL_APIS:
                steps.append(
                    Step(
                        e,
                        "skip",
                        reason="SASL: captured tokens are never re-sent (log in afresh with "
                        "--sasl-mechanism, --sasl-username, --sasl-password-env)",
                    )
                )
            elif e.api_name in INTER_BROKER:
                steps.append(Step(e, "skip", reason="inter-broker request (a broker's own, not a client's)"))
            elif e.api_name in WRITE_APIS and not allow_writes:
                steps.append(Step(e, "skip", reason="write (use --allow-writes)"))
            else:
                steps.append(rewrite(e, ranges))
        conns[cid] = Conn(
            cid,
            xs[0].client,
            xs[0].broker,
            steps,
            _inflight(xs),
            login_first=sasl is not None and not any(s.login for s in steps),
        )
    out = list(conns.values())
    _link(out)
    return out


def _link(conns: list[Conn]) -> None:
    """Keys and waits: a request that uses a value the target hands out (member id, generation, producer
    id, fetch session) waits for the earlier answer it is learned from, and requests on the same group or
    producer keep their captured order across connections (a transaction's AddPartitionsToTxn before its
    Produce), and requests naming a topic wait for its CreateTopics/DeleteTopics. A request waits only for
    answers the capture shows arrived before it was sent, and per connection and key for the latest such
    one (a connection's answers come in order)."""
    from replay import session

    sends = sorted(
        (
            (s.exchange.ts if s.exchange.ts is not None else float("inf"), c.connection, i, s)
            for c in conns
            for i, s in enumerate(c.steps)
            if s.action == "send" and s.frame is not None
        ),
        key=lambda t: t[:3],
    )
    ids = session.captured_topic_ids(s.exchange for c in conns for s in c.steps)
    last: dict = {}  # key -> {connection: latest steps, oldest first}
    used: dict = {}  # topic key -> {connection: latest steps naming it}

    def answered_before(steps: list, ts) -> Step | None:
        # Causality as captured: the client can only have waited for answers it had when it sent this
        # request; an earlier request still unanswered then (a JoinGroup the broker held for seconds) is
        # not waited for, or the replay would lag the capture by as long.
        for t in reversed(steps):
            rts = t.exchange.response_ts
            if rts is not None and (ts is None or rts <= ts):
                return t
        return None

    for _, cid, _, s in sends:
        try:
            body = decode_request(s.frame).body
        except Exception:  # noqa: BLE001 - a frame we cannot read is sent as it is
            continue
        s.keys = session.keys(s.exchange, body, ids)
        admin = session.creates_topics(s.exchange.api_name, body)
        seen = set()
        for k in s.keys:
            # a topic orders only around its creation or deletion: its uses wait for the admin request
            # before them, and the admin request for the uses before it
            earlier = list(last.get(k, {}).items()) + (list(used.get(k, {}).items()) if admin else [])
            for ocid, steps in earlier:
                t = answered_before(steps, s.exchange.ts)
                if t is None:
                    continue
                if (ocid != cid or t.exchange.api_name in session.WAITED_FOR) and id(t) not in seen:
                    seen.add(id(t))
                    s.deps.append(t)
        for k in s.keys | ({("topic", "*")} if admin else set()):
            if k[0] != "topic" or admin:
                _keep(last.setdefault(k, {}).setdefault(cid, []), s)
            if k[0] == "topic":
                _keep(used.setdefault(k, {}).setdefault(cid, []), s)


def _keep(steps: list, s: Step, n: int = 16) -> None:
    steps.append(s)
    if len(steps) > n:
        del steps[0]


def summary(conns: list[Conn]) -> list[str]:
    """The plan as text lines (what --dry-run prints)."""
    lines = [f"{len(conns)} connection(s)"]
    per: dict[str, list[int]] = {}
    for c in conns:
        sent = sum(s.action == "send" for s in c.steps)
        lines.append(
            f"connection {c.connection} {c.client} -> {c.broker}: {sent} to send, "
            f"{len(c.steps) - sent} skipped, up to {c.inflight} in flight"
        )
        if c.login_first:
            lines.append("  login (SASL) on connect: the capture has none on this connection")
        for s in c.steps:
            n = per.setdefault(s.exchange.api_name, [0, 0, 0, 0])
            n[0 if s.action == "send" else 2] += 1
            if s.action == "send" and any(k[0] in AT_SEND for k in s.keys):
                n[3] += 1
            if s.changes:
                n[1] += 1
                lines.append(
                    f"  rewrite {s.exchange.api_name} corr={s.exchange.correlation_id}: " + "; ".join(s.changes)
                )
            if s.action == "skip":
                lines.append(
                    f"  skip {s.exchange.api_name} v{s.exchange.api_version} "
                    f"corr={s.exchange.correlation_id}: {s.reason}"
                )
    lines.append("api                            send  rewritten  skip  at-send")
    for name, (a, b, c, d) in sorted(per.items()):
        lines.append(f"{name:<30} {a:>4} {b:>10} {c:>5} {d:>8}")
    lines.append(
        "(at-send: requests naming a group, producer, transaction or fetch session, whose ids are "
        "replaced by the target's when sent)"
    )
    return lines


# Keys whose requests carry ids the target hands out (replaced at send time; see replay.session).
AT_SEND = frozenset({"group", "producer", "transaction", "fetch"})
