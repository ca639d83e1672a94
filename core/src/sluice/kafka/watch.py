"""Watching Kafka topics for a whole process: one client per cluster, however many sensors.

Every :class:`~sluice_airflow.triggers.queue.QueueMessageTrigger` of a triggerer, and every
tick of a Dagster queue sensor in a code server, asks the broker the same question: how many
messages wait for my group on my topic? Asked by each sensor on its own, 500 triggers hold
500 sets of clients and threads. A :class:`KafkaWatch` asks once for all of them:

- one thread and one set of clients per cluster (:class:`_Clients`), shared by every watcher
  with the same client settings (:func:`kafka_watch`);
- every ``interval`` seconds (the shortest any watcher asked for), one batched ListOffsets
  request for every watched partition. A broker whose ListOffsets lags (Tansu 0.6, see
  :mod:`sluice.kafka.offsets`) is corrected from fetch responses every
  :data:`EXACT_EVERY` seconds;
- the groups' committed offsets, in one request for all of them, only when a topic's ends
  moved, or when a watcher asks for fresh ones (it has a batch in flight and waits for the
  ingest's commit);
- watchers wait for a change without a thread of their own: an asyncio future per waiting
  trigger, resolved from the watch's thread, or a blocking call for a sensor's tick.

The thread starts with the first watcher and stops, closing its clients, once none is left.
Nothing is committed and no consumer group is joined.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, UnsupportedVersionError

from ..batch import BatchSpec, OffsetRange
from ..errors import TopicNotFoundError
from ..secrets import redact_exception
from .config import consumer_config, credentials
from .logs import hide_secret
from .offsets import (
    ENDS_CONSUMER,
    refresh_ends,
    resume_offset,
    tracked_consumer,
    waiting_out_coordinator,
)

__all__ = [
    "DEFAULT_INTERVAL",
    "EXACT_EVERY",
    "KafkaWatch",
    "Watcher",
    "kafka_watch",
    "stop_watches",
    "watch_topic",
]

log = logging.getLogger(__name__)

#: Seconds between two reads of the ends unless a watcher asks for less.
DEFAULT_INTERVAL = 0.25
#: Seconds between two corrections of the ends from fetch responses (see the module docstring).
EXACT_EVERY = 5.0
#: Seconds between two refreshes of the topics' partitions (new partitions, new topics).
METADATA_EVERY = 5.0
#: Seconds a blocking caller (a sensor's tick) keeps its topic watched after its last call.
IDLE_WATCH_SECONDS = 600.0

_GroupKey = tuple[str, str]  # (topic, group_id)


@dataclass
class _Clients:
    """The watch's clients, used on its thread only. ListOffsets goes through a consumer that
    never fetches: kafka-python 3.0 drops partitions from a ListOffsets answer that arrives
    while a fetch of the same consumer is in flight (found on noida-db; it raises KeyError)."""

    lister: KafkaConsumer
    fetcher: KafkaConsumer
    admin: KafkaAdminClient
    kwargs: Mapping[str, Any]

    @classmethod
    def connect(cls, kwargs: Mapping[str, Any]) -> _Clients:
        def consumer(**extra: Any) -> KafkaConsumer:
            return tracked_consumer(**kwargs, group_id=None, enable_auto_commit=False, **extra)

        # the exact refresh wants its fetches answered at once
        return cls(
            consumer(), consumer(fetch_max_wait_ms=10, **ENDS_CONSUMER), _admin(kwargs), kwargs
        )

    def group_offsets(
        self, by_group: dict[str, list[TopicPartition]]
    ) -> dict[str, dict[TopicPartition, Any]]:
        """:func:`_group_offsets`, once more with a new admin client when the first answer is
        an error worth retrying: after an outage kafka-python's client refuses requests
        (NodeNotReadyError) until its reconnect backoff has passed, which grows up to
        ``options.retry_timeout``, even once the broker is back."""
        try:
            return _group_offsets(self.admin, by_group)
        except KafkaError as exc:
            if not exc.retriable:
                raise
        log.debug("Reading committed offsets failed; trying again with a new admin client")
        fresh = _admin(self.kwargs)  # raises while the broker is down
        _close(self.admin)
        self.admin = fresh
        admin = self.admin
        return waiting_out_coordinator(lambda: _group_offsets(admin, by_group))

    def close(self) -> None:
        for client in (self.lister, self.fetcher, self.admin):
            _close(client)


def _admin(kwargs: Mapping[str, Any]) -> KafkaAdminClient:
    """An admin client of the watch's consumer settings (it takes no isolation level)."""
    return KafkaAdminClient(**{k: v for k, v in kwargs.items() if k != "isolation_level"})


def _close(client: KafkaConsumer | KafkaAdminClient) -> None:
    try:
        client.close()
    except Exception:  # closing a client of a broker that is gone
        log.debug("Closing the watch's client failed", exc_info=True)


@dataclass
class _Topic:
    partitions: list[int] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)
    version: int = 0  # grows each time an end moves
    known: bool = False  # ends were read at least once
    missing: bool = False  # the broker's metadata has no such topic
    topic_id: str | None = None  # where the broker has topic ids (KIP-516)
    error: str | None = None  # why the last read failed
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(
        default_factory=list
    )


@dataclass
class _Group:
    from_beginning: bool
    interval: float
    users: int = 0  # watchers that hold it until they close
    kept_until: float = 0.0  # blocking callers keep it until then (monotonic)
    start_ends: dict[int, int] | None = None  # where a new group starts without from_beginning
    committed: dict[int, int | None] = field(default_factory=dict)
    beginnings: dict[int, int] = field(default_factory=dict)
    version: int = -1  # the topic's version the committed offsets were read at


class Watcher:
    """One sensor's view of a watched ``topic`` and ``group_id``; :meth:`close` when done."""

    def __init__(self, watch: KafkaWatch, topic: str, group_id: str) -> None:
        self._watch, self.topic, self.group_id = watch, topic, group_id
        self._closed = False

    @property
    def version(self) -> int:
        """Grows each time an end offset of the topic moves."""
        return self._watch._version(self.topic)

    def backlog(self, fresh: bool = False) -> BatchSpec:
        """The group's whole backlog, planned from its committed offsets (blocking).

        ``fresh``: read the committed offsets now, not only when the ends moved.
        """
        return self._watch._request((self.topic, self.group_id), fresh).result()

    async def abacklog(self, fresh: bool = False) -> BatchSpec:
        """:meth:`backlog` for an asyncio caller (it does not block the event loop)."""
        return await asyncio.wrap_future(self._watch._request((self.topic, self.group_id), fresh))

    async def changed(self, since: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the ends to move past ``version`` ``since``;
        whether they did (or a read failed: the next :meth:`abacklog` says why)."""
        return await self._watch._changed(self.topic, since, timeout)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._watch._release((self.topic, self.group_id))


class KafkaWatch:
    """The watch of one cluster (see the module docstring); get it with :func:`kafka_watch`.

    ``client_kwargs`` are kafka-python keyword arguments (they may hold a password: never
    logged).
    """

    def __init__(self, client_kwargs: Mapping[str, Any]) -> None:
        self._kwargs = dict(client_kwargs)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._topics: dict[str, _Topic] = {}
        self._groups: dict[_GroupKey, _Group] = {}
        self._requests: list[tuple[_GroupKey, bool, Future[BatchSpec]]] = []
        self._thread: threading.Thread | None = None
        self._metadata_due = 0.0
        self._failing = False
        self.stats = {"ticks": 0, "committed_reads": 0}  # for tests and benchmarks

    # ---- watchers' side ----------------------------------------------------------------------

    def watch(
        self,
        topic: str,
        group_id: str,
        from_beginning: bool = True,
        interval: float = DEFAULT_INTERVAL,
        blocking: bool = False,
    ) -> Watcher:
        """Start watching ``topic`` for ``group_id``, reading its ends at least every
        ``interval`` seconds. ``blocking``: the caller only asks now and then (a sensor's
        tick, it never closes), so the topic stays watched for :data:`IDLE_WATCH_SECONDS`
        after its last question instead of until :meth:`Watcher.close`."""
        with self._lock:
            self._topics.setdefault(topic, _Topic())
            group = self._groups.setdefault((topic, group_id), _Group(from_beginning, interval))
            group.interval = min(group.interval, interval)
            if blocking:
                group.kept_until = time.monotonic() + IDLE_WATCH_SECONDS
            else:
                group.users += 1
            self._metadata_due = 0.0
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluice-kafka-watch", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return Watcher(self, topic, group_id)

    def _version(self, topic: str) -> int:
        with self._lock:
            state = self._topics.get(topic)
            return state.version if state else 0

    def _request(self, key: _GroupKey, fresh: bool) -> Future[BatchSpec]:
        future: Future[BatchSpec] = Future()
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                future.set_exception(RuntimeError(f"{key[0]} is not watched for {key[1]}"))
                return future
            if group.kept_until:
                group.kept_until = time.monotonic() + IDLE_WATCH_SECONDS
            self._requests.append((key, fresh, future))
        self._wake.set()
        return future

    async def _changed(self, topic: str, since: int, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            state = self._topics.get(topic)
            if state is None or state.version > since or state.error:
                return True
            state.waiters.append((loop, waiter))
        try:
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if state is not None and (loop, waiter) in state.waiters:
                    state.waiters.remove((loop, waiter))

    def _release(self, key: _GroupKey) -> None:
        with self._lock:
            group = self._groups.get(key)
            if group is not None:
                group.users -= 1
                if group.users <= 0 and group.kept_until < time.monotonic():
                    self._forget(key)
        self._wake.set()

    def _forget(self, key: _GroupKey) -> None:
        """Stop watching ``key`` (the lock is held)."""
        del self._groups[key]
        if not any(topic == key[0] for topic, _ in self._groups):
            state = self._topics.pop(key[0], None)
            if state is not None:
                _notify(state)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching everything now: the thread ends and closes its clients, waiters wake
        and a later question raises. For a process that ends before its broker does (a test
        session): a sensor's watch otherwise outlives its last tick by
        :data:`IDLE_WATCH_SECONDS`."""
        with self._lock:
            for key in list(self._groups):
                self._forget(key)
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            pending, self._requests = self._requests, []
        for _, _, future in pending:
            _settle(future, RuntimeError("the Kafka watch was stopped"))

    # ---- the watch's thread ----------------------------------------------------------------

    def _run(self) -> None:
        clients: _Clients | None = None
        exact_due = next_tick = 0.0
        requests: list[tuple[_GroupKey, bool, Future[BatchSpec]]] = []
        try:
            while True:
                self._wake.wait(max(0.0, next_tick - time.monotonic()))
                self._wake.clear()
                with self._lock:
                    self._expire_idle()
                    if not self._groups:
                        self._thread = None
                        return
                    requests += self._requests
                    self._requests = []
                    interval = min(group.interval for group in self._groups.values())
                    # a question of a watcher closed since it asked is answered "no longer
                    # watched" (by _plan), never looked up in what the watch forgot
                    unknown = any(
                        key[0] in self._topics and not self._topics[key[0]].known
                        for key, _, _ in requests
                    )
                now = time.monotonic()
                # Fresh committed offsets wait for the tick: one request for every watcher
                # with a batch in flight, however many there are.
                urgent = unknown or any(not fresh for _, fresh, _ in requests)
                if now < next_tick and not urgent:
                    continue
                if clients is None:
                    try:
                        clients = _Clients.connect(self._kwargs)
                    except Exception as exc:  # the broker is down: say so, try again later
                        self._failed(exc, requests)
                        requests, next_tick = [], now + max(interval, 1.0)
                        continue
                if now >= next_tick or unknown:
                    exact = now >= exact_due
                    self._tick(clients, exact)
                    next_tick = now + interval
                    exact_due = now + EXACT_EVERY if exact else exact_due
                self._answer(clients, requests)
                requests = []
        except BaseException as exc:  # never leave a caller waiting forever
            with self._lock:
                self._thread = None
                requests += self._requests
                self._requests = []
            for _, _, future in requests:
                _settle(future, exc)
            raise
        finally:
            if clients is not None:
                clients.close()

    def _expire_idle(self) -> None:
        """Drop what blocking callers stopped asking about (the lock is held)."""
        now = time.monotonic()
        for key, group in list(self._groups.items()):
            if group.users <= 0 and group.kept_until < now:
                self._forget(key)

    def _tick(self, clients: _Clients, exact: bool) -> None:
        """Read the ends of every watched topic; the committed offsets where they moved."""
        self.stats["ticks"] += 1
        with self._lock:
            topics = dict(self._topics)
        try:
            if time.monotonic() >= self._metadata_due:
                self._refresh_partitions(clients.lister, topics)
            ends = self._read_ends(clients, topics, exact)
        except Exception as exc:
            self._failed(exc)
            return
        self._failing = False
        moved = []
        with self._lock:
            for topic, state in topics.items():
                new = {
                    p: max(state.ends.get(p, 0), ends.get((topic, p), 0)) for p in state.partitions
                }
                if new != state.ends or not state.known or state.error:
                    state.ends, state.known, state.error = new, True, None
                    state.version += 1
                    moved.append(topic)
            keys = [key for key in self._groups if key[0] in moved]
        if keys:
            try:
                self._read_committed(clients, keys)
            except Exception as exc:  # the groups stay stale: their next question reads again
                self._failed(exc)
                return
        with self._lock:
            for topic in moved:
                _notify(topics[topic])

    def _refresh_partitions(self, consumer: KafkaConsumer, topics: dict[str, _Topic]) -> None:
        existing = consumer.topics()  # one metadata request for every topic
        for topic, state in topics.items():
            found = consumer.partitions_for_topic(topic) if topic in existing else ()
            state.partitions = sorted(found or ())
            state.missing = topic not in existing
            known_id = consumer._client.cluster.topic_id(topic)
            state.topic_id = str(known_id) if known_id else None
        self._metadata_due = time.monotonic() + METADATA_EVERY

    def _read_ends(
        self, clients: _Clients, topics: dict[str, _Topic], exact: bool
    ) -> dict[tuple[str, int], int]:
        tps = [TopicPartition(t, p) for t, state in topics.items() for p in state.partitions]
        if not tps:
            return {}
        listed = clients.lister.end_offsets(tps)
        ends = {(tp.topic, tp.partition): end for tp, end in listed.items()}
        if exact:
            fetcher = clients.fetcher
            if set(tps) != fetcher.assignment():
                fetcher.assign(tps)
            for tp, end in refresh_ends(fetcher, tps).items():
                ends[(tp.topic, tp.partition)] = max(ends[(tp.topic, tp.partition)], end)
        return ends

    def _read_committed(self, clients: _Clients, keys: list[_GroupKey]) -> None:
        """The committed offsets of ``keys`` (one request for every group), with the log
        starts where a group has none (one request) and the ends when watching began."""
        with self._lock:
            wanted = {
                key: (list(self._topics[key[0]].partitions), self._topics[key[0]].version)
                for key in keys
                if key in self._groups and key[0] in self._topics
            }
        by_group: dict[str, list[TopicPartition]] = {}
        for (topic, group_id), (partitions, _) in wanted.items():
            by_group.setdefault(group_id, []).extend(TopicPartition(topic, p) for p in partitions)
        self.stats["committed_reads"] += 1
        answers = clients.group_offsets(by_group)
        committed_of: dict[_GroupKey, dict[int, int | None]] = {}
        for (topic, group_id), (partitions, _) in wanted.items():
            offsets = answers.get(group_id, {})
            metas = {p: offsets.get(TopicPartition(topic, p)) for p in partitions}
            committed_of[(topic, group_id)] = {
                p: meta.offset if meta is not None and meta.offset >= 0 else None
                for p, meta in metas.items()
            }
        missing = sorted(
            {
                TopicPartition(key[0], p)
                for key, c in committed_of.items()
                for p, o in c.items()
                if o is None
            }
        )
        starts = clients.lister.beginning_offsets(missing) if missing else {}
        with self._lock:
            for key, (_, version) in wanted.items():
                group = self._groups.get(key)
                if group is None:
                    continue
                if group.start_ends is None:
                    group.start_ends = dict(self._topics[key[0]].ends)
                group.committed, group.version = committed_of[key], version
                group.beginnings = {
                    tp.partition: offset for tp, offset in starts.items() if tp.topic == key[0]
                }

    def _answer(
        self, clients: _Clients, requests: list[tuple[_GroupKey, bool, Future[BatchSpec]]]
    ) -> None:
        if not requests:
            return
        with self._lock:
            stale = [
                key
                for key, fresh, _ in requests
                if key in self._groups
                and (fresh or self._groups[key].version != self._topics[key[0]].version)
            ]
        try:
            if stale:
                self._read_committed(clients, list(dict.fromkeys(stale)))
        except Exception as exc:
            self._failed(exc, requests)
            return
        for key, _, future in requests:
            with self._lock:
                spec = self._plan(key)
            _settle(future, spec)

    def _failed(
        self,
        exc: Exception,
        requests: Sequence[tuple[_GroupKey, bool, Future[BatchSpec]]] = (),
    ) -> None:
        """Tell every watcher that reading failed: their next question raises why."""
        error = ConnectionError(
            f"Watching Kafka at {_servers(self._kwargs)} failed: {redact_exception(exc)}. "
            "Check that the broker is up and reachable from this process; the watch tries "
            "again at its next read."
        )
        log.log(logging.DEBUG if self._failing else logging.WARNING, "%s", error)
        self._failing = True  # one warning per outage
        with self._lock:
            for state in self._topics.values():
                state.error = str(error)
                _notify(state)
        for _, _, future in requests:
            _settle(future, error)

    def _plan(self, key: _GroupKey) -> BatchSpec | Exception:
        """The group's whole backlog from what the watch knows (the lock is held)."""
        topic, group_id = key
        state, group = self._topics.get(topic), self._groups.get(key)
        if state is None or group is None:
            return RuntimeError(f"{topic} is no longer watched for {group_id}")
        if state.error:
            return ConnectionError(state.error)
        if state.missing:
            return TopicNotFoundError(topic, _servers(self._kwargs))
        ranges = []
        for partition, end in sorted(state.ends.items()):
            start = resume_offset(
                partition,
                group.committed,
                group.beginnings,
                group.from_beginning,
                group.start_ends,
                end,
            )
            if end > start:
                ranges.append(OffsetRange(partition, start, end))
        return BatchSpec(
            "kafka", topic, group_id=group_id, ranges=tuple(ranges), topic_id=state.topic_id
        )


def _settle(future: Future[BatchSpec], outcome: BatchSpec | BaseException) -> None:
    """Answer a watcher's question, unless it was cancelled meanwhile (its asyncio task was:
    ``asyncio.wrap_future`` cancels the question with it); a cancelled question must not end
    the thread that answers every other watcher."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        pass


def _notify(state: _Topic) -> None:
    waiters, state.waiters = state.waiters, []
    for loop, waiter in waiters:
        try:
            loop.call_soon_threadsafe(_resolve, waiter)
        except RuntimeError:  # its event loop is closed: nobody waits any more
            continue


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _group_offsets(
    admin: KafkaAdminClient, by_group: dict[str, list[TopicPartition]]
) -> dict[str, dict[TopicPartition, Any]]:
    """Committed offsets of several groups: one OffsetFetch (v8, Kafka 3.0 and later), else
    one request per group."""
    if not by_group:
        return {}
    try:
        return dict(admin.list_group_offsets(by_group))
    except UnsupportedVersionError:
        return {g: admin.list_group_offsets({g: tps}).get(g, {}) for g, tps in by_group.items()}


def _servers(kwargs: Mapping[str, Any]) -> str:
    servers = kwargs.get("bootstrap_servers", "localhost:9092")
    return ",".join(servers) if isinstance(servers, list | tuple) else str(servers)


_watches: dict[tuple[tuple[str, str], ...], KafkaWatch] = {}
_watches_lock = threading.Lock()


def kafka_watch(client_kwargs: Mapping[str, Any]) -> KafkaWatch:
    """The process's watch of the cluster ``client_kwargs`` (kafka-python keyword arguments)
    connect to: the same settings, the same watch."""
    key = tuple(sorted((name, repr(value)) for name, value in client_kwargs.items()))
    with _watches_lock:
        watch = _watches.get(key)
        if watch is None:
            watch = _watches[key] = KafkaWatch(client_kwargs)
        return watch


def stop_watches() -> None:
    """Stop every watch of this process (:meth:`KafkaWatch.stop`)."""
    with _watches_lock:
        watches = list(_watches.values())
    for watch in watches:
        watch.stop()


def watch_topic(
    config: Mapping[str, Any], interval: float = DEFAULT_INTERVAL, blocking: bool = False
) -> Watcher:
    """Watch the topic and group of a Kafka queue ``config`` (checked as
    :class:`~sluice.kafka.queue.KafkaMessageQueue` checks it) through its cluster's watch."""
    from ..queues import queue_from_config  # the queues import this package

    values = queue_from_config("kafka", dict(config)).config
    hide_secret(credentials(values)[1])
    return kafka_watch(consumer_config(values)).watch(
        str(values["topic"]),
        str(values["group_id"]),
        bool(values["from_beginning"]),
        interval,
        blocking,
    )
