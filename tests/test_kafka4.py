"""Kafka 4 readiness (`kafkawire report --kafka4`, report.analysis.kafka4_readiness) on real old
clients: samples/kafka4-old-ak.pcap holds kafka-python 1.4.7 (PyPI's release; as it comes and
pinned to api_version 0.9 and 0.10.1), librdkafka told the broker is 0.9.0, the Java client
2.0.1 (Maven Central's kafka-clients) and Debian's kcat (librdkafka 2.0.2) against Apache Kafka
3.9.1, which still answers the
versions Kafka 4 removed, beside today's kafka-python.
Held to tshark's own reading of which client id sent which API version, and to what each client
produced and read back (samples/kafka4-old-ak.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.registry import removed_in_kafka4
from tests.broker import first_syn_port
from tests.tshark_fields import request_versions

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
OLD = SAMPLES / "kafka4-old-ak.pcap"


def _kafkawire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafkawire", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _readiness(*pcaps: Path) -> list[dict]:
    out = _kafkawire("report", "--kafka4", "--format", "json", *map(str, pcaps))
    assert out.returncode in (0, 1), out.stderr
    rows = json.loads(out.stdout)
    assert out.returncode == (1 if rows else 0)
    return rows


def test_the_clients_did_their_work_on_a_broker_that_takes_the_old_versions():
    """The witness: every client produced its messages and read them back through its group, so
    the removed versions were answered, not refused."""
    witness = json.loads(OLD.with_suffix(".json").read_text())
    assert witness["broker"].startswith("Apache Kafka 3.9")
    runs = {r["client_id"]: r for r in witness["runs"]}
    assert set(runs) == {
        "kpy147-auto",
        "kpy147-0.9",
        "kpy147-0.10.1",
        "java-2.0.1",
        "aiokafka-0.12-0.10.1",
        "kcat-2.0.2",
        "kpy-modern",
        "rdkafka-0.9",
    }
    for r in runs.values():
        assert r["produced"] == len(r["consumed"]) == 6, r
    assert {runs[c]["kafka_python"] for c in ("kpy147-auto", "kpy147-0.9")} == {"1.4.7"}
    assert runs["java-2.0.1"]["kafka_clients"] == "2.0.1" and runs["kcat-2.0.2"]["librdkafka"] == "2.0.2"
    assert runs["aiokafka-0.12-0.10.1"]["aiokafka"] == "0.12.0"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_every_removed_version_each_client_sent_as_tshark_reads_them():
    sent = request_versions(OLD, first_syn_port(OLD), by_client=True)
    want = {(c, k, v): n for (c, k, v), n in sent.items() if removed_in_kafka4(k, v)}
    rows = _readiness(OLD)
    got = {(r["client_id"], r["api_key"], r["version"]): r["exchanges"] for r in rows}
    assert got == want
    # the clients pinned to old versions (kafka-python 1.4.7, aiokafka 0.12.0, librdkafka's
    # 0.9.0 fallback) break on Kafka 4; today's kafka-python, kafka-python
    # 1.4.7 left to ask the broker, the Java client 2.0.1 and librdkafka 2.0.2 (every version
    # they send survived KIP-896 as Kafka 4 shipped it) do not
    assert {c for c, _k, _v in got} == {
        "kpy147-0.9",
        "kpy147-0.9-consumer",
        "kpy147-0.10.1",
        "kpy147-0.10.1-consumer",
        "rdkafka-0.9",
        "rdkafka-0.9-consumer",
        "aiokafka-0.12-0.10.1",
        "aiokafka-0.12-0.10.1-consumer",
    }


def test_each_row_says_what_to_upgrade_to_and_when_it_was_seen():
    rows = {(r["client_id"], r["api_name"], r["version"]): r for r in _readiness(OLD)}
    produce = rows[("kpy147-0.10.1", "Produce", 2)]
    assert produce["kafka4_lowest"] == 3 and produce["upgrade"].startswith("Produce v3+ (as kafka-python 2.0.2")
    assert produce["host"] == "127.0.0.1" and produce["software"] is None  # ApiVersions v0/v1: no KIP-511 name
    fetch = rows[("kpy147-0.9-consumer", "Fetch", 1)]
    assert fetch["kafka4_lowest"] == 4 and fetch["first_seen"] <= fetch["last_seen"] and fetch["exchanges"] > 1
    assert rows[("rdkafka-0.9-consumer", "ListOffsets", 0)]["kafka4_lowest"] == 1


@pytest.mark.parametrize("sample", ["kafka-python-ak.pcap", "java-codecs-ak.pcap", "kraft3-ak.pcap", "aiokafka.pcap"])
def test_todays_clients_pass(sample):
    out = _kafkawire("report", "--kafka4", str(SAMPLES / sample))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith("kafka 4: no client sent an API version Kafka 4 removed")


def test_the_text_summary_and_the_exit_status_a_ci_job_gates_on(tmp_path):
    out = _kafkawire("report", "--kafka4", str(OLD))
    assert out.returncode == 1
    last = out.stdout.rstrip().splitlines()[-1]
    assert last == (
        "kafka 4: 8 client(s) would break: 10 API version(s) Kafka 4 removed "
        "(Fetch v1, Fetch v3, ListOffsets v0, Produce v1, Produce v2)"
    )
    # a landed directory reads the same; a missing capture is the usual one line and status 2
    lake = tmp_path / "lake"
    assert _kafkawire("land", "--quiet", str(OLD), "--out", str(lake)).returncode == 0
    assert _kafkawire("report", "--kafka4", str(lake)).stdout == out.stdout
    gone = _kafkawire("report", "--kafka4", str(tmp_path / "none.pcap"))
    assert gone.returncode == 2 and "Traceback" not in gone.stderr and len(gone.stderr.splitlines()) == 1


def test_the_whole_report_has_the_section(tmp_path):
    out = _kafkawire("report", str(OLD), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["kafka4_readiness"]) == 10
    page = tmp_path / "r.html"
    assert _kafkawire("report", str(OLD), "--html", str(page)).returncode == 0
    html = page.read_text()
    assert "Kafka 4 readiness" in html and "kpy147-0.9-consumer" in html
