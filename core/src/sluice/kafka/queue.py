"""KafkaMessageQueue (as pip-services' KafkaMessageQueue) on kafka-python, with the semantics of
docs/architecture.md.

- ``read_message_count`` is the group's real backlog: end offsets minus committed offsets.
- ``peek``/``peek_batch`` look at the local buffer and never commit.
- With ``autocommit`` true a message is committed when ``receive`` hands it out; with it false
  only ``complete`` commits, and never past a received message that is not completed yet.
- ``abandon`` seeks back, so the message comes again; ``move_to_dead_letter`` republishes to
  ``<topic>.dlq`` with the origin and the reason in headers, then commits.
- After a rebalance, messages of partitions the queue kept stay buffered and completable; those
  of partitions it lost are the new owner's (it delivers them again), so completing, abandoning
  or dead-lettering an old copy does nothing (see :mod:`sluice.kafka.ledger`).
"""

from __future__ import annotations

import collections
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata
from pip_services3_commons.config import ConfigParams
from pip_services3_commons.refer import Descriptor

from ..batch import BatchSpec, OffsetRange
from ..errors import TopicNotFoundError
from ..queues.base import LISTEN_INTERVAL_KEY
from ..queues.broker import BrokerQueue
from ..queues.capabilities import MessagingCapabilities
from ..queues.envelope import MessageEnvelope
from .config import CONNECTION_KEYS, QUEUE_KEYS, security_protocol
from .connection import KafkaConnection
from .ledger import Ledger
from .offsets import end_offsets, resume_offset
from .records import dead_letter_headers, to_envelope, to_record
from .subscription import Subscription

__all__ = ["KafkaMessageQueue"]

log = logging.getLogger("sluice.kafka")


class KafkaMessageQueue(BrokerQueue[KafkaConnection]):
    """A message queue on a Kafka topic, read through a consumer group (see module docstring)."""

    CONFIG_KEYS = (*QUEUE_KEYS, *CONNECTION_KEYS, LISTEN_INTERVAL_KEY)
    CONNECTION_CLASS = KafkaConnection
    CONNECTION_DESCRIPTOR = Descriptor("*", "connection", "kafka", "*", "1.0")
    JOIN_SERVERS = True

    def __init__(self, name: str | None = None) -> None:
        super().__init__(
            name,
            MessagingCapabilities.full(can_renew_lock=False),
        )
        self._ledger = Ledger()  # guarded by self._cond
        self._start_offsets: dict[int, int] | None = None  # where to start without a commit

    # ---- configuration and references ----------------------------------------------------

    def configure(self, config: ConfigParams | Mapping[str, Any]) -> None:
        super().configure(config)
        # A wrong connection.protocol, or a password over plaintext, fails here, not at open.
        security_protocol(self._config)

    def check_topic(self) -> None:
        """:class:`~sluice.errors.TopicNotFoundError` unless the topic exists (open queue)."""
        connection = self._conn()
        if not connection.end_offsets(self.topic):
            raise TopicNotFoundError(self.topic, ",".join(connection.servers))

    @property
    def group_id(self) -> str:
        return str(self._config["group_id"])

    @property
    def dead_letter_topic(self) -> str:
        return str(self._config["options.dead_letter_topic"] or f"{self.topic}.dlq")

    def _after_open(self, connection: KafkaConnection) -> None:
        if self._config["options.create_topic"] and not connection.end_offsets(self.topic):
            # as pip-services' KafkaMessageQueue.open(): a missing topic is created with
            # options.num_partitions, so a write_partition beyond the broker's default exists
            connection.create_queue(self.topic)
        # Without from_beginning a new group starts where the topic ended when the queue opened
        # (not when the group join completes), so nothing sent after open() is missed.
        self._start_offsets = (
            None if self._config["from_beginning"] else connection.end_offsets(self.topic)
        )

    def _detach(self, connection: KafkaConnection) -> None:
        """Stop this queue's consumers; commits already made stay, the rest will come again."""
        connection.unsubscribe(self.topic, self.group_id, self)

    def _forget(self) -> None:
        self._ledger.clear()

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

    def wait_assigned(self, timeout: float | None = None) -> bool:
        """Wait until the group has assigned each of this queue's consumers its partitions
        (subscribing first if needed); False if ``timeout`` seconds (default: twice the
        session timeout plus 5 s) pass first. Until then a receive finds nothing."""
        if timeout is None:
            timeout = 2 * self._config["options.session_timeout"] / 1000 + 5
        deadline = time.monotonic() + timeout
        return all(
            subscription.wait_assigned(max(0.0, deadline - time.monotonic()))
            for subscription in self.subscriptions()
        )

    def _wait_assigned(self) -> list[Subscription]:
        self.wait_assigned()
        return self.subscriptions()

    # ---- the listener side: called on the consumer's thread ------------------------------

    def on_message(self, topic: str, partition: int, message: ConsumerRecord) -> None:
        envelope = to_envelope(message)
        with self._cond:
            token, ended = self._ledger.token_for(partition, threading.current_thread())
            if ended is not None:
                self._drop_tenures([ended])
            envelope.set_reference(token)
            self._buffer_message(envelope)

    def _holds(self, message: MessageEnvelope) -> bool:
        """Whether ``message`` belongs to its partition's current tenure. Hold ``self._cond``."""
        return self._ledger.holds(_partition(message), message.get_reference())

    def is_full(self) -> bool:
        return len(self._buffer) >= int(self._config["options.max_buffer"])

    def on_partitions_revoked(self, partitions: set[int], consumer: Subscription) -> None:
        with self._cond:
            self._ledger.revoked(consumer, partitions)

    def on_partitions_assigned(self, partitions: set[int], consumer: Subscription) -> None:
        """The revoked partitions not assigned again went to another consumer: forget what was
        buffered and received of them (the new owner reads from the committed offset)."""
        with self._cond:
            self._drop_tenures(self._ledger.assigned(consumer, partitions))

    def on_partitions_lost(self, partitions: set[int], consumer: Subscription) -> None:
        with self._cond:
            self._drop_tenures(self._ledger.lost(consumer, partitions))

    def _drop_tenures(self, tokens: list[int]) -> None:
        if tokens:
            self._drop_buffered(lambda m: m.get_reference() in tokens)

    def _drop_buffered(self, doomed: Callable[[MessageEnvelope], bool]) -> None:
        self._buffer = collections.deque(m for m in self._buffer if not doomed(m))

    # ---- sending -------------------------------------------------------------------------

    def _send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        self._check_open(correlation_id)
        message.sent_time = datetime.datetime.now(datetime.UTC)
        partition = self._config["options.write_partition"]
        self._conn().publish(self.topic, [to_record(message)], {"partition": partition})

    # ---- reading -------------------------------------------------------------------------

    def receive(self, correlation_id: str | None, wait_timeout: int = 0) -> MessageEnvelope | None:
        deadline = time.monotonic() + max(0, wait_timeout) / 1000
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            message = self._take(correlation_id, remaining_ms)
            if message is None:
                return None
            with self._cond:
                # A message whose partition a rebalance took away just now is the new owner's.
                if self._holds(message):
                    self._ledger.received(_partition(message), _offset(message))
                    autocommit = self._config["autocommit"]
                    commit = self._commit_completed(message) if autocommit else None
                    break
        if commit is not None:  # queued in order; not waited for, but a failure is reported
            commit.add_done_callback(_report_failed_commit)
        return message

    def read_message_count(self) -> int:
        """The group's backlog on this topic: end offsets minus committed offsets.

        Partitions this queue's consumers own are counted on their threads (they know what was
        fetched but not completed, and the fetch high watermark); the rest (owned by other
        members of the group, or not yet fetched) through a probe that joins no group.
        """
        self._check_open(None)
        counted: dict[int, int] = {}
        for subscription in self._wait_assigned():
            counted.update(
                subscription.call(
                    lambda consumer: _owned_backlog(consumer, self.topic, self._lowest_unread)
                )
            )
        partitions = self.subscriptions()[0].call(
            lambda consumer: consumer.partitions_for_topic(self.topic)
        )
        if set(partitions or ()) - counted.keys():
            committed, beginnings, ends = self._conn().group_offsets(self.topic, self.group_id)
            for partition, end in ends.items():
                if partition not in counted:
                    start = self._resume_offset(partition, committed, beginnings, end)
                    counted[partition] = max(0, end - start)
        return sum(counted.values())

    def _resume_offset(
        self,
        partition: int,
        committed: dict[int, int | None],
        beginnings: dict[int, int],
        end: int | None = None,
    ) -> int:
        """Where the group reads ``partition`` next (:func:`~.offsets.resume_offset`)."""
        return resume_offset(
            partition,
            committed,
            beginnings,
            self._config["from_beginning"],
            self._start_offsets,
            end,
        )

    def _lowest_unread(self, partition: int) -> int | None:
        """The lowest offset of ``partition`` fetched here but not completed, if any."""
        with self._cond:
            offsets = [_offset(m) for m in self._buffer if m.partition == partition]
            offsets += self._ledger.pending(partition)
        return min(offsets, default=None)

    def plan_batch(self, max_messages: int | None = None) -> BatchSpec:
        """The group's waiting messages as a BatchSpec; nothing is committed (see sluice.batch)."""
        self._check_open(None)
        connection = self._conn()
        committed, beginnings, ends = connection.group_offsets(self.topic, self.group_id)
        ranges = []
        for partition, end in sorted(ends.items()):
            start = self._resume_offset(partition, committed, beginnings, end)
            if end > start:
                ranges.append(OffsetRange(partition, start, end))
        spec = BatchSpec(
            "kafka",
            self.topic,
            group_id=self.group_id,
            ranges=tuple(ranges),
            topic_id=connection.topic_id(self.topic),
        )
        return spec.limited(max_messages)

    # ---- acknowledging -------------------------------------------------------------------

    def complete(self, message: MessageEnvelope) -> None:
        """Commit the message (and wait for the commit)."""
        self._conn()  # raises if the queue is closed
        if message.partition is None or message.offset is None:
            return
        with self._cond:
            commit = self._commit_completed(message)
        if commit is not None:
            commit.result(self._config["options.request_timeout"] / 1000)

    def _commit_completed(self, message: MessageEnvelope) -> Future[None] | None:
        """Mark ``message`` completed and queue the commit it allows. Hold ``self._cond``."""
        partition, token = _partition(message), message.get_reference()
        holder = self._ledger.holder(partition, token)
        if not isinstance(holder, Subscription):
            log.info(
                "%s: not committing %s: a rebalance gave its partition to another consumer, "
                "which delivers it again",
                self,
                message.message_id,
            )
            return None
        offset = self._ledger.completed(partition, _offset(message))
        if offset is None:
            return None
        tp = TopicPartition(self.topic, partition)

        def commit(consumer: KafkaConsumer) -> None:
            with self._cond:
                if not self._ledger.holds(partition, token):
                    return  # lost since: the new owner commits
            consumer.commit({tp: _offset_meta(offset)})

        return holder.submit(commit)

    def abandon(self, message: MessageEnvelope) -> None:
        """Return the message: its partition is read again from its offset.

        The message stays uncompleted, so nothing after it is committed until it is."""
        self._conn()  # raises if the queue is closed
        if message.partition is None or message.offset is None:
            return
        partition, offset, token = message.partition, message.offset, message.get_reference()
        with self._cond:
            holder = self._ledger.holder(partition, token)
        if not isinstance(holder, Subscription):
            return  # a rebalance gave its partition to another consumer, which delivers it
        tp = TopicPartition(self.topic, partition)

        def seek_back(consumer: KafkaConsumer) -> None:
            # On the consumer's thread: nothing of this partition is delivered between the two.
            with self._cond:
                if not self._ledger.holds(partition, token):
                    return
                self._drop_buffered(lambda m: m.partition == partition and _offset(m) >= offset)
            consumer.seek(tp, offset)

        holder.call(seek_back)

    def move_to_dead_letter(self, message: MessageEnvelope, reason: str | None = None) -> None:
        """Republish to the dead-letter topic with origin and reason headers, then commit.

        Nothing happens if a rebalance gave the message's partition to another consumer since
        it was received: that consumer gets the message and decides (no duplicate dead letter).
        """
        with self._cond:
            if not self._holds(message):
                return
        record = to_record(message)
        record["headers"] = [
            *record["headers"],
            *dead_letter_headers(
                message.topic or self.topic, message.partition, message.offset, reason
            ),
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
            self._drop_buffered(lambda m: m.partition in {tp.partition for tp in assigned})
            for tp in assigned:
                self._ledger.skipped_to(tp.partition, ends[tp], threading.current_thread())
        for tp in assigned:
            consumer.seek(tp, ends[tp])
        consumer.commit({tp: _offset_meta(ends[tp]) for tp in assigned})


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


def _owned_backlog(
    consumer: KafkaConsumer, topic: str, lowest_unread: Callable[[int], int | None]
) -> dict[int, int]:
    """Per partition of ``topic`` assigned to ``consumer`` and fetched at least once: end offset
    minus where the group resumes (the committed offset; without one, the lowest offset fetched
    here and not completed, else the consumer's position)."""
    tps = [
        tp
        for tp in consumer.assignment()
        if tp.topic == topic and consumer.highwater(tp) is not None
    ]
    ends = end_offsets(consumer, tps)
    backlog: dict[int, int] = {}
    for tp in tps:
        start = consumer.committed(tp)
        if start is None:
            start = lowest_unread(tp.partition)
        if start is None:
            start = consumer.position(tp)
        backlog[tp.partition] = max(0, ends[tp] - start)
    return backlog
