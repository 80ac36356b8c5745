"""The fuzz harness (tests/fuzz) inside the test run, with a bounded budget.

- every input a fuzz run ever broke an invariant with (tests/fuzz/crashers/) is replayed;
- hypothesis mutates real frames, record sets and captures (seeded from samples/: flipped bytes,
  cuts, inserts, absurd lengths) through every target, each input under a time limit and with
  tracemalloc's peak held to `memory_bound(len(input))`;
- a short coverage-guided atheris run of every target (a few seconds each) must find nothing
  (marked slow, about 30 s: `.ci/run` runs it after the default run).
Long runs: `python -m tests.fuzz.run all --seconds 600 --jobs 2` (see tests/fuzz/run.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import run as fuzz_run
from tests.fuzz.targets import TARGETS, memory_bound

ROOT = Path(__file__).resolve().parent.parent
CRASHERS = sorted(p for p in (ROOT / "tests" / "fuzz" / "crashers").glob("*/*") if p.is_file())
TIME_LIMIT = 10  # seconds one input may take (the targets' inputs are at most a few hundred KB)


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise _TooSlow(f"an input took more than {TIME_LIMIT} s")


def check(target: str, data: bytes) -> None:
    """One input through one target, bounded in time and in memory."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    tracemalloc.start()
    try:
        TARGETS[target](data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert peak <= memory_bound(len(data)), f"{target}: {peak} bytes at peak for a {len(data)}-byte input"


@pytest.mark.parametrize("path", CRASHERS, ids=[f"{p.parent.name}/{p.name[:16]}" for p in CRASHERS])
def test_every_kept_crasher_now_passes(path):
    check(path.parent.name, path.read_bytes())


def test_crashers_are_kept_for_the_findings():
    # the first runs' findings, each fixed: replay.compare keyed list items by an unhashable value
    # (TypeError), and the tcp target's own first invariant was too strict after an RST
    assert {p.parent.name for p in CRASHERS} >= {"compare", "tcp"}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    counts = fuzz_run.seed(d)
    assert counts["frame"] >= 100 and counts["capture"] >= 10 and counts["records"] >= 10
    return {t: [p.read_bytes() for p in sorted((d / t).iterdir())] for t in counts}


_ABSURD = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00", b"\x06\x40\x00\x00")


@st.composite
def mutated(draw, pool: list[bytes]):
    data = bytearray(draw(st.sampled_from(pool)))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            data += draw(st.binary(max_size=16))
            continue
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 4))
        if op == 0:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i : i + draw(st.integers(1, 64))]
        elif op == 2:
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == 3:
            del data[i:]
        else:
            data[i : i + 4] = draw(st.sampled_from(_ABSURD))  # a length field gone absurd
    return bytes(data)


PROFILE = settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_mutated_real_inputs_keep_every_invariant(target, seeds):
    pool = seeds.get(target) or [b""]

    @PROFILE
    @given(mutated(pool))
    def run(data):
        check(target, data)

    run()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_random_bytes_keep_every_invariant(target):
    @PROFILE
    @given(st.binary(max_size=4096))
    def run(data):
        check(target, data)

    run()


@pytest.mark.slow  # nine atheris processes, 3 s of fuzzing each, two at a time: about 30 s
def test_a_short_coverage_guided_run_finds_nothing(tmp_path):
    # a fixed seed: the bounded run in every test run is the same run; long runs (tests/fuzz/run.py) explore
    pytest.importorskip("atheris")
    before = set(CRASHERS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            "all",
            "--seconds",
            "3",
            "--jobs",
            "2",
            "--quick",
            "--work",
            str(tmp_path),
            "--seed",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for t in TARGETS:
        row = next((ln for ln in lines if ln.startswith(t + " ")), "")
        assert "exit 0" in row and "FOUND" not in row, row
        assert int(row.split("inputs ")[1].split()[0]) > 10, row  # it ran inputs, not just started
    new = set(p for p in (ROOT / "tests" / "fuzz" / "crashers").glob("*/*") if p.is_file()) - before
    assert not new, f"new crashers: {sorted(map(str, new))}"
