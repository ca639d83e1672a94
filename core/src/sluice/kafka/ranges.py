"""Reading exactly some offset ranges of a topic: assign, seek, read to each range's end.

Joins no consumer group and commits nothing, so it serves planning tools (``sluice peek``,
``sluice dlq replay``) and batch ingestion alike. It runs wherever it is called (the driver,
a Spark task), taking plain kafka-python keyword arguments.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from ..batch import OffsetRange

__all__ = ["read_range_records", "stalled_message"]

MAX_POLL_RECORDS = 10_000


def read_range_records(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    stall_timeout_s: float,
) -> Iterator[tuple[int, list[ConsumerRecord]]]:
    """(partition, records) as they are fetched: every record of ``ranges``, none beyond.

    Raises ``TimeoutError`` when nothing arrives for ``stall_timeout_s`` while a range is
    unfinished (the broker is down, or a range ends past its partition's end).
    """
    ends = {TopicPartition(topic, r.partition): r.end for r in ranges if r.count > 0}
    if not ends:
        return
    consumer = KafkaConsumer(
        **{"max_poll_records": MAX_POLL_RECORDS, **kwargs, "enable_auto_commit": False},
        group_id=None,
    )
    try:
        consumer.assign(list(ends))
        for r in ranges:
            if r.count > 0:
                consumer.seek(TopicPartition(topic, r.partition), r.start)
        last_progress = time.monotonic()
        while ends:
            polled = consumer.poll(timeout_ms=200)
            for tp, records in polled.items():
                end = ends.get(tp)
                if end is None or not records:
                    continue
                if records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                yield tp.partition, records
            for tp in [tp for tp, end in ends.items() if consumer.position(tp) >= end]:
                del ends[tp]
                consumer.pause(tp)
            if polled:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                positions = {tp.partition: (consumer.position(tp), end) for tp, end in ends.items()}
                raise TimeoutError(stalled_message(topic, positions, stall_timeout_s))
    finally:
        consumer.close(autocommit=False)


def stalled_message(topic: str, positions: Mapping[int, tuple[int, int]], timeout_s: float) -> str:
    """The error of a range reader that got no message for ``timeout_s`` while waiting for
    ``positions`` ({partition: (position, range end)}); every reader raises the same."""
    waiting = ", ".join(
        f"partition {partition} at offset {position} of {end}"
        for partition, (position, end) in sorted(positions.items())
    )
    return (
        f"Reading topic '{topic}' stalled: no message for {timeout_s:.0f} s while waiting for "
        f"{waiting}. Check that the broker is up and that the batch was planned on this "
        "topic (options.request_timeout sets this limit). Nothing was committed."
    )
