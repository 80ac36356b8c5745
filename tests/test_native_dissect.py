"""dissect() on the native core against the Python pipeline, capture for capture.

The same items in the same order (values, JSON with key order, container types) for
every sample and shared capture, damaged files, rotated sets, and the synthetic
TCP pathologies of tests/pcapgen.py; the Python pipeline is the frozen oracle in tests/oracle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_native = pytest.importorskip("dissector._native")

from dissector import dissect  # noqa: E402
from tests import oracle  # noqa: E402
from tests.native_compare import assert_same_items  # noqa: E402
from tests.test_corrupt_files import KINDS, damaged  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))


def python_items(paths, monkeypatch, **kw) -> list:
    return list(oracle.dissect(paths, connections=True, **kw))


def native_items(paths, **kw) -> list:
    return list(dissect(paths, connections=True, **kw))


def check(paths, monkeypatch, **kw) -> list:
    want = python_items(paths, monkeypatch, **kw)
    got = native_items(paths, **kw)
    assert_same_items(got, want, str(paths))
    return got


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples(path, monkeypatch):
    got = check([path], monkeypatch, ports=[29092])
    assert any(x.type == "exchange" for x in got)


def test_shared_captures(shared_dir, monkeypatch):
    for path in sorted((shared_dir / "pcaps").glob("*.pcap")):
        check([path], monkeypatch)


def test_secrets_shown(monkeypatch):
    check([ROOT / "samples" / "secrets-ak.pcap"], monkeypatch, show_secrets=True)


def test_a_rotated_set_and_a_directory(tmp_path, monkeypatch):
    a, b = ROOT / "samples" / "kafka-python-basic.pcap", ROOT / "samples" / "errors.pcap"
    check([a, b], monkeypatch)
    (tmp_path / "set").mkdir()
    for p in (a, b):
        (tmp_path / "set" / p.name).write_bytes(p.read_bytes())
    check([tmp_path / "set"], monkeypatch)


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_files(kind, tmp_path, monkeypatch):
    blob, _ = damaged(kind)
    path = tmp_path / f"{kind}.pcap"
    path.write_bytes(blob)
    check([path], monkeypatch)


def test_small_window(monkeypatch):
    # items released early past the bounds come out in the same (late) places
    check([ROOT / "samples" / "java-txn-ak.pcap"], monkeypatch, window=0.001)
