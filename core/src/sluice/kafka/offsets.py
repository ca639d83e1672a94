"""End offsets that are right on every broker we test on, for either isolation level.

The end of a partition is where a batch may be planned up to: the high watermark for a
consumer that reads uncommitted records, the *last stable offset* (below any open
transaction) for one that reads committed records (``options.isolation_level``, the default).
Some brokers (Tansu 0.6) answer ListOffsets wrongly, for both levels; the watermarks that every
fetch response carries are right. So the end is the larger of ListOffsets and the watermark of
a fetch answered after the question was asked: the consumer fetches the last record of each
partition again (the fetch returns at once, with fresh watermarks on every broker; a response
to an older fetch has another offset, and is not taken).

kafka-python keeps only the high watermark of a fetch response; :func:`tracked_consumer`
builds consumers that also keep its last stable offset and log start (:class:`Watermarks`).
A consumer that asks for ends fetches without incremental fetch sessions
(:data:`ENDS_CONSUMER`).

:class:`EndProbe` keeps one such consumer per topic between calls, so asking again costs two
small requests and a one-record fetch instead of a new consumer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from .clients import new_consumer

__all__ = [
    "ENDS_CONSUMER",
    "FETCH_TIMEOUT_S",
    "EndProbe",
    "Watermarks",
    "end_offsets",
    "reads_committed",
    "refresh_ends",
    "resume_offset",
    "topic_end_offsets",
    "topic_ends",
    "track",
    "tracked_consumer",
]

FETCH_TIMEOUT_S = 5.0
#: Settings of every consumer :func:`refresh_ends` asks: no incremental fetch sessions
#: (KIP-227). Within a session Apache Kafka leaves a partition with nothing new out of a
#: fetch's answer, so the fetch of an empty partition was never answered and every refresh
#: after a consumer's first waited out its whole timeout (the triggers' shared watch saw new
#: messages 4 to 14 s late). The emulators have no sessions.
ENDS_CONSUMER: Mapping[str, Any] = {"enable_incremental_fetch_sessions": False}
#: How long one poll of :func:`refresh_ends` waits before it looks at what arrived.
_POLL_SLICE_MS = 50
T = TypeVar("T")


@dataclass(frozen=True)
class Watermarks:
    """What the newest successful fetch response of a partition said."""

    fetched_offset: int
    high_watermark: int
    last_stable_offset: int  # -1: the broker did not say
    log_start_offset: int  # -1: the broker did not say
    sequence: int  # counts the responses of one consumer: which came after a question


class _Tracker:
    """Keeps :class:`Watermarks` of a consumer's fetch responses (kafka-python parses them on
    the consumer's own thread, in ``Fetcher._parse_fetched_data``, and keeps only the high
    watermark)."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.latest: dict[TopicPartition, Watermarks] = {}
        self.sequence = 0
        fetcher = consumer._fetcher
        parse = fetcher._parse_fetched_data

        def tracked(completed: Any) -> Any:
            data = completed.partition_data
            if data.error_code == 0 and data.high_watermark >= 0:
                self.sequence += 1
                self.latest[completed.topic_partition] = Watermarks(
                    completed.fetched_offset,
                    data.high_watermark,
                    getattr(data, "last_stable_offset", -1),
                    getattr(data, "log_start_offset", -1),
                    self.sequence,
                )
            return parse(completed)

        fetcher._parse_fetched_data = tracked


#: How long a group question waits out a group coordinator that is not available yet.
COORDINATOR_WAIT = 10.0


def waiting_out_coordinator(ask: Callable[[], T], wait: float = COORDINATOR_WAIT) -> T:
    """``ask()``, asked again (backing off) while it fails with a retriable Kafka error, for up
    to ``wait`` s. Apache Kafka answers COORDINATOR_NOT_AVAILABLE while it creates
    ``__consumer_offsets`` (a fresh cluster's first group question) or moves a coordinator: a
    while, not an outage; the emulators never do."""
    deadline, pause = time.monotonic() + wait, 0.05
    while True:
        try:
            return ask()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def tracked_consumer(**kwargs: Any) -> KafkaConsumer:
    """A ``KafkaConsumer(**kwargs)`` that keeps the :class:`Watermarks` of its fetches."""
    return track(new_consumer(**kwargs))


def track(consumer: KafkaConsumer) -> KafkaConsumer:
    """``consumer``, keeping the :class:`Watermarks` of its fetches from now on."""
    _tracker(consumer)
    return consumer


def _tracker(consumer: KafkaConsumer) -> _Tracker:
    tracker: _Tracker | None = getattr(consumer, "_sluice_watermarks", None)
    if tracker is None:
        tracker = _Tracker(consumer)
        consumer._sluice_watermarks = tracker
    return tracker


def reads_committed(consumer: KafkaConsumer) -> bool:
    return bool(consumer.config.get("isolation_level") == "read_committed")


def _fetched_end(consumer: KafkaConsumer, watermarks: Watermarks | None) -> int | None:
    """The end a fetch response gave: its last stable offset for a consumer that reads
    committed records (its high watermark if the broker gave none), else its high watermark."""
    if watermarks is None:
        return None
    if reads_committed(consumer) and watermarks.last_stable_offset >= 0:
        return watermarks.last_stable_offset
    return watermarks.high_watermark


def resume_offset(
    partition: int,
    committed: Mapping[int, int | None],
    beginnings: Mapping[int, int],
    from_beginning: bool,
    start_ends: Mapping[int, int] | None,
    end: int | None = None,
) -> int:
    """Where a group reads ``partition`` next: its committed offset, else where a new consumer
    starts (the log start with ``from_beginning``, else the end when watching began).

    A committed offset past the partition's ``end`` belongs to a topic that was deleted and
    recreated (or whose offsets were reset): the group reads from the log start, and the
    ingest of that batch says what happened (a DataLossError, unless the loss is accepted),
    instead of the new topic's messages waiting unseen until they pass the old position."""
    start = committed.get(partition)
    if start is not None:
        if end is not None and start > end:
            return beginnings.get(partition, 0)
        return start
    if from_beginning:
        return beginnings.get(partition, 0)
    return (start_ends or {}).get(partition, 0)


def _listed_ends(consumer: KafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """ListOffsets, asked again (three times at most) when kafka-python 3.0 loses a partition
    of the answer that arrived while a fetch of the same consumer was in flight (KeyError)."""
    for attempt in range(3):
        try:
            return dict(consumer.end_offsets(tps)) if tps else {}
        except KeyError:
            if attempt == 2:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")  # pragma: no cover


def end_offsets(consumer: KafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """ListOffsets (at the consumer's isolation level) corrected by the newest fetch response
    where the consumer has one."""
    ends = _listed_ends(consumer, tps)
    tracker: _Tracker | None = getattr(consumer, "_sluice_watermarks", None)
    assigned = consumer.assignment()
    for tp in tps:
        if tracker is not None:
            fetched = _fetched_end(consumer, tracker.latest.get(tp))
        elif not reads_committed(consumer) and tp in assigned:
            fetched = consumer.highwater(tp)
        else:
            fetched = None
        ends[tp] = max(ends.get(tp) or 0, fetched or 0)
    return ends


def refresh_ends(
    consumer: KafkaConsumer, tps: list[TopicPartition], timeout_s: float = FETCH_TIMEOUT_S
) -> dict[TopicPartition, int]:
    """The end of each of ``tps`` (all assigned to the group-less ``consumer``), from fetches
    answered now.

    Leaves the consumer positioned near the ends. A partition whose fetch does not come back
    within ``timeout_s`` is answered from ListOffsets alone. A consumer reading uncommitted
    records skips the fetch where ListOffsets calls the partition empty (it is empty on those
    brokers too); one reading committed records always fetches (Tansu answers its ListOffsets
    with 0).

    Raises ``ValueError`` for a consumer built without :data:`ENDS_CONSUMER`.
    """
    if consumer.config.get("enable_incremental_fetch_sessions", False):
        raise ValueError(
            "refresh_ends needs a consumer without incremental fetch sessions: build it with "
            "sluice.kafka.offsets.ENDS_CONSUMER among its settings"
        )
    tracker = _tracker(consumer)
    listed = _listed_ends(consumer, tps)
    known = {tp: listed.get(tp) or 0 for tp in tps}
    committed = reads_committed(consumer)
    asked = tracker.sequence
    sought = {tp: max(0, known[tp] - 1) for tp in tps if committed or known[tp] > 0}
    for tp, offset in sought.items():
        consumer.seek(tp, offset)

    def answered(tp: TopicPartition) -> bool:
        """A response to a fetch sent after the seek: of the sought offset, or of wherever
        the consumer went from there (records read, or its reset policy after retention)."""
        seen = tracker.latest.get(tp)
        if seen is None or seen.sequence <= asked:
            return False
        return seen.fetched_offset == sought[tp] or consumer.position(tp) != sought[tp]

    waiting = [tp for tp in sought if not answered(tp)]
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        # short polls: a fetch that returns no record (a transaction marker) ends no poll
        consumer.poll(timeout_ms=_POLL_SLICE_MS)
        waiting = [tp for tp in waiting if not answered(tp)]
    # Only ListOffsets and the fetches answered after the question count: an older watermark
    # may be a deleted topic's, whose end lies past the recreated log's (the cluster soak
    # planned a recreated topic with its old ends).
    fresh = {tp: _fetched_end(consumer, tracker.latest[tp]) for tp in sought if answered(tp)}
    return {tp: max(known[tp], fresh.get(tp) or 0) for tp in tps}


def topic_end_offsets(consumer: KafkaConsumer, topic: str) -> dict[int, int]:
    """End offset per partition of ``topic`` through an idle, group-less ``consumer`` ({} if none).

    The consumer is assigned every partition of the topic (see :func:`refresh_ends`).
    """
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        return {}
    consumer.assign(tps)
    return {tp.partition: offset for tp, offset in refresh_ends(consumer, tps).items()}


def topic_ends(client_kwargs: Mapping[str, Any], topic: str) -> dict[int, int]:
    """:func:`topic_end_offsets` through a consumer of its own, built from kafka-python
    ``client_kwargs`` and closed afterwards."""
    consumer = new_consumer(**client_kwargs, group_id=None, **ENDS_CONSUMER)
    try:
        return topic_end_offsets(consumer, topic)
    finally:
        consumer.close(autocommit=False)


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

    def topic_id(self) -> str | None:
        """The topic's id in the consumer's metadata (None where the broker has no topic
        ids, KIP-516, or the topic does not exist)."""
        found = self._use(lambda consumer: consumer._client.cluster.topic_id(self.topic))
        return str(found) if found else None

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
