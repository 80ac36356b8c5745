"""`kafkawire dissect`'s lines against golden outputs, and the native writer's parts against Python.

tests/golden holds the output of `kafkawire dissect` for a few samples and option sets, made
before the native core wrote the lines of --raw, --no-payloads, --records and the filters (when
the Python writer, now tests/oracle/output.py, wrote them), where the Python pipeline and the native
items gave the same bytes. tests/golden/manifest.json: file -> capture and options.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import json
import subprocess
import sys
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkawire import cli
from dissector.items import Anomaly, Exchange
from tests.oracle.output import _bytes, _Encoder, format_text

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


def dissect_out(argv: list[str]) -> bytes:
    """`kafkawire dissect ARGV`'s stdout, run in this process."""
    out = io.BytesIO()
    old = sys.stdout
    w = sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    try:
        assert cli.main(["dissect", "--quiet", *argv]) == 0
        w.flush()
    finally:
        sys.stdout = old
        w.detach()
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_dissect_lines_equal_the_golden_output(name):
    case = MANIFEST[name]
    want = gzip.decompress((GOLDEN / name).read_bytes())
    got = dissect_out([*case["args"], str(ROOT / case["capture"])])
    assert got == want


def test_render_imports_no_consumer_module():
    src = sorted((ROOT / "native").glob("*/src/*.rs"))
    assert len(src) > 20, "the native crates' sources were not found"
    for f in src:
        text = f.read_text()
        for consumer in ("orjson", "landing", "report", "replay", "kafkawire", "tests", "dissector."):
            assert f'import("{consumer}' not in text, (f.name, consumer)


def test_printable_table_is_pythons():
    from dissector import _native

    version, ranges = _native._not_printable()
    if version != unicodedata.unidata_version:
        pytest.skip(f"table made for Unicode {version}, this Python has {unicodedata.unidata_version}")
    bad = set()
    for a, b in ranges:
        bad.update(range(a, b + 1))
    wrong = [cp for cp in range(sys.maxunicode + 1) if chr(cp).isprintable() == (cp in bad)]
    assert wrong == []


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=40),
        st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.sampled_from(["\u00ad", "\u200b", "é\t\x01", "\u2028", "\U0001f600", "\u0378", "\ue000", "\xa0"]).map(
            str.encode
        ),
    )
)
def test_bytes_as_output_writes_them(b):
    import orjson

    from dissector import _native

    assert _native._json_bytes(b) == orjson.dumps(_bytes(b))


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="ab-!]*?[^\\z", max_size=8), st.text(alphabet="ab-!]^\\z", max_size=6))
def test_fnmatch_is_pythons(pattern, name):
    from dissector import _native

    assert _native._fnmatchcase(name, pattern) == fnmatch.fnmatchcase(name, pattern), (name, pattern)


@dataclass
class _Point:
    x: int
    label: bytes


def _exchange(**kw):
    base = dict(
        ts=1795298086.5,
        response_ts=1795298086.75,
        latency_ms=250.0,
        connection=3,
        client="10.0.0.1:5000",
        broker="10.0.0.2:9092",
        api_key=18,
        api_name="ApiVersions",
        api_version=3,
        correlation_id=7,
        client_id="é-client",
        status="ok",
        error_codes=[],
        request={},
        response={},
        request_size=10,
        response_size=20,
        request_raw=b"\x00\x12\x00\x03\x00\x00\x00\x07rest",
        response_raw=b"\x00\x00\x00\x07body",
        response_version=None,
    )
    base.update(kw)
    return Exchange(**base)


ODD_BODIES = [
    {"Id": uuid.UUID(int=0x1234), "Tags": {0: b"\x00\xff", 7: b"text\n"}, "Nested": [(1, 2.5), None, True]},
    {"Big": 2**63 + 5, "Neg": -(2**63), "F": [1e16, 1e-7, 0.1, -0.0, float("nan")], "P": _Point(1, b"\xe9")},
    {"_raw_body": b"\x00\x01\x02secret-ish"},
    {"_decode_error": "past the end"},
    {"Text": "tab\there \u2028 \x7f", "Mem": memoryview(b"caf\xc3\xa9"), "Arr": bytearray(b"\x01\x02")},
]


@pytest.mark.parametrize("records", [False, True])
@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("payloads", [True, False])
@pytest.mark.parametrize("body", range(len(ODD_BODIES)))
def test_lines_writes_python_items_as_output_does(body, records, raw, payloads):
    from dissector import _native

    for api_key in (18, 1, None):
        x = _exchange(api_key=api_key, request=ODD_BODIES[body], response=ODD_BODIES[-body], flags=("retransmitted",))
        want = _Encoder(records, raw, payloads).line(x)
        got = _native.Lines("jsonl", records, raw, not payloads).line(x)
        assert got == want
    a = Anomaly(connection=None, ts=1795298086.25, kind="capture_fault", detail="file.pcap: cut é")
    assert _native.Lines("jsonl").line(a) == _Encoder(False, False).line(a)
    assert _native.Lines("text").line(a) == (format_text(a) + "\n").encode()


def test_lines_writes_text_as_format_text():
    from dissector import _native
    from dissector.topics import topics

    for kw in (
        {},
        {"ts": None, "status": "unanswered", "error_codes": [35, 99999], "latency_ms": None, "client_id": None},
        {"api_name": "", "api_version": None, "correlation_id": None, "flags": ("gap", "resync")},
    ):
        x = _exchange(**kw)
        assert _native.Lines("text").line(x, topics(x)) == (format_text(x) + "\n").encode()


def test_file_names_that_are_not_utf8_are_read_natively(tmp_path):
    import os
    import shutil

    name = os.fsdecode(b"adm\xffin.pcap")
    shutil.copy(ROOT / "samples" / "admin.pcap", tmp_path / name)
    for fmt in ("text", "jsonl"):
        want = dissect_out(["--format", fmt, "--raw", str(ROOT / "samples" / "admin.pcap")])
        assert dissect_out(["--format", fmt, "--raw", str(tmp_path / name)]) == want
        assert dissect_out(["--format", fmt, "--raw", str(tmp_path)]) == want  # a directory's listing
    (tmp_path / os.fsdecode(b"bad\xfe.pcap")).write_bytes(b"not a capture at all")
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "dissect", "--format", "jsonl", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.count(b"\n") == 1 and b"bad\xef\xbf\xbd.pcap" in r.stderr  # the name, lossily
