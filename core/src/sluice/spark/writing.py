"""Writing a chunk's good rows and quarantined rows in one Spark job.

Spark's DataFrame writer writes one DataFrame per job, so two outputs would take two jobs,
and the classification (``from_json`` on every value) would run twice or go through a
cache. Instead one ``mapInArrow`` stage gets every classified row once, as Arrow, and each
task writes its good rows and its quarantined rows to Parquet itself (pyarrow, through
pyarrow's file systems: local paths and object stores alike): one file per output per task,
so one per core, and no quarantine file for a task without bad rows.

A task writes into an ``_attempts`` directory beside its output and returns the names of
its files. Only the driver moves them into place, and only those that successful task
attempts returned: a failed or speculative attempt's files are deleted with ``_attempts``,
so a retried task never writes its rows twice (this is what Spark's own commit protocol
does for its writer).

Spark hands the rows over in Arrow batches of :func:`batch_rows` rows, with Spark's own byte
limit off: to keep that limit Spark measures the batch after every row, which took about a
sixth of the writing tasks' time (the list-of-struct ``headers`` column is slow to measure).
When the largest message is known (driver mode) the row count keeps a batch under
:data:`BATCH_BYTES`; otherwise (executor mode) a batch has as many rows as the reading tasks'
own batches, which they held in memory already.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "ATTEMPTS_DIR",
    "BATCH_BYTES",
    "BATCH_ROWS",
    "WriteCounts",
    "WriteTargets",
    "batch_rows",
    "write_outcomes",
]

ATTEMPTS_DIR = "_attempts"
#: Rows of an Arrow batch handed to a writing task at most: Spark's default, and as many as
#: an executor-mode reading task hands over at once (:data:`.reading.TASK_BATCH_ROWS`).
BATCH_ROWS = 10_000
#: Bytes of such a batch at most when the largest message is known (Spark's default limit).
BATCH_BYTES = 64 << 20
_RESULT_DDL = "output STRING, file STRING, rows BIGINT, value_bytes BIGINT"
_ARROW_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_ARROW_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_NO_BYTE_LIMIT = str(2**31 - 1)  # the value that turns Spark's measuring off


def batch_rows(largest_message: int | None) -> int:
    """Rows per Arrow batch for messages of at most ``largest_message`` bytes (key, value and
    headers; None: unknown), keeping a batch under :data:`BATCH_BYTES`. A good row holds the
    message and the fields parsed from its value, which are no larger than the value."""
    if largest_message is None:
        return BATCH_ROWS
    return max(1, min(BATCH_ROWS, BATCH_BYTES // (2 * largest_message + 1024)))


@dataclass(frozen=True)
class WriteTargets:
    """Where a run's files go (directory URIs), and constant columns the sink wants on every
    row (the Iceberg sink's ``batch_id``)."""

    data: str
    quarantine: str
    constants: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WriteCounts:
    good: int
    bad: int
    value_bytes: int  # of every row read, good or bad


def write_outcomes(
    frame: Any,
    good_columns: list[str],
    bad_columns: list[str],
    targets: WriteTargets,
    largest_message: int | None = None,
) -> WriteCounts:
    """Write the rows of ``frame`` whose ``reason`` is null (``good_columns`` of them) to
    ``targets.data`` and the others (``bad_columns``) to ``targets.quarantine``, in one job.
    ``largest_message``: the bytes of the largest message, if known (:func:`batch_rows`)."""
    from pyarrow import fs

    dirs = {"good": targets.data.rstrip("/"), "bad": targets.quarantine.rstrip("/")}
    attempts = {kind: f"{path}/{ATTEMPTS_DIR}" for kind, path in dirs.items()}
    task = _task_writer(good_columns, bad_columns, attempts)
    try:
        with _arrow_batches(frame.sparkSession, batch_rows(largest_message)):
            written = frame.mapInArrow(task, _RESULT_DDL).collect()
        counts = {"good": 0, "bad": 0}
        value_bytes = 0
        for row in written:
            value_bytes += row["value_bytes"]
            if row["output"] is None:
                continue
            filesystem, source = fs.FileSystem.from_uri(f"{attempts[row['output']]}/{row['file']}")
            _, target = fs.FileSystem.from_uri(f"{dirs[row['output']]}/{row['file']}")
            filesystem.move(source, target)
            counts[row["output"]] += row["rows"]
    finally:
        for path in attempts.values():
            filesystem, local = fs.FileSystem.from_uri(path)
            with contextlib.suppress(OSError):  # FileNotFoundError included: nothing written
                filesystem.delete_dir(local)
    return WriteCounts(counts["good"], counts["bad"], value_bytes)


@contextlib.contextmanager
def _arrow_batches(spark: Any, rows: int) -> Iterator[None]:
    """Arrow batches of ``rows`` rows and no byte limit in ``spark`` while the block runs."""
    settings = {_ARROW_ROWS: str(rows), _ARROW_BYTES: _NO_BYTE_LIMIT}
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _task_writer(
    good_columns: list[str], bad_columns: list[str], attempts: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function every task runs. It imports nothing of Sluice (cloudpickle ships it by
    value), so driver-mode ingests need no Sluice on the executors."""
    columns = {"good": good_columns, "bad": bad_columns}

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyarrow import fs

        name = f"part-{uuid.uuid4().hex}.parquet"
        writers: dict[str, Any] = {}
        rows = {"good": 0, "bad": 0}
        value_bytes = 0
        try:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                value_bytes += pc.sum(pc.binary_length(table["value"])).as_py() or 0
                bad = pc.is_valid(table["reason"])
                for kind, mask in (("good", pc.invert(bad)), ("bad", bad)):
                    part = table.filter(mask).select(columns[kind])
                    if not part.num_rows:
                        continue
                    if kind not in writers:
                        filesystem, path = fs.FileSystem.from_uri(attempts[kind])
                        filesystem.create_dir(path, recursive=True)
                        writers[kind] = pq.ParquetWriter(
                            f"{path}/{name}", part.schema, filesystem=filesystem
                        )
                    writers[kind].write_table(part)
                    rows[kind] += part.num_rows
        finally:
            for writer in writers.values():
                writer.close()
        results = [
            {"output": kind, "file": name, "rows": rows[kind], "value_bytes": 0} for kind in writers
        ]
        results.append({"output": None, "file": None, "rows": 0, "value_bytes": value_bytes})
        text, number = pa.string(), pa.int64()
        schema = pa.schema(
            [("output", text), ("file", text), ("rows", number), ("value_bytes", number)]
        )
        yield pa.RecordBatch.from_pylist(results, schema=schema)

    return write
