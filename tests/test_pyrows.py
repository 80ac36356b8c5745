"""landing.pyrows against pyarrow's own converter (the oracle), on the tables it builds: the runs
row, the group tables from the samples' exchanges, a topic placeholder resolved; and a landing
that needs none of pandas."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from landing import pyrows
from landing.lake import _runs_schema
from landing.schemas import DERIVED, SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def _same(rows, schema):
    ours = pyrows.table(rows, schema)
    theirs = pa.Table.from_pylist(rows, schema=schema)
    ours.validate(full=True)
    assert ours.equals(theirs), (ours, theirs)
    return ours


def test_the_runs_row_is_built_as_pyarrow_builds_it():
    row = {
        "run": 7,
        "id": "b2f1",
        "mode": "append",
        "landed": "2026-11-29T13:00:00Z",
        "captures": [
            {"path": "s3://bucket/a.pcap", "content": "blake2:ab", "size": 1 << 40},
            {"path": "b.pcap", "content": None, "size": 0},
        ],
        "rows": '{"exchanges": 3}',
        "topic_names": "{}",
        "pending": "[]",
        "state": [{"name": "carry", "data": bytes(range(256))}, {"name": "empty", "data": b""}],
        "plan": None,
    }
    _same([row], _runs_schema())
    _same([{**row, "captures": [], "state": None}, row], _runs_schema())


@pytest.mark.parametrize("sample", ["aiokafka.pcap", "kafka-python-ak.pcap"])
def test_the_group_tables_of_a_sample_are_built_as_pyarrow_builds_them(tmp_path, sample):
    from landing.groups import rebalances
    from landing.local import land_local

    land_local([str(SAMPLES / sample)], tmp_path / "lake")
    import pyarrow.dataset as pads

    exchanges = pads.dataset(tmp_path / "lake" / "exchanges", format="parquet", partitioning="hive").to_table()
    assert exchanges.num_rows
    generations, assignments = rebalances(exchanges.to_pylist())
    assert generations and assignments
    for table, rows in zip(DERIVED, (generations, assignments), strict=True):
        _same(rows, SCHEMAS[table])
    # and the timestamps come back as the datetimes pyarrow gives
    theirs = exchanges.select(["ts", "response_ts", "client", "error_codes"])
    ours = pyrows.rows(theirs)
    assert ours == theirs.to_pylist()
    assert all(isinstance(r["ts"], datetime.datetime) and r["ts"].utcoffset() == datetime.timedelta(0) for r in ours)


def test_every_type_with_nulls_and_empties():
    schema = pa.schema(
        [
            ("i16", pa.int16()),
            ("i32", pa.int32()),
            ("f", pa.float64()),
            ("b", pa.bool_()),
            ("s", pa.string()),
            ("raw", pa.binary()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("naive", pa.timestamp("us")),
            ("codes", pa.list_(pa.int16())),
            ("names", pa.list_(pa.string())),
        ]
    )
    when = datetime.datetime(2026, 11, 29, 13, 1, 2, 345678, tzinfo=datetime.UTC)
    rows = [
        {
            "i16": -3,
            "i32": 2**31 - 1,
            "f": 0.1,
            "b": True,
            "s": "héllo",
            "raw": b"\x00\xff",
            "ts": when,
            "naive": when.replace(tzinfo=None),
            "codes": [1, -1],
            "names": ["a", None, ""],
        },
        {},
        {
            "b": False,
            "s": "",
            "raw": b"",
            "codes": [],
            "names": [],
            "ts": datetime.datetime(1969, 12, 31, tzinfo=datetime.UTC),
        },
    ] + [{"i16": i, "b": i % 3 == 0} for i in range(20)]
    _same(rows, schema)
    _same([], schema)
    with pytest.raises(TypeError, match="no buffers"):
        pyrows.column([1], pa.uint8())


def test_a_landing_imports_no_pandas(tmp_path):
    """pandas costs a fifth of a second to import, and a fresh landing has no use for it (an
    appended one reads the runs table back through pyarrow.dataset, which imports it)."""
    code = (
        "import sys; from landing.local import land_local; "
        f"land_local([{str(SAMPLES / 'aiokafka.pcap')!r}], {str(tmp_path / 'lake')!r}, threads=2); "
        "print('pandas' in sys.modules, 'pyarrow.dataset' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
