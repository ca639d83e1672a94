"""KafkaMessageQueue (seed 000) on kafka-python, with the semantics DESIGN.md asks for.

- ``read_message_count`` is the group's real backlog: end offsets minus committed offsets.
- ``peek``/``peek_batch`` look at the local buffer and never commit.
- With ``autocommit`` true a message is committed when ``receive`` hands it out; with it false
  only ``complete`` commits, and never past a received message that is not completed yet.
- ``abandon`` seeks back, so the message comes again; ``move_to_dead_letter`` republishes to
  ``<topic>.dlq`` with the origin and the reason in headers, then commits.
"""

from __future__ import annotations

import collections
import datetime
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata
from pip_services3_commons.refer import Descriptor

from ..batch import BatchSpec, OffsetRange, limit_ranges
from ..queues.base import LISTEN_INTERVAL_KEY
from ..queues.broker import BrokerQueue
from ..queues.capabilities import MessagingCapabilities
from ..queues.envelope import MessageEnvelope
from .config import CONNECTION_KEYS, QUEUE_KEYS
from .connection import KafkaConnection
from .offsets import end_offsets
from .subscription import Subscription

__all__ = ["KafkaMessageQueue"]

log = logging.getLogger("sluice.kafka")

#: Header names Sluice writes; they are envelope fields on the receiving side, not user headers.
ID_HEADER, TYPE_HEADER, CORRELATION_HEADER = "message_id", "message_type", "correlation_id"
_ENVELOPE_HEADERS = {ID_HEADER, TYPE_HEADER, CORRELATION_HEADER}


class KafkaMessageQueue(BrokerQueue[KafkaConnection]):
    """A message queue on a Kafka topic, read through a consumer group (see module docstring)."""

    CONFIG_KEYS = (*QUEUE_KEYS, *CONNECTION_KEYS, LISTEN_INTERVAL_KEY)
    CONNECTION_CLASS = KafkaConnection
    CONNECTION_DESCRIPTOR = Descriptor("*", "connection", "kafka", "*", "1.0")

    def __init__(self, name: str | None = None) -> None:
        super().__init__(
            name,
            MessagingCapabilities(
                can_message_count=True,
                can_send=True,
                can_receive=True,
                can_peek=True,
                can_peek_batch=True,
                can_renew_lock=False,
                can_abandon=True,
                can_dead_letter=True,
                can_clear=True,
                can_persist=True,
                can_order=True,
            ),
        )
        self._pending: dict[int, set[int]] = {}  # received, not completed, by partition
        self._done: dict[int, int] = {}  # highest completed offset + 1, by partition
        self._committed: dict[int, int] = {}  # last offset this queue committed, by partition
        self._start_offsets: dict[int, int] | None = None  # where to start without a commit

    # ---- configuration and references ----------------------------------------------------

    @property
    def group_id(self) -> str:
        return str(self._config["group_id"])

    @property
    def dead_letter_topic(self) -> str:
        return str(self._config["options.dead_letter_topic"] or f"{self.topic}.dlq")

    def _after_open(self, connection: KafkaConnection) -> None:
        # Without from_beginning a new group starts where the topic ended when the queue opened
        # (not when the group join completes), so nothing sent after open() is missed.
        self._start_offsets = (
            None if self._config["from_beginning"] else connection.end_offsets(self.topic)
        )

    def _detach(self, connection: KafkaConnection) -> None:
        """Stop this queue's consumers; commits already made stay, the rest will come again."""
        connection.unsubscribe(self.topic, self.group_id, self)

    def _forget(self) -> None:
        self._pending.clear()
        self._done.clear()
        self._committed.clear()

    def _subscribe(self) -> None:
        if not self._subscribed:
            options = {
                "from_beginning": self._config["from_beginning"],
                "read_partitions": self._config["read_partitions"],
                "session_timeout": self._config["options.session_timeout"],
                "start_offsets": self._start_offsets,
            }
            self._conn().subscribe(self.topic, self.group_id, options, self)
            self._subscribed = True

    def subscriptions(self) -> list[Subscription]:
        """This queue's consumers (subscribing first if needed)."""
        self._subscribe()
        return self._conn().subscriptions(self.topic, self.group_id, self)

    def _wait_assigned(self) -> list[Subscription]:
        subscriptions = self.subscriptions()
        timeout = 2 * self._config["options.session_timeout"] / 1000 + 5
        for subscription in subscriptions:
            subscription.wait_assigned(timeout)
        return subscriptions

    # ---- the listener side: called on the consumer's thread ------------------------------

    def on_message(self, topic: str, partition: int, message: ConsumerRecord) -> None:
        self._buffer_message(_to_envelope(message))

    def is_full(self) -> bool:
        return len(self._buffer) >= int(self._config["options.max_buffer"])

    def on_partitions_revoked(self, partitions: set[int]) -> None:
        """Another consumer gets these partitions: forget what we buffered and received of them."""
        with self._cond:
            self._drop_buffered(lambda m: m.partition in partitions)
            for partition in partitions:
                self._pending.pop(partition, None)
                self._done.pop(partition, None)
                self._committed.pop(partition, None)

    def _drop_buffered(self, doomed: Callable[[MessageEnvelope], bool]) -> None:
        self._buffer = collections.deque(m for m in self._buffer if not doomed(m))

    # ---- sending -------------------------------------------------------------------------

    def send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        self._check_open(correlation_id)
        message.sent_time = datetime.datetime.now(datetime.UTC)
        partition = self._config["options.write_partition"]
        self._conn().publish(self.topic, [_to_record(message)], {"partition": partition})

    # ---- reading -------------------------------------------------------------------------

    def receive(self, correlation_id: str | None, wait_timeout: int = 0) -> MessageEnvelope | None:
        message = self._take(correlation_id, wait_timeout)
        if message is None:
            return None
        with self._cond:
            self._pending.setdefault(_partition(message), set()).add(_offset(message))
            commit = self._commit_completed(message) if self._config["autocommit"] else None
        if commit is not None:  # queued in order; not waited for, but a failure is reported
            commit.add_done_callback(_report_failed_commit)
        return message

    def read_message_count(self) -> int:
        """The group's backlog on this topic: end offsets minus committed offsets."""
        self._check_open(None)
        subscription = self._wait_assigned()[0]
        from_beginning = self._config["from_beginning"]
        backlog = subscription.call(
            lambda consumer: _backlog(consumer, self.topic, from_beginning, self._lowest_unread)
        )
        return sum(backlog.values())

    def _lowest_unread(self, partition: int) -> int | None:
        """The lowest offset of ``partition`` fetched here but not completed, if any."""
        with self._cond:
            offsets = [_offset(m) for m in self._buffer if m.partition == partition]
            offsets += self._pending.get(partition, ())
        return min(offsets, default=None)

    def plan_batch(self, max_messages: int | None = None) -> BatchSpec:
        """The group's waiting messages as a BatchSpec; nothing is committed (see sluice.batch)."""
        self._check_open(None)
        committed, beginnings, ends = self._conn().group_offsets(self.topic, self.group_id)
        ranges = []
        for partition, end in sorted(ends.items()):
            start = committed.get(partition)
            if start is None:
                start = (
                    beginnings[partition]
                    if self._config["from_beginning"]
                    else (self._start_offsets or {}).get(partition, 0)
                )
            if end > start:
                ranges.append(OffsetRange(partition, start, end))
        if max_messages is not None:
            ranges = limit_ranges(ranges, max_messages)
        return BatchSpec("kafka", self.topic, group_id=self.group_id, ranges=tuple(ranges))

    # ---- acknowledging -------------------------------------------------------------------

    def complete(self, message: MessageEnvelope) -> None:
        """Commit the message (and wait for the commit)."""
        if message.partition is None or message.offset is None:
            return
        with self._cond:
            commit = self._commit_completed(message)
        if commit is not None:
            commit.result(self._config["options.request_timeout"] / 1000)

    def _commit_completed(self, message: MessageEnvelope) -> Future[None] | None:
        """Mark ``message`` completed and queue the commit it allows. Hold ``self._cond``."""
        partition, offset = _partition(message), _offset(message)
        pending = self._pending.setdefault(partition, set())
        pending.discard(offset)
        self._done[partition] = max(self._done.get(partition, 0), offset + 1)
        safe = min(pending) if pending else self._done[partition]
        if safe <= self._committed.get(partition, -1):
            return None
        self._committed[partition] = safe
        return self._conn().commit_async(self.topic, self.group_id, partition, safe, self)

    def abandon(self, message: MessageEnvelope) -> None:
        """Return the message: the partition is read again from its offset."""
        if message.partition is None or message.offset is None:
            return
        partition, offset = message.partition, message.offset
        with self._cond:
            self._pending.get(partition, set()).discard(offset)
        tp = TopicPartition(self.topic, partition)

        def seek_back(consumer: KafkaConsumer) -> None:
            # On the consumer's thread: nothing of this partition is delivered between the two.
            with self._cond:
                self._drop_buffered(lambda m: m.partition == partition and _offset(m) >= offset)
            consumer.seek(tp, offset)

        owner = next((s for s in self.subscriptions() if partition in s.assigned), None)
        if owner is not None:
            owner.call(seek_back)

    def move_to_dead_letter(self, message: MessageEnvelope, reason: str | None = None) -> None:
        """Republish to the dead-letter topic with origin and reason headers, then commit."""
        record = _to_record(message)
        record["headers"] = [
            *record["headers"],
            ("sluice.original_topic", (message.topic or self.topic).encode()),
            ("sluice.original_partition", str(message.partition).encode()),
            ("sluice.original_offset", str(message.offset).encode()),
            ("sluice.reason", (reason or "moved to dead letter").encode()),
        ]
        self._conn().publish(self.dead_letter_topic, [record])
        self.complete(message)

    def clear(self, correlation_id: str | None = None) -> None:
        """Skip everything waiting: commit this group to the end of each of its partitions."""
        self._check_open(correlation_id)
        for subscription in self._wait_assigned():
            subscription.call(self._skip_to_end)

    def _skip_to_end(self, consumer: KafkaConsumer) -> None:
        assigned = list(consumer.assignment())
        ends = end_offsets(consumer, assigned)
        with self._cond:
            self._drop_buffered(lambda m: True)
            for tp in assigned:
                self._pending.pop(tp.partition, None)
                self._done[tp.partition] = self._committed[tp.partition] = ends[tp]
        for tp in assigned:
            consumer.seek(tp, ends[tp])
        consumer.commit({tp: _offset_meta(ends[tp]) for tp in assigned})


# ---- records and envelopes -------------------------------------------------------------


def _to_record(message: MessageEnvelope) -> dict[str, Any]:
    headers = [(n, v) for n, v in message.headers if n not in _ENVELOPE_HEADERS]
    headers.append((ID_HEADER, str(message.message_id).encode()))
    if message.message_type is not None:
        headers.append((TYPE_HEADER, message.message_type.encode()))
    if message.correlation_id is not None:
        headers.append((CORRELATION_HEADER, str(message.correlation_id).encode()))
    return {
        "value": message.message,
        "key": message.key if message.key is not None else str(message.message_id).encode(),
        "headers": headers,
        "timestamp": message.timestamp,
    }


def _to_envelope(record: ConsumerRecord) -> MessageEnvelope:
    fields: dict[str, str] = {}
    user_headers: list[tuple[str, bytes]] = []
    for name, value in record.headers or []:
        if name in _ENVELOPE_HEADERS:
            fields[name] = value.decode("utf-8", "replace")
        else:
            user_headers.append((name, value))
    envelope = MessageEnvelope(
        fields.get(CORRELATION_HEADER),
        fields.get(TYPE_HEADER),
        record.value,
        key=record.key,
        headers=user_headers,
    )
    envelope.message_id = (
        fields.get(ID_HEADER) or f"{record.topic}-{record.partition}-{record.offset}"
    )
    envelope.topic, envelope.partition, envelope.offset = (
        record.topic,
        record.partition,
        record.offset,
    )
    envelope.timestamp = record.timestamp
    if record.timestamp is not None and record.timestamp >= 0:
        envelope.sent_time = datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.UTC)
    return envelope


def _report_failed_commit(commit: Future[None]) -> None:
    if commit.exception() is not None:
        log.error("autocommit failed (the message will be delivered again): %s", commit.exception())


def _partition(message: MessageEnvelope) -> int:
    return message.partition if message.partition is not None else 0


def _offset(message: MessageEnvelope) -> int:
    return message.offset if message.offset is not None else -1


def _offset_meta(offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, "", -1)


# ---- offsets (run on the consumer's thread) ----------------------------------------------


def _backlog(
    consumer: KafkaConsumer,
    topic: str,
    from_beginning: bool,
    lowest_unread: Callable[[int], int | None],
) -> dict[int, int]:
    """Per partition: end offset minus where the group resumes (committed offset; without one,
    what this consumer has fetched but not completed, its position, or the reset point)."""
    partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    ends = end_offsets(consumer, tps)
    assigned = consumer.assignment()
    beginnings = consumer.beginning_offsets(tps) if tps else {}
    backlog: dict[int, int] = {}
    for tp in tps:
        start = consumer.committed(tp)
        if start is None and tp in assigned:
            start = lowest_unread(tp.partition)
            if start is None:
                start = consumer.position(tp)
        if start is None:
            start = beginnings[tp] if from_beginning else ends[tp]
        backlog[tp.partition] = max(0, ends[tp] - start)
    return backlog
