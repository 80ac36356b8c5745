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
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkawire import cli
from tests.oracle.output import _bytes

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
