"""Reading exactly a batch's offset ranges from Kafka, and committing them afterwards.

The reader assigns the partitions (it joins no consumer group), seeks each to its range's
start and reads until its position reaches the range's end: not one message more. It runs on
the driver, or inside a Spark task (one per range) in executor mode, so it takes plain
kafka-python keyword arguments that pickle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from ..batch import OffsetRange
from ..kafka.config import client_config, credentials
from ..kafka.logs import hide_secret
from .records import RecordColumns

__all__ = ["commit_offsets", "committed_offsets", "read_ranges", "reader_kwargs"]

MAX_POLL_RECORDS = 10_000


def reader_kwargs(config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python arguments for a batch reader of the cluster ``config`` (validated queue
    config values) names; they contain the password, so they never go to a log."""
    hide_secret(credentials(dict(config))[1])
    return {
        **client_config(dict(config)),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",  # a start deleted by retention: read what is left
        "max_poll_records": MAX_POLL_RECORDS,
    }


def read_ranges(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    chunk_size: int,
    stall_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``ranges`` as Arrow batches of at most ``chunk_size`` rows.

    Raises ``TimeoutError`` when no message arrives for ``stall_timeout_s`` while some range is
    unfinished (the broker is down, or the range ends past the partition's end).
    """
    ends = {TopicPartition(topic, r.partition): r.end for r in ranges if r.count > 0}
    if not ends:
        return
    consumer = KafkaConsumer(**kwargs, group_id=None)
    try:
        consumer.assign(list(ends))
        for r in ranges:
            if r.count > 0:
                consumer.seek(TopicPartition(topic, r.partition), r.start)
        columns = RecordColumns()
        last_progress = time.monotonic()
        while ends:
            polled = consumer.poll(
                timeout_ms=200, max_records=min(MAX_POLL_RECORDS, max(1, chunk_size))
            )
            for tp, records in polled.items():
                end = ends.get(tp)
                if end is None:
                    continue
                if records and records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                columns.extend_kafka(records, topic, tp.partition)
            for tp in [tp for tp, end in ends.items() if consumer.position(tp) >= end]:
                del ends[tp]
                consumer.pause(tp)
            if polled:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise TimeoutError(_stalled(consumer, topic, ends, stall_timeout_s))
            if len(columns) >= chunk_size:
                yield columns.to_batch()
                columns = RecordColumns()
        if len(columns):
            yield columns.to_batch()
    finally:
        consumer.close(autocommit=False)


def _stalled(
    consumer: KafkaConsumer, topic: str, ends: dict[TopicPartition, int], timeout_s: float
) -> str:
    waiting = ", ".join(
        f"partition {tp.partition} at offset {consumer.position(tp)} of {end}"
        for tp, end in sorted(ends.items())
    )
    return (
        f"Reading topic '{topic}' stalled: no message for {timeout_s:.0f} s while waiting for "
        f"{waiting}. Check that the broker is up and that the batch was planned on this "
        "topic (options.request_timeout sets this limit). Nothing was committed."
    )


def committed_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """The group's committed offset of each partition (None where it has none)."""
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
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
