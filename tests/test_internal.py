"""The records of Kafka's internal topics, decoded by the native core (native/py/src/internal.rs),
held to Kafka itself: samples/kraft3-ak.pcap is a 3-node KRaft cluster at work, and beside it
samples/kraft3-ak.json holds what its clients did and what Kafka's own DumpLogSegments decoded
from the nodes' log files after the capture (--cluster-metadata-decoder, --offsets-decoder,
--transaction-log-decoder, --share-group-state-decoder). Every record the capture carries is
compared with Kafka's reading of the record at the same offset, field by field.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dissector import native
from landing.writer import dataset

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "kraft3-ak.pcap"
WITNESS = json.loads((ROOT / "samples" / "kraft3-ak.json").read_text())
INTERNAL = ("__cluster_metadata", "__consumer_offsets", "__transaction_state", "__share_group_state")


def _kafka(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkawire", *cmd], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """The sample landed with its records."""
    out = tmp_path_factory.mktemp("lake") / "lake"
    done = _kafka(["land", str(SAMPLE), "--out", str(out), "--records"])
    assert done.returncode == 0, done.stderr
    return out


def _table(lake: Path, name: str) -> list[dict]:
    return dataset(lake, name).to_table().to_pylist()


@pytest.fixture(scope="module")
def records(lake) -> list[dict]:
    """The records table of the sample: one dict per row."""
    return _table(lake, "records")


def _internal(records, topic):
    return [r for r in records if r["topic"] == topic]


def _lower_first(k: str) -> str:
    return k[:1].lower() + k[1:]


def _kafka_uuid(s: str) -> str | None:
    """Kafka prints a Uuid as URL-safe base64 without padding."""
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except ValueError:
        return None
    return str(uuid.UUID(bytes=raw)) if len(raw) == 16 else None


def _bytes_of(ours) -> bytes | None:
    if isinstance(ours, dict) and set(ours) == {"hex"}:
        return bytes.fromhex(ours["hex"])
    if isinstance(ours, str):
        return ours.encode()
    return None


def same(ours, theirs, path: str = "") -> list[str]:
    """Where our decoded value differs from Kafka's JSON of it (Kafka's field names are the
    spec's with a lower-case first letter, its Uuids URL-safe base64, its bytes base64, and it
    prints a consumer-protocol payload decoded where we keep the bytes beside `<field>Decoded`)."""
    if isinstance(theirs, dict):
        if not isinstance(ours, dict):
            return [f"{path}: {ours!r} is not a struct"]
        keys = {_lower_first(k): k for k in ours}
        out = []
        for k, v in theirs.items():
            if k not in keys:
                out.append(f"{path}.{k}: missing")
                continue
            mine = ours[keys[k]]
            if isinstance(v, dict) and not isinstance(mine, dict) or (isinstance(mine, dict) and set(mine) == {"hex"}):
                decoded = ours.get(keys[k] + "Decoded")
                if isinstance(v, dict) and decoded is not None:
                    mine = {n: x for n, x in decoded.items() if n != "Version"}
            out += same(mine, v, f"{path}.{k}")
        return out
    if isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            return [f"{path}: {ours!r} vs {theirs!r}"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for d in same(a, b, f"{path}[{i}]")]
    if ours == theirs or ours == "<redacted>":
        return []
    if isinstance(theirs, str) and isinstance(ours, str) and _kafka_uuid(theirs) == ours:
        return []
    if isinstance(theirs, str) and _bytes_of(ours) is not None:
        try:
            if base64.b64decode(theirs, validate=True) == _bytes_of(ours):
                return []
        except ValueError:
            pass
    return [f"{path}: ours {ours!r}, Kafka's {theirs!r}"]


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_the_sample_carries_every_internal_topic(records):
    counts = Counter(r["topic"] for r in records if r["topic"] in INTERNAL)
    assert counts["__cluster_metadata"] >= 40  # raft Fetches from the two follower controllers
    assert counts["__consumer_offsets"] >= 10  # replication Fetches of the followers
    assert counts["__transaction_state"] >= 6
    assert counts["__share_group_state"] >= 4
    for r in records:
        if r["topic"] in INTERNAL:
            assert r["value_decoded"] is None or "_error" not in json.loads(r["value_decoded"]), r
            assert r["key_decoded"] is None or "_error" not in json.loads(r["key_decoded"]), r


@pytest.mark.parametrize("topic", INTERNAL)
def test_every_record_agrees_with_kafkas_dump(records, topic):
    """Each record the capture carries, against DumpLogSegments' reading of the same offset."""
    dump = {r["offset"]: r for r in WITNESS["dump"][topic]}
    checked = 0
    for r in _internal(records, topic):
        theirs = dump.get(r["offset"])
        assert theirs is not None, f"{topic} offset {r['offset']} is not in Kafka's dump"
        key = json.loads(r["key_decoded"]) if r["key_decoded"] else None
        value = json.loads(r["value_decoded"]) if r["value_decoded"] else None
        if r["control"]:
            assert theirs["control"]
            name = key["type"]
            if topic == "__cluster_metadata":
                # DumpLogSegments names the control type (LeaderChange, ...) and prints its payload
                assert _upper_snake(theirs["key"]) == name
                diffs = same(value["data"], {k: v for k, v in theirs["payload"].items() if k != "version"})
                assert not diffs, (topic, r["offset"], diffs)
            else:
                assert name in theirs["payload"], (theirs, key)  # "COMMIT coordinatorEpoch: 0"
        elif topic == "__cluster_metadata":
            assert key is None
            assert _upper_snake(value["type"]) == theirs["payload"]["type"], (value["type"], theirs)
            assert value["version"] == theirs["payload"]["version"]
            diffs = same(value["data"], theirs["payload"]["data"])
            assert not diffs, (topic, r["offset"], value["type"], diffs)
        else:
            assert key["type_id"] == int(theirs["key"]["type"])
            assert not same(key["data"], theirs["key"]["data"]), (key, theirs["key"])
            if theirs["payload"] in (None, "<DELETE>"):  # a tombstone, as DumpLogSegments prints one
                assert value is None
            else:
                assert value["version"] == int(theirs["payload"]["version"])
                diffs = same(value["data"], theirs["payload"]["data"])
                assert not diffs, (topic, r["offset"], value["type"], diffs)
        checked += 1
    assert checked >= 6


def test_topic_records_name_the_topics_the_workload_made(records):
    made = {}
    for r in _internal(records, "__cluster_metadata"):
        v = json.loads(r["value_decoded"]) if r["value_decoded"] else None
        if v and v["type"] == "TopicRecord":
            made[v["data"]["Name"]] = v["data"]["TopicId"]
    for name, facts in WITNESS["topics"].items():
        assert made[name] == facts["uuid"]
    # and the internal topics the cluster made for the groups and the transactions
    assert {"__consumer_offsets", "__transaction_state"} <= set(made)
    # those names are what the replication Fetches (which ask by topic id) are labelled with
    replicated = {r["topic"] for r in records if r["direction"] == "fetch"}
    assert {"__consumer_offsets", "__transaction_state", "kr-orders", "kr-audit"} <= replicated
    assert not any(t.startswith("<unresolved") for t in replicated if t)


def test_committed_offsets_are_in_consumer_offsets(records):
    """The offsets the clients committed (kr-group: 10 then 20 per partition; kr-txn-group: 3
    committed in a transaction, 5 in one aborted), as __consumer_offsets' values carry them."""
    seen: dict = defaultdict(list)
    for r in _internal(records, "__consumer_offsets"):
        key = json.loads(r["key_decoded"])
        if key["type"] != "OffsetCommitKey" or not r["value_decoded"]:
            continue
        k = key["data"]
        offset = json.loads(r["value_decoded"])["data"]["offset"]
        at = (k["group"], k["topic"], k["partition"])
        if not seen[at] or seen[at][-1] != offset:  # each follower fetches the record once
            seen[at].append(offset)
    for commit in WITNESS["commits"]:
        for p, offset in commit["offsets"].items():
            assert offset in seen[(commit["group"], commit["topic"], int(p))]
    for group, topics in WITNESS["committed"].items():
        for topic, parts in topics.items():
            for p, offset in parts.items():
                assert offset in seen[(group, topic, int(p))]
    assert seen[("kr-group", "kr-orders", 0)][-1] == WITNESS["committed"]["kr-group"]["kr-orders"]["0"]
    txn = {t["outcome"]: t["offsets"]["kr-txn-group"]["kr-audit"]["0"] for t in WITNESS["transactions"]}
    assert set(seen[("kr-txn-group", "kr-audit", 0)]) == {txn["commit"], txn["abort"]}


def test_group_metadata_members_hold_their_decoded_assignment(records):
    for r in _internal(records, "__consumer_offsets"):
        v = json.loads(r["value_decoded"] or "null")
        if v and v["type"] == "GroupMetadataValue" and v["data"]["members"]:
            m = v["data"]["members"][0]
            assert m["subscriptionDecoded"]["Topics"] == ["kr-orders"]
            assert m["assignmentDecoded"]["AssignedPartitions"] == [{"Topic": "kr-orders", "Partitions": [0, 1, 2]}]
            return
    pytest.fail("no GroupMetadataValue with members")


def test_the_share_group(lake, records):
    """kr-share (the Java client's KafkaShareConsumer, sh-a and sh-b): its generations in the group
    tables, its members' partitions as the records they read say (20 a partition), and its state
    in __share_group_state."""
    gens = [g for g in _table(lake, "group_generations") if g["group_id"] == "kr-share"]
    assert [g["protocol"] for g in gens] == ["share"] * len(gens)
    last = max(gens, key=lambda g: g["generation"])
    assert sorted(m["client_id"] for m in last["members"]) == ["sh-a", "sh-b"]
    owned = Counter(
        a["client_id"]
        for a in _table(lake, "group_assignments")
        if a["group_id"] == "kr-share" and a["generation"] == last["generation"]
    )
    assert {name: 20 * n for name, n in owned.items()} == WITNESS["share"]["received"]
    # the share coordinator's state of each kr-orders partition the group read
    orders = WITNESS["topics"]["kr-orders"]["uuid"]
    keys = [json.loads(r["key_decoded"]) for r in _internal(records, "__share_group_state")]
    assert {k["type"] for k in keys} <= {"ShareSnapshotKey", "ShareUpdateKey"}
    assert {(k["data"]["GroupId"], k["data"]["TopicId"], k["data"]["Partition"]) for k in keys} == {
        ("kr-share", orders, p) for p in range(3)
    }
    # and the group coordinator's records of it in __consumer_offsets
    types = {json.loads(r["key_decoded"])["type"] for r in _internal(records, "__consumer_offsets")}
    assert {"ShareGroupMetadataKey", "ShareGroupMemberMetadataKey", "ShareGroupTargetAssignmentMemberKey"} <= types


def test_the_streams_group(lake):
    """kr-streams (a Kafka Streams app, group.protocol=streams): its epochs in group_generations,
    and the active tasks its heartbeats' answers gave it, as the app itself listed them."""
    gens = sorted(
        (g for g in _table(lake, "group_generations") if g["group_id"] == "kr-streams"), key=lambda g: g["generation"]
    )
    assert gens and {g["protocol"] for g in gens} == {"streams"}
    assert all(m["client_id"].startswith("st-app-StreamThread-1") for g in gens for m in g["members"])
    assert gens[0]["trigger"] == "member_joined"
    # streams groups assign tasks, not partitions: no assignment rows
    assert not [a for a in _table(lake, "group_assignments") if a["group_id"] == "kr-streams"]
    given = set()
    done = _kafka(["dissect", str(SAMPLE), "--format", "jsonl", "--api", "StreamsGroupHeartbeat"])
    for line in done.stdout.splitlines():
        x = json.loads(line)
        for t in (x["response"] or {}).get("ActiveTasks") or []:
            given |= {f"{t['SubtopologyId']}_{p}" for p in t["Partitions"]}
        if (x["response"] or {}).get("ActiveTasks"):  # the answer that delivered the tasks
            assert x["response"]["MemberEpoch"] == gens[-1]["generation"]
    assert sorted(given) == WITNESS["streams"]["active_tasks"]


def test_transaction_state_follows_the_transactions(records):
    statuses = []
    for r in _internal(records, "__transaction_state"):
        key = json.loads(r["key_decoded"])
        assert key["data"]["TransactionalId"] == "kr-txn"
        s = json.loads(r["value_decoded"])["data"]["TransactionStatus"]
        if not statuses or statuses[-1] != s:
            statuses.append(s)
    # Ongoing, PrepareCommit, CompleteCommit, then Ongoing, PrepareAbort, CompleteAbort
    assert [1, 2, 4] == [s for s in statuses if s in (1, 2, 4)][:3]
    assert 3 in statuses and 5 in statuses


def test_the_text_line_names_the_metadata_records(records):
    lines = [ln for ln in dissect_lines() if "topics=__cluster_metadata" in ln and "metadata=" in ln]
    assert any("TopicRecord x1" in ln for ln in lines)
    total = Counter()
    for ln in lines:
        for name, n in re.findall(r"(\w+) x(\d+)", ln.split("metadata=", 1)[1]):
            total[name] += int(n)
    table = Counter()
    for r in _internal(records, "__cluster_metadata"):
        v = json.loads(r["value_decoded"])
        table[v["type"]] += 1
    assert total == table


def dissect_lines() -> list[str]:
    done = _kafka(["dissect", str(SAMPLE)])
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_records_in_jsonl_equal_the_table(records):
    """dissect --records writes each internal record's key_decoded/value_decoded as the table has them."""
    done = _kafka(["dissect", str(SAMPLE), "--records", "--format", "jsonl"])
    assert done.returncode == 0, done.stderr
    got = Counter()
    for line in done.stdout.splitlines():
        x = json.loads(line)
        if x.get("api_name") != "Fetch" or not isinstance(x.get("response"), dict):
            continue
        for t in x["response"].get("Responses", []):
            if t.get("TopicName") not in INTERNAL:
                continue
            for p in t["Partitions"]:
                for b in p["Records"].get("batches", []):
                    if b["control"]:
                        continue
                    for rec in b["records"]:
                        got[(t["TopicName"], rec["offset"], json.dumps(rec["value_decoded"], sort_keys=True))] += 1
    want = Counter(
        (
            r["topic"],
            r["offset"],
            json.dumps(json.loads(r["value_decoded"]) if r["value_decoded"] else None, sort_keys=True),
        )
        for r in records
        if r["topic"] in INTERNAL and not r["control"]
    )
    assert got == want


def test_scram_credentials_stay_out_of_every_output(records, tmp_path):
    """The metadata log holds kr-user's SCRAM salt and keys: no output shows them."""
    scram = next(r for r in WITNESS["dump"]["__cluster_metadata"] if "SCRAM" in json.dumps(r))["payload"]["data"]
    secrets = [base64.b64decode(scram[k]) for k in ("salt", "storedKey", "serverKey")]
    done = _kafka(["dissect", str(SAMPLE), "--records", "--raw", "--format", "jsonl"])
    assert done.returncode == 0
    for s in secrets:
        assert s.hex() not in done.stdout
        assert base64.b64encode(s).decode() not in done.stdout
    rows = [r for r in _internal(records, "__cluster_metadata") if "UserScramCredentialRecord" in r["value_decoded"]]
    assert len(rows) == 2  # each follower controller fetched it once
    for r in rows:
        assert r["value"] is None
        data = json.loads(r["value_decoded"])["data"]
        assert data["Name"] == "kr-user" and data["Iterations"] == 4096
        assert data["Salt"] == data["StoredKey"] == data["ServerKey"] == "<redacted>"


def test_apis_lists_the_internal_schemas(records):
    done = _kafka(["apis", "--internal", "--json"])
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    listed = {(r["topic"], r["value"]) for r in rows}
    for topic in INTERNAL:
        assert any(t == topic for t, _ in listed)
    assert ("__share_group_state", "ShareSnapshotValue") in listed
    for r in records:
        if r["topic"] in INTERNAL and r["value_decoded"] and not r["control"]:
            assert (r["topic"], json.loads(r["value_decoded"])["type"]) in listed


# -- one record at a time: faults stay one JSON error each ---------------------------------


def _offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    s = lambda x: struct.pack(">h", len(x)) + x.encode()  # noqa: E731
    return struct.pack(">h", 1) + s(group) + s(topic) + struct.pack(">i", partition)


def test_a_record_at_a_time():
    key, value = native.internal_row("__consumer_offsets", _offset_commit_key("g", "t", 3), None)[:2]
    assert json.loads(key) == {
        "type": "OffsetCommitKey",
        "type_id": 1,
        "data": {"group": "g", "topic": "t", "partition": 3},
    }
    assert value is None  # a tombstone
    # OffsetCommitValue v1: offset, metadata, commitTimestamp, expireTimestamp
    v1 = struct.pack(">hq", 1, 42) + struct.pack(">h", 0) + struct.pack(">qq", 7, -1)
    _, value = native.internal_row("__consumer_offsets", _offset_commit_key("g", "t", 3), v1)[:2]
    assert json.loads(value)["data"]["offset"] == 42
    assert native.internal_row("some-topic", b"k", b"v")[:2] == (None, None)


@pytest.mark.parametrize(
    "topic, key, value, why",
    [
        ("__consumer_offsets", b"\x00", None, "key of 2 bytes"),
        ("__consumer_offsets", struct.pack(">h", 999) + b"x", None, "record type 999"),
        ("__consumer_offsets", _offset_commit_key("g", "t", 0)[:-2], None, "ends in the middle"),
        ("__cluster_metadata", None, b"\x01\x02", "cut inside"),
        ("__cluster_metadata", None, b"\x01\x7f\x00", "type 127 is not"),
        ("__cluster_metadata", None, b"\x01\x02\x00\x05ab", "TopicRecord"),
    ],
)
def test_a_fault_is_one_error(topic, key, value, why):
    k, v = native.internal_row(topic, key, value)[:2]
    err = json.loads(v if key is None else k)["_error"]
    assert why in err


def test_a_newer_value_version_reads_with_the_newest_layout():
    """As Kafka reads these forward-compatible types: the known fields, the tail left."""
    v4_body = struct.pack(">qi", 9, -1) + b"\x01" + struct.pack(">q", 5) + b"\x00"  # no tagged fields
    _, value = native.internal_row("__consumer_offsets", _offset_commit_key("g", "t", 0), b"\x00\x04" + v4_body)[:2]
    assert json.loads(value) == {
        "type": "OffsetCommitValue",
        "version": 4,
        "data": {"offset": 9, "leaderEpoch": -1, "metadata": "", "commitTimestamp": 5},
    }
    newer = struct.pack(">h", 99) + v4_body + b"\x00\x01\x02"
    _, value = native.internal_row("__consumer_offsets", _offset_commit_key("g", "t", 0), newer)[:2]
    got = json.loads(value)
    assert got["version"] == 99 and got["data"]["offset"] == 9


def test_other_topics_decode_only_their_control_records(tmp_path):
    out = tmp_path / "lake"
    done = _kafka(["land", str(ROOT / "samples" / "java-txn-ak.pcap"), "--out", str(out), "--records"])
    assert done.returncode == 0, done.stderr
    rows = dataset(out, "records").to_table().to_pylist()
    control = [r for r in rows if r["control"]]
    assert control and all(r["key_decoded"] is None and r["value_decoded"] is None for r in rows if not r["control"])
    types = Counter(json.loads(r["key_decoded"])["type"] for r in control)
    assert set(types) == {"COMMIT", "ABORT"}
    for r in control:
        assert json.loads(r["value_decoded"])["type"] == "EndTxnMarker"


def test_a_kraft_control_record():
    """A LeaderChange control record as KRaft writes one (LeaderChangeMessage v0, flexible; its
    own Version field first), by hand from the spec."""
    voter = lambda n: struct.pack(">i", n) + b"\x00"  # noqa: E731 - VoterId, no tagged fields
    value = struct.pack(">hi", 0, 2) + b"\x03" + voter(1) + voter(2) + b"\x02" + voter(2) + b"\x00"
    key, value = native.internal_row("__cluster_metadata", struct.pack(">hh", 0, 2), value, control=True)[:2]
    assert json.loads(key) == {"type": "LEADER_CHANGE", "type_id": 2, "version": 0}
    assert json.loads(value) == {
        "type": "LeaderChangeMessage",
        "version": 0,
        "data": {
            "Version": 0,
            "LeaderId": 2,
            "Voters": [{"VoterId": 1}, {"VoterId": 2}],
            "GrantingVoters": [{"VoterId": 2}],
        },
    }
