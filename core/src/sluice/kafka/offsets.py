"""End offsets that are right on every broker we test on.

Some brokers (Tansu 0.6) answer ListOffsets(latest) wrongly; the high watermark that every
fetch response carries is right. So the end of a partition is the larger of the two, taken
from a fetch answered after the question was asked: the consumer reads the last message of
each non-empty partition again, so the fetch returns at once with a fresh high watermark on
every broker (a response to an older fetch is discarded, its offset no longer matching).
A partition that ListOffsets calls empty is empty on those brokers too.

:class:`EndProbe` keeps one such consumer per topic between calls, so asking again costs two
small requests and a one-record fetch instead of a new consumer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

__all__ = [
    "FETCH_TIMEOUT_S",
    "EndProbe",
    "end_offsets",
    "refresh_ends",
    "resume_offset",
    "topic_end_offsets",
]

FETCH_TIMEOUT_S = 5.0
T = TypeVar("T")


def resume_offset(
    partition: int,
    committed: Mapping[int, int | None],
    beginnings: Mapping[int, int],
    from_beginning: bool,
    start_ends: Mapping[int, int] | None,
) -> int:
    """Where a group reads ``partition`` next: its committed offset, else where a new consumer
    starts (the log start with ``from_beginning``, else the end when watching began)."""
    start = committed.get(partition)
    if start is not None:
        return start
    if from_beginning:
        return beginnings.get(partition, 0)
    return (start_ends or {}).get(partition, 0)


def end_offsets(consumer: KafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """ListOffsets corrected by the high watermark of ``consumer``'s fetches where it has one."""
    ends: dict[TopicPartition, int] = dict(consumer.end_offsets(tps)) if tps else {}
    assigned = consumer.assignment()
    for tp in tps:
        highwater = consumer.highwater(tp) if tp in assigned else None
        ends[tp] = max(ends.get(tp) or 0, highwater or 0)
    return ends


def refresh_ends(
    consumer: KafkaConsumer, tps: list[TopicPartition], timeout_s: float = FETCH_TIMEOUT_S
) -> dict[TopicPartition, int]:
    """The end of each of ``tps`` (all assigned to the group-less ``consumer``), fetched now.

    Leaves the consumer positioned at the ends. A partition whose last message cannot be
    fetched again (removed by retention, or a transaction marker) is answered from what is
    known after ``timeout_s``.
    """
    known = end_offsets(consumer, tps)
    fresh = [tp for tp in tps if known[tp] > 0]
    for tp in fresh:
        consumer.seek(tp, known[tp] - 1)
    deadline = time.monotonic() + timeout_s
    while fresh:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            break
        consumer.poll(timeout_ms=remaining_ms)  # returns as soon as records came
        fresh = [tp for tp in fresh if consumer.position(tp) < known[tp]]
    return {tp: max(known[tp], consumer.highwater(tp) or 0) for tp in tps}


def topic_end_offsets(consumer: KafkaConsumer, topic: str) -> dict[int, int]:
    """End offset per partition of ``topic`` through an idle, group-less ``consumer`` ({} if none).

    The consumer is assigned every partition of the topic (see :func:`refresh_ends`).
    """
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        return {}
    consumer.assign(tps)
    return {tp.partition: offset for tp, offset in refresh_ends(consumer, tps).items()}


class EndProbe:
    """A long-lived consumer of every partition of ``topic`` that joins no group and commits
    nothing, kept at the partitions' ends to answer :meth:`ends` (from any thread, one at a
    time: a kafka-python consumer must not be used by two threads at once).

    ``make_consumer`` builds the consumer on first use, and again after a failure.
    """

    def __init__(self, topic: str, make_consumer: Callable[[], KafkaConsumer]) -> None:
        self.topic = topic
        self._make_consumer = make_consumer
        self._consumer: KafkaConsumer | None = None
        self._lock = threading.Lock()

    def ends(self) -> dict[int, int]:
        """The end offset of each partition of the topic ({} if it does not exist)."""

        def ask(consumer: KafkaConsumer) -> dict[int, int]:
            tps = self._assign(consumer)
            return {tp.partition: end for tp, end in refresh_ends(consumer, tps).items()}

        return self._use(ask)

    def beginnings(self, partitions: list[int]) -> dict[int, int]:
        """The first offset still held of each of ``partitions``."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        if not tps:
            return {}
        return self._use(
            lambda consumer: {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()}
        )

    def _use(self, ask: Callable[[KafkaConsumer], T]) -> T:
        with self._lock:
            consumer = self._consumer or self._make_consumer()
            self._consumer = consumer
            try:
                return ask(consumer)
            except KafkaError:
                self._consumer = None  # start afresh next time
                consumer.close(autocommit=False)
                raise

    def _assign(self, consumer: KafkaConsumer) -> list[TopicPartition]:
        """Assign the topic's partitions as the (periodically refreshed) metadata lists them."""
        partitions = sorted(consumer.partitions_for_topic(self.topic) or ())
        tps = [TopicPartition(self.topic, p) for p in partitions]
        if set(tps) != consumer.assignment():
            consumer.assign(tps)
        return tps

    def close(self) -> None:
        with self._lock:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                consumer.close(autocommit=False)
