"""One consumer, one thread: a KafkaConsumer owned by the thread that polls it.

kafka-python consumers are not thread-safe. A :class:`Subscription` thread is the only one
that touches its consumer; other threads hand it work (commit, seek, offset look-ups) as
callables and wait for the result. Work runs between polls, so "drop what is buffered and
seek back" is atomic with respect to delivery.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError
from kafka.structs import MemberState

from ..secrets import redact_exception
from .offsets import tracked_consumer

log = logging.getLogger("sluice.kafka")

T = TypeVar("T")
POLL_MS = 100


class KafkaMessageListener(Protocol):
    """pip-services' IKafkaMessageListener, plus back-pressure and rebalance hooks."""

    def on_message(self, topic: str, partition: int, message: Any) -> None: ...


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Keeps the subscription's ``assigned`` up to date and tells the listener, when it has the
    hooks, on the consumer's thread: ``on_partitions_revoked`` (kafka-python rebalances eagerly:
    every partition, the kept ones included, whose positions kafka-python preserves),
    ``on_partitions_assigned`` (the whole new assignment) and ``on_partitions_lost`` (evicted
    from the group: positions are gone too), each with the partitions and the Subscription."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def _tell(self, hook: str, partitions: set[TopicPartition]) -> None:
        # kafka-python may call these on its own event-loop thread: name the consumer.
        callback = getattr(self._subscription.listener, hook, None)
        if callback is not None:
            callback({tp.partition for tp in partitions}, self._subscription)

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._subscription.assigned = frozenset()
        self._subscription.assigned_event.clear()
        self._tell("on_partitions_revoked", revoked)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._subscription.assigned = frozenset()
        self._subscription.assigned_event.clear()
        self._tell("on_partitions_lost", lost)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        subscription = self._subscription
        subscription.assigned = frozenset(tp.partition for tp in assigned)
        subscription.assigned_event.set()
        log.debug("%s assigned %s", subscription.name, sorted(subscription.assigned))
        self._tell("on_partitions_assigned", assigned)


def finish_answered_joins(consumer: KafkaConsumer) -> None:
    """Work around a kafka-python 3.0.12 defect: a join's answer is lost when no poll waits.

    kafka-python drives a group join as a task that outlives a poll's timeout, and uses the
    task's SyncGroup answer only if a poll is waiting on it when it comes. When a poll's
    timeout expires just as the answer arrives, the next poll starts another join: one more
    round trip (about 3 s on Tansu) and, under load, another chance to lose the answer. Seen
    as a contract test on Tansu waiting 15 s for a join. Installed on each consumer of a
    group: before kafka-python starts a join, one whose answer came is finished with it, as
    kafka-python would have done had its poll waited a moment longer. The check runs on
    kafka-python's loop, where the answer arrives, so no answer can slip in between."""
    coordinator = getattr(consumer, "_coordinator", None)
    join = getattr(coordinator, "join_group_async", None)
    if coordinator is None or join is None:
        return

    async def join_group_async(timeout_ms: float | None = None) -> bool:
        task = getattr(coordinator, "_join_task", None)
        if coordinator.rejoining and task is not None and task.succeeded():
            log.debug("group %s: finishing the join kafka-python left", coordinator.group_id)
            await _finish_join(coordinator, task.value)
        joined: bool = await join(timeout_ms=timeout_ms)  # joins again only if still needed
        return joined

    coordinator.join_group_async = join_group_async


async def _finish_join(coordinator: Any, assignment: bytes) -> None:
    """What kafka-python's ``join_group_async`` does with a SyncGroup answer."""
    coordinator._join_task = None
    with coordinator._lock:
        coordinator.rejoining = False
        coordinator.rejoin_needed = False
        coordinator.state = MemberState.STABLE
        coordinator._enable_heartbeat()
    generation = coordinator._generation
    await coordinator._on_join_complete_async(
        generation.generation_id, generation.member_id, generation.protocol, assignment
    )


def mend_lost_join(consumer: KafkaConsumer) -> bool:
    """Work around a second form of the defect above; True when it struck and was mended.

    A rebalance that the leader starts because topic metadata changed (its assignment snapshot
    differs from the metadata snapshot) sets no ``rejoin_needed`` flag: the comparison is the
    only reason. The leader's assignment makes the snapshots equal again. If the poll's
    timeout expires just as the SyncGroup answer arrives, the next poll sees no reason to
    rejoin and never looks at the join it has the answer for: the member stays in REBALANCING
    with no partitions and heartbeats off until the group evicts it. Apache Kafka shows it
    (the first metadata of a new topic often comes after the first join); so can any broker.
    Asking to rejoin makes the next poll finish that join (:func:`finish_answered_joins`), or
    join again if its attempt failed."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not getattr(coordinator, "rejoining", False):
        return False
    task = getattr(coordinator, "_join_task", None)
    if (task is None or task.is_done) and not coordinator.need_rejoin():
        log.debug("group %s: kafka-python lost a finished join; asking again", coordinator.group_id)
        coordinator.request_rejoin()
        return True
    return False


class Subscription(threading.Thread):
    """A consumer in ``group_id`` subscribed to ``topic``, delivering records to ``listener``."""

    def __init__(
        self,
        topic: str,
        group_id: str,
        consumer_config: dict[str, Any],
        listener: KafkaMessageListener,
        index: int = 0,
        start_offsets: dict[int, int] | None = None,
    ) -> None:
        super().__init__(name=f"sluice-kafka-{topic}-{group_id}-{index}", daemon=True)
        self.topic = topic
        self.group_id = group_id
        self.listener = listener
        self._config = consumer_config
        # Where partitions without a committed offset start (the consumer runs with
        # auto_offset_reset="none" and asks us); None: kafka-python's reset policy decides.
        self._start_offsets = start_offsets
        self._work: queue.SimpleQueue[tuple[Callable[[KafkaConsumer], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._failure: str | None = None  # why the thread ended, when it ended on an error
        self.consumer: KafkaConsumer | None = None
        #: Partitions assigned to this consumer now (replaced, never mutated, by its thread).
        self.assigned: frozenset[int] = frozenset()
        self.assigned_event = threading.Event()

    # ---- called from other threads -------------------------------------------------------

    def start_and_wait(self, timeout: float) -> None:
        self.start()
        self._started.wait(timeout)
        if self._startup_error is not None:
            raise self._startup_error

    def submit(self, work: Callable[[KafkaConsumer], T]) -> Future[T]:
        """Queue ``work(consumer)`` for the consumer's thread; work runs in submission order."""
        if not self.is_alive():
            why = f": it stopped on {self._failure}" if self._failure else ""
            raise RuntimeError(f"{self.name} is not running{why}")
        future: Future[T] = Future()
        self._work.put((work, future))
        return future

    def call(self, work: Callable[[KafkaConsumer], T], timeout: float | None = 60.0) -> T:
        """Run ``work(consumer)`` on the consumer's thread and return its result."""
        return self.submit(work).result(timeout)

    def wait_assigned(self, timeout: float) -> bool:
        """Wait until the group has assigned this consumer its partitions."""
        return self.assigned_event.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    # ---- the consumer's thread -----------------------------------------------------------

    def run(self) -> None:
        try:
            consumer = tracked_consumer(
                group_id=self.group_id, enable_auto_commit=False, **self._config
            )
            finish_answered_joins(consumer)
            consumer.subscribe([self.topic], listener=_Rebalance(self))
        except BaseException as exc:  # handed to start_and_wait's caller
            self._startup_error = exc
            self._started.set()
            return
        self.consumer = consumer
        self._started.set()
        try:
            while not self._stopping.is_set():
                self._run_work(consumer)
                self._poll_once(consumer)
            self._run_work(consumer)  # pending commits before closing
        except Exception as exc:  # told to the log and to the next caller of submit()
            self._failure = repr(redact_exception(exc))
            log.error("%s stopped on %s", self.name, self._failure)
        finally:
            self._fail_pending_work()
            consumer.close(autocommit=False)

    def _poll_once(self, consumer: KafkaConsumer) -> None:
        full = bool(getattr(self.listener, "is_full", lambda: False)())
        assigned = consumer.assignment()
        if full and assigned - consumer.paused():
            consumer.pause(*assigned)
        elif not full and consumer.paused():
            consumer.resume(*consumer.paused())
        try:
            batches = consumer.poll(timeout_ms=POLL_MS)
            mend_lost_join(consumer)
        except NoOffsetForPartitionError as exc:
            for tp in exc.args[0]:
                consumer.seek(tp, (self._start_offsets or {}).get(tp.partition, 0))
            return
        except OffsetOutOfRangeError as exc:
            log.warning(
                "%s: committed offsets out of range (%s); reading from the earliest", self.name, exc
            )
            consumer.seek_to_beginning(
                *(exc.args[0] if exc.args and isinstance(exc.args[0], dict) else ())
            )
            return
        except KafkaError as exc:
            log.warning("%s: poll failed (%s); retrying", self.name, exc)
            self._stopping.wait(POLL_MS / 1000)
            return
        for tp, records in batches.items():
            for record in records:
                self.listener.on_message(tp.topic, tp.partition, record)

    def _run_work(self, consumer: KafkaConsumer) -> None:
        while True:
            try:
                work, future = self._work.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work(consumer))
            except BaseException as exc:
                future.set_exception(exc)

    def _fail_pending_work(self) -> None:
        while True:
            try:
                _, future = self._work.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError(f"{self.name} stopped"))
