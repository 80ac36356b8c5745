"""`kafkawire top`: the model against `report` on the same captures, and the terminal view in tmux.

The model is fed the items of bundled captures as the player feeds them (each at its request time,
the clock advanced first); its since-start figures per API, client id and broker are held to the
report's (report.analysis over a landed copy): counts and max exactly, p50/p99 within the histogram's
stated relative error (histogram.ALPHA). The tmux tests run the real command in an 80x24 terminal,
press its keys and read the screen back.
"""

from __future__ import annotations

import math
import os
from collections import Counter
import random
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import dissector
from kafkawire.top.histogram import ALPHA, LogHistogram
from kafkawire.top.model import TopModel
from kafkawire.top.view import View, fmt_bytes

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CAPTURES = ["kafka-python-ak.pcap", "rebalance-ak.pcap", "errors.pcap", "kafka-python-basic.pcap"]
# produce and fetch from several clients and codecs, share groups (ShareFetch), fetch sessions, errors
TOPIC_CAPTURES = ["confluent-codecs.pcap", "java-codecs-ak.pcap", "kraft3-ak.pcap", "errors.pcap", "aiokafka.pcap"]


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    """capture name -> its landed tables (report.analysis reads them)."""
    from landing.local import land_local

    out = {}
    for name in {*CAPTURES, *TOPIC_CAPTURES, "rebalance-kip848-ak.pcap"}:
        d = tmp_path_factory.mktemp(name.replace(".", "-"))
        land_local([str(SAMPLES / name)], d)
        out[name] = d
    return out


def played(name: str, window: float = 1.0, until: float | None = None) -> TopModel:
    """A model fed a capture's items as the player feeds them (at request time, clock first)."""
    m = TopModel(window=window)
    for item in dissector.dissect([str(SAMPLES / name)], by_topic=True):
        t = getattr(item, "ts", None) or getattr(item, "response_ts", None)
        if until is not None and t is not None and t > until:
            m.advance(until)
            return m
        if t is not None:
            m.advance(t)
        m.add(item)
    if until is None:
        m.finish()
    else:
        m.advance(until)
    return m


def close(got: float | None, want: float, rel: float = ALPHA, abs_: float = 1e-9) -> bool:
    return got is not None and abs(got - want) <= rel * abs(want) + abs_


@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("grouping,by", [("api", "api_name"), ("client", "client_id"), ("broker", "broker")])
def test_since_start_figures_are_the_reports(name, grouping, by, landed):
    from report.analysis import latency

    rows = {r.key: r for r in played(name).snapshot(grouping).rows}
    want = latency(landed[name], by)
    assert len(want)
    for r in want.itertuples(index=False):
        key = getattr(r, by)
        got = rows[key if isinstance(key, str) else "-"]
        assert got.answered == r.count, key
        assert got.max_all == r.max, key
        assert close(got.p50_all, r.p50), (key, got.p50_all, r.p50)
        assert close(got.p99_all, r.p99), (key, got.p99_all, r.p99)
        assert got.in_flight == 0


def topic_oracle(landed: Path):
    """Per topic, from the landed tables alone: the exchanges that name it (the exchanges table's
    topics, and the topics of the batches a Fetch's answer carries), their latencies, the record
    bytes produced and fetched (batches), and its error codes (the errors table: under the topic,
    or above every topic of the exchange); "-" for the exchanges naming none."""
    from report.analysis import Tables

    tables = Tables(landed)
    ex = tables.get("exchanges", ["exchange_id", "status", "latency_ms", "topics", "error_codes"])
    batches = tables.get("batches", ["exchange_id", "topic", "direction", "bytes"])
    errors = tables.get("errors", ["exchange_id", "topic", "code"])
    fetched = batches[batches["direction"] == "fetch"].groupby("exchange_id")["topic"].agg(set)
    named: dict[int, list[str]] = {}
    want: dict[str, dict] = {}
    for r in ex.itertuples(index=False):
        topics = list(r.topics) if r.topics is not None else []
        topics += sorted(fetched.get(r.exchange_id, set()) - set(topics))
        named[r.exchange_id] = topics
        for topic in topics or ["-"]:
            w = want.setdefault(topic, {"requests": 0, "latencies": [], "errors": Counter(), "in": 0, "out": 0})
            w["requests"] += r.status != "orphan_response"
            if not math.isnan(r.latency_ms):
                w["latencies"].append(r.latency_ms)
            if not topics:
                w["errors"].update(int(c) for c in (r.error_codes if r.error_codes is not None else ()))
    for r in errors.itertuples(index=False):
        for topic in [r.topic] if isinstance(r.topic, str) else named[r.exchange_id]:
            want[topic]["errors"][int(r.code)] += 1
    for (topic, direction), n in batches.groupby(["topic", "direction"])["bytes"].sum().items():
        want[topic]["in" if direction == "produce" else "out"] += int(n)
    return want


@pytest.mark.parametrize("name", TOPIC_CAPTURES)
def test_topic_figures_are_the_tables(name, landed):
    """By topic, since start: requests, answers, latency, record bytes in and out and errors per code
    equal what the landed tables say (the batches table decodes each batch header on its own path)."""
    want = topic_oracle(landed[name])
    snap = played(name).snapshot("topic")
    rows = {r.key: r for r in snap.rows}
    assert set(rows) == set(want)
    assert any(w["in"] for w in want.values()) or name == "errors.pcap"
    got_errors: dict[str, Counter] = {k: Counter() for k in rows}
    for e in snap.errors:
        got_errors[e.key][e.code] = e.count
    for topic, w in want.items():
        r = rows[topic]
        assert (r.requests, r.bytes_in, r.bytes_out) == (w["requests"], w["in"], w["out"]), topic
        assert got_errors[topic] == +w["errors"], topic
        assert r.answered == len(w["latencies"]), topic
        if w["latencies"]:
            assert r.max_all == max(w["latencies"]), topic
            assert close(r.p50_all, float(np.quantile(w["latencies"], 0.5))), topic
            assert close(r.p99_all, float(np.quantile(w["latencies"], 0.99))), topic


def test_topic_window_figures():
    """The interval's figures by topic: a window as long as the capture holds every request and
    record byte once per topic, the same as since start."""
    m = played("java-codecs-ak.pcap", window=1000.0)
    snap = m.snapshot("topic")
    for r in snap.rows:
        assert math.isclose(r.rate * 1000, r.requests), r.key
        assert math.isclose(r.in_rate * 1000, r.bytes_in) and math.isclose(r.out_rate * 1000, r.bytes_out), r.key
        assert math.isclose(r.bytes_rate * 1000, r.bytes_in + r.bytes_out), r.key
    assert snap.total.requests == m.snapshot("api").total.requests


@pytest.mark.parametrize("name", CAPTURES)
def test_errors_per_api_are_the_reports(name, landed):
    from report.analysis import report

    want = {(r.api_name, r.code): (r.name, r.count) for r in report(landed[name])["errors_by_api"].itertuples()}
    got = {(e.key, e.code): (e.name, e.count) for e in played(name).snapshot("api").errors}
    assert got == want


def test_requests_and_unanswered_per_api(landed):
    from report.analysis import Tables

    ex = Tables(landed["errors.pcap"]).get("exchanges", ["api_name", "status"])
    rows = {r.key: r for r in played("errors.pcap").snapshot("api").rows}
    for api, group in ex.groupby("api_name"):
        assert rows[api].requests == int((group["status"] != "orphan_response").sum()), api
        assert rows[api].unanswered == int((group["status"] == "unanswered").sum()), api
    m = played("errors.pcap")
    assert m.orphans == 1 and m.all.unanswered == 1


def test_in_flight_until_the_answer_time():
    """kafka-python-basic's second JoinGroup waits 5 s: in flight from its request to its answer."""
    items = [i for i in dissector.dissect([str(SAMPLES / "kafka-python-basic.pcap")]) if i.type == "exchange"]
    slow = max(items, key=lambda x: x.latency_ms or 0)
    assert slow.api_name == "JoinGroup" and slow.latency_ms > 5000
    mid = played("kafka-python-basic.pcap", until=(slow.ts + slow.response_ts) / 2)
    rows = {r.key: r for r in mid.snapshot("api").rows}
    assert rows["JoinGroup"].in_flight == 1
    assert {r.key: r.in_flight for r in mid.snapshot("client").rows}["kw-consumer"] == 1
    after = played("kafka-python-basic.pcap", until=slow.response_ts)
    assert after.all.in_flight == 0
    assert after.snapshot("api").total.max_all >= slow.latency_ms


@pytest.mark.parametrize("name", ["rebalance-ak.pcap", "rebalance-kip848-ak.pcap", "kafka-python-ak.pcap"])
def test_rebalances_in_progress_during_the_reports(name, landed):
    """Sampled every 5 ms, a rebalance is shown through each of the report's (began..settled), and none
    once the capture has played."""
    from report.analysis import rebalances

    spans = [(r.began.timestamp(), r.settled.timestamp(), r.group_id) for r in rebalances(landed[name]).itertuples()]
    assert spans
    items = list(dissector.dissect([str(SAMPLES / name)]))
    m, i = TopModel(), 0
    t, end = items[0].ts, max((x.response_ts or x.ts) for x in items)
    shown = []
    while t <= end:  # bounded: end - start is a few seconds of capture, in 5 ms steps
        while i < len(items) and items[i].ts <= t:
            m.add(items[i])
            i += 1
        m.advance(t)
        shown.append((t, {r.group_id for r in m.snapshot("api").rebalances}))
        t += 0.005
    for began, settled, group in spans:
        inside = [group in g for tt, g in shown if began + 0.001 < tt < settled]
        assert inside and all(inside), (group, began, settled)
    m.finish()
    assert m.snapshot("api").rebalances == []


def test_interval_figures_cover_the_window():
    m = played("kafka-python-ak.pcap", window=1000.0)
    snap = m.snapshot("api")
    assert math.isclose(sum(r.rate for r in snap.rows) * 1000, 40) and snap.total.requests == 40
    later = TopModel(window=0.5)
    for item in dissector.dissect([str(SAMPLES / "kafka-python-ak.pcap")]):
        later.advance(item.ts)
        later.add(item)
    later.finish()
    later.advance(later.clock + 10)
    snap = later.snapshot("api")
    assert snap.total.rate == 0 and all(r.p99 is None for r in snap.rows)
    assert snap.total.requests == 40  # since start stays


def test_histogram_quantiles_within_alpha():
    rng = random.Random(7)
    for n in (1, 2, 5, 100, 20_000):
        values = [rng.lognormvariate(0, 2.5) for _ in range(n)] + [0.0]
        h = LogHistogram()
        for v in values:
            h.add(v)
        qs = [0.0, 0.5, 0.9, 0.99, 0.999, 1.0]
        for q, got in zip(qs, h.quantiles(qs), strict=True):
            want = float(np.quantile(values, q))
            assert abs(got - want) <= ALPHA * want + 1e-3, (n, q, got, want)  # 1 µs floor
    assert len(h.buckets) < 1200  # bounded, whatever the count


def test_the_view_fits_80x24_with_many_groups():
    from rich.console import Console

    m = TopModel()
    for name in ("kafka-python-ak.pcap", "java-admin-ak.pcap", "errors.pcap", "rebalance-ak.pcap"):
        for item in dissector.dissect([str(SAMPLES / name)], by_topic=True):
            if item.type == "exchange":
                item.client_id = (item.client_id or "") + "-a-very-long-client-id-that-goes-on-" * 2
            m.add(item)
    m.finish()
    console = Console(width=80, height=24, color_system=None, force_terminal=False)
    view = View()
    for _ in range(8):  # every grouping and sort, in both modes
        for _ in range(2):
            with console.capture() as cap:
                console.print(view.render(m.snapshot(view.grouping), 80, 24, state="x20 playing sample.pcap"))
            lines = cap.get().rstrip("\n").split("\n")
            assert len(lines) <= 24 and max(map(len, lines)) <= 80, "\n".join(lines)
            assert lines[-1].startswith("g:group=")
            view.toggle_mode()
        view.cycle_grouping()
        view.cycle_sort()


def test_plain_snapshot_when_not_a_terminal(landed):
    from report.analysis import latency

    out = subprocess.run(
        [sys.executable, "-m", "kafkawire", "top", str(SAMPLES / "kafka-python-ak.pcap"), "--once", "--since-start"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    table = parse_table(out.stdout.splitlines())
    want = latency(landed["kafka-python-ak.pcap"], "api_name")
    assert {k: int(v[0]) for k, v in table.items()} == dict(zip(want["api_name"], want["count"], strict=True))
    assert "ended" in out.stdout.splitlines()[0]


def test_options_refused_in_one_line():
    for argv, says in (
        ([], "give one source"),
        (["nope.pcap"], "cannot read nope.pcap"),
        ([str(SAMPLES / "errors.pcap"), "--speed", "0"], "--speed"),
        (["-", "--once"], "--duration"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "kafkawire", "top", *argv], capture_output=True, text=True, timeout=30, cwd=ROOT
        )
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1, (argv, out.stderr)


# -- the terminal view, in tmux ----------------------------------------------------------------------

NUM = re.compile(r"^-?\d+(\.\d+)?[KMGks]?$")


def parse_table(lines: list[str], cells: int = 8) -> dict[str, list[str]]:
    """The rows under the table's rule: key -> its cells (8; by topic 9)."""
    out, inside = {}, False
    for line in lines:
        if line.startswith("─"):
            inside = True
            continue
        if inside:
            parts = line.rsplit(None, cells)
            if len(parts) != cells + 1 or not all(NUM.match(p) or p == "-" for p in parts[1:]):
                break
            out[parts[0]] = parts[1:]
    return out


def shown_close(cell: str, want: float) -> bool:
    """A latency as shown (2, 1 or 0 decimals) against the report's: the histogram's error plus rounding."""
    decimals = len(cell.split(".")[1]) if "." in cell else 0
    return abs(float(cell) - want) <= ALPHA * want + 0.5 * 10**-decimals + 1e-9


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    def __init__(self, tmp: Path, argv: str):
        self.name = f"kwtop-{uuid.uuid4().hex[:8]}"
        self.rc, self.stty = tmp / "rc", tmp / "stty"
        cmd = f"cd {ROOT} && {sys.executable} -m kafkawire top {argv}; echo $? > {self.rc}; stty -a > {self.stty}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", "80", "-y", "24", cmd],
            check=True,
            env={**os.environ, "TERM": "xterm-256color"},
        )

    def screen(self) -> list[str]:
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True)
        return out.stdout.rstrip("\n").split("\n")

    def wait(self, pred, timeout: float = 20.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # bounded polls
            lines = self.screen()
            if pred(lines):
                return lines
            time.sleep(0.1)
        raise AssertionError("screen never matched:\n" + "\n".join(self.screen()))

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode == 0

    def gone(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.1)
        return not self.alive()

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def fits(lines: list[str]) -> bool:
    return len(lines) <= 24 and all(len(line) <= 80 for line in lines)


@needs_tmux
def test_tmux_numbers_are_the_reports_and_ctrl_c_restores_the_terminal(tmp_path, landed):
    from report.analysis import Tables, latency

    name = "kafka-python-basic.pcap"
    t = Tmux(tmp_path, f"samples/{name} --speed 20 --since-start")
    try:
        lines = t.wait(lambda ls: "ended" in ls[0] and "since start" in ls[0])
        assert fits(lines), "\n".join(lines)
        table = parse_table(lines)
        want = latency(landed[name], "api_name")
        ex = Tables(landed[name]).get("exchanges", ["api_name", "status"])
        assert set(table) == set(want["api_name"])
        for r in want.itertuples(index=False):
            reqs, p50, p99, mx, errors, _, infl, unans = table[r.api_name]
            sent = int((ex[ex["api_name"] == r.api_name]["status"] != "orphan_response").sum())
            assert int(reqs) == sent and int(reqs) - int(unans) == r.count, r.api_name
            assert shown_close(p50, r.p50) and shown_close(p99, r.p99) and shown_close(mx, r.max), (
                r,
                table[r.api_name],
            )
            assert infl == "0"
        assert "JoinGroup MEMBER_ID_REQUIRED(79)" in "\n".join(lines)
        t.keys("C-c")
        assert t.gone()
        assert t.rc.read_text().strip() == "130"
        stty = t.stty.read_text().split()
        assert "icanon" in stty and "echo" in stty  # cbreak undone
    finally:
        t.kill()


@needs_tmux
def test_tmux_by_topic_shows_the_records_in_and_out(tmp_path, landed):
    """--group topic: per topic, the requests naming it and the record bytes produced (in) and
    fetched (out) since start, as the landed tables count them, in an 80x24 terminal."""
    name = "kraft3-ak.pcap"  # Java producers and consumers, Kafka Streams, share groups: 26.6 s of capture
    t = Tmux(tmp_path, f"samples/{name} --speed 10 --group topic --since-start")
    try:
        lines = t.wait(lambda ls: "ended" in ls[0] and "since start" in ls[0], timeout=30)
        assert fits(lines), "\n".join(lines)
        assert lines[2].split()[:3] == ["topic", "reqs*", "p50"] and " in " in lines[2] and " out " in lines[2]
        table = parse_table(lines, 9)
        want = topic_oracle(landed[name])
        shown = sorted(want, key=lambda k: (-want[k]["requests"], k))[: len(table)]
        assert list(table) == shown  # the busiest that fit, busiest first
        for topic, cells in table.items():
            assert int(cells[0]) == want[topic]["requests"], topic
            assert [cells[5], cells[6]] == [fmt_bytes(want[topic]["in"]), fmt_bytes(want[topic]["out"])], topic
        assert table["kr-orders"][5:7] == ["6.0K", "29.8K"]  # 6,093 bytes produced, 30,465 fetched
        t.keys("q")
        assert t.gone()
    finally:
        t.kill()


@needs_tmux
def test_tmux_keys_group_sort_freeze_quit(tmp_path, landed):
    from report.analysis import latency

    name = "rebalance-kip848-ak.pcap"  # 11.6 s of capture: ~6 s at speed 2
    t = Tmux(tmp_path, f"samples/{name} --speed 2")
    try:
        t.wait(lambda ls: re.search(r"\d\d:\d\d:\d\d", ls[0]) and "playing" in ls[0])
        t.keys("f")
        a = t.wait(lambda ls: "FROZEN" in ls[-1])
        time.sleep(1.5)
        assert t.screen() == a  # the view holds still while the capture plays on
        t.keys("f")
        b = t.wait(lambda ls: "FROZEN" not in ls[-1] and ls[0] != a[0])
        assert fits(a) and fits(b)
        lines = t.wait(lambda ls: "ended" in ls[0], timeout=30)
        t.keys("t")
        lines = t.wait(lambda ls: "since start" in ls[0])
        table = parse_table(lines)
        want = latency(landed[name], "api_name")
        assert {k: int(v[0]) for k, v in table.items()} == dict(zip(want["api_name"], want["count"], strict=True))
        by_reqs = list(table)
        assert by_reqs == sorted(by_reqs, key=lambda k: (-int(table[k][0]), k))
        t.keys("s")  # sort by p99
        lines = t.wait(lambda ls: "s:sort=p99" in ls[-1])
        table = parse_table(lines)
        by_p99 = list(table)
        assert by_p99 == sorted(by_p99, key=lambda k: (-float(table[k][2]), k)) and by_p99 != by_reqs
        t.keys("g")  # by client id
        lines = t.wait(lambda ls: "g:group=client" in ls[-1])
        assert "client id" in "\n".join(lines)
        assert {"kip-a", "kip-b"} <= set(parse_table(lines))
        t.keys("gg")  # by topic: the records produced (in) and fetched (out) since start, as the tables have them
        lines = t.wait(lambda ls: "g:group=topic" in ls[-1])
        table = parse_table(lines, 9)
        want = topic_oracle(landed[name])
        assert set(table) == set(want)
        for topic, cells in table.items():
            assert int(cells[0]) == want[topic]["requests"], topic
            assert [cells[5], cells[6]] == [fmt_bytes(want[topic]["in"]), fmt_bytes(want[topic]["out"])], topic
        t.keys("q")
        assert t.gone()
        assert t.rc.read_text().strip() == "0"
    finally:
        t.kill()


def test_stdin_stream_and_a_closed_pipe(landed):
    """`top -` reads a pcap stream on stdin (here a file's bytes): its totals are the report's; a reader
    that goes away (`| head -1`) ends it quietly, status 0."""
    from report.analysis import latency

    name = "kafka-python-ak.pcap"
    data = (SAMPLES / name).read_bytes()
    cmd = [sys.executable, "-m", "kafkawire", "top", "-", "--since-start"]
    out = subprocess.run(cmd, input=data, capture_output=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    last = out.stdout.decode().strip().split("\n\n")[-1].splitlines()
    assert "live ended stdin" in last[0]
    want = latency(landed[name], "api_name")
    got = {k: int(v[0]) for k, v in parse_table(last).items()}
    assert got == dict(zip(want["api_name"], want["count"], strict=True))
    shell = f"{sys.executable} -m kafkawire top {SAMPLES / 'errors.pcap'} | head -1; echo ${{PIPESTATUS[0]}}"
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.splitlines()[-1] == "0" and out.stderr == ""


@needs_tmux
def test_tmux_with_a_key_log_shows_the_decrypted_traffic_the_report_has(tmp_path):
    """A TLS capture with its key log: the screen's figures per API are those of `report` on the same
    capture and key log (the key log's paths reach the run, its contents no message)."""
    from landing.local import land_local
    from report.analysis import Tables, latency

    from dissector.tls import read_keylogs

    pcap, keys = "samples/tls/tls-kafka-python-ak.pcap", "samples/tls/tls-kafka-python-ak.keys"
    land_local([str(ROOT / pcap)], tmp_path / "tables", tls_keylogs=read_keylogs(ROOT / keys))
    want = latency(tmp_path / "tables", "api_name")
    ex = Tables(tmp_path / "tables").get("exchanges", ["api_name", "status"])
    assert {"SaslAuthenticate", "Produce", "Fetch"} <= set(want["api_name"])
    t = Tmux(tmp_path, f"{pcap} --tls-keylog {keys} --speed 50 --since-start")
    try:
        lines = t.wait(lambda ls: "ended" in ls[0] and "since start" in ls[0])
        table = parse_table(lines)
        assert set(table) == set(want["api_name"]), "\n".join(lines)
        for r in want.itertuples(index=False):
            reqs, p50, p99, mx, *_ = table[r.api_name]
            sent = int((ex[ex["api_name"] == r.api_name]["status"] != "orphan_response").sum())
            assert int(reqs) == sent, r.api_name
            assert shown_close(p50, r.p50) and shown_close(mx, r.max), (r, table[r.api_name])
        t.keys("q")
        assert t.gone() and t.rc.read_text().strip() == "0"
    finally:
        t.kill()
