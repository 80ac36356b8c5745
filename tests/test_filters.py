"""Filters on dissect and land: the common cases of tshark's display filters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dissector import dissect
from dissector.filters import Filter, parse_time
from landing import dataset

ROOT = Path(__file__).resolve().parents[1]
KPY = ROOT / "samples" / "kafka-python-basic.pcap"
ERRORS = ROOT / "samples" / "errors.pcap"


@pytest.fixture(scope="module")
def items():
    return list(dissect([KPY], connections=True)) + list(dissect([ERRORS]))


def kept(items, **kw):
    f = Filter.of(**kw)
    return [x for x in items if f(x)]


def test_each_filter(items):
    ex = [x for x in items if x.type == "exchange"]
    assert [x.api_name for x in kept(ex, apis=["produce", "1"])] == ["Produce", "Produce", "Fetch", "Produce"]
    assert {x.client_id for x in kept(ex, client_ids=["kw-producer-*"])} == {"kw-producer-none", "kw-producer-gzip"}
    assert {x.api_name for x in kept(ex, topics=["kpy-g?ip"])} == {
        "CreateTopics",
        "Metadata",
        "Produce",
        "Fetch",
        "OffsetCommit",
        "OffsetFetch",
        "ListOffsets",
        "DeleteTopics",
    }
    errs = kept(ex, errors_only=True)
    assert {(x.api_name, x.status) for x in errs} == {
        ("JoinGroup", "ok"),
        ("Heartbeat", "ok"),
        ("SyncGroup", "ok"),
        ("OffsetCommit", "ok"),
        ("CreateTopics", "ok"),
        ("Unknown(999)", "unanswered"),
        ("DeleteTopics", "ok"),
        ("Metadata", "ok"),
        ("", "orphan_response"),
    }
    assert all(x.error_codes or x.status != "ok" for x in errs)
    slow = kept(ex, min_latency=1000)
    assert [x.api_name for x in slow] == ["JoinGroup"] and slow[0].latency_ms > 5000
    assert {x.connection for x in kept(ex, connections=[3])} == {3}


def test_times_and_what_happens_to_anomalies_and_connections(items):
    t0 = parse_time("2026-11-21T21:53:55")
    assert t0 == parse_time("1795298035") == parse_time("2026-11-21T22:53:55+01:00")
    late = kept(items, time_from=t0)
    assert late and all((x.ts or x.response_ts or x.first_ts) >= t0 for x in late if x.type != "connection")
    conns = [x for x in items if x.type == "connection"]
    assert kept(conns, connections=[3]) == [c for c in conns if c.connection == 3]
    assert kept(conns, apis=["Produce"]) == []  # an exchange-only filter drops connection accounting
    with pytest.raises(ValueError, match="not a time"):
        parse_time("yesterday")


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "kafkawire", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_dissect_and_land_filter_the_same_way(tmp_path):
    one = cli("dissect", KPY, "--api", "Produce,Fetch", "--min-latency", "0.5")
    two = cli("dissect", KPY, "--api", "Produce,Fetch", "--min-latency", "0.5", "--raw")  # text: --raw adds nothing
    assert one.returncode == 0 and one.stdout == two.stdout
    assert [line.split()[5] for line in one.stdout.splitlines()] == ["Produce", "Fetch"]
    r = cli("land", KPY, "--out", tmp_path, "--topic", "kpy-plain", "--quiet")
    assert r.returncode == 0, r.stderr
    ex = dataset(tmp_path, "exchanges").to_table().to_pandas()
    assert len(ex) == 12 and all("kpy-plain" in list(t) for t in ex["topics"])
    bad = cli("dissect", KPY, "--time-to", "soon")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "kafkawire: not a time: 'soon' (epoch seconds or ISO 8601, e.g. 2026-11-21T21:53:49)"
    )
