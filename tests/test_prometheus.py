"""Metrics out (`--prometheus HOST:PORT`): a real Prometheus server (Debian's `prometheus`) scrapes
`kafkawire top -i lo` (a real capture tool) and `kafkawire dissect -` (tcpdump's live stream)
while real clients produce and consume through a real broker; what Prometheus's HTTP query API
answers is held to `kafkawire report` of a capture of the same traffic: requests per API, and
each busy API's p99 within the latency bucket of the report's exact one. The Grafana dashboard's
queries are checked against the same server (valid PromQL, answered)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.broker import free_port, port_open, tcpdump_stream, terminate

ROOT = Path(__file__).resolve().parents[1]
KAFKAWIRE = [sys.executable, "-m", "kafkawire"]
DASHBOARD = ROOT / "docs" / "grafana" / "kafkawire.json"

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed"),
    pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="live capture on lo needs root"),
]


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:.0f} s")


class Prometheus:
    """A Prometheus server scraping `targets` ({job: HOST:PORT}) every second, on 127.0.0.1."""

    def __init__(self, folder: Path, targets: dict[str, str]):
        self.port = free_port()
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n" for job, addr in targets.items()
        )
        config = folder / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}")
        self.log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        _wait(lambda: _get(f"http://127.0.0.1:{self.port}/-/ready") is not None, 30, "prometheus ready")

    def query(self, promql: str) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        answer = json.loads(_get(url))
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def targets_up(self) -> bool:
        got = json.loads(_get(f"http://127.0.0.1:{self.port}/api/v1/targets"))["data"]["activeTargets"]
        return bool(got) and all(t["health"] == "up" for t in got)

    def stop(self) -> None:
        terminate(self.proc)
        self.log.close()


def _traffic(address: str, messages: int = 60) -> None:
    """kafka-python: a producer sending a record every 0.1 s (a steady rate over several scrapes)
    and a consumer group reading them back."""
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(bootstrap_servers=address, client_id="prom-producer", linger_ms=0)
    for i in range(messages):
        p.send("prom-topic", key=b"k%d" % (i % 7), value=b"value %d" % i).get(timeout=15)
        time.sleep(0.1)
    p.close(timeout=10)
    c = KafkaConsumer(
        "prom-topic",
        bootstrap_servers=address,
        client_id="prom-consumer",
        group_id="prom-group",
        auto_offset_reset="earliest",
        session_timeout_ms=10000,  # Tansu holds the second JoinGroup about 5 s
        consumer_timeout_ms=15000,
    )
    got = 0
    for _ in c:
        got += 1
        if got == messages:
            break
    c.close()
    assert got == messages


def _report_counts(capture: Path, port: int) -> tuple[dict[str, int], dict[str, float]]:
    """Requests per API and the p99 latency (ms) per API, from `kafkawire report --format json`."""
    out = subprocess.run(
        [*KAFKAWIRE, "report", str(capture), "--port", str(port), "--format", "json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    counts: dict[str, int] = {}
    for r in rep["version_matrix"]:
        counts[r["api_name"]] = counts.get(r["api_name"], 0) + r["exchanges"]
    p99 = {r["api_name"]: r["p99"] for r in rep["latency_by_api"] if r["count"] >= 20}
    return counts, p99


def _latencies(capture: Path, port: int) -> dict[str, list[float]]:
    """Every answered exchange's latency (s) per API, as `kafkawire dissect --format jsonl` gives it."""
    out = subprocess.run(
        [*KAFKAWIRE, "dissect", str(capture), "--port", str(port), "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    got: dict[str, list[float]] = {}
    for line in out.stdout.splitlines():
        x = json.loads(line)
        if x.get("type") == "exchange" and x.get("latency_ms") is not None:
            got.setdefault(x["api_name"], []).append(x["latency_ms"] / 1000.0)
    return got


def _histogram_quantile(q: float, values: list[float]) -> float:
    """What Prometheus's histogram_quantile gives for `values` counted in kafkawire's buckets:
    the bucket holding rank q*n, linearly within it (the first bucket from 0)."""
    from bisect import bisect_left

    from kafkawire.metrics import LATENCY_BUCKETS

    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    for v in values:
        counts[bisect_left(LATENCY_BUCKETS, v)] += 1
    rank, seen = q * len(values), 0
    for i, n in enumerate(counts):
        if seen + n >= rank:
            if i == len(LATENCY_BUCKETS):
                return LATENCY_BUCKETS[-1]
            lower = 0.0 if i == 0 else LATENCY_BUCKETS[i - 1]
            return lower + (LATENCY_BUCKETS[i] - lower) * (rank - seen) / n
        seen += n
    raise AssertionError("no values")


def _bucket_index(seconds: float) -> int:
    from bisect import bisect_left

    from kafkawire.metrics import LATENCY_BUCKETS

    return bisect_left(LATENCY_BUCKETS, seconds)


@pytest.mark.broker
def test_prometheus_scrapes_what_report_counts(broker, tmp_path):
    port = int(broker.rsplit(":", 1)[1])
    capture = tmp_path / "live.pcap"
    top_at, dissect_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    dump, tee = tcpdump_stream(port, capture)
    dissect = subprocess.Popen(
        [*KAFKAWIRE, "dissect", "-", "--port", str(port), "--prometheus", dissect_at],
        stdin=tee.stdout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    tee.stdout.close()
    top = subprocess.Popen(
        [*KAFKAWIRE, "top", "-i", "lo", "-f", f"tcp port {port}", "--port", str(port), "--prometheus", top_at]
        + ["--duration", "120", "--interval", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    prom = None
    try:
        for at in (top_at, dissect_at):
            _wait(lambda at=at: port_open(int(at.rsplit(":", 1)[1])), 30, f"kafkawire serving on {at}")
        _wait(lambda: capture.exists() and capture.stat().st_size >= 24, 15, "tcpdump capturing")
        time.sleep(2)  # top's capture tool started too
        prom = Prometheus(tmp_path, {"top": top_at, "dissect": dissect_at})
        _wait(prom.targets_up, 30, "both targets up")
        _traffic(broker)
        time.sleep(4)  # the last answers through both, and a scrape or two after them
        counts, p99 = _report_counts(capture, port)
        latencies = _latencies(capture, port)
        assert counts.get("Produce", 0) >= 60 and counts.get("Fetch", 0) >= 1 and "Produce" in p99
        _wait(
            lambda: all(
                {
                    r["metric"]["api"]: int(float(r["value"][1]))
                    for r in prom.query(f'sum by (api) (kafkawire_requests_total{{job="{job}"}})')
                }
                == counts
                for job in ("top", "dissect")
            ),
            20,
            "Prometheus's requests per API equal to the report's",
        )
        for job in ("top", "dissect"):
            # the rate over the run: Prometheus's increase() misses what came before a series' first
            # scrape (a second of the steady 10 a second at most) and extrapolates the rest
            rate = prom.query(f'sum(increase(kafkawire_requests_total{{job="{job}",api="Produce"}}[10m]))')
            assert float(rate[0]["value"][1]) == pytest.approx(counts["Produce"], rel=0.25)
            for api, want_ms in p99.items():
                got = prom.query(
                    f'histogram_quantile(0.99, sum by (le) (kafkawire_request_latency_seconds_bucket{{job="{job}",api="{api}"}}))'
                )
                got_s = float(got[0]["value"][1])
                # exactly what the capture's own latencies give in these buckets, and the report's
                # exact p99 in that bucket or the one next to it (a bucket's interpolation)
                assert got_s == pytest.approx(_histogram_quantile(0.99, latencies[api]), rel=1e-9), (job, api)
                assert abs(_bucket_index(got_s) - _bucket_index(want_ms / 1000.0)) <= 1, (job, api, want_ms, got_s)
                print(
                    f"{job} {api}: report {counts[api]} requests p99 {want_ms:.2f} ms; Prometheus p99 {got_s * 1000:.2f} ms"
                )
            print(
                f"{job} Produce: increase() {float(rate[0]['value'][1]):.1f} against the report's {counts['Produce']}"
            )
        errors = prom.query("sum(kafkawire_errors_total)")  # present (maybe none), answered
        assert isinstance(errors, list)
        # the Grafana dashboard: every panel's query is valid PromQL that this server answers
        board = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        assert len(exprs) >= 6
        answered = 0
        for expr in exprs:
            q = expr.replace("$__rate_interval", "1m").replace("$job", "top")
            answered += bool(prom.query(q))
        assert answered >= len(exprs) - 2  # in flight and rebalancing can be empty when idle
    finally:
        if prom is not None:
            prom.stop()
        terminate(top)
        dump.terminate()
        dump.wait(timeout=10)
        dissect.wait(timeout=30)
    assert top.returncode in (0, -15), top.stderr.read()
    assert dissect.returncode == 0, dissect.stderr.read()


def test_a_bad_address_is_one_line(tmp_path):
    for cmd in (
        ["top", str(ROOT / "samples" / "admin.pcap"), "--prometheus", "nowhere"],
        ["dissect", str(ROOT / "samples" / "admin.pcap"), "--prometheus", "127.0.0.1:9464"],
    ):
        out = subprocess.run([*KAFKAWIRE, *cmd], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr


def test_labels_stay_bounded_and_the_exposition_parses():
    """A fleet of client ids: the first MAX_CLIENTS keep their label, the rest share `_other`; the
    text prometheus_client exposes parses back (its own parser) to what was counted; a gauge of
    an API no longer in flight reads 0."""
    from types import SimpleNamespace

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from kafkawire.metrics import MAX_CLIENTS, OTHER, Exporter

    x = Exporter()
    for i in range(MAX_CLIENTS + 50):
        x.observe(
            SimpleNamespace(
                type="exchange",
                api_name="Produce",
                api_key=0,
                client_id=f"c-{i}",
                broker="10.0.0.1:9092",
                ts=1.0,
                request_size=100,
                response_size=50,
                latency_ms=3.0,
                status="ok",
                error_codes=[6] if i % 10 == 0 else [],
            )
        )
    x.observe(SimpleNamespace(type="anomaly", kind="resync"))
    x.refresh({"Produce": 3}, {"g1": 2})
    x.refresh({}, {})
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(x.registry).decode())}
    reqs = {s.labels["client_id"]: s.value for s in fams["kafkawire_requests"].samples if s.name.endswith("_total")}
    assert len(reqs) == MAX_CLIENTS + 1 and reqs[OTHER] == 50 and sum(reqs.values()) == MAX_CLIENTS + 50
    hist = [s for s in fams["kafkawire_request_latency_seconds"].samples if s.labels.get("client_id") == OTHER]
    count = next(s.value for s in hist if s.name.endswith("_count"))
    le = {s.labels["le"]: s.value for s in hist if s.name.endswith("_bucket")}
    assert count == 50 and le["0.002"] == 0 and le["0.005"] == 50 and le["+Inf"] == 50
    errors = {s.labels["error"]: s.value for s in fams["kafkawire_errors"].samples if s.name.endswith("_total")}
    assert errors == {"NOT_LEADER_OR_FOLLOWER": 15}
    assert [s.value for s in fams["kafkawire_requests_in_flight"].samples] == [0]
    assert [s.value for s in fams["kafkawire_group_members_rebalancing"].samples] == [0]
    assert [s.value for s in fams["kafkawire_anomalies"].samples if s.name.endswith("_total")] == [1]
