"""`kafkawire dissect` as a subprocess, on real and synthetic (scapy) captures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import protocol
from dissector import dissect
from tests.oracle.output import EXCHANGE_KEYS
from tests.pcapgen import Flow, write_pcap

ROOT = Path(__file__).resolve().parents[1]
PCAPS = ROOT.parent / "shared" / "pcaps"
needs_pcaps = pytest.mark.skipif(not PCAPS.is_dir(), reason="../shared/pcaps not present")


def cli(*args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "dissect", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def jsonl(*args):
    return [json.loads(line) for line in cli(*args, "--format", "jsonl").stdout.splitlines()]


def rq(api_key, version, corr, body=None, client_id="synth"):
    return protocol.with_size(
        protocol.encode_request(api_key, version, {"CorrelationId": corr, "ClientId": client_id}, body or {})
    )


def rs(api_key, version, corr, body=None):
    return protocol.with_size(protocol.encode_response(api_key, version, {"CorrelationId": corr}, body or {}))


@needs_pcaps
def test_jsonl_keys_and_raw_frames():
    rows = jsonl(PCAPS / "kpy_basic.pcap", "--raw")
    assert len(rows) == 54 and {r["type"] for r in rows} == {"exchange"}
    for r in rows:
        assert list(r) == ["type", *EXCHANGE_KEYS, "request_raw", "response_raw"]
        req = protocol.decode_request(bytes.fromhex(r["request_raw"]))
        assert (req.api_key, req.api_version, req.correlation_id) == (
            r["api_key"],
            r["api_version"],
            r["correlation_id"],
        )
        assert len(r["request_raw"]) == 2 * r["request_size"] and len(r["response_raw"]) == 2 * r["response_size"]
        assert r["status"] == "ok" and r["latency_ms"] == pytest.approx((r["response_ts"] - r["ts"]) * 1000, abs=0.002)
    create = [r for r in rows if r["api_name"] == "CreateTopics"][0]
    assert create["client_id"] == "kpy-admin" and create["broker"] == "127.0.0.1:9092"
    assert isinstance(create["response"]["Topics"][0]["TopicId"], str)  # UUIDs as text
    without = jsonl(PCAPS / "kpy_basic.pcap")
    assert "request_raw" not in without[0]


@needs_pcaps
def test_text_lines_and_records_flag():
    out = cli(PCAPS / "errors.pcap").stdout.splitlines()
    assert len(out) == 61  # 60 exchanges and the anomaly for Metadata v13 answered with a v12 body
    meta = [line for line in out if " Metadata v13 " in line and " ANOMALY " not in line][0]
    assert "corr=13" in meta and meta.endswith("flags=version_mismatch")
    delete = [line for line in out if " DeleteTopics v6 " in line][0]
    assert "corr=7" in delete and "client=err-admin" in delete and delete.endswith("errors=UNKNOWN_TOPIC_OR_PARTITION")
    assert " topics=err-missing-topic " in delete
    # aligned columns, as in tshark's summary lines: the API column starts at the same place on every line
    exchanges = [line for line in out if " ANOMALY " not in line]
    assert (
        len({line.index(" -> ") for line in exchanges}) == 1 and len({line.index("corr=") for line in exchanges}) == 1
    )
    assert sum("UNANSWERED" in line for line in out) == 2
    rows = jsonl(PCAPS / "kpy_basic.pcap", "--records")
    produce = [r for r in rows if r["api_name"] == "Produce"][0]
    batch = produce["request"]["TopicData"][0]["PartitionData"][0]["Records"]["batches"][0]
    assert batch["records"][0]["key"] == "key-1" and batch["records"][0]["headers"][0] == ["trace-id", "t0001"]


def test_exit_codes_and_messages(tmp_path):
    r = cli(tmp_path / "missing.pcap", check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture at all")
    r = cli(junk, check=False)
    assert r.returncode == 2 and "unknown file magic" in r.stderr and "Traceback" not in r.stderr
    r = cli("--format", "xml", junk, check=False)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def sasl_capture(path: Path) -> Path:
    f = Flow()
    pkts = f.handshake()
    pkts += [
        f.send("c", rq(17, 0, 1, {"Mechanism": "PLAIN"})),
        f.send("s", rs(17, 0, 1, {"ErrorCode": 0, "Mechanisms": ["PLAIN"]})),
        f.send("c", protocol.with_size(b"\0alice\0hunter2-pw")),
        f.send("s", protocol.with_size(b"")),
        f.send("c", rq(18, 3, 2)),
        f.send("s", rs(18, 3, 2)),
    ]
    pkts += f.close()
    return write_pcap(path, pkts)


def test_sasl_plain_redacted_everywhere_unless_show_secrets(tmp_path):
    cap = sasl_capture(tmp_path / "sasl.pcap")
    rows = jsonl(cap, "--raw")
    assert [(r["api_name"], r["status"]) for r in rows] == [
        ("SaslHandshake", "ok"),
        ("SaslToken", "ok"),
        ("ApiVersions", "ok"),
    ]
    token = rows[1]
    assert token["request"] == {"token": "\u0000alice\u0000<redacted>"}
    assert b"hunter2".hex() not in token["request_raw"] and token["request_raw"].endswith("2a" * 10)
    assert "hunter2" not in cli(cap).stdout
    shown = jsonl(cap, "--show-secrets", "--raw")[1]
    assert shown["request"] == {"token": "\u0000alice\u0000hunter2-pw"} and b"hunter2".hex() in shown["request_raw"]


def test_lost_segment_inside_a_response_then_resync(tmp_path):
    f = Flow()
    big = rs(3, 12, 2, {"Topics": [{"Name": "t" * 3000}]})
    pkts = f.handshake() + [f.send("c", rq(3, 12, 2)), f.send("s", big[:1000])]
    f.skip("s", 1000)  # the middle segment never made it into the capture
    pkts += [f.send("s", big[2000:]), f.send("c", rq(18, 3, 3)), f.send("s", rs(18, 3, 3))] + f.close()
    items = list(dissect(write_pcap(tmp_path / "gap.pcap", pkts)))
    kinds = [(x.type, getattr(x, "kind", None) or x.status) for x in items]
    assert ("anomaly", "gap_in_frame") in kinds
    by_corr = {x.correlation_id: x for x in items if x.type == "exchange"}
    assert by_corr[2].status == "undecodable" and by_corr[2].api_name == "Metadata"
    assert by_corr[3].status == "ok" and by_corr[3].api_name == "ApiVersions"


def test_unknown_gap_size_resyncs_on_outstanding_correlation_id(tmp_path):
    # two requests in flight; both answers travel in one segment cut by the snaplen: the lost bytes run
    # past the first answer, so the splitter hunts and resyncs on the next outstanding correlation id.
    f = Flow()
    big = rs(3, 12, 5, {"Topics": [{"Name": "n" * 4000}]})
    pkts = f.handshake() + [f.send("c", rq(3, 12, 5) + rq(18, 3, 6)), f.send("s", big + rs(18, 3, 6))]
    pkts += [f.send("c", rq(18, 3, 7)), f.send("s", rs(18, 3, 7))] + f.close()
    items = list(dissect(write_pcap(tmp_path / "snap.pcap", pkts, snaplen=1500)))
    ex = {x.correlation_id: x.status for x in items if x.type == "exchange"}
    # 6's answer was in the cut tail too; brokers answer in order, so once 7's answer shows up it is known lost
    assert ex == {5: "undecodable", 6: "undecodable", 7: "ok"}
    gaps = [x for x in items if x.type == "anomaly"]
    assert [a.kind for a in gaps] == ["gap_in_frame"] and "response correlation id 5" in gaps[0].detail


def test_broker_on_another_port_and_midstream_start(tmp_path):
    f = Flow(server=("10.0.0.2", 29092))
    pkts = [f.send("s", rs(3, 12, 41)), f.send("c", rq(3, 12, 42, client_id="late")), f.send("s", rs(3, 12, 42))]
    cap = write_pcap(tmp_path / "mid.pcap", pkts)
    rows = jsonl(cap)
    # request-time order: the orphan's answer (held until the connection ends) came first
    assert [(r["status"], r["correlation_id"], r["broker"]) for r in rows] == [
        ("orphan_response", 41, "10.0.0.2:29092"),
        ("ok", 42, "10.0.0.2:29092"),
    ]
    assert rows[1]["client_id"] == "late"
    assert [r["status"] for r in jsonl(cap, "--port", "29092")] == ["orphan_response", "ok"]


def test_max_frame_size_flag(tmp_path):
    f = Flow()
    pkts = (
        f.handshake()
        + [
            f.send("c", rq(3, 12, 1, {"Topics": [{"Name": "x" * 600}]})),
            f.send("s", rs(3, 12, 1)),
            f.send("c", rq(18, 3, 2)),
            f.send("s", rs(18, 3, 2)),
        ]
        + f.close()
    )
    cap = write_pcap(tmp_path / "big.pcap", pkts)
    rows = jsonl(cap, "--max-frame-size", "500")
    anomalies = [r for r in rows if r["type"] == "anomaly"]
    assert anomalies[0]["kind"] == "frame_too_large" and anomalies[0]["connection"] == 0
    assert set(anomalies[0]) == {"type", "connection", "ts", "kind", "detail"}
    # the refused request is skipped, so its answer is an orphan; the next request is found by its header
    # (in time order: the orphan answer came before the next request)
    assert [(r["type"], r.get("kind") or r["status"]) for r in rows] == [
        ("anomaly", "frame_too_large"),
        ("exchange", "orphan_response"),
        ("anomaly", "resync"),
        ("exchange", "ok"),
    ]
    assert "frame size 639 above the 500-byte limit" in anomalies[0]["detail"]


def test_progress_bar_only_on_a_terminal_and_never_in_stdout(tmp_path):
    import os
    import pty

    cap = sasl_capture(tmp_path / "p.pcap")
    master, slave = pty.openpty()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kafkawire", "dissect", str(cap), "--format", "jsonl"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=120,
        )
        os.close(slave)
        shown = b""
        try:
            while chunk := os.read(master, 65536):
                shown += chunk
        except OSError:
            pass  # EIO once the pty's other side is closed
    finally:
        os.close(master)
    assert r.returncode == 0
    assert b"dissecting:" in shown and b"packets" in shown
    lines = r.stdout.decode().splitlines()
    assert [json.loads(line)["api_name"] for line in lines] == ["SaslHandshake", "SaslToken", "ApiVersions"]
    assert "dissecting:" not in cli(cap).stderr  # not a terminal: no bar


@pytest.mark.skipif(not (ROOT / "samples" / "errors.pcap").is_file(), reason="samples/errors.pcap not present")
def test_broker_on_a_random_port_found_without_port_flag():
    rows = jsonl(ROOT / "samples" / "errors.pcap")
    assert len(rows) == 17 and rows[0]["api_version"] == 99 and rows[0]["status"] == "ok"
    assert [r["api_key"] for r in rows if r["status"] == "unanswered"] == [999]
    assert [r["correlation_id"] for r in rows if r["status"] == "orphan_response"] == [14]
