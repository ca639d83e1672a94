"""Writing a batch without a Python worker: Spark's own Parquet writer, for rows that Spark's
Kafka source read (``options.reader = "spark"``) and Spark columns classified.

:mod:`.writing` hands every row to a Python task (``mapInArrow``), which needs Python and
pyarrow on the executors. When nothing in the job needs Python (a payload Spark decodes
itself: JSON, text, bytes; no partition spec, whose Iceberg transforms Spark has no
functions for; a sink on a local or shared file system, which Spark writes without an
object store's connector), this module writes the same two outputs with Spark's
DataFrame writer instead, so executors need only a JVM.

One job reads the batch, classifies it and writes the good rows; an observation on that job
(``DataFrame.observe``: aggregates computed as the rows pass, no extra pass) counts the good
and quarantined rows and the value bytes, and brings the quarantined rows themselves back to
the driver when they are few and small (at most :data:`QUARANTINE_ROWS`, each message at
most :data:`QUARANTINE_ROW_BYTES`: a bounded aggregate). The driver writes those to the
quarantine with pyarrow, so the batch is read once, with no cache. Only a larger quarantine
is written by a second job, which reads the batch again. (A cache of the classified rows
cost more than that: Spark serialized every row into it, and at 2,000,000 messages the rows
spilled out of a 2-core session's memory.) Each output goes to an ``_attempts`` directory
first; Spark's commit protocol keeps only committed task attempts' files there, and the
driver syncs those (:mod:`.durable`: Spark's tasks do not) and moves them into place, as
:mod:`.writing` does.

The observation sits outside Spark's generated code: every row reaches it as a row holding
each column its aggregates name. So the rows are first narrowed to the good rows' columns
and a few small ones (:func:`_observed`), the quarantined row built there only where it is
kept; its message id, which takes a higher-order function in Spark (the headers' search),
is made on the driver. That took the observation from 2.3 s to 0.9 to 1.4 s of a
2,000,000-message batch (bench/spark_reader_breakdown.py). The last message of each
partition, whose fingerprint the recreated-topic check needs, is not observed for the same
reason: the caller fetches it from the broker, as for :mod:`.writing`'s lean rows.

The report that :mod:`.writing`'s tasks give is built on the driver: the offsets come from
the written files' ``partition`` and ``offset`` columns (read alone, they are small), as
runs of consecutive offsets (a repeated offset stays in its run and shows as more rows than
offsets), each partition's last message without its fingerprint (fetched by the caller).
Row counts that differ between the files and the observation fail the batch (the second
job's read of a topic that changed meanwhile).

The observation also names the tasks that wrote rows, each of which wrote a file at least. A
driver that finds fewer files than that is looking at another disk than the executors wrote
to (a path on each host's own file system, on a cluster of several hosts): the batch fails
saying so, not blaming the topic.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..kafka.records import record_id
from . import durable, layout
from .durable import local_target
from .failpoints import is_armed
from .layout import ID_COLUMN
from .writing import (
    ATTEMPTS_DIR,
    UNKNOWN_FINGERPRINT,
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
#: Quarantined rows the good rows' job brings back to the driver at most (module docstring),
#: and the bytes of each one's message (key, value and headers) at most: 64 MiB at most.
QUARANTINE_ROWS = 65_536
QUARANTINE_ROW_BYTES = 1_024
#: Columns of the observed rows only (:func:`_observed`): the writing task's number (Spark
#: cannot evaluate ``spark_partition_id()`` inside an observation's aggregate itself), whether
#: the row is quarantined, its value's bytes, and the quarantined row as the driver keeps it
#: with its offset (null where it is not kept).
_TASK = "_sluice_task"
_BAD = "_sluice_bad"
_VALUE_BYTES = "_sluice_value_bytes"
_KEPT = "_sluice_kept"
_KEPT_AT = "_sluice_kept_offset"


def jvm_writable(decodes_in_python: bool, targets: WriteTargets) -> bool:
    """Whether :func:`write_outcomes_in_jvm` can write to ``targets`` (module docstring).
    Not while a test arms ``task.lost``: that failpoint lives in :mod:`.writing`'s tasks."""
    if decodes_in_python or targets.partitioning or targets.filesystem is not None:
        return False
    if is_armed("task.lost"):
        return False
    return all(local_target(t) is not None for t in (targets.data, targets.quarantine))


def write_outcomes_in_jvm(
    frame: Any,
    good_columns: list[str],
    bad_columns: list[str],
    targets: WriteTargets,
    partitions: Sequence[int],
) -> WriteCounts:
    """What :func:`.writing.write_outcomes` does, in Spark's JVM alone (module docstring);
    ``partitions``: the Kafka partitions ``frame`` reads."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    spark = frame.sparkSession
    dirs = {"good": targets.data.rstrip("/"), "bad": targets.quarantine.rstrip("/")}
    attempts = {kind: f"{path}/{ATTEMPTS_DIR}" for kind, path in dirs.items()}
    observation = Observation("sluice_batch")
    encoded = layout.spark_writer_options()
    try:
        with session_conf(spark, _PARQUET_SETTINGS):
            observed = _observed(frame, good_columns, bad_columns).observe(
                observation, *_measures()
            )
            observed.filter(~F.col(_BAD)).select(good_columns).write.options(**encoded).parquet(
                _uri(attempts["good"])
            )
            seen = dict(observation.get)
            written = [("good", name) for name in _parquet_names(attempts["good"])]
            if seen["bad"]:
                schema = to_arrow_schema(frame.select(bad_columns).schema, timezone="UTC")
                rows = _quarantined(seen["quarantined"], schema)
                if rows.num_rows == seen["bad"]:  # every one came back: no second read
                    written.append(("bad", _write_quarantine(rows, attempts["bad"])))
                    seen["bad_tasks"] = [None]  # one file, the driver's
                else:
                    bad = F.col("reason").isNotNull()
                    frame.filter(bad).select(bad_columns).write.options(**encoded).parquet(
                        _uri(attempts["bad"])
                    )
                    written += [("bad", name) for name in _parquet_names(attempts["bad"])]
        offsets = _offsets(attempts, written)
        _check_counts(offsets, seen, dirs)
        written = [(kind, name) for kind, name in written if seen[kind]]  # not an empty file
        for kind, name in written:
            durable.sync_file(f"{attempts[kind]}/{name}")  # Spark's tasks do not sync
        move_into_place(written, attempts, dirs, None)
    finally:
        remove_attempts(attempts, None)
    report = _report(offsets, partitions)
    return WriteCounts(seen["good"], seen["bad"], seen["value_bytes"] or 0, merge_reports([report]))


def _observed(frame: Any, good_columns: Sequence[str], bad_columns: Sequence[str]) -> Any:
    """The classified ``frame`` as the observation sees it (module docstring): the good rows'
    columns and the small ones it counts; each quarantined row few enough bytes to keep
    (:data:`QUARANTINE_ROW_BYTES`: key, value and headers) built as a struct of
    ``bad_columns``, timestamps in microseconds, without its message id (:func:`_quarantined`
    makes it). No higher-order function: a projection holding one runs outside Spark's
    generated code, the classification with it (about 3 s more at 2,000,000 messages)."""
    from pyspark.sql import functions as F

    bad = F.col("reason").isNotNull()
    # the headers' keys and values, each joined into one string (bytes kept as they are)
    header_bytes = F.lit(0)
    for part in ("key", "value"):
        joined = F.array_join(F.col(f"headers.{part}").cast("array<string>"), "")
        header_bytes = header_bytes + F.coalesce(F.octet_length(joined), F.lit(0))
    size = F.coalesce(F.length("value"), F.lit(0)) + F.coalesce(F.length("key"), F.lit(0))
    kept = bad & (size + header_bytes <= QUARANTINE_ROW_BYTES)  # (evaluated on bad rows only)
    row = F.struct(
        *(
            F.unix_micros(name).alias(name) if name == "timestamp" else F.col(name)
            for name in bad_columns
            if name != ID_COLUMN
        )
    )
    return frame.select(
        *good_columns,
        bad.alias(_BAD),
        F.spark_partition_id().alias(_TASK),
        F.coalesce(F.length("value"), F.lit(0)).alias(_VALUE_BYTES),
        F.when(kept, row).alias(_KEPT),
        # the offset again, as a column of its own: ordering the bounded aggregate by the
        # struct's field instead cost about 2.8 s at 2,000,000 messages (bench/README.md)
        F.when(kept, F.col("offset")).alias(_KEPT_AT),
    )


def _measures() -> list[Any]:
    """The observation's aggregates over :func:`_observed`'s rows: rows per output and the
    tasks that wrote them, value bytes, and the kept quarantined rows as JSON, the first
    :data:`QUARANTINE_ROWS` by offset."""
    from pyspark.sql import functions as F

    bad = F.col(_BAD)
    return [
        F.count_if(~bad).alias("good"),
        F.count_if(bad).alias("bad"),
        F.collect_set(F.when(~bad, F.col(_TASK))).alias("good_tasks"),
        F.collect_set(F.when(bad, F.col(_TASK))).alias("bad_tasks"),
        F.sum(_VALUE_BYTES).alias("value_bytes"),
        F.to_json(F.min_by(_KEPT, _KEPT_AT, QUARANTINE_ROWS)).alias("quarantined"),
    ]


def _quarantined(text: str | None, schema: pa.Schema) -> pa.Table:
    """The quarantined rows of the observation (Spark's ``to_json``: binary values in base64,
    timestamps in microseconds, no message id) as a table of ``schema``, each row's message
    id made as every reader makes it (:func:`sluice.kafka.records.record_id`)."""
    rows = json.loads(text) if text else []
    values: dict[str, list[Any]] = {}
    for column in schema:
        if column.name != ID_COLUMN:
            convert = _converter(column.type)  # once a column, not once a value
            values[column.name] = [_applied(convert, row.get(column.name)) for row in rows]
    if ID_COLUMN in schema.names:
        values[ID_COLUMN] = [
            record_id(
                [(h.get("key"), h.get("value")) for h in headers or ()], topic, partition, offset
            )
            for headers, topic, partition, offset in zip(
                values["headers"],
                values["topic"],
                values["partition"],
                values["offset"],
                strict=True,
            )
        ]
    columns = []
    for column in schema:
        if pa.types.is_timestamp(column.type):
            columns.append(pa.array(values[column.name], pa.int64()).cast(column.type))
        else:
            columns.append(pa.array(values[column.name], column.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _converter(kind: pa.DataType) -> Callable[[Any], Any] | None:
    """How a non-null value of Spark's ``to_json`` becomes what pyarrow takes for ``kind``;
    None where it takes the value as it is. Chosen once per column rather than for each value
    (a third of the time, on 20,000 quarantined rows)."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return base64.b64decode
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _converter(kind.value_type)
        if item is None:
            return None
        return lambda values: [_applied(item, v) for v in values]
    if pa.types.is_struct(kind):
        fields = [
            (kind.field(i).name, _converter(kind.field(i).type)) for i in range(kind.num_fields)
        ]
        if all(convert is None for _, convert in fields):
            return None
        return lambda value: {name: _applied(convert, value.get(name)) for name, convert in fields}
    return None


def _applied(convert: Callable[[Any], Any] | None, value: Any) -> Any:
    return value if convert is None or value is None else convert(value)


def _write_quarantine(rows: pa.Table, directory: str) -> str:
    """Write ``rows`` as one file in ``directory`` (made if missing); the file's name."""
    root = local_target(directory)
    assert root is not None  # jvm_writable: local targets only
    root.mkdir(parents=True, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(rows, root / name, **layout.arrow_writer_options(rows.schema))
    return name


@dataclass(frozen=True)
class _Offsets:
    """The ``partition`` and ``offset`` columns of a batch's written files, and the rows
    each output ("good", "bad") holds."""

    partition: np.ndarray
    offset: np.ndarray
    rows: dict[str, int]
    #: the files with rows each output has
    files: dict[str, int] = field(default_factory=dict)


def _offsets(attempts: dict[str, str], written: list[tuple[str, str]]) -> _Offsets:
    """:class:`_Offsets` of the files ``written`` (output, name under its attempts)."""
    tables, rows, files = [], {"good": 0, "bad": 0}, {"good": 0, "bad": 0}
    for kind, name in written:
        path = local_target(f"{attempts[kind]}/{name}")
        table = pq.read_table(path, columns=["partition", "offset"])
        tables.append(table)
        rows[kind] += table.num_rows
        files[kind] += table.num_rows > 0
    if not tables:
        return _Offsets(np.zeros(0, np.int64), np.zeros(0, np.int64), rows, files)
    both = pa.concat_tables(tables)
    return _Offsets(both["partition"].to_numpy(), both["offset"].to_numpy(), rows, files)


def _check_counts(
    offsets: _Offsets, seen: Mapping[str, Any], dirs: Mapping[str, str] | None = None
) -> None:
    """Fail the batch when the written files do not hold what the observation counted:
    fewer files than tasks that wrote rows (the executors wrote where the driver cannot see),
    else other row counts (rows read again from a topic that changed). ``dirs``: the
    outputs' directories, for the message."""
    for kind, label in (("good", "good"), ("bad", "quarantined")):
        tasks = len(seen.get(f"{kind}_tasks") or ())
        found = offsets.files.get(kind, 0)
        if found < tasks:
            where = (dirs or {}).get(kind, "the sink's directory")
            raise RuntimeError(
                f"Spark's executors wrote the batch's {label} rows in {tasks} task(s), each a "
                f"file at least, and the driver finds {found} of those files under {where}: "
                "the executors wrote where the driver cannot see (a path on each host's own "
                "disk, on a cluster of several hosts). Give the sink a path every host shares "
                "(one file system mounted at the same path on the driver and every executor) "
                "or an object store (s3://...). Nothing was published or committed."
            )
    for kind, label in (("good", "good"), ("bad", "quarantined")):
        if offsets.rows[kind] != seen[kind]:
            raise RuntimeError(
                f"Spark's writer wrote {offsets.rows[kind]} {label} rows where the read "
                f"counted {seen[kind]}: the quarantine's job read the batch again from a topic "
                "that changed meanwhile (retention or compaction). Run the batch again."
            )


def _report(offsets: _Offsets, partitions: Sequence[int]) -> dict[str, Any]:
    """The report :mod:`.writing`'s tasks give (module docstring), from the written files'
    offsets; each partition's last message without its fingerprint."""
    report: dict[str, Any] = {}
    for p in partitions:
        mine = np.sort(offsets.offset[offsets.partition == p])
        if not mine.size:
            continue
        breaks = np.flatnonzero(np.diff(mine) > 1) + 1
        starts = mine[np.concatenate(([0], breaks))]
        ends = mine[np.concatenate((breaks - 1, [mine.size - 1]))] + 1
        report[str(p)] = {
            "intervals": [[int(s), int(e)] for s, e in zip(starts, ends, strict=True)],
            "rows": int(mine.size),
            "last": [int(mine[-1]), UNKNOWN_FINGERPRINT],
        }
    return report


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
