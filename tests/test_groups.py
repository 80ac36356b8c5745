"""Consumer-group rebalances as tables (landing/groups.py: group_generations, group_assignments),
held to what the members themselves saw (rebalance-ak.json: each kafka-python member's own
assignment() after each step of its workload), to a rebalance counted by hand from the
exchanges, and to the Java client's KIP-848 group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dissector import dissect
from landing.local import land_local
from landing.writer import dataset

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
REBALANCE = SAMPLES / "rebalance-ak.pcap"
KIP848 = SAMPLES / "rebalance-kip848-ak.pcap"


def _table(out: Path, name: str) -> list[dict]:
    return dataset(out, name).to_table().to_pylist()


def _land(tmp_path: Path, *pcaps: Path, mode: str = "error") -> Path:
    out = tmp_path / "lake"
    land_local([str(p) for p in pcaps], out, mode=mode)
    return out


def _owned(assignments: list[dict], group: str, generation: int) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {}
    for a in assignments:
        if a["group_id"] == group and a["generation"] == generation:
            got.setdefault(a["client_id"], []).append(a["partition"])
    return {k: sorted(v) for k, v in got.items()}


def _steps_are_generations(tmp_path, pcap: Path, group: str) -> tuple[list, list]:
    """Land `pcap`; assert that each step its members saw (pcap.json: client id -> the partitions
    its own assignment() listed) is, in order, a generation's assignment. (gens, assignments)."""
    out = _land(tmp_path, pcap)
    gens = sorted(
        (g for g in _table(out, "group_generations") if g["group_id"] == group), key=lambda g: g["generation"]
    )
    assigned = _table(out, "group_assignments")
    steps = json.loads(pcap.with_suffix(".json").read_text())
    # the generations that ended with an assignment, in order, as each member's client id -> partitions
    seen = [_owned(assigned, group, g["generation"]) for g in gens if g["partitions"]]
    want = [{k: v for k, v in s.items() if k != "step"} for s in steps]
    it = iter(seen)
    assert all(any(w == s for s in it) for w in want), (want, seen)
    return gens, assigned


def test_each_step_the_members_saw_is_a_generation(tmp_path):
    gens, assigned = _steps_are_generations(tmp_path, REBALANCE, "rb-group")
    for g in gens:
        assert g["protocol"] == "classic" and g["protocol_type"] == "consumer" and g["protocol_name"] == "range"
        assert g["member_count"] == len(g["members"]) and g["leader"] in {m["member_id"] for m in g["members"]}
        if g["settled"] is not None:
            assert g["began"] <= g["settled"] and g["stopped_ms"] >= 0
    first, *_ = [g for g in gens if g["partitions"]]
    assert first["trigger"] == "member_joined" and first["partitions"] == 4 and first["moved"] is None
    two = next(g for g in gens if g["member_count"] == 2 and g["partitions"])
    assert two["moved"] == 2  # two of rb-a's four went to rb-b
    last = [g for g in gens if g["partitions"]][-1]
    assert last["member_count"] == 1 and [m["client_id"] for m in last["members"]] == ["rb-b"]
    assert any(g["trigger"] == "member_left" for g in gens if g["generation"] <= last["generation"])
    moved = [a for a in assigned if a["group_id"] == "rb-group" and a["previous_member"]]
    assert {a["client_id"] for a in moved} == {"rb-b"} and len(moved) == 4


def test_each_step_the_kip848_members_saw_is_an_epoch(tmp_path):
    """rebalance-kip848-ak.pcap: the Java client's KIP-848 members (ConsumerGroupHeartbeat); the
    broker moves partitions by epochs, each member told its own at its next heartbeat."""
    gens, assigned = _steps_are_generations(tmp_path, KIP848, "kip-group")
    steps = json.loads(KIP848.with_suffix(".json").read_text())
    assert [set(s) - {"step"} for s in steps] == [{"kip-a"}, {"kip-a", "kip-b"}, {"kip-b"}]
    assert {g["protocol"] for g in gens} == {"consumer"}
    assert [g["trigger"] for g in gens][0] == "member_joined"
    assert "member_left" in [g["trigger"] for g in gens]
    assert all(g["began"] <= g["settled"] for g in gens if g["settled"] is not None)
    moved = {a["partition"] for a in assigned if a["group_id"] == "kip-group" and a["previous_member"]}
    assert len(moved) == 4  # two went to kip-b when it joined, the other two when kip-a left
    # kip-b's arrival by hand: from its epoch-0 heartbeat to the answer that first gave it partitions
    beats = sorted(
        (x for x in dissect([KIP848]) if x.type == "exchange" and x.api_name == "ConsumerGroupHeartbeat"),
        key=lambda x: x.ts,
    )
    joined = next(x for x in beats if x.client_id == "kip-b" and x.request["MemberEpoch"] == 0)
    given = next(
        x for x in beats if x.client_id == "kip-b" and (x.response.get("Assignment") or {}).get("TopicPartitions")
    )
    (row,) = [g for g in gens if g["trigger_detail"] == "kip-b"]
    assert row["trigger"] == "member_joined" and row["member_count"] == 2
    assert row["stopped_ms"] == pytest.approx((given.response_ts - joined.ts) * 1000, abs=0.01)
    assert row["stopped_ms"] > 5000  # the members were moved at their heartbeats, 5 s apart


def test_a_rebalance_counted_by_hand(tmp_path):
    """The rebalance rb-b's arrival caused, from the exchanges alone: it began with rb-b's first
    JoinGroup (the first group request after generation 1 settled) and settled with the last
    SyncGroup answer of the next generation."""
    xs = [x for x in dissect([REBALANCE]) if x.type == "exchange" and x.api_name in ("JoinGroup", "SyncGroup")]
    xs.sort(key=lambda x: x.ts)
    b_join = next(x for x in xs if x.api_name == "JoinGroup" and x.client_id == "rb-b")
    gen = max(x.response["GenerationId"] for x in xs if x.api_name == "JoinGroup" and x.ts < b_join.ts)
    # each member's first SyncGroup of the new generation: a later one (a member rejoining the
    # stable group with the same subscription, as kafka-python does) settles nothing
    first_sync = {}
    for x in xs:
        if x.api_name == "SyncGroup" and x.request["GenerationId"] == gen + 1 and x.response["ErrorCode"] == 0:
            first_sync.setdefault(x.client_id, x.response_ts)
    assert sorted(first_sync) == ["rb-a", "rb-b"]
    settled = max(first_sync.values())
    by_hand = (settled - b_join.ts) * 1000
    out = _land(tmp_path, REBALANCE)
    (row,) = [g for g in _table(out, "group_generations") if g["group_id"] == "rb-group" and g["generation"] == gen + 1]
    assert row["trigger"] == "member_joined" and row["trigger_detail"] == "rb-b"
    assert row["began"].timestamp() == pytest.approx(b_join.ts, abs=1e-6)
    assert row["stopped_ms"] == pytest.approx(by_hand, abs=0.01)
    assert sorted(m["client_id"] for m in row["members"]) == ["rb-a", "rb-b"]


def test_kip848_group_of_the_java_client(tmp_path):
    """java-codecs-ak.pcap: the Java client with group.protocol=consumer joins jv-group (epoch 0
    in its first heartbeat), is given partition 0 of each of the five topics, then leaves."""
    out = _land(tmp_path, SAMPLES / "java-codecs-ak.pcap")
    (g,) = [g for g in _table(out, "group_generations") if g["group_id"] == "jv-group"]
    assert g["protocol"] == g["protocol_type"] == "consumer" and g["trigger"] == "member_joined"
    assert [m["client_id"] for m in g["members"]] == ["java-consumer"] and g["partitions"] == 5
    assert g["began"] <= g["settled"]
    topics = sorted(a["topic"] for a in _table(out, "group_assignments") if a["group_id"] == "jv-group")
    assert topics == ["jv-gzip", "jv-lz4", "jv-none", "jv-snappy", "jv-zstd"]


def test_classic_group_of_kafka_python(tmp_path):
    out = _land(tmp_path, SAMPLES / "kafka-python-ak.pcap")
    (g,) = _table(out, "group_generations")
    assert (g["group_id"], g["generation"], g["member_count"], g["partitions"]) == ("kw-group", 1, 1, 2)
    assert g["leader"] == g["members"][0]["member_id"] and g["members"][0]["client_id"] == "kw-consumer"
    assert g["members"][0]["host"] == "127.0.0.1"


def test_appends_give_the_tables_of_one_landing(tmp_path):
    both = _land(tmp_path / "one", SAMPLES / "kafka-python-ak.pcap", REBALANCE)
    out = tmp_path / "two" / "lake"
    land_local([str(SAMPLES / "kafka-python-ak.pcap")], out)
    land_local([str(REBALANCE)], out, mode="append")
    for t in ("group_generations", "group_assignments"):
        key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
        assert sorted(map(key, _table(out, t))) == sorted(map(key, _table(both, t))), t


def test_report_has_a_consumer_groups_section(tmp_path):
    from report import analysis
    from report.html import render

    out = _land(tmp_path, REBALANCE)
    rep = analysis.report(out)
    assert len(rep["rebalances"]) >= 3 and set(rep["partitions_moved"]["client_id"]) == {"rb-b"}
    assert rep["longest_rebalances"]["stopped_ms"].is_monotonic_decreasing
    page = render(out)
    assert "id='groups'" in page and "rebalances: each bar" in page


def test_the_clients_own_words_for_a_rebalance(tmp_path):
    """KIP-800: kraft3-ak.pcap's Java consumer st-reader joins, is told MEMBER_ID_REQUIRED and
    joins again saying why; that Reason, as its JoinGroup carries it, is the generation's. A
    kafka-python member (JoinGroup before v8) says nothing: null, not an empty string."""
    pcap = SAMPLES / "kraft3-ak.pcap"
    joins = [x for x in dissect([pcap]) if x.type == "exchange" and x.api_name == "JoinGroup"]
    said = [x.request["Reason"] for x in joins if x.request.get("GroupId") == "kr-streams-reader"]
    assert said[0] == "" and said[1].startswith("need to re-join with the given member-id: st-reader-")
    out = _land(tmp_path, pcap)
    gens = {(g["group_id"], g["generation"]): g for g in _table(out, "group_generations")}
    assert gens[("kr-streams-reader", 1)]["reason"] == said[1]
    assert gens[("kr-group", 1)]["reason"] is None
    assert all(g["reason"] is None for g in gens.values() if g["protocol"] != "classic")


def test_a_member_leaving_says_why():
    """The LeaveGroup (v5+) that begins a rebalance gives its member's Reason; a JoinGroup's
    later Reason does not replace it."""
    from datetime import UTC, datetime, timedelta

    from landing.groups import JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP, rebalances

    t0 = datetime(2026, 11, 29, tzinfo=UTC)

    def row(i, key, req, resp, client_id="c-b"):
        return {
            "ts": t0 + timedelta(seconds=i),
            "response_ts": t0 + timedelta(seconds=i, milliseconds=5),
            "client": "10.0.0.2:5000",
            "client_id": client_id,
            "api_key": key,
            "status": "ok",
            "error_codes": [],
            "group_id": "g",
            "correlation_id": i,
            "request_json": json.dumps({"GroupId": "g", **req}),
            "response_json": json.dumps({"ErrorCode": 0, **resp}),
        }

    join = {"GenerationId": 1, "MemberId": "m-a", "Leader": "m-a", "ProtocolType": "consumer"}
    rows = [
        row(0, JOIN_GROUP, {"MemberId": "", "Reason": ""}, join, "c-a"),
        row(1, SYNC_GROUP, {"MemberId": "m-a", "GenerationId": 1}, {}, "c-a"),
        row(2, LEAVE_GROUP, {"Members": [{"MemberId": "m-b", "Reason": "the consumer is being closed"}]}, {}),
        row(3, JOIN_GROUP, {"MemberId": "m-a", "Reason": "rebalance in progress"}, {**join, "GenerationId": 2}, "c-a"),
        row(4, SYNC_GROUP, {"MemberId": "m-a", "GenerationId": 2}, {}, "c-a"),
    ]
    gens, _ = rebalances(rows)
    assert [(g["generation"], g["trigger"], g["reason"]) for g in gens] == [
        (1, "member_joined", None),
        (2, "member_left", "the consumer is being closed"),
    ]


def test_a_lake_landed_before_the_reason_column_takes_an_append(tmp_path):
    """group_generations gained `reason`: the derived tables are made anew on each run, so an
    append to a lake whose table lacks the column gives it the column."""
    from deltalake import DeltaTable, write_deltalake

    out = _land(tmp_path, SAMPLES / "kafka-python-ak.pcap")
    uri = str(out / "group_generations")
    old = DeltaTable(uri).to_pyarrow_table().drop_columns(["reason"])
    write_deltalake(uri, old, mode="overwrite", schema_mode="overwrite", partition_by=["date"])
    assert "reason" not in DeltaTable(uri).schema().to_arrow().names
    land_local([str(SAMPLES / "kraft3-ak.pcap")], out, mode="append")
    rows = _table(out, "group_generations")
    assert any(r["reason"] for r in rows) and {r["group_id"] for r in rows} >= {"kw-group", "kr-streams-reader"}
