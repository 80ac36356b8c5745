"""`kafkawire report --html`: one self-contained page, rendered in real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    tables = out / "tables"
    caps = [SAMPLES / "kafka-python-basic.pcap", SAMPLES / "errors.pcap", SAMPLES / "old-protocol.pcap"]
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "land", *map(str, caps), "--out", str(tables), "--records"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    html = out / "report.html"
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "report", str(tables), "--html", str(html)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {html}", r.stderr
    return html


def test_page_is_self_contained_and_has_every_section(page):
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must fetch nothing"
    assert "<script" not in text and text.count("<svg") == 9  # the topic and batching plots too
    for section in (
        "Latency",
        "Slowest exchanges",
        "Error codes",
        "Client/broker versions",
        "Throughput",
        "Consumer lag",
        "Produce to fetch",
        "Consumer groups",
        "Anomalies",
        "Kafka 4 readiness",
        "per topic (the top talkers)",
        "Batching and compression, per producer and topic",
    ):
        assert f">{section}</h" in text, section
    assert "throughput per topic (busiest)" in text  # the topic plot's title
    # the batching plot: a row per producer and topic of the batching table, its codecs at the bars
    start = text.index("id='batching'")
    plot = text[start : text.index("<table", start)]
    assert "batching: records per produced batch" in plot and "compression ratio per producer and topic" in plot
    for who in ("kw-producer-gzip kpy-gzip", "old-kpy-0.8.2 old-kpy-0.8.2", "old-ck-lz4 old-ck-lz4"):
        assert who in plot, who
    # figures from the data: 34 + 17 + 38 exchanges, errors by name, the versions Kafka 4 removed marked
    assert "<b>89</b>exchanges" in text
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text and "MEMBER_ID_REQUIRED" in text and "UNKNOWN_PRODUCER_ID" in text
    # old-protocol clients: Produce v0/v1/v2 and Fetch v0/v1/v3 are marked removed in Kafka 4 in the heat map
    assert ">0*<" in text and ">2*<" in text and ">3*<" in text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs Debian's chromium)")
def test_page_renders_in_headless_chromium(page, tmp_path):
    shot = tmp_path / "report.png"
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    r = subprocess.run(
        [*base, "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CONSOLE" not in r.stderr and "Uncaught" not in r.stderr
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a blank page compresses to a few kB
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "Client/broker versions" in dom.stdout and dom.stdout.count("<svg") == 9


def test_a_page_that_cannot_be_written_is_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkawire",
            "report",
            str(SAMPLES / "errors.pcap"),
            "--html",
            str(tmp_path / "no" / "r.html"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"kafkawire: cannot write {tmp_path / 'no' / 'r.html'}: No such file or directory\n"
