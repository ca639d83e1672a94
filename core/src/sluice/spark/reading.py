"""The two ways an ingest reads a Kafka batch's ranges (``mode="driver"`` / ``"executors"``).

* On the driver: the ranges are read in chunks of Arrow record batches (the caller hands
  each to Spark through local files, so only one chunk is in memory at a time).
* On the executors: one Spark task per piece of at most ``chunk_size`` messages, each reading
  its piece with the same range reader (:func:`.kafka_source.read_ranges`); the result is a
  DataFrame of the raw records, read when the job that writes them runs (one job: no cache).

Both read exactly the offsets asked for and nothing else; what to do with the rows is
:mod:`.ingest`'s business.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from ..batch import OffsetRange
from ..errors import DataLossError
from .records import RAW_SCHEMA_DDL
from .writing import BATCH_BYTES, BATCH_ROWS

__all__ = [
    "TASK_BATCH_BYTES",
    "TASK_BATCH_ROWS",
    "chunks_on_driver",
    "read_on_executors",
    "rounds",
    "split_ranges",
    "task_errors",
]

#: Rows per Arrow batch a Spark task hands back in executor mode: as many as the writing
#: tasks get at once; and the bytes of keys and values it holds at most (one message may
#: pass it).
TASK_BATCH_ROWS = BATCH_ROWS
TASK_BATCH_BYTES = BATCH_BYTES


def split_ranges(ranges: list[OffsetRange], size: int) -> list[OffsetRange]:
    """``ranges`` cut into pieces of at most ``size`` messages (one Spark task each)."""
    return [
        OffsetRange(r.partition, start, min(r.end, start + size))
        for r in ranges
        for start in range(r.start, r.end, size)
    ]


def rounds(ranges: list[OffsetRange]) -> list[list[OffsetRange]]:
    """``ranges`` grouped so that no group has two ranges of one partition (a range reader
    reads one range per partition at a time)."""
    groups: list[list[OffsetRange]] = []
    for r in sorted(ranges):
        for group in groups:
            if all(g.partition != r.partition for g in group):
                group.append(r)
                break
        else:
            groups.append([r])
    return groups


def chunks_on_driver(
    kwargs: dict[str, Any],
    topic: str,
    todo: list[OffsetRange],
    chunk_size: int,
    stall_s: float,
    chunk_bytes: int,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``todo`` as record batches of at most ``chunk_size`` rows and at most
    ``chunk_bytes`` bytes (:func:`~sluice.spark.kafka_source.read_ranges`)."""
    from .kafka_source import read_ranges

    for group in rounds(todo):
        yield from read_ranges(kwargs, topic, group, chunk_size, stall_s, chunk_bytes)


def read_on_executors(
    spark: Any,
    kwargs: dict[str, Any],
    topic: str,
    todo: list[OffsetRange],
    chunk_size: int,
    stall_s: float,
) -> Any:
    """The messages of ``todo`` as a DataFrame of raw records that Spark tasks read when it is
    computed, one task per piece of at most ``chunk_size`` messages."""
    from .kafka_source import read_ranges

    pieces = split_ranges(todo, chunk_size)
    rows = [(r.partition, r.start, r.end) for r in pieces]
    ranges_schema = "partition INT, start BIGINT, end BIGINT"
    try:  # classic Spark: exactly one task per range
        ranges = spark.createDataFrame(
            spark.sparkContext.parallelize(rows, len(rows)), ranges_schema
        )
    except Exception:  # Spark Connect has no SparkContext
        ranges = spark.createDataFrame(rows, ranges_schema).repartition(len(rows))

    def read_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition, start, end in zip(*batch.to_pydict().values(), strict=True):
                piece = [OffsetRange(partition, start, end)]
                yield from read_ranges(
                    kwargs, topic, piece, TASK_BATCH_ROWS, stall_s, TASK_BATCH_BYTES
                )

    return ranges.mapInArrow(read_task, RAW_SCHEMA_DDL)


@contextmanager
def task_errors() -> Iterator[None]:
    """Errors of executor-mode reading tasks as the driver would raise them: a
    :class:`DataLossError` of a task as itself, and the executors' missing Sluice with how to
    fix it."""
    from .workers import PythonWorkersError

    try:
        yield
    except PythonWorkersError:
        raise  # it names what the workers lack already
    except Exception as exc:
        text = str(exc)
        loss = re.search(r"DataLossError: (Data loss: [^\n]*)", text)
        if loss:
            raise DataLossError(loss.group(1)) from None
        if "No module named 'sluice'" in text:
            raise RuntimeError(
                "The executors' Python has no Sluice, which executor-mode reading needs "
                "there: pass ship_sluice=True to spark_session (SparkResource, or "
                "SLUICE_SPARK_SHIP=1 for the Airflow operator and the CLI), or install "
                "sluice-core[kafka] on the executors, or read with mode='driver'."
            ) from None
        raise
