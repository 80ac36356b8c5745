"""Spark's Delta writer under a landing: the rows stage 2 hands to Spark as Arrow are written as the
tables' files by delta-spark (OptimisticTransaction.writeFiles: Spark's own Parquet writer, its
Hadoop filesystems, its statistics) and each table's commit is made by delta-spark too, with the
run's transaction id.

Why not DataFrame.write.format("delta"): a landing's commit of a table must add this run's files
and remove the ones it supersedes (the previous append's provisional rows, files rewritten with
late-learned topic names) in one commit, and only after the run's row is committed to the runs
table (landing.lake: that row is the commit point and holds the plan a killed run is completed
from). The writer's save() commits at once and cannot remove given files; writeFiles() writes and
leaves the commit to its caller, which is what Delta's own commands (WriteIntoDelta, MERGE) do."""

from __future__ import annotations

import json
import time
import uuid

from landing.lake import APP, GROUP_ROWS, Lake, table_schema
from landing.schemas import PARTITION

__all__ = ["SparkDelta"]


class SparkDelta:
    """The Delta tables of one lake, as delta-spark writes and commits them in one Spark session."""

    def __init__(self, spark, lake: Lake):
        self.spark = spark
        self.lake = lake
        jvm = spark._jvm
        self.delta = jvm.org.apache.spark.sql.delta
        self.scala = jvm.scala.jdk.javaapi.CollectionConverters
        self.jvm = jvm

    def write(self, table: str, df) -> list[dict]:
        """Write a DataFrame's rows as new files of `table` (none committed); returns their plan
        entries (landing.lake: path inside the table, size, partition values, statistics)."""
        txn = self._begin(table)
        files = self.scala.asJava(txn.writeFiles(df._jdf))
        entries = []
        for f in files:
            add = json.loads(f.json())["add"]
            entries.append(
                {
                    "path": add["path"],
                    "size": add["size"],
                    "partition": add.get("partitionValues") or {},
                    "stats": add.get("stats"),
                }
            )
        return entries

    def commit(self, table: str, step: dict, number: int) -> None:
        """One table's step of a run's plan as one commit: its adds, its removes (an overwrite's:
        every file the table holds now), the run's txn (APP, number)."""
        txn = self._begin(table)
        action = self.delta.actions.Action.fromJson
        now = int(time.time() * 1000)
        actions = [
            action(
                json.dumps(
                    {
                        "add": {
                            "path": a["path"],
                            "partitionValues": a["partition"],
                            "size": a["size"],
                            "modificationTime": now,
                            "dataChange": True,
                            "stats": a["stats"],
                        }
                    }
                )
            )
            for a in step["add"]
        ]
        if step["mode"] == "overwrite":
            actions += [f.remove() for f in self.scala.asJava(txn.filterFiles())]
        else:
            actions += [
                action(
                    json.dumps(
                        {
                            "remove": {
                                "path": r["path"],
                                "deletionTimestamp": now,
                                "dataChange": True,
                                "extendedFileMetadata": True,
                                "partitionValues": r["partition"],
                                "size": r["size"],
                            }
                        }
                    )
                )
                for r in step["remove"]
            ]
        actions.append(action(json.dumps({"txn": {"appId": APP, "version": number, "lastUpdated": now}})))
        listed = self.jvm.java.util.ArrayList()
        for a in actions:
            listed.add(a)
        txn.commit(self.scala.asScala(listed).toList(), self._operation(table, step["mode"]))

    def _begin(self, table: str):
        txn = self.delta.DeltaLog.forTable(self.spark._jsparkSession, self._uri(table)).startTransaction()
        if txn.snapshot().version() < 0:
            txn.updateMetadataForNewTable(self.delta.actions.Action.fromJson(json.dumps(self._metadata(table))))
        return txn

    def _uri(self, table: str) -> str:
        uri = self.lake._home_uri(GROUP_ROWS) if table == GROUP_ROWS else self.lake.table_uri(table)
        return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri

    @staticmethod
    def _metadata(table: str) -> dict:
        """A new table's metadata, as landing.lake makes it through delta-rs: the same schema and
        partitioning whichever engine creates the table."""
        from deltalake import Schema

        return {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": Schema.from_arrow(table_schema(table)).to_json(),
                "partitionColumns": [] if table == GROUP_ROWS else [PARTITION],
                "configuration": {},
                "createdTime": int(time.time() * 1000),
            }
        }

    def _operation(self, table: str, mode: str):
        jvm = self.jvm
        none = jvm.scala.Option.empty()
        cols = self.jvm.java.util.ArrayList()
        if table != GROUP_ROWS:
            cols.add(PARTITION)
        save = (
            jvm.org.apache.spark.sql.SaveMode.Overwrite
            if mode == "overwrite"
            else jvm.org.apache.spark.sql.SaveMode.Append
        )
        parts = jvm.scala.Option.apply(self.scala.asScala(cols).toList())
        return getattr(self.delta, "DeltaOperations$Write")(save, parts, none, none, none, none, none, none, none)
