"""Reading exactly a batch's offset ranges from Kafka, and committing them afterwards.

The reader assigns the partitions (it joins no consumer group), seeks each to its range's
start and reads until its position reaches the range's end: not one message more. It runs on
the driver, or inside a Spark task (one per range) in executor mode, so it takes plain
kafka-python keyword arguments that pickle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from ..batch import OffsetRange
from ..kafka.config import client_config, credentials
from ..kafka.logs import hide_secret
from ..kafka.offsets import refresh_ends
from ..kafka.ranges import read_range_records
from .records import RecordColumns

__all__ = [
    "commit_offsets",
    "committed_offsets",
    "partition_positions",
    "read_ranges",
    "reader_kwargs",
]


def reader_kwargs(config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python arguments for a batch reader of the cluster ``config`` (validated queue
    config values) names; they contain the password, so they never go to a log."""
    hide_secret(credentials(dict(config))[1])
    return {
        **client_config(dict(config)),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",  # a start deleted by retention: read what is left
    }


def read_ranges(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    chunk_size: int,
    stall_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``ranges`` as Arrow batches of at most ``chunk_size`` rows (see
    :func:`sluice.kafka.ranges.read_range_records`)."""
    columns = RecordColumns()
    for partition, records in read_range_records(kwargs, topic, ranges, stall_timeout_s):
        while records:
            room = chunk_size - len(columns)
            columns.extend_kafka(records[:room], topic, partition)
            records = records[room:]
            if len(columns) >= chunk_size:
                yield columns.to_batch()
                columns = RecordColumns()
    if len(columns):
        yield columns.to_batch()


def committed_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """The group's committed offset of each partition (None where it has none)."""
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close(autocommit=False)


def partition_positions(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> tuple[dict[int, int | None], dict[int, tuple[int, int]]]:
    """The group's committed offset of each of ``partitions`` (None where it has none), and
    (log start, log end) of each partition of ``topic`` that exists."""
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
        existing = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions if p in existing]
        if not tps:
            return committed, {}
        consumer.assign(tps)
        starts = consumer.beginning_offsets(tps)
        ends = refresh_ends(consumer, tps)
        return committed, {tp.partition: (starts[tp], ends[tp]) for tp in tps}
    finally:
        consumer.close(autocommit=False)


def commit_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, offsets: Mapping[int, int]
) -> None:
    """Commit ``offsets`` ({partition: next offset to read}) for ``group_id``, as a client that
    is not a member of the group (so the group must have no active members)."""
    if not offsets:
        return
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )
    except (CommitFailedError, KafkaError) as exc:
        raise RuntimeError(
            f"Committing the batch's offsets of topic '{topic}' for group '{group_id}' failed: "
            f"{exc}. The data is written; rerunning the same batch commits without writing it "
            "again. If the group has running consumers, ingest with a group of its own."
        ) from None
    finally:
        consumer.close(autocommit=False)
