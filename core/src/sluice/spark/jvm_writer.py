"""Writing a batch without a Python worker: Spark's own Parquet writer, for rows that Spark's
Kafka source read (``options.reader = "spark"``) and Spark columns classified.

:mod:`.writing` hands every row to a Python task (``mapInArrow``), which needs Python and
pyarrow on the executors. When nothing in the job needs Python (a payload Spark decodes
itself: JSON, text, bytes; no partition spec, whose Iceberg transforms Spark has no
functions for; a sink on a local or shared file system, which Spark writes without an
object store's connector), this module writes the same two outputs with Spark's
DataFrame writer instead, so executors need only a JVM.

The classified rows are cached (memory, then disk) and written in three jobs over that
cache: the per-partition report (offset intervals, row counts, value bytes, the last
message), the good rows, the quarantined rows (skipped when the report counts none). Each
output goes to an ``_attempts`` directory first; Spark's commit protocol keeps only
committed task attempts' files there, and the driver syncs those (:mod:`.durable`: Spark's
tasks do not) and moves them into place, as :mod:`.writing` does.

The report is the one :mod:`.writing`'s tasks give, computed in SQL: a partition's offsets
as islands (``offset - dense_rank()``: consecutive offsets share an island, a repeated
offset stays in its island and shows as more rows than offsets), and the fingerprint of its
last message, whose key, value and timestamp are collected to the driver (one row per
partition) and digested there (:mod:`.fingerprints` is BLAKE2, which Spark SQL lacks).
"""

from __future__ import annotations

from typing import Any

from . import durable
from .durable import local_target
from .failpoints import is_armed
from .fingerprints import message_fingerprint
from .writing import (
    ATTEMPTS_DIR,
    WriteCounts,
    WriteTargets,
    merge_reports,
    move_into_place,
    remove_attempts,
    session_conf,
)

__all__ = ["jvm_writable", "write_outcomes_in_jvm"]

#: Spark writes timestamps as INT96 unless told; every reader of the sinks takes these.
_PARQUET_SETTINGS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def jvm_writable(decodes_in_python: bool, targets: WriteTargets) -> bool:
    """Whether :func:`write_outcomes_in_jvm` can write to ``targets`` (module docstring).
    Not while a test arms ``task.lost``: that failpoint lives in :mod:`.writing`'s tasks."""
    if decodes_in_python or targets.partitioning or targets.filesystem is not None:
        return False
    if is_armed("task.lost"):
        return False
    return all(local_target(t) is not None for t in (targets.data, targets.quarantine))


def write_outcomes_in_jvm(
    frame: Any, good_columns: list[str], bad_columns: list[str], targets: WriteTargets
) -> WriteCounts:
    """What :func:`.writing.write_outcomes` does, in Spark's JVM alone (module docstring)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = frame.sparkSession
    dirs = {"good": targets.data.rstrip("/"), "bad": targets.quarantine.rstrip("/")}
    attempts = {kind: f"{path}/{ATTEMPTS_DIR}" for kind, path in dirs.items()}
    bad = F.col("reason").isNotNull()
    cached = frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        report, counts, value_bytes = _report(cached)
        written = []
        with session_conf(spark, _PARQUET_SETTINGS):
            for kind, rows, columns in (
                ("good", cached.filter(~bad), good_columns),
                ("bad", cached.filter(bad), bad_columns),
            ):
                if counts[kind]:
                    rows.select(columns).write.parquet(_uri(attempts[kind]))
                    written += [(kind, name) for name in _parquet_names(attempts[kind])]
        for kind, name in written:
            durable.sync_file(f"{attempts[kind]}/{name}")  # Spark's tasks do not sync
        move_into_place(written, attempts, dirs, None)
    finally:
        cached.unpersist()
        remove_attempts(attempts, None)
    return WriteCounts(counts["good"], counts["bad"], value_bytes, merge_reports([report]))


def _report(rows: Any) -> tuple[dict[str, Any], dict[str, int], int]:
    """(the tasks' report of :mod:`.writing`, rows per output, value bytes) of ``rows``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("partition").orderBy("offset")
    island = F.col("offset") - F.dense_rank().over(order)
    intervals = (
        rows.where(F.col("offset").isNotNull())
        .select("partition", "offset", island.alias("island"))
        .groupBy("partition", "island")
        .agg(F.min("offset").alias("start"), F.max("offset").alias("end"), F.count("*").alias("n"))
        .collect()
    )
    message = F.struct("offset", "key", "value", F.unix_micros("timestamp").alias("micros"))
    totals = (
        rows.groupBy("partition")
        .agg(
            F.count_if(F.col("reason").isNull()).alias("good"),
            F.count_if(F.col("reason").isNotNull()).alias("bad"),
            F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("value_bytes"),
            F.max_by(message, "offset").alias("last"),
        )
        .collect()
    )
    report: dict[str, Any] = {}
    for row in intervals:
        part = report.setdefault(str(row["partition"]), {"intervals": [], "rows": 0})
        part["intervals"].append([row["start"], row["end"] + 1])
        part["rows"] += row["n"]
    for row in totals:
        last = row["last"]
        if last is None or last["offset"] is None or str(row["partition"]) not in report:
            continue
        micros = last["micros"]
        fingerprint = message_fingerprint(
            _bytes(last["key"]), _bytes(last["value"]), None if micros is None else micros // 1000
        )
        report[str(row["partition"])]["last"] = [last["offset"], fingerprint]
    counts = {kind: sum(row[kind] for row in totals) for kind in ("good", "bad")}
    return report, counts, sum(row["value_bytes"] or 0 for row in totals)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _uri(path: str) -> str:
    """A local path as the URI Spark's writer takes (a path alone would be the cluster's
    default file system's)."""
    found = local_target(path)
    return found.resolve().as_uri() if found is not None else path


def _parquet_names(directory: str) -> list[str]:
    """The data files Spark committed under ``directory`` (relative names), not its
    ``_SUCCESS`` marker or the checksum files of Hadoop's local file system."""
    root = local_target(directory)
    assert root is not None  # jvm_writable: local targets only
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)
    )
