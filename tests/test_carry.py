"""Appended landings (landing/carry.py): a capture set landed part by part, each run restoring the
state the previous one carried, gives the tables one run over the parts gives, after every run.

Real traffic only: the samples replayed into one pcap and rotated tcpdump -C style
(bench/bench_spark.py's make and rotate), and single samples with long connections split by packet
count, so connections, frames and exchanges are cut at the file edges.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dpkt
import pyarrow.parquet as pq
import pytest

from landing.carry import STATE, land_append, read_state
from landing.local import land_local
from landing.writer import NATIVE_TABLES, dataset, native_columns
from tests.rowsets import RowSet

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_spark", ROOT / "bench" / "bench_spark.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rotated(tmp_path_factory) -> list[Path]:
    """Every sample replayed into one pcap, rotated into 8 files cut mid-connection."""
    bench = _bench()
    d = tmp_path_factory.mktemp("rotated")
    return bench.rotate(bench.make(1, d / "set.pcap"), d / "parts", 8)


def split(src: Path, folder: Path, parts: int, *, swap: bool = False) -> list[Path]:
    """src cut into `parts` files by packet count. swap: at each cut the last data segment before
    it trades places (not times: time still only grows) with the next one of its direction after
    it, so the file ends with a segment out of order, waiting behind a hole the next file fills."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f:
        r = dpkt.pcap.Reader(f)
        linktype = r.datalink()
        recs = list(r)
    cuts = [len(recs) * i // parts for i in range(parts + 1)]
    if swap:
        flows = [_flow(buf) for _, buf in recs]
        for c in cuts[1:-1]:
            i = next((i for i in range(c - 1, max(c - 40, 0), -1) if flows[i]), None)
            j = next((j for j in range(c, len(recs)) if i is not None and flows[j] == flows[i]), None)
            if j is not None:
                (ti, a), (tj, b) = recs[i], recs[j]
                recs[i], recs[j] = (ti, b), (tj, a)
                flows[i], flows[j] = flows[j], flows[i]
    files = []
    for i in range(parts):
        p = folder / f"part{i:03d}.pcap"
        with open(p, "wb") as f:
            w = dpkt.pcap.Writer(f, linktype=linktype)
            for ts, buf in recs[cuts[i] : cuts[i + 1]]:
                w.writepkt(buf, ts)
        files.append(p)
    return files


def _flow(buf: bytes):
    """A TCP segment's 4-tuple when it carries data (Ethernet, IPv4 or IPv6), else None."""
    try:
        ip = dpkt.ethernet.Ethernet(buf).data
        tcp = ip.data
    except (dpkt.UnpackError, AttributeError):
        return None
    if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data:
        return None
    return (bytes(ip.src), tcp.sport, bytes(ip.dst), tcp.dport)


def rows(out: Path, table: str) -> RowSet | list:
    """A table's rows as a multiset, every column (the date partition too) compared."""
    if not (out / table).exists():
        return []
    return RowSet(dataset(out, table).to_table())


def tables(records: bool) -> list[str]:
    return [t for t in NATIVE_TABLES if records or t != "records"]


def assert_same(app: Path, one: Path, records: bool, what: str) -> None:
    for t in tables(records):
        a, o = rows(app, t), rows(one, t)
        assert a == o, f"{what}: {t} differs ({len(a)} rows appended, {len(o)} in one run)"


def commit(staging: Path, landed: Path, result) -> None:
    """What landing.lake does with a run's staging directory: its files replace those at the same
    paths under `landed`, and the superseded provisional files go."""
    for rel in result.written:
        dst = landed / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / rel, dst)
    for rel in result.remove:
        (landed / rel).unlink()
    shutil.rmtree(staging)


@pytest.mark.parametrize("records", [False, True])
def test_rotated_set_appended_run_by_run(rotated, tmp_path, records):
    """Eight runs, each committed from a staging directory, equal one run over parts 1..k after
    run k; the unanswered request a run ends with is provisional, answered by the next part."""
    landed, state = tmp_path / "landed", tmp_path / "landed" / "_carry"
    answered_later = 0
    sizes = []
    for k, part in enumerate(rotated, 1):
        staging = tmp_path / f"staging{k}"
        r = land_append([str(part)], staging, state, landed=landed, state_out=staging / "_carry", records=records)
        assert r.run == k
        assert all(not Path(p).name.startswith(("part-", "provisional-")) or f"-{k:06d}." in p for p in r.written)
        # the previous run's provisional files, and only those, are superseded
        assert sorted(r.remove) == sorted(
            p for p in (read_state(state)[0]["provisional"] if k > 1 else []) if (landed / p).exists()
        )
        r.written.append(str(Path(r.state).relative_to(staging)))
        prov = [landed / p for p in r.written if Path(p).name.startswith("provisional-")]
        commit(staging, landed, r)
        sizes.append((state / STATE).stat().st_size)
        one = tmp_path / f"one{k}"
        land_local([str(p) for p in rotated[:k]], one, records=records)
        assert_same(landed, one, records, f"after run {k}")
        # a request this part ends with unanswered, answered in a later one
        full = None
        for p in prov:
            if p.parts[-3] != "exchanges":
                continue
            for x in pq.read_table(p).to_pylist():
                if x["response_ts"] is None:
                    if full is None:
                        full = tmp_path / "full"
                        if not full.exists():
                            land_local([str(p) for p in rotated], full, records=records)
                    done = [
                        y
                        for y in dataset(full, "exchanges").to_table().to_pylist()
                        if (y["connection_id"], y["correlation_id"], y["ts"])
                        == (x["connection_id"], x["correlation_id"], x["ts"])
                    ]
                    answered_later += any(y["response_ts"] is not None for y in done)
        shutil.rmtree(one)
    assert answered_later, "no rotate cut fell between a request and its response"
    assert max(sizes) < 64 << 10, sizes


@pytest.mark.parametrize(
    "sample,swap,records",
    [
        ("java-txn-ak.pcap", False, True),
        ("kafka-python-ak.pcap", False, False),
        ("kafka-python-ak.pcap", True, True),
        ("java-admin-ak.pcap", True, False),
        ("java-codecs-ak.pcap", True, True),
        ("old-protocol.pcap", False, False),
        ("midstream.pcap", True, False),
        ("sasl-ak.pcap", False, False),
        ("secrets-ak.pcap", True, False),
    ],
)
def test_sample_split_appended(tmp_path, sample, swap, records):
    """A sample's long connections cut into 8 parts (reordered at the cuts with swap): 8 appended
    runs, out == landed, equal one run, after each run."""
    parts = split(SAMPLES / sample, tmp_path / "parts", 8, swap=swap)
    app, state = tmp_path / "app", tmp_path / "state"
    for k in range(1, len(parts) + 1):
        land_append([str(parts[k - 1])], app, state, records=records)
        one = tmp_path / f"one{k}"
        land_local([str(p) for p in parts[:k]], one, records=records)
        assert_same(app, one, records, f"{sample} after run {k}")
        shutil.rmtree(one)
    if swap:  # the reordering held a segment behind a hole at a cut (or, mid-stream, made one look resent)
        conns = dataset(app, "connections").to_table().to_pydict()
        assert sum(conns["out_of_order"]) + sum(conns["retransmissions"]) > 0
    # every superseded provisional file is gone: only the last run's remain
    prov = {p.name for p in app.glob("*/*/provisional-*.parquet")}
    assert prov <= {"provisional-000008.parquet"}


def test_runs_in_separate_processes(rotated, tmp_path):
    """Each part landed by its own process (as `kafkawire land --mode append` runs): only the state
    on disk goes from one to the next."""
    app, state = tmp_path / "app", tmp_path / "state"
    code = "import sys; from landing.carry import land_append; land_append(sys.argv[1:2], sys.argv[2], sys.argv[3])"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for part in rotated:
        subprocess.run([sys.executable, "-c", code, str(part), str(app), str(state)], check=True, env=env)
    one = tmp_path / "one"
    land_local([str(p) for p in rotated], one)
    assert_same(app, one, False, "8 processes")


def test_state_bounded_by_open_connections(rotated, tmp_path):
    """The state holds what open connections need, not what was read: cutting the same traffic
    into four times as many parts does not make it grow, nor does it grow run after run."""
    src = rotated[0].parent.parent / "set.pcap"
    sizes = {}
    for n in (8, 32):
        parts = split(src, tmp_path / f"p{n}", n)
        state = tmp_path / f"state{n}"
        sizes[n] = [land_append([str(p)], tmp_path / f"app{n}", state).state_bytes for p in parts]
    assert max(sizes[32]) < 64 << 10, sizes
    assert max(sizes[32]) <= 3 * max(sizes[8]), sizes
    total = sum(p.stat().st_size for p in rotated)
    assert max(sizes[8]) < total / 8, (sizes, total)


def test_parts_out_of_order_reported(rotated, tmp_path):
    assert not land_append([str(rotated[1])], tmp_path / "app", tmp_path / "state").overlaps
    assert land_append([str(rotated[0])], tmp_path / "app", tmp_path / "state").overlaps


def test_options_must_match(rotated, tmp_path):
    from landing.lake import LakeOptions

    land_append([str(rotated[0])], tmp_path / "app", tmp_path / "state")
    with pytest.raises(LakeOptions, match="was landed with no --port, --records or --no-payloads: append with"):
        land_append([str(rotated[1])], tmp_path / "app", tmp_path / "state", records=True)


def test_an_append_with_other_options_is_refused_in_one_line(rotated, tmp_path, capsys):
    from kafkawire.cli import main

    assert main(["land", str(rotated[0]), "--out", str(tmp_path / "lake"), "--quiet", "--records"]) == 0
    capsys.readouterr()
    assert main(["land", str(rotated[1]), "--out", str(tmp_path / "lake"), "--quiet", "--mode", "append"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"kafkawire: {tmp_path / 'lake'} was landed with --records: append with the same options (or land elsewhere)\n"
    )


def test_damaged_state_refused(rotated, tmp_path):
    from dissector import native

    land_append([str(rotated[0])], tmp_path / "app", tmp_path / "state")
    _, blob = read_state(tmp_path / "state")
    engine = native.lander([str(rotated[1])], ports=(), columns=native_columns())
    with pytest.raises(ValueError, match="damaged"):
        engine.restore(blob[: len(blob) // 2])
    engine.restore(blob)
    with pytest.raises(ValueError):
        engine.restore(blob)  # once, before anything is read


def _api_key(buf: bytes) -> int | None:
    """The api key of a request frame starting this segment (a guess good enough to cut at)."""
    try:
        tcp = dpkt.ethernet.Ethernet(buf).data.data
    except (dpkt.UnpackError, AttributeError):
        return None
    d = tcp.data if isinstance(tcp, dpkt.tcp.TCP) else b""
    if len(d) < 8 or int.from_bytes(d[:4], "big") != len(d) - 4 or int.from_bytes(d[6:8], "big") > 20:
        return None
    return int.from_bytes(d[4:6], "big")


@pytest.mark.parametrize("sample", ["java-txn-ak.pcap", "old-protocol.pcap"])
def test_request_of_the_general_path_carried(tmp_path, sample):
    """A file that ends just after an ApiVersions request (a body the core's general path decodes,
    lenient.rs): the request waits in the state, and its exchange row is the one run's."""

    with open(SAMPLES / sample, "rb") as f:
        r = dpkt.pcap.Reader(f)
        linktype = r.datalink()
        recs = list(r)
    cut = next(i + 1 for i, (_, buf) in enumerate(recs) if _api_key(buf) == 18)
    parts = []
    for i, chunk in enumerate((recs[:cut], recs[cut:])):
        p = tmp_path / f"part{i}.pcap"
        with open(p, "wb") as f:
            w = dpkt.pcap.Writer(f, linktype=linktype)
            for ts, buf in chunk:
                w.writepkt(buf, ts)
        parts.append(p)
    app, state = tmp_path / "app", tmp_path / "state"
    first = land_append([str(parts[0])], app, state)
    assert first.provisional["exchanges"] >= 1
    land_append([str(parts[1])], app, state)
    land_local([str(p) for p in parts], tmp_path / "one")
    assert_same(app, tmp_path / "one", False, sample)
    api = [x for x in dataset(app, "exchanges").to_table().to_pylist() if x["api_key"] == 18]
    assert api and all(x["response_ts"] is not None for x in api[:1])


def test_topic_named_by_a_later_part(tmp_path):
    """A Fetch naming topics only by id in the first parts, their names learned from Metadata in a
    later part (java-codecs-ak's consumer, its other connections moved an hour later): the earlier
    runs' files are rewritten with the names, as one run resolves them at its end."""
    with open(SAMPLES / "java-codecs-ak.pcap", "rb") as f:
        r = dpkt.pcap.Reader(f)
        linktype = r.datalink()
        recs = list(r)
    fetch = 40894  # the consumer's fetch connection's client port

    def ports(buf):
        tcp = dpkt.ethernet.Ethernet(buf).data.data
        return (tcp.sport, tcp.dport) if isinstance(tcp, dpkt.tcp.TCP) else ()

    moved = sorted(((ts if fetch in ports(buf) else ts + 3600), buf) for ts, buf in recs)
    src = tmp_path / "moved.pcap"
    with open(src, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=linktype)
        for ts, buf in moved:
            w.writepkt(buf, ts)
    parts = split(src, tmp_path / "parts", 8)
    landed, state = tmp_path / "landed", tmp_path / "landed" / "_carry"
    rewritten = 0
    for k, part in enumerate(parts, 1):
        staging = tmp_path / f"staging{k}"
        res = land_append([str(part)], staging, state, landed=landed, state_out=staging / "_carry")
        rewritten += sum(not Path(p).name.endswith(f"-{k:06d}.parquet") for p in res.written)
        res.written.append(str(Path(res.state).relative_to(staging)))
        commit(staging, landed, res)
        one = tmp_path / f"one{k}"
        land_local([str(p) for p in parts[:k]], one)
        assert_same(landed, one, False, f"after run {k}")
        shutil.rmtree(one)
    assert rewritten, "no earlier file held a topic id named later"
    assert not read_state(state)[0]["marked"]
    fetches = [x for x in dataset(landed, "exchanges").to_table().to_pylist() if x["api_name"] == "Fetch"]
    assert fetches and not any(t.startswith("topic-id:") for x in fetches for t in x["topics"] or [])
