"""RoutedMessageTrigger: many assets on one routed Kafka topic, one poller in the triggerer.

A routed topic (:mod:`sluice.routes`: an ``events`` topic whose ``event_type`` names the
table of each message) has one Airflow asset per route, each watched by a
``RoutedMessageTrigger`` that names its ``route`` (a route value; None for the messages no
route takes). The triggers of one topic, group and routes in a triggerer share one poller
(:class:`_SharedRoutes`): it plans one batch at a time from the group's committed offsets, as
:class:`~sluice_airflow.triggers.queue.QueueMessageTrigger` does (the one sensing model of
:mod:`sluice.sensing`, the cluster's shared :class:`~sluice.kafka.watch.KafkaWatch`), reads
that batch's messages once and routes them (:func:`sluice.route_index.batch_places`), and
hands the batch to the triggers of the routes that have messages in it. Each of those emits
an asset event carrying the batch (its ``BatchSpec``); a trigger whose route has nothing in
the batch stays silent. Nothing is committed or acknowledged at sensing.

One ingest per batch writes every route: a DAG scheduled on any of the route assets (an
asset expression ``a | b | ...``) runs :class:`~sluice_airflow.operators.spark.SparkIngestOperator`
with the routes, which takes the batch from the run's triggering events (several events of
one batch are one batch: one read of the topic, every table's slice, then the commit). The
next batch is planned once the group's offsets are committed past it; a batch still not
committed ``rerun_after`` seconds after it was emitted is emitted again, to the same routes,
unchanged (same ``batch_id``). A trigger that starts while a batch is in flight gets it too
when its route is in it, so a triggerer that starts its triggers one by one loses none.

The poller's cursor is kept in the watched assets' state stores (each subscriber's), so a
triggerer restart neither forgets a batch in flight nor skips one. MQTT topics are not routed
at sensing (the messages wait in the ingest's session): watch them with a
``QueueMessageTrigger`` and route in the ingest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from sluice.batch import BatchSpec
from sluice.connection_fields import check_no_secrets
from sluice.cursor import BatchCursor, BatchRequest
from sluice.kafka.watch import DEFAULT_INTERVAL, watch_topic
from sluice.route_index import HOME, batch_places, places_reader
from sluice.routes import Routes
from sluice.sensing import DEFAULT_RERUN_AFTER, sensing_config

from ..hooks.queue import QueueHook, config_from_connection, queue_kind
from .kafka_requests import Sensing, kafka_requests
from .queue import describe_batch
from .signals import sigterm_stops_inline_run

if TYPE_CHECKING:
    from sluice.kafka.ranges import RangeReader

__all__ = ["RoutedMessageTrigger", "shared_pollers"]

log = logging.getLogger(__name__)

_Key = tuple[str, str, str, str, int, int | None, float, float]


@dataclass(frozen=True)
class _Emission:
    """A batch handed to the routes that have messages in it (``places``: table -> count)."""

    request: BatchRequest
    places: dict[str, int]


@dataclass
class _Subscriber:
    place: str
    queue: asyncio.Queue[_Emission | BaseException]
    store: Any = None  # the watched asset's state store, if the triggerer gave one


@dataclass
class _SharedRoutes:
    """The one poller of a (connection, topic, group, routes) in this process (see the module
    docstring). Its loop runs while it has subscribers."""

    key: _Key
    topic: str
    config: dict[str, Any]
    routes: Routes
    min_messages: int
    max_messages: int | None
    poll_interval: float
    rerun_after: float
    subscribers: list[_Subscriber] = field(default_factory=list)
    cursor: BatchCursor = field(default_factory=BatchCursor)
    last: _Emission | None = None
    reads: int = 0  # batches read and routed (one per emission)
    task: asyncio.Task[None] | None = None
    _reader: RangeReader | None = None  # kept for routing batch after batch
    _loaded: bool = False
    _status: str | None = None

    @property
    def _state_key(self) -> str:
        return f"sluice.routed_cursor.{self.key[0]}.{self.topic}"

    async def subscribe(self, place: str, store: Any) -> asyncio.Queue[_Emission | BaseException]:
        subscriber = _Subscriber(place, asyncio.Queue(), store)
        self.subscribers.append(subscriber)
        if not self._loaded:
            await self._load_cursor(store)
        if self.last is not None and place in self.last.places and self._in_flight():
            subscriber.queue.put_nowait(self.last)  # a latecomer gets the batch in flight
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        return subscriber.queue

    async def unsubscribe(self, queue: asyncio.Queue[_Emission | BaseException]) -> None:
        self.subscribers = [s for s in self.subscribers if s.queue is not queue]
        if self.subscribers:
            return
        _SHARED.pop(self.key, None)
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _in_flight(self) -> bool:
        """Whether the last batch is not yet committed (its lease may have run out)."""
        if self.cursor.last is None or self.cursor.emitted_at is None:
            return False
        return time.time() - self.cursor.emitted_at < self.rerun_after

    async def _load_cursor(self, store: Any) -> None:
        if store is None:
            return
        self._loaded = True
        try:
            saved = await store.aget(self._state_key)
            if isinstance(saved, str):
                self.cursor = BatchCursor.from_json(saved)
        except Exception:  # no API, or not a cursor: plan from the committed offsets
            log.warning(
                "Cannot read the routed sensing cursor %s; planning from the committed offsets",
                self._state_key,
            )

    async def _save_cursor(self) -> None:
        for subscriber in self.subscribers:
            if subscriber.store is None:
                continue
            try:
                await subscriber.store.aset(self._state_key, self.cursor.to_json())
            except Exception:
                log.warning("Cannot save the routed sensing cursor %s", self._state_key)

    def _say(self, status: str, level: int = logging.INFO) -> None:
        if status != self._status:
            self._status = status
            log.log(level, "%s", status)

    async def _run(self) -> None:
        try:
            await self._poll()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # every trigger of the topic fails with the reason
            for subscriber in self.subscribers:
                subscriber.queue.put_nowait(exc)

    async def _poll(self) -> None:
        watcher = watch_topic(self.config, self.poll_interval)
        sensing = Sensing(
            self.topic, self.poll_interval, self.rerun_after, self.min_messages, self.max_messages
        )
        requests = kafka_requests(watcher, sensing, lambda: self.cursor, self._say)
        try:
            async for cursor, request in requests:
                places = await self._places(request.spec)
                if places is None:  # the broker did not answer: ask again soon
                    await asyncio.sleep(self.poll_interval)
                    continue
                self.cursor, self.last = cursor, _Emission(request, places)
                await self._save_cursor()
                self._deliver(self.last)
        finally:
            await requests.aclose()  # type: ignore[attr-defined]
            watcher.close()
            if self._reader is not None:
                self._reader.close()  # a read still running closes it when it ends
                self._reader = None

    async def _places(self, spec: BatchSpec) -> dict[str, int] | None:
        if self._reader is None:
            self._reader = places_reader(self.config, self.topic)
        try:
            places = await asyncio.to_thread(
                batch_places, self.config, spec, self.routes, reader=self._reader
            )
        except (ConnectionError, TimeoutError, OSError) as exc:
            self._say(f"waiting: reading batch {spec.batch_id} to route it failed: {exc}")
            return None
        self.reads += 1
        return places

    def _deliver(self, emission: _Emission) -> None:
        routes = ", ".join(f"{place} ({n})" for place, n in sorted(emission.places.items()))
        self._status = None
        log.info("%s goes to %s", describe_batch(emission.request.spec), routes)
        for subscriber in self.subscribers:
            if subscriber.place in emission.places:
                subscriber.queue.put_nowait(emission)


_SHARED: dict[_Key, _SharedRoutes] = {}


def shared_pollers() -> list[_SharedRoutes]:
    """The routed pollers running in this process (one per connection, topic, group and
    routes), for a look at how many there are and what they read."""
    return list(_SHARED.values())


class RoutedMessageTrigger(BaseEventTrigger):
    """Yield ``TriggerEvent(BatchSpec.to_dict())`` when a batch holds messages of ``route``.

    :param conn_id: a ``sluice_kafka`` connection.
    :param topic: the Kafka topic.
    :param routes: the routes (:class:`~sluice.routes.Routes`' dict or JSON); the ingest must
        be given the same ones.
    :param route: the route value this asset stands for (its table is the one the routes
        give it); None: the messages no route takes (the ingest's own sink).
    :param min_messages: how many messages (of every route) must wait before a batch.
    :param max_messages: the most messages one batch holds (None: all that wait).
    :param poll_interval: seconds between two checks of the broker (see
        :class:`~sluice_airflow.triggers.queue.QueueMessageTrigger`).
    :param config: config keys on top of the connection's (``group_id`` ...); never
        credentials (this trigger is serialized to the database).
    :param rerun_after: seconds after emitting a batch until its run is taken as failed when
        its offsets are still not committed: it is emitted again, to the same routes.
    """

    def __init__(
        self,
        conn_id: str,
        topic: str,
        routes: dict[str, Any] | str,
        route: str | None = None,
        min_messages: int = 1,
        max_messages: int | None = None,
        poll_interval: float = DEFAULT_INTERVAL,
        config: dict[str, Any] | None = None,
        rerun_after: float = DEFAULT_RERUN_AFTER,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        check_no_secrets(config, f"RoutedMessageTrigger({topic}, {route})")
        parsed = Routes.parse(routes)
        if min_messages < 1:
            raise ValueError(f"min_messages must be at least 1, got {min_messages}.")
        if max_messages is not None and max_messages < min_messages:
            raise ValueError(
                f"max_messages ({max_messages}) must be at least min_messages ({min_messages})."
            )
        if rerun_after <= 0:
            raise ValueError(
                f"rerun_after must be a positive number of seconds, not {rerun_after}."
            )
        self.conn_id = conn_id
        self.topic = topic
        self.routes = parsed.to_dict()
        self.route = route
        self.place = HOME if route is None else parsed.table_for(route)
        self.min_messages = min_messages
        self.max_messages = max_messages
        self.poll_interval = poll_interval
        self.config = dict(config or {})
        self.rerun_after = rerun_after

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "topic": self.topic,
                "routes": dict(self.routes),
                "route": self.route,
                "min_messages": self.min_messages,
                "max_messages": self.max_messages,
                "poll_interval": self.poll_interval,
                "config": dict(self.config),
                "rerun_after": self.rerun_after,
            },
        )

    @property
    def _key(self) -> _Key:
        return (
            self.conn_id,
            self.topic,
            json.dumps(self.config, sort_keys=True, default=str),
            Routes.parse(self.routes).digest,
            self.min_messages,
            self.max_messages,
            self.poll_interval,
            self.rerun_after,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        with sigterm_stops_inline_run():
            async for event in self._run():
                yield event

    async def _run(self) -> AsyncIterator[TriggerEvent]:
        conn = await QueueHook.aget_connection(self.conn_id)
        if queue_kind(conn) != "kafka":
            raise ValueError(
                f"RoutedMessageTrigger({self.topic}): connection '{self.conn_id}' is not a Kafka "
                "one; an MQTT topic is watched by a QueueMessageTrigger and routed by the ingest."
            )
        shared = _SHARED.get(self._key)
        if shared is None:
            values = await asyncio.to_thread(config_from_connection, conn, self.topic, self.config)
            config = sensing_config("kafka", values)
            shared = _SHARED.setdefault(
                self._key,
                _SharedRoutes(
                    self._key,
                    self.topic,
                    config,
                    Routes.parse(self.routes),
                    self.min_messages,
                    self.max_messages,
                    self.poll_interval,
                    self.rerun_after,
                ),
            )
        queue = await shared.subscribe(self.place, getattr(self, "asset_state_store", None))
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                request = item.request
                self.log.info(
                    "Emitting%s (attempt %d) for route %s: %s, %d of its message(s)",
                    " again" if request.retry else "",
                    request.attempt,
                    self.route if self.route is not None else "(none: no route)",
                    describe_batch(request.spec),
                    item.places[self.place],
                )
                yield TriggerEvent(request.spec.to_dict())  # type: ignore[no-untyped-call]
        finally:
            await shared.unsubscribe(queue)
