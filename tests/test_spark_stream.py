"""The `kafkawire` streaming source (landing/spark_stream.py): spark.readStream over a directory a
real tcpdump rotates into (-G 2 -W 5) while kafka-python talks to a real broker. A windowed
aggregate (p99 latency per API per minute) and the raw rows, each to a sink with a checkpoint (the raw rows to a Delta table):
they equal the same over the batch-landed final rows of the same files, once each, and a second
run of the queries from their checkpoints adds nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.test_follow import FILES, Rotating, workload

pytest.importorskip("pyspark")


def _aggregate(df):
    from pyspark.sql import functions as F

    return df.groupBy(F.window("ts", "1 minute"), "api_name").agg(
        F.percentile_approx("latency_ms", 0.99).alias("p99"), F.count("*").alias("n")
    )


def _rows(df) -> list[tuple]:
    return sorted((str(r["window"]["start"]), r["api_name"], r["p99"], r["n"]) for r in df.collect())


@pytest.mark.slow  # tcpdump's five 2-second files, streamed, then a second run: about 30 s
@pytest.mark.broker
def test_stream_windowed_p99_exactly_once(broker, spark, tmp_path):
    from landing.local import land_local
    from landing.spark import register

    register(spark)
    port = int(broker.rsplit(":", 1)[1])
    caps = tmp_path / "caps"
    rot = Rotating(caps, port, tmp_path / "copies")

    def stream():
        return spark.readStream.format("kafkawire").option("table", "exchanges").option("maxFilesPerTrigger", 1)

    def start(trigger: dict):
        agg = (
            _aggregate(stream().load(str(caps)).withWatermark("ts", "1 minute"))
            .writeStream.outputMode("complete")
            .format("memory")
            .queryName("kw_p99")
            .option("checkpointLocation", str(tmp_path / "ck-agg"))
            .trigger(**trigger)
            .start()
        )
        raw = (
            stream()
            .option("stateDir", str(tmp_path / "raw-state"))  # its own: commit drops what it no longer needs
            .load(str(caps))
            .writeStream.format("delta")  # a Delta sink: exactly once with Spark's checkpoint
            .option("checkpointLocation", str(tmp_path / "ck-raw"))
            .trigger(**trigger)
            .start(str(tmp_path / "sink"))
        )
        return agg, raw

    sent = []
    clients = threading.Thread(target=lambda: sent.append(workload(broker, rot.done)), daemon=True)
    clients.start()
    agg, raw = start({"processingTime": "1 second"})  # runs while tcpdump rotates
    try:
        rot.wait()
        clients.join(timeout=30)
        agg.processAllAvailable()
        raw.processAllAvailable()
        batches = [p for p in agg.recentProgress if p["numInputRows"]]
        # every batch that read a file, rows or none (a rotated file may hold no whole exchange)
        planned = [p for p in agg.recentProgress if any(s["startOffset"] != s["endOffset"] for s in p["sources"])]
        streamed = _rows(spark.table("kw_p99"))
    finally:
        agg.stop()
        raw.stop()
    assert sent and sent[0] > 50
    assert len(rot.seen) == FILES
    assert len(batches) >= 2, "the files came in more than one batch"

    # the batch landing of the same files (the stream reads the complete ones: all but the newest)
    files = [str(caps / n) for n in rot.seen[:-1]]
    land_local(files, tmp_path / "one")
    final = [str(p) for p in (tmp_path / "one" / "exchanges").rglob("part-*.parquet")]
    landed = spark.read.parquet(*final)
    assert landed.count() > 50
    assert streamed == _rows(_aggregate(landed))
    got = spark.read.format("delta").load(str(tmp_path / "sink"))
    assert got.count() == landed.count() == got.select("exchange_id").distinct().count()
    cols = [c for c in landed.columns if c != "date"]
    assert got.select(*cols).exceptAll(landed.select(*cols)).count() == 0

    # a second run from the same checkpoints: nothing new to read, nothing added
    sink_files = sorted(p.name for p in (tmp_path / "sink").glob("*.parquet"))
    agg, raw = start({"availableNow": True})
    try:
        assert agg.awaitTermination(120) is not False and raw.awaitTermination(120) is not False
    finally:
        agg.stop()
        raw.stop()
    assert not [p for p in agg.recentProgress if p["numInputRows"]]
    assert sorted(p.name for p in (tmp_path / "sink").glob("*.parquet")) == sink_files
    assert spark.read.format("delta").load(str(tmp_path / "sink")).count() == landed.count()
    # a query's own stateDir keeps the states of its last two offsets (Spark commits a batch when it
    # plans the next); the default one, which queries may share, keeps them all
    assert len(list((tmp_path / "raw-state").glob("state-*.bin"))) <= 2
    # one state per batch that read files: every batch with rows has one, and no batch more than one
    # (a batch that found no file, its offsets still moving, reads nothing and leaves none)
    states = len(list(Path(caps, ".kafkawire-stream").rglob("state-*.bin")))
    assert len(batches) <= states <= len(planned), (len(batches), states, len(planned))
