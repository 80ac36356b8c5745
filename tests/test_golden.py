"""Every sample's `dissect` lines and `land` tables equal the golden outputs (tests/golden.py)."""

from __future__ import annotations

import difflib
import itertools
import json

import pytest

from tests.golden import DISSECT, SAMPLES, dissect, golden, land


def _first_difference(got: bytes, want: bytes) -> str:
    a, b = got.decode(errors="replace").splitlines(), want.decode(errors="replace").splitlines()
    diff = difflib.unified_diff(b, a, "golden", "now", n=0, lineterm="")
    return "\n".join(line[:300] for line in itertools.islice(diff, 12))


@pytest.mark.parametrize("mode", list(DISSECT))
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_dissect(path, mode):
    got, want = dissect(path, mode), golden(f"{path.stem}.{mode}")
    assert want.count(b"\n") > 0
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_land(path):
    want = json.loads(golden(f"{path.stem}.land"))
    got = land(path)
    tables = [
        "anomalies",
        "batches",
        "connections",
        "errors",
        "exchanges",
        "group_assignments",
        "group_generations",
        "records",
    ]
    assert sorted(got) == sorted(want) == tables
    for table in want:
        assert got[table]["columns"] == want[table]["columns"], table
        assert got[table]["rows"] == want[table]["rows"], table
    # without --records the native core writes every row itself: the same tables but records
    bare = land(path, records=False)
    assert sorted(bare) == [t for t in tables if t != "records"]
    for table in bare:
        assert bare[table] == want[table], table
