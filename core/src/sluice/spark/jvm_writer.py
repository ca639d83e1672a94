"""Writing a batch without a Python worker: Spark's own Parquet writer, for rows that Spark's
Kafka source read (``options.reader = "spark"``) or the driver read, and Spark columns
classified, in a session whose Python workers have not started (a cold task's first ingest)
or cannot (:meth:`sluice.spark.ingest._Job._python_writes`; once they run, Python's writer
is the faster).

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

import binascii
import io
import uuid
from collections.abc import Mapping, Sequence
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
            seen = _observed_values(observation)
            written = [("good", name) for name in _parquet_names(attempts["good"])]
            if seen["bad"]:
                whole = to_arrow_schema(frame.schema, timezone="UTC")  # (known: no analysis)
                schema = pa.schema([whole.field(name) for name in bad_columns])
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
    tasks that wrote them, value bytes, and the kept quarantined rows as JSON lines, the first
    :data:`QUARANTINE_ROWS` by offset. (The lambda runs once, on the aggregate's result.)"""
    from pyspark.sql import functions as F

    bad = F.col(_BAD)
    return [
        F.count_if(~bad).alias("good"),
        F.count_if(bad).alias("bad"),
        F.collect_set(F.when(~bad, F.col(_TASK))).alias("good_tasks"),
        F.collect_set(F.when(bad, F.col(_TASK))).alias("bad_tasks"),
        F.sum(_VALUE_BYTES).alias("value_bytes"),
        # one JSON line a row: Arrow's reader parses them without a Python object a row
        F.array_join(
            F.transform(F.min_by(_KEPT, _KEPT_AT, QUARANTINE_ROWS), lambda row: F.to_json(row)),
            "\n",
        ).alias("quarantined"),
    ]


def _observed_values(observation: Any) -> dict[str, Any]:
    """The observation's row (:func:`_measures`) by name, each field asked for on its own.
    PySpark's ``Observation.get`` pickles the whole row in the JVM and sends the pickle over
    Py4J: 157 ms where the quarantined rows' JSON was 4.4 MB (20,000 of them), which comes
    alone as a string in 24 ms. (A PySpark whose observation keeps no JVM object, Spark
    Connect's: its own ``get``.)"""
    found = getattr(observation, "_jo", None)
    if found is None:
        return dict(observation.get)
    row = found.getRow()
    values: dict[str, Any] = {}
    for index, name in enumerate(row.schema().fieldNames()):
        if row.isNullAt(index):
            values[name] = None
        elif name.endswith("_tasks"):
            values[name] = [int(task) for task in row.getList(index)]
        else:
            values[name] = row.get(index)
    return values


def _quarantined(text: str | None, schema: pa.Schema) -> pa.Table:
    """The quarantined rows of the observation (JSON lines of Spark's ``to_json``: binary
    values in base64, timestamps in microseconds, null fields left out, no message id) as a
    table of ``schema``, each row's message id made as every reader makes it
    (:func:`sluice.kafka.records.record_id`). Arrow's JSON reader parses the lines as JSON has
    them, then each column becomes its type: 165 ms for 20,000 rows took Python's parser and a
    conversion value by value, its garbage collector most of it (its objects a row)."""
    from pyarrow import json as arrow_json

    fields = [f for f in schema if f.name != ID_COLUMN]
    textual = pa.schema([(f.name, _as_json(f.type)) for f in fields])
    if text:
        options = arrow_json.ParseOptions(explicit_schema=textual)
        parsed = arrow_json.read_json(io.BytesIO(text.encode()), parse_options=options)
    else:
        parsed = textual.empty_table()
    columns = {f.name: _from_json(parsed[f.name].combine_chunks(), f.type) for f in fields}
    if ID_COLUMN in schema.names:
        columns[ID_COLUMN] = pa.array(
            [
                record_id([(h["key"], h["value"]) for h in headers or ()], topic, partition, offset)
                for headers, topic, partition, offset in zip(
                    columns["headers"].to_pylist(),
                    columns["topic"].to_pylist(),
                    columns["partition"].to_pylist(),
                    columns["offset"].to_pylist(),
                    strict=True,
                )
            ],
            pa.string(),
        )
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)


def _as_json(kind: pa.DataType) -> pa.DataType:
    """The type of ``kind``'s values as Spark's ``to_json`` writes them."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return pa.string()
    if pa.types.is_timestamp(kind):
        return pa.int64()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):  # (Arrow reads lists only)
        return pa.list_(_as_json(kind.value_type))
    if pa.types.is_struct(kind):
        return pa.struct([(f.name, _as_json(f.type)) for f in kind])
    return kind


def _from_json(values: pa.Array, kind: pa.DataType) -> pa.Array:
    """``values`` (of :func:`_as_json`'s type for ``kind``) as ``kind``."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        decoded = [None if v is None else binascii.a2b_base64(v) for v in values.to_pylist()]
        return pa.array(decoded, kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        assert isinstance(values, pa.ListArray)
        items = _from_json(values.values, kind.value_type)
        lists = pa.ListArray.from_arrays(values.offsets, items, mask=values.is_null())
        return lists if lists.type == kind else lists.cast(kind)
    if pa.types.is_struct(kind):
        assert isinstance(values, pa.StructArray)
        children = [_from_json(values.field(i), f.type) for i, f in enumerate(kind)]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=values.is_null())
    return values if values.type == kind else values.cast(kind)


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
