"""The Spark engine on a real local[2] session: the same tables as the local engine (a standalone cluster: test_spark_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from kafkawire.cli import main as cli_main  # noqa: F401  (the land command's engines)
from landing import dataset
from landing.schemas import TABLES

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
PCAPS = ROOT.parent / "shared" / "pcaps"
SHARED = sorted(PCAPS.glob("*.pcap")) if PCAPS.is_dir() else []  # optional, beside the repo
CAPTURES = sorted(SAMPLES.glob("*.pcap")) + SHARED
# today 516 exchanges in samples/, 215 in ../shared/pcaps (a fresh clone has no ../shared)
MIN_EXCHANGES = 500 + (200 if SHARED else 0)


def land_local(paths, out, records=True):
    from landing.local import land_local as land

    return land([str(p) for p in paths], out, records=records)


def as_text(df):
    """Every cell as text to compare and sort by: bytes as hex (the metadata log's record values
    are not UTF-8), the rest by str()."""
    return df.map(lambda v: v.hex() if isinstance(v, bytes) else str(v)).astype(str)


def tables(out: Path, records=True) -> dict:
    got = {}
    for t in TABLES:
        if t == "records" and not records:
            continue
        df = dataset(out, t).to_table().to_pandas()
        df = as_text(df).sort_values(list(df.columns)).reset_index(drop=True)
        got[t] = df
    return got


def assert_same(a: Path, b: Path, records=True) -> None:
    x, y = tables(a, records), tables(b, records)
    for t in x:
        assert len(x[t]) == len(y[t]), t
        assert x[t].equals(y[t]), f"{t} differs"


def _workers(spark) -> set:
    """What the session's Python workers say about how they started, one answer per task slot."""

    def tell(_):
        import gc
        import os
        import sys

        yield (
            sys.modules["__main__"].__spec__.name,
            ".zip" in sys.modules["pyspark"].__file__,
            gc.get_freeze_count() > 0,
            len(os.listdir("/proc/self/task")),
        )

    return set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(tell).collect())


def test_spark_lands_what_the_local_engine_lands(spark, tmp_path):
    from landing.spark import land_spark

    counts = land_local(CAPTURES, tmp_path / "local")
    got, faults = land_spark([str(p) for p in CAPTURES], tmp_path / "spark", spark=spark, records=True)
    assert faults == [] and got == counts and counts["exchanges"] > MIN_EXCHANGES and counts["records"] > 0
    assert_same(tmp_path / "local", tmp_path / "spark")
    # without --records the native lander writes the rows itself
    got, faults = land_spark([str(p) for p in CAPTURES], tmp_path / "native", spark=spark, catalog=False)
    assert faults == [] and got == {t: n for t, n in counts.items() if t != "records"}
    assert_same(tmp_path / "local", tmp_path / "native", records=False)
    # ...landed by workers forked from kafkawire's daemon (local mode): pyspark imported from the
    # installed package, the preloaded modules frozen before the fork; a worker may run pyarrow's threads by now
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.python.daemon.module") == "landing.spark_daemon"
    assert conf.get("spark.python.unix.domain.socket.enabled") == "true"
    assert {w[:3] for w in _workers(spark)} == {("landing.spark_daemon", False, True)}
    # the catalog tables, partitions discovered
    n = spark.sql("SELECT count(*) AS n, count(DISTINCT date) AS d FROM kafka_exchanges").first()
    assert n.n == counts["exchanges"] and n.d >= 1
    e = spark.sql("SELECT count(*) FROM kafka_errors e JOIN kafka_exchanges x USING (exchange_id)").first()[0]
    assert e == counts["errors"] > 0


def _rotate(src: Path, whole: Path, folder: Path, parts: int = 3) -> list[Path]:
    """Rewrite src with its first large Kafka frame sent as two TCP segments (as `whole`), then
    rotate it into `parts` files (like tcpdump -C) with one cut between those two segments."""
    import dpkt

    with open(src, "rb") as f:
        recs = list(dpkt.pcap.Reader(f))
    out, cut = [], None
    for ts, buf in recs:
        eth = dpkt.ethernet.Ethernet(buf)
        tcp = getattr(eth.data, "data", None)
        if cut is None and isinstance(tcp, dpkt.tcp.TCP) and len(tcp.data) >= 64:
            ip, data, half = eth.data, tcp.data, len(tcp.data) // 2
            for i, piece in enumerate((data[:half], data[half:])):
                t = dpkt.tcp.TCP(bytes(tcp))
                t.data, t.sum = piece, 0
                t.seq = (tcp.seq + (half if i else 0)) & 0xFFFFFFFF
                ip.data, ip.sum = t, 0
                ip.len = ip.hl * 4 + len(bytes(t))
                out.append((ts + i * 1e-6, bytes(eth)))
                if not i:
                    cut = len(out)
            continue
        out.append((ts, buf))
    assert cut is not None

    def write(p, rows):
        with open(p, "wb") as f:
            w = dpkt.pcap.Writer(f, linktype=dpkt.pcap.DLT_EN10MB)
            for ts, buf in rows:
                w.writepkt(buf, ts)

    write(whole, out)
    folder.mkdir()
    edges = [0, *sorted({cut, *(len(out) * k // parts for k in range(1, parts))}), len(out)]
    files = []
    for i, (a, b) in enumerate(pairwise(edges)):
        files.append(folder / f"cap{i:02d}.pcap")
        write(files[-1], out[a:b])
    return files


@pytest.mark.parametrize(
    "name,records",
    [
        # every capture and --records on and off, with -m slow (20 s each on 2 cores)
        pytest.param("java-codecs-ak.pcap", True, marks=pytest.mark.slow),
        pytest.param("kafka-python-basic.pcap", True, marks=pytest.mark.slow),
        pytest.param("java-codecs-ak.pcap", False, marks=pytest.mark.slow),
    ],
)
def test_rotated_files_and_byte_ranges_land_like_the_whole_capture(spark, tmp_path, name, records):
    from landing.spark import land_spark, plan

    src = tmp_path / "whole.pcap"
    files = _rotate(SAMPLES / name, src, tmp_path / "rot")
    assert len(files) >= 3
    land_local([src], tmp_path / "whole", records=records)
    land_spark([str(tmp_path / "rot")], tmp_path / "rotated", spark=spark, records=records, catalog=False)
    assert_same(tmp_path / "whole", tmp_path / "rotated", records)
    # the files cut and counted by a task each (land_spark on a big set): the same plan, a corrupt file too
    from landing.spark import _on_executors

    bad = tmp_path / "rot" / "zz-bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1garbage")
    rot = [str(tmp_path / "rot")]
    assert plan(rot, 2048, map_files=_on_executors(spark.sparkContext), spread_after=0) == plan(rot, 2048)
    # one file in ranges of ~2 KB: many tasks, connections and frames cut at every edge
    assert len(plan([str(src)], 2048)) >= 6
    land_spark([str(src)], tmp_path / "ranges", spark=spark, records=records, target_bytes=2048, catalog=False)
    assert_same(tmp_path / "whole", tmp_path / "ranges", records)


def _source_frame(df):
    got = df.toPandas()
    for c in got.columns:  # Spark hands timestamps over naive, in the session's zone (UTC)
        if str(got[c].dtype).startswith("datetime64") and got[c].dt.tz is None:
            got[c] = got[c].dt.tz_localize("UTC")
    return as_text(got).sort_values(list(got.columns)).reset_index(drop=True)


def test_data_source_reads_captures_as_land_does(spark, tmp_path):
    """Every sample (and shared capture) as one set: each table equals land's, topic names included."""
    import json

    from landing.spark import register

    register(spark)
    land_local(CAPTURES, tmp_path / "local")
    want = tables(tmp_path / "local")
    paths = json.dumps([str(p) for p in CAPTURES])
    for t in TABLES:
        got = _source_frame(spark.read.format("kafkawire").option("table", t).load(paths))
        assert len(got) == len(want[t]) and (t == "anomalies" or len(got) > 0), t
        # the same rows as land's (binary payloads and timestamps print alike after as_text)
        assert list(got.columns) == list(want[t].columns), t
        assert got.equals(want[t]), t
    # names learned late are in (the local engine rewrote its files for them; the source held its rows back)
    topics = [
        x for v in dataset(tmp_path / "local", "exchanges").to_table().column("topics").to_pylist() for x in v or ()
    ]
    assert topics and not any(x.startswith("topic-id:") for x in topics)
    ids = spark.read.format("kafkawire").load(str(SAMPLES / "errors.pcap")).select("exchange_id").toPandas()
    assert len(ids) > 0


def test_data_source_reads_each_byte_once(tmp_path):
    """The source's read task reads the capture set once: the bytes its process reads (rchar)
    while it runs are the captures' size, give or take a little, on a set of rotated files."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_spark import make, rotate

    from landing.spark_source import source_partitions, source_read

    big = make(6, tmp_path / "x.pcap")
    files = rotate(big, tmp_path / "rot", parts=4)
    size = sum(f.stat().st_size for f in files)

    def rchar() -> int:
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])

    options = {"path": str(tmp_path / "rot"), "table": "exchanges"}
    [part] = source_partitions(options)
    assert sorted(part) == sorted(str(f) for f in files)
    list(source_read(options, part[:0]))  # imports and first-use costs out of the count
    before = rchar()
    rows = sum(b.num_rows for b in source_read(options, part))
    read = rchar() - before
    assert rows > 1000
    assert size <= read < size * 1.05 + (1 << 20), (read, size)


def test_data_source_pushes_date_filters_down(spark, tmp_path):
    """A filter on `date` is applied by the source (not again by Spark) and gives land's rows of those dates."""
    from landing.spark import register

    register(spark)
    land_local(CAPTURES, tmp_path / "local")
    want = tables(tmp_path / "local")["exchanges"]
    dates = sorted(set(want.date))
    assert len(dates) >= 2
    import json

    df = spark.read.format("kafkawire").load(json.dumps([str(p) for p in CAPTURES])).where(f"date >= '{dates[-1]}'")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert " Filter " not in plan, plan  # pushed to the source, which applied them
    import pyarrow.dataset as ds

    # land's rows of those dates, through pandas as the source's are (ints with nulls turn float)
    mine = dataset(tmp_path / "local", "exchanges").to_table(filter=ds.field("date") >= dates[-1]).to_pandas()
    mine = as_text(mine).sort_values(list(mine.columns)).reset_index(drop=True)
    got = _source_frame(df)
    assert len(got) == len(mine) < len(want) and got.equals(mine)


@pytest.mark.slow  # `land --engine spark` in a process (and a JVM) of its own: about 20 s
def test_corrupt_file_in_a_set_with_the_spark_engine(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1garbage")
    out = tmp_path / "tables"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkawire",
            "land",
            str(SAMPLES / "admin.pcap"),
            str(bad),
            "--out",
            str(out),
            "--engine",
            "spark",
            "--master",
            "local[1]",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("kafkawire:")]
    assert len(lines) == 1 and str(bad) in lines[0]
    assert "landed in" in r.stdout
    ex = dataset(out, "exchanges").to_table()
    an = dataset(out, "anomalies").to_table().to_pandas()
    assert ex.num_rows == 12
    assert (
        len(an) == 1 and an.iloc[0]["kind"] in ("truncated_file", "corrupt_file") and str(bad) in an.iloc[0]["detail"]
    )


def test_the_daemon_only_where_the_workers_import_this_kafkawire(tmp_path, monkeypatch):
    from landing.spark import _local_conf

    daemon = "spark.python.daemon.module"
    assert _local_conf("local[2]", {}, "/tmp/x")[daemon] == "landing.spark_daemon"
    assert _local_conf("spark://127.0.0.1:7077", {}, "/tmp/x") == {}  # a cluster's workers: ship()
    assert _local_conf("local-cluster[2,1,1024]", {}, "/tmp/x") == {}
    assert _local_conf(None, {}, "/tmp/x")[daemon] == "landing.spark_daemon"  # local[*]...
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # ...unless spark-submit's defaults say
    (tmp_path / "spark-defaults.conf").write_text("spark.master   spark://10.0.0.1:7077\n")
    assert _local_conf(None, {}, "/tmp/x") == {}
    monkeypatch.delenv("SPARK_CONF_DIR")
    (tmp_path / "landing").mkdir()  # another checkout where the JVM starts
    (tmp_path / "landing" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert daemon not in _local_conf("local[2]", {}, "/tmp/x")


def _start_daemon(env: dict) -> tuple[int, str]:
    """Run the daemon as Spark does; (the port it reports on stdout, its stderr) once stdin closes."""
    import os
    import struct

    p = subprocess.Popen(
        [sys.executable, "-m", "landing.spark_daemon", "pyspark.worker"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        port = struct.unpack(">i", p.stdout.read(4))[0]
        p.stdin.close()  # how Spark stops it (exit status 1, as PySpark's)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    return port, p.stderr.read().decode()


@pytest.mark.parametrize(
    "pandas, fallback",
    [
        (None, None),
        ("raise ImportError('no pandas here')", "preloading failed"),
        (
            "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
            "threads started while preloading",
        ),
    ],
)
def test_the_daemon_runs_pysparks_own_when_preloading_fails_or_starts_a_thread(tmp_path, pandas, fallback):
    env = {}
    if pandas is not None:  # a pandas that fails, or that starts a thread on import, first on the path
        (tmp_path / "pandas").mkdir()
        (tmp_path / "pandas" / "__init__.py").write_text(pandas + "\n")
        env["PYTHONPATH"] = str(tmp_path)
    port, err = _start_daemon(env)
    assert 0 < port < 65536
    if fallback is None:
        assert "kafkawire:" not in err, err
    else:
        assert fallback in err and "running pyspark.daemon" in err, err


@pytest.mark.slow  # four Spark landings: about 20 s
def test_spark_appends_a_rotated_set_file_by_file_like_one_run(spark, tmp_path):
    """Four rotated files (connections cut mid-stream at each edge) appended by four Spark landings
    give the tables of landing the set in one run: each bucket carries its open connections."""
    from landing.local import land_local
    from landing.spark import land_spark
    from tests.test_lake import rows

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_spark import make, rotate

    from landing.lake import Lake

    parts = rotate(make(2, tmp_path / "whole.pcap"), tmp_path / "rot", 4)
    land_local([str(p) for p in parts], tmp_path / "one", records=True)
    for p in parts:
        land_spark([str(p)], tmp_path / "lake", spark=spark, records=True, mode="append", catalog=False)
    want = rows(tmp_path / "one")
    assert len(want["exchanges"]) > 500
    assert rows(tmp_path / "lake") == want
    # the carried state is in the lake's runs table, with the run that carries it
    state = [f["name"] for f in Lake(tmp_path / "lake").last_run()["state"]]
    assert sorted(state) == ["spark/bucket-0.bin", "spark/bucket-1.bin", "spark/meta.json"]


@pytest.mark.slow
def test_switching_engines_between_appends_cuts_the_open_connections_in_one_line(spark, tmp_path, capsys):
    from landing.local import land_local
    from landing.spark import land_spark
    from tests.test_lake import rows

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_spark import make, rotate

    from landing.lake import Lake

    parts = rotate(make(1, tmp_path / "whole.pcap"), tmp_path / "rot", 3)
    land_local([str(parts[0])], tmp_path / "lake", mode="append")
    land_spark([str(parts[1])], tmp_path / "lake", spark=spark, mode="append", catalog=False)
    land_local([str(parts[2])], tmp_path / "lake", mode="append")
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "are cut here" in line] == [
        "kafkawire: the connections the last landing (local engine) left open are cut here: "
        "append with the same engine to continue them",
        "kafkawire: the connections the last landing (Spark engine) left open are cut here: "
        "append with the same engine to continue them",
    ]
    state = [f["name"] for f in Lake(tmp_path / "lake").last_run()["state"]]
    assert state == ["state.bin"]
    assert len(rows(tmp_path / "lake")["exchanges"]) > 100


@pytest.mark.slow
def test_spark_decrypts_tls_in_byte_ranges_as_the_local_engine(spark, tmp_path):
    """A TLS capture with its key log, cut into ~4 KB byte ranges (TLS connections and records cut
    at every edge): Spark's tasks, given the key log by the job, land the local engine's tables; a
    pcapng carrying its key log in a Decryption Secrets Block needs no option; the data source
    takes the key log as an option."""
    from dissector.tls import read_keylogs
    from landing.local import land_local
    from landing.spark import land_spark, register

    register(spark)
    tls = SAMPLES / "tls"
    keys = read_keylogs(tls / "tls-kafka-python-ak.keys")
    land_local([str(tls / "tls-kafka-python-ak.pcap")], tmp_path / "local", records=True, tls_keylogs=keys)
    got, faults = land_spark(
        [str(tls / "tls-kafka-python-ak.pcap")],
        tmp_path / "spark",
        spark=spark,
        records=True,
        target_bytes=4096,
        catalog=False,
        tls_keylogs=keys,
    )
    assert faults == [] and got["exchanges"] > 100 and got["anomalies"] == 0
    assert_same(tmp_path / "local", tmp_path / "spark")
    got, faults = land_spark(
        [str(tls / "tls-kafka-python-ak-dsb.pcapng")], tmp_path / "dsb", spark=spark, records=True, catalog=False
    )
    assert faults == [] and got["anomalies"] == 0
    assert_same(tmp_path / "local", tmp_path / "dsb")
    df = (
        spark.read.format("kafkawire")
        .option("table", "connections")
        .option("tls_keylog", str(tls / "tls-java-ak.keys"))
        .load(str(tls / "tls-java-ak.pcap"))
    )
    rows = df.groupBy("tls_version").count().collect()
    assert {r.tls_version: r["count"] for r in rows} == {"TLSv1.2": 12, "TLSv1.3": 16}
