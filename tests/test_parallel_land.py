"""`land` over buckets (kafkawire_core::parallel): the connections split among threads give the rows
one thread gives, table by table, whatever the number of threads, for every sample and real
capture, TLS and --records included; appended runs carry one state per bucket; faults, exit status
and error lines are those of one thread.

The oracle is the one-thread landing, itself checked against the Python row makers
(test_native_land) and the independent decoders (test_differential).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from landing.carry import land_append, read_state
from landing.local import land_local
from tests.test_carry import _bench, assert_same, commit, tables
from tests.test_lake import land, rows

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SHARED_PCAPS = ROOT.parent / "shared" / "pcaps"
CAPTURES = sorted([*SAMPLES.glob("*.pcap"), *(SAMPLES / "tls").glob("*.pcap"), *(SAMPLES / "tls").glob("*.pcapng")])


def _keys(capture: Path) -> list[str]:
    base = capture.with_suffix("")
    keys = base.with_name(base.name.removesuffix("-dsb") + ".keys")
    return ["--tls-keylog", str(keys)] if keys.exists() and capture.suffix == ".pcap" else []


def _same(capture: Path, tmp_path: Path, *opts: str) -> dict:
    one, many = tmp_path / "one", tmp_path / "many"
    a = land(capture, "--out", one, "--threads", "1", *opts, *_keys(capture))
    b = land(capture, "--out", many, "--threads", "3", *opts, *_keys(capture))
    assert a == b  # exit status and error lines
    got = rows(many)
    assert got == rows(one)
    return got


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_buckets_land_what_one_thread_lands(capture, tmp_path):
    got = _same(capture, tmp_path, "--records")
    assert len(got["exchanges"]) > 0


def test_real_captures(shared_dir, tmp_path):
    captures = sorted((shared_dir / "pcaps").glob("*.pcap*"))
    assert captures
    for i, c in enumerate(captures):
        _same(c, tmp_path / str(i), "--records")


def test_a_set_of_files_and_a_filter(tmp_path):
    """Several captures merged in time order, and `land --filter`'s stable ids, over buckets."""
    got = _same(SAMPLES / "aiokafka.pcap", tmp_path / "a", "--api", "Fetch")
    assert {r["api_name"] for r in got["exchanges"].table.to_pylist()} == {"Fetch"}
    one, many = tmp_path / "one", tmp_path / "many"
    pair = [SAMPLES / "kafka-python-ak.pcap", SAMPLES / "java-codecs-ak.pcap"]
    assert land(*pair, "--out", one, "--threads", "1") == land(*pair, "--out", many, "--threads", "2") == (0, "")
    assert rows(many) == rows(one)


def test_a_damaged_capture_faults_as_one_thread_does(tmp_path):
    """A capture cut mid-record: the same anomaly rows, the same exit status and one-line error."""
    src = (SAMPLES / "java-txn-ak.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src[: len(src) * 2 // 3])
    got = _same(cut, tmp_path, "--records")
    kinds = [r["kind"] for r in got["anomalies"].table.to_pylist()]
    assert "truncated_file" in kinds or "truncated_record" in kinds, kinds


@pytest.fixture(scope="module")
def rotated(tmp_path_factory) -> list[Path]:
    """Every sample replayed into one pcap, rotated into 4 files cut mid-connection."""
    bench = _bench()
    d = tmp_path_factory.mktemp("rotated")
    return bench.rotate(bench.make(1, d / "set.pcap"), d / "parts", 4)


@pytest.mark.parametrize("threads", [(3, 1, 2, 3), (1, 3, 3, 3)], ids=["buckets-first", "one-thread-first"])
def test_appended_runs_go_on_as_their_state_was_made(rotated, tmp_path, threads):
    """Runs over buckets carry one state per bucket, and a next run goes on over as many whatever
    it is asked (a one-thread state goes on on one thread): after every run the tables equal one
    run over the parts so far on one thread."""
    landed, state = tmp_path / "landed", tmp_path / "landed" / "_carry"
    for k, (part, n) in enumerate(zip(rotated, threads, strict=True), 1):
        staging = tmp_path / f"staging{k}"
        r = land_append([str(part)], staging, state, landed=landed, state_out=staging / "_carry", threads=n)
        blob = read_state(staging / "_carry")[1]
        assert blob.startswith(b"kwbucket") == (threads[0] > 1), k
        r.written.append(str(Path(r.state).relative_to(staging)))
        commit(staging, landed, r)
        if k in (1, len(rotated)):
            one = tmp_path / f"one{k}"
            land_local([str(p) for p in rotated[:k]], one, threads=1)
            assert_same(landed, one, False, f"after run {k}")
    assert tables(False)


def test_the_threads_option_is_checked(capsys):
    from kafkawire.cli import main

    for bad in ("0", "-1", "two", "5000"):
        with pytest.raises(SystemExit) as e:
            main(["land", str(SAMPLES / "admin.pcap"), "--out", "/nonexistent/x", "--threads", bad])
        err = capsys.readouterr().err.splitlines()[-1]
        assert e.value.code == 2 and err.endswith(f"argument --threads: a number from 1 to 1024, not '{bad}'"), err
