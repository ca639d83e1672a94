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

Each task also reports what it wrote, for the ingest to reconcile with what it planned
(invariant I6): per Kafka partition, the offsets as intervals, the row count (a row written
twice shows as more rows than offsets) and the fingerprint of the last message
(:mod:`.fingerprints`). And it makes its files durable (``fsync``, on local file systems)
before it reports them: offsets are committed only for bytes on stable storage (I9).

Only what a task writes crosses from the JVM to it (:func:`lean_rows`): a good row comes
without the message columns the table does not keep (the value, key, headers...), with its
value's length instead, except at the last offset of its partition's range, whose message
the fingerprint needs. Sending every good row's message to Python for nothing cost about a
tenth of a 2,000,000-message batch. Where that offset holds no message (a transaction
marker, a compacted record) the task reports the last message's fingerprint as unknown and
the ingest fetches it (:func:`sluice.spark.kafka_source.fingerprints_at`).

Spark hands the rows over in Arrow batches of :func:`batch_rows` rows, with Spark's own byte
limit off: to keep that limit Spark measures the batch after every row, which took about a
sixth of the writing tasks' time (the list-of-struct ``headers`` column is slow to measure).
When the largest message is known (driver mode) the row count keeps a batch under
:data:`BATCH_BYTES`; otherwise (executor mode) a batch has as many rows as the reading tasks'
own batches, which they held in memory already.

A batch small enough (:data:`DRIVER_WRITE_BYTES`) can be written by the driver instead
(``on_driver``): Spark classifies it as before and hands the rows to the driver as Arrow
(``toArrow``), where the same writer function runs: no function shipped to a Python
worker, no rows sent there and results back. That was about a fifth of a warm
10,000-message batch's write (0.42 s against 0.54 s), time a small batch's freshness waits
on.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from . import durable, fingerprints, layout, partitioning
from .durable import sync_directory
from .failpoints import is_armed
from .partitioning import Partitioning

# The writing tasks call fingerprints.message_fingerprint, split rows by partition
# (partitioning.Partitioning.split) and choose encodings (layout.arrow_writer_options):
# pickled by value, they need no Sluice on the executors.
with contextlib.suppress(ImportError):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(fingerprints)  # type: ignore[no-untyped-call]
    cloudpickle.register_pickle_by_value(partitioning)  # type: ignore[no-untyped-call]
    cloudpickle.register_pickle_by_value(layout)  # type: ignore[no-untyped-call]

__all__ = [
    "ATTEMPTS_DIR",
    "BATCH_BYTES",
    "BATCH_ROWS",
    "DRIVER_WRITE_BYTES",
    "PartitionWrites",
    "WriteCounts",
    "WriteTargets",
    "arrow_settings",
    "batch_rows",
    "lean_rows",
    "merge_reports",
    "move_into_place",
    "remove_attempts",
    "resolve",
    "session_conf",
    "write_outcomes",
]

ATTEMPTS_DIR = "_attempts"
#: Rows of an Arrow batch handed to a writing task at most: Spark's default, and as many as
#: an executor-mode reading task hands over at once (:data:`.reading.TASK_BATCH_ROWS`).
BATCH_ROWS = 10_000
#: Bytes of such a batch at most when the largest message is known (Spark's default limit).
BATCH_BYTES = 64 << 20
#: A batch read on the driver of at most this many bytes is written by the driver itself
#: (``write_outcomes(on_driver=True)``): it holds the classified rows in memory, as one
#: writing task would hold an Arrow batch.
DRIVER_WRITE_BYTES = BATCH_BYTES
_RESULT_DDL = "output STRING, file STRING, rows BIGINT, value_bytes BIGINT, offsets STRING"
_ARROW_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_ARROW_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_NO_BYTE_LIMIT = str(2**31 - 1)  # the value that turns Spark's measuring off
#: Columns :func:`lean_rows` adds: the value's length, and whether the row kept its message.
VALUE_BYTES_COLUMN = "__sluice_value_bytes"
WHOLE_COLUMN = "__sluice_whole"
#: What :class:`PartitionWrites` says of a last message whose fingerprint the task could not
#: take (its row came without the message): the ingest fetches it.
UNKNOWN_FINGERPRINT = ""


def batch_rows(largest_message: int | None) -> int:
    """Rows per Arrow batch for messages of at most ``largest_message`` bytes (key, value and
    headers; None: unknown), keeping a batch under :data:`BATCH_BYTES`. A good row holds the
    message and the fields parsed from its value, which are no larger than the value."""
    if largest_message is None:
        return BATCH_ROWS
    return max(1, min(BATCH_ROWS, BATCH_BYTES // (2 * largest_message + 1024)))


def lean_rows(
    frame: Any, good_columns: list[str], bad_columns: list[str], last_offsets: dict[int, int]
) -> Any:
    """``frame`` (a classified batch) as it crosses to the writing tasks: the columns only
    quarantined rows are written with (the message's own) are null on good rows, except on
    a row at ``last_offsets`` ({partition: the last offset of its range}), whose message the
    fingerprint needs; :data:`VALUE_BYTES_COLUMN` carries every value's length, and
    :data:`WHOLE_COLUMN` whether the row kept its message.

    One SQL projection in one call: built from Column objects it took some 40 round trips
    to the JVM, 50 ms, a tenth of a 20,000-message batch."""
    whole = "reason IS NOT NULL"
    if last_offsets:
        ends = ", ".join(f"{int(p)}, {int(o)}" for p, o in sorted(last_offsets.items()))
        whole += f" OR coalesce(try_element_at(map({ends}), partition) = offset, false)"
    dropped = {c for c in bad_columns if c not in good_columns and c != "reason"}
    return frame.selectExpr(
        *[
            f"CASE WHEN {whole} THEN {_quoted(c)} END AS {_quoted(c)}"
            if c in dropped
            else _quoted(c)
            for c in frame.columns
        ],
        f"length(value) AS {VALUE_BYTES_COLUMN}",
        f"{whole} AS {WHOLE_COLUMN}",
    )


def _quoted(name: str) -> str:
    """A column name as Spark SQL reads it, whatever it holds."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class WriteTargets:
    """Where a run's files go (directory URIs), constant columns the sink wants on every row
    (the Iceberg sink's ``batch_id``), and the pyarrow file system to write them with (None:
    the one the URIs name; an object store's carries its endpoint, and is pickled into the
    tasks: see :mod:`.sinks.s3`). ``partitioning``: the good rows' partition spec; each of
    a task's partition values gets its own file, in a hive-style directory under ``data``
    (``ts_day=2026-01-05/part-*.parquet``), so that every file holds one partition value."""

    data: str
    quarantine: str
    constants: tuple[tuple[str, str], ...] = ()
    filesystem: Any = None
    partitioning: Partitioning = field(default_factory=Partitioning)


def resolve(uri: str, filesystem: Any = None) -> tuple[Any, str]:
    """(file system, path in it) of ``uri``; with ``filesystem``, the path is the URI
    without its scheme (``s3://bucket/key`` -> ``bucket/key``)."""
    if filesystem is None:
        from pyarrow import fs

        found, path = fs.FileSystem.from_uri(uri)
        return found, str(path)
    return filesystem, uri.split("://", 1)[-1]


@dataclass(frozen=True)
class PartitionWrites:
    """What a write job wrote of one Kafka partition (good and quarantined rows together)."""

    intervals: list[tuple[int, int]]  # offsets written, as merged [start, end) intervals
    rows: int
    last_offset: int
    last_fingerprint: str


@dataclass(frozen=True)
class WriteCounts:
    good: int
    bad: int
    value_bytes: int  # of every row read, good or bad
    partitions: dict[int, PartitionWrites] = field(default_factory=dict)  # Kafka rows only


def write_outcomes(
    frame: Any,
    good_columns: list[str],
    bad_columns: list[str],
    targets: WriteTargets,
    largest_message: int | None = None,
    on_driver: bool = False,
) -> WriteCounts:
    """Write the rows of ``frame`` whose ``reason`` is null (``good_columns`` of them) to
    ``targets.data`` and the others (``bad_columns``) to ``targets.quarantine``, in one job.
    ``largest_message``: the bytes of the largest message, if known (:func:`batch_rows`).
    ``on_driver``: the driver writes the rows Spark classified (a small batch: see
    :data:`DRIVER_WRITE_BYTES`), as one task would; not while a test arms ``task.lost``,
    a fault of the tasks that write."""
    dirs = {"good": targets.data.rstrip("/"), "bad": targets.quarantine.rstrip("/")}
    attempts = {kind: f"{path}/{ATTEMPTS_DIR}" for kind, path in dirs.items()}
    lost = _lost_marker() if is_armed("task.lost") else None
    on_driver = on_driver and lost is None
    task = _task_writer(
        good_columns,
        bad_columns,
        attempts,
        fingerprints.message_fingerprint,
        lost,
        durable.ENABLED,
        targets.filesystem,
        targets.partitioning,
        layout.arrow_writer_options,
    )
    try:
        rows = batch_rows(largest_message)
        with session_conf(frame.sparkSession, arrow_settings(rows)):
            if on_driver:
                batches = frame.toArrow().to_batches(max_chunksize=rows)
                written: list[Any] = [r for b in task(iter(batches)) for r in b.to_pylist()]
            else:
                written = frame.mapInArrow(task, _RESULT_DDL).collect()
        counts = {"good": 0, "bad": 0}
        value_bytes = 0
        reports = []
        files = []
        for row in written:
            value_bytes += row["value_bytes"]
            if row["output"] is None:
                reports.append(json.loads(row["offsets"] or "{}"))
                continue
            files.append((row["output"], row["file"]))
            counts[row["output"]] += row["rows"]
        move_into_place(files, attempts, dirs, targets.filesystem)
    finally:
        if lost is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lost)
        remove_attempts(attempts, targets.filesystem)
    return WriteCounts(counts["good"], counts["bad"], value_bytes, merge_reports(reports))


def move_into_place(
    files: list[tuple[str, str]],
    attempts: dict[str, str],
    dirs: dict[str, str],
    filesystem: Any,
) -> None:
    """Move each (output, relative name) of ``files`` from its output's ``attempts``
    directory into the output's directory ``dirs[output]``, and sync the directories that
    got entries, a partition's new ones up to the output's own (:mod:`.durable`)."""
    moved = set()
    for output, name in files:
        found, source = resolve(f"{attempts[output]}/{name}", filesystem)
        _, target = resolve(f"{dirs[output]}/{name}", filesystem)
        parent = target.rpartition("/")[0]
        if "/" in name and type(found).__name__ != "S3FileSystem":
            found.create_dir(parent, recursive=True)  # a partition's directory
        _move(found, source, target)
        moved.add(f"{dirs[output]}/{name}".rpartition("/")[0])
    for directory in sorted(moved, key=len, reverse=True):
        sync_directory(directory)
        for output in dirs.values():
            if directory.startswith(f"{output}/"):
                parent = directory
                while parent != output:
                    parent = parent.rpartition("/")[0]
                    sync_directory(parent)


def _move(filesystem: Any, source: str, target: str) -> None:
    """Move a file; on a store whose pyarrow file system has no move (Azure Blob Storage
    without a hierarchical namespace), copy it and delete the source, as a move on S3 is."""
    try:
        filesystem.move(source, target)
    except NotImplementedError:
        filesystem.copy_file(source, target)
        filesystem.delete_file(source)


def remove_attempts(attempts: dict[str, str], filesystem: Any) -> None:
    """Delete the ``attempts`` directories, with whatever failed attempts left there."""
    for path in attempts.values():
        found, local = resolve(path, filesystem)
        with contextlib.suppress(OSError):  # FileNotFoundError included: nothing written
            found.delete_dir(local)


def _lost_marker() -> str:
    """Where the tasks of a job armed with ``task.lost`` agree which one dies: a local file
    (the failpoint is for tests, whose executors share this machine)."""
    import tempfile
    import uuid

    return f"{tempfile.gettempdir()}/sluice-task-lost-{uuid.uuid4().hex}"


def merge_reports(reports: list[dict[str, Any]]) -> dict[int, PartitionWrites]:
    """The tasks' per-partition reports, merged."""
    merged: dict[int, PartitionWrites] = {}
    for report in reports:
        for key, part in report.items():
            p = int(key)
            intervals = [tuple(i) for i in part["intervals"]]
            last = (part["last"][0], part["last"][1])
            if p in merged:
                before = merged[p]
                intervals += before.intervals
                if before.last_offset > last[0]:
                    last = (before.last_offset, before.last_fingerprint)
                part = {**part, "rows": part["rows"] + before.rows}
            merged[p] = PartitionWrites(_union(intervals), part["rows"], *last)
    return merged


def _union(intervals: list[Any]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def arrow_settings(rows: int) -> dict[str, str]:
    """Arrow batches of ``rows`` rows and no byte limit."""
    return {_ARROW_ROWS: str(rows), _ARROW_BYTES: _NO_BYTE_LIMIT}


@dataclass
class _Hold:
    """A setting that blocks of :func:`session_conf` hold in one session: its value, the
    session's own value before the first of them (None: unset), and the threads inside."""

    value: str
    before: str | None
    threads: list[int]


#: The settings held, by (session, key); and the condition a block waits on for a setting
#: another block holds with another value.
_held: dict[tuple[int, str], _Hold] = {}
_held_changed = threading.Condition()


@contextlib.contextmanager
def session_conf(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in ``spark``'s runtime configuration while the block runs.

    A session's configuration is shared: two ingests at once in one session (threads of one
    driver: Dagster's in-process executor, a Spark Connect client) must not undo each
    other's setting mid-write. So a setting is held by every block that asks for its value,
    and the session's own value comes back when the last of them leaves; a block that asks
    for another value of a setting held waits until it is free."""
    session = id(spark)
    keys = [(session, key) for key in settings]
    me = threading.get_ident()

    def free() -> bool:
        for key in keys:
            hold = _held.get(key)
            if hold is not None and hold.value != settings[key[1]]:
                if me in hold.threads:
                    raise RuntimeError(
                        f"session_conf: {key[1]} is held by this thread with "
                        f"{hold.value!r}, and asked again with {settings[key[1]]!r}"
                    )
                return False
        return True

    with _held_changed:
        _held_changed.wait_for(free)
        for key in keys:
            hold = _held.get(key)
            if hold is None:
                before = spark.conf.get(key[1], None)
                spark.conf.set(key[1], settings[key[1]])
                hold = _held[key] = _Hold(settings[key[1]], before, [])
            hold.threads.append(me)
    try:
        yield
    finally:
        with _held_changed:
            for key in keys:
                hold = _held[key]
                hold.threads.remove(me)
                if hold.threads:
                    continue
                del _held[key]
                if hold.before is None:
                    spark.conf.unset(key[1])
                else:
                    spark.conf.set(key[1], hold.before)
            _held_changed.notify_all()


def _task_writer(
    good_columns: list[str],
    bad_columns: list[str],
    attempts: dict[str, str],
    fingerprint: Callable[[bytes | None, bytes | None, int | None], str],
    lost: str | None = None,
    sync: bool = True,
    filesystem: Any = None,
    partitions: Partitioning | None = None,
    encodings: Callable[[pa.Schema], dict[str, Any]] = lambda schema: {},
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function every task runs. It imports nothing of Sluice (cloudpickle ships it, and
    ``fingerprint``, by value), so driver-mode ingests need no Sluice on the executors.
    ``lost``: a marker file; the first task to create it dies after writing its files (the
    ``task.lost`` failpoint). ``sync``: fsync the files written (:mod:`.durable`).
    ``filesystem``: the pyarrow file system of ``attempts`` (None: the one their URIs name).
    ``partitions``: the good rows' partition spec (a file per partition value and task).
    ``encodings``: the ``ParquetWriter`` options of a file's schema (:mod:`.layout`)."""
    columns = {"good": good_columns, "bad": bad_columns}
    spec = partitions or Partitioning()
    length_column, whole_column, unknown = VALUE_BYTES_COLUMN, WHOLE_COLUMN, UNKNOWN_FINGERPRINT

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import json
        import os
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyarrow import fs

        name = f"part-{uuid.uuid4().hex}.parquet"
        writers: dict[tuple[str, str], Any] = {}  # (output, partition directory) -> writer
        paths: dict[tuple[str, str], tuple[Any, str]] = {}
        counts: dict[tuple[str, str], int] = {}
        value_bytes = 0
        partitions: dict[int, dict[str, Any]] = {}

        def note_offsets(table: pa.Table) -> None:
            """Add the table's Kafka offsets (intervals, rows, last message) to partitions."""
            if "offset" not in table.column_names or "partition" not in table.column_names:
                return
            known = pc.is_valid(table["offset"])
            for p in pc.unique(table["partition"].filter(known)).to_pylist():
                part = table.filter(pc.and_(known, pc.equal(table["partition"], p)))
                offsets = part["offset"].combine_chunks()
                order = pc.sort_indices(offsets)
                sorted_offsets = pc.take(offsets, order)
                steps = pc.subtract(sorted_offsets[1:], sorted_offsets[:-1])
                cuts = pc.indices_nonzero(pc.not_equal(steps, 1))
                first, last = sorted_offsets[0].as_py(), sorted_offsets[-1].as_py()
                starts = [first, *pc.take(sorted_offsets, pc.add(cuts, 1)).to_pylist()]
                ends = [*pc.add(pc.take(sorted_offsets, cuts), 1).to_pylist(), last + 1]
                seen = partitions.setdefault(p, {"intervals": [], "rows": 0, "last": [-1, ""]})
                seen["intervals"] += [[s, e] for s, e in zip(starts, ends, strict=True)]
                seen["rows"] += part.num_rows
                if last > seen["last"][0]:
                    at = order[-1].as_py()
                    micros = part["timestamp"].cast(pa.int64())[at].as_py()
                    whole = whole_column not in part.column_names or part[whole_column][at].as_py()
                    seen["last"] = [
                        last,
                        fingerprint(
                            part["key"][at].as_py(),
                            part["value"][at].as_py(),
                            None if micros is None else micros // 1000,
                        )
                        if whole
                        else unknown,  # a lean row (lean_rows): the ingest fetches it
                    ]

        try:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                lengths = (
                    table[length_column]
                    if length_column in table.column_names
                    else pc.binary_length(table["value"])
                )
                value_bytes += pc.sum(lengths).as_py() or 0
                note_offsets(table)
                bad = pc.is_valid(table["reason"])
                for kind, mask in (("good", pc.invert(bad)), ("bad", bad)):
                    rows_of_kind = table.filter(mask).select(columns[kind])
                    if not rows_of_kind.num_rows:
                        continue
                    pieces = (
                        spec.split(rows_of_kind) if kind == "good" else [("", (), rows_of_kind)]
                    )
                    for directory, _, part in pieces:
                        key = (kind, directory)
                        if key not in writers:
                            if filesystem is None:
                                target, path = fs.FileSystem.from_uri(attempts[kind])
                            else:
                                target, path = filesystem, attempts[kind].split("://", 1)[-1]
                            if directory:
                                path = f"{path}/{directory}"
                            if not isinstance(target, fs.S3FileSystem):  # S3: no directories
                                target.create_dir(path, recursive=True)
                            paths[key] = (target, f"{path}/{name}")
                            writers[key] = pq.ParquetWriter(
                                f"{path}/{name}",
                                part.schema,
                                filesystem=target,
                                **encodings(part.schema),
                            )
                        writers[key].write_table(part)
                        counts[key] = counts.get(key, 0) + part.num_rows
        finally:
            for writer in writers.values():
                writer.close()
        for written, path in paths.values():
            if sync and isinstance(written, fs.LocalFileSystem):  # object stores: when acked
                handle = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(handle)
                finally:
                    os.close(handle)
        if lost is not None and writers:
            try:
                os.close(os.open(lost, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os._exit(1)  # an executor lost after writing, before reporting
        results: list[dict[str, Any]] = [
            {
                "output": kind,
                "file": f"{directory}/{name}" if directory else name,
                "rows": counts[(kind, directory)],
                "value_bytes": 0,
                "offsets": None,
            }
            for kind, directory in writers
        ]
        results.append(
            {
                "output": None,
                "file": None,
                "rows": 0,
                "value_bytes": value_bytes,
                "offsets": json.dumps(partitions),
            }
        )
        text, number = pa.string(), pa.int64()
        schema = pa.schema(
            [
                ("output", text),
                ("file", text),
                ("rows", number),
                ("value_bytes", number),
                ("offsets", text),
            ]
        )
        yield pa.RecordBatch.from_pylist(results, schema=schema)

    return write
