"""The boundary between Python and the native core (native/py/src/config.rs): the engine's configuration
is built by keyword, and the facts both sides define (the item classes' fields, the anomaly kinds,
the API keys the core names, the tables' columns) are checked as it is built, so a mismatch fails
there, not in a run."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

_native = pytest.importorskip("dissector._native")

from dissector import native  # noqa: E402
from dissector.anomalies import TABLE, AnomalyKind  # noqa: E402
from dissector.items import Anomaly, Connection, Exchange  # noqa: E402
from landing.writer import native_columns  # noqa: E402


def _config(**kw):
    return native.config(ports=[9092], max_frame_size=1 << 20, connections=True, window=5.0, **kw)


def _items(**changes):
    """_native.Items as dissector.native.config() builds it, with some arguments changed."""
    fields = {c: [f.name for f in dataclasses.fields(c)] for c in (Exchange, Anomaly, Connection)}
    kw = dict(
        exchange=Exchange,
        exchange_fields=fields[Exchange],
        anomaly=Anomaly,
        anomaly_fields=fields[Anomaly],
        connection=Connection,
        connection_fields=fields[Connection],
        anomaly_table=[list(r) for r in TABLE],
        file_faults=["corrupt_file"],
    )
    kw.update(changes)
    return _native.Items(**kw)


def test_the_cores_registry_is_protocols_generation():
    """The core decodes with its own copy of the schema data (native/core/data/registry.json,
    embedded): it is what native/tools/gen_registry.py writes from protocol/_generated, byte for
    byte, so the two registries are one generation of Kafka's specs."""
    import runpy

    root = Path(__file__).resolve().parents[1]
    gen = runpy.run_path(str(root / "native" / "tools" / "gen_registry.py"))
    written = (root / "native" / "core" / "data" / "registry.json").read_text()
    assert written == gen["source"](), "run: python native/tools/gen_registry.py > native/core/data/registry.json"


def test_anomaly_table_is_the_native_cores_and_generated_from_its_source():
    """One source (native/core/anomalies.tsv): the core's table (made by build.rs) and Python's
    (written by native/tools/gen_anomalies.py) are that file's, row for row."""
    import runpy

    root = Path(__file__).resolve().parents[1]
    gen = runpy.run_path(str(root / "native" / "tools" / "gen_anomalies.py"))
    tsv = (root / "native" / "core" / "anomalies.tsv").read_text()
    written = (root / "dissector" / "_generated" / "anomalies.py").read_text()
    assert written == gen["source"](tsv), (
        "run: python native/tools/gen_anomalies.py > dissector/_generated/anomalies.py"
    )
    assert [list(r) for r in _native.ANOMALY_TABLE] == gen["rows"](tsv) == [list(r) for r in TABLE]
    assert [k.value for k in AnomalyKind] == [r[0] for r in TABLE]
    assert {r[1] for r in TABLE} <= {"error", "warn", "note", "chat"}


def test_v2_batch_header_is_the_python_structs():
    """records.rs reads a magic 2 batch header at the offsets of protocol.records' struct."""
    import struct

    from protocol import records

    fmt = records._V2.format.lstrip(">")
    assert "".join(code for _, code, _ in _native.V2_HEADER) == fmt
    for i, (_, _, offset) in enumerate(_native.V2_HEADER):
        assert offset == struct.calcsize(">" + fmt[:i])
    assert records._V2_CRC_START == dict((n, o) for n, _, o in _native.V2_HEADER)["attributes"]


def test_config_builds_and_reads_back():
    cfg = _config(columns=native_columns())
    assert cfg.ports == [9092] and cfg.connections is True
    assert cfg.limits.max_frame_size == 1 << 20 and cfg.limits.window == 5.0
    assert cfg.items.exchange is Exchange
    assert cfg.protocol.api_names[0] == "Produce"
    engine = _native.Engine(config=cfg, files=[], stitch=True, rows=True)
    assert engine.next_batch() == []
    assert engine.next_batch() is None


def test_config_is_keyword_only():
    with pytest.raises(TypeError):
        _native.Limits(1, 2, 3, 4, 5.0, 6, 7, 8)  # type: ignore[misc]


def test_an_anomaly_table_that_differs_fails_construction():
    rows = [list(r) for r in TABLE]
    with pytest.raises(ValueError, match=r'only in Python \["brand_new_kind"\]'):
        _items(anomaly_table=[*rows, ["brand_new_kind", "note", "protocol", "exchanges", "new"]])
    with pytest.raises(ValueError, match=r'only in the native core \["resync"\]'):
        _items(anomaly_table=[r for r in rows if r[0] != "resync"])
    graver = [[*r[:1], "error", *r[2:]] if r[0] == "resync" else r for r in rows]
    with pytest.raises(ValueError, match="anomaly table differs"):
        _items(anomaly_table=graver)


def test_a_file_fault_must_be_an_anomaly_kind():
    with pytest.raises(ValueError, match="no anomaly kind"):
        _items(file_faults=["not_a_kind"])


@pytest.mark.parametrize("cls", ["exchange", "anomaly", "connection"])
def test_item_fields_added_or_moved_fail_construction(cls):
    names = [
        f.name for f in dataclasses.fields({"exchange": Exchange, "anomaly": Anomaly, "connection": Connection}[cls])
    ]
    with pytest.raises(ValueError, match="fields differ"):
        _items(**{f"{cls}_fields": [*names, "added_on_one_side"]})
    with pytest.raises(ValueError, match="fields differ"):
        _items(**{f"{cls}_fields": [*names[1:], names[0]]})


def test_table_columns_out_of_step_fail_construction():
    columns = native_columns()
    columns["anomalies"] = [*columns["anomalies"], "extra"]
    with pytest.raises(ValueError, match="out of step"):
        _config(columns=columns)


def test_rows_need_columns():
    with pytest.raises(ValueError, match="columns"):
        _native.Engine(config=_config(), files=[], stitch=True, rows=True)


def test_api_keys_the_core_names_are_the_registrys():
    cfg = _config()
    p = cfg.protocol
    names = {**p.api_names, 1: "Renamed"}
    with pytest.raises(ValueError, match="API key 1 for Fetch"):
        _native.Protocol(
            api_names=names,
            secret_apis=p.secret_apis,
            record_apis=p.record_apis,
        )
    with pytest.raises(ValueError, match="record APIs differ"):
        _native.Protocol(
            api_names=p.api_names,
            secret_apis=p.secret_apis,
            record_apis=[0, 1],
        )


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_stub_matches_the_module():
    """dissector/_native.pyi against the built module (mypy's stubtest, as .ci/run runs it)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "mypy.stubtest", "dissector._native", "--mypy-config-file", ".ci/mypy-stubtest.ini"]
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
