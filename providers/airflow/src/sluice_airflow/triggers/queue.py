"""QueueMessageTrigger: fires with a BatchSpec once enough messages wait on a Kafka or MQTT topic.

It serves a deferrable :class:`~sluice_airflow.sensors.queue.QueueMessageSensor` (one event)
and an ``AssetWatcher`` (an event per new batch, for as long as the watcher runs). Nothing is
committed or acknowledged: the ingest does that after writing the batch.

Kafka: every trigger of the process watches through the one :class:`~sluice.kafka.watch.KafkaWatch`
of its cluster (one thread and one set of clients however many triggers run; ends read in one
request for all topics, committed offsets only when the ends moved or a batch is in flight).
A trigger has no thread of its own: it awaits the watch. MQTT: the blocking client runs on a
thread the trigger owns (paho is not an asyncio library); the queue stays open between polls.

What it emits, and when, is the one sensing model of :mod:`sluice.sensing`: one batch in
flight, every new batch planned from the group's committed offsets. The trigger cannot see
Airflow's runs, so the broker tells it: Kafka, the last batch is done once the group's
committed offsets reached its ends; if they have not ``rerun_after`` seconds after the
emission, its run is taken as failed and the *same* batch (same ``batch_id``) is emitted
again. Its cursor (:class:`~sluice.cursor.BatchCursor`) is kept in the watched asset's state
store when it has one, so a triggerer restart neither forgets a batch in flight nor skips
one. MQTT: the trigger holds the persistent session until messages wait, then lets go of it
(so the ingest can drain it) and emits; from then on it watches the topic with a client of
its own and emits the session's next batch each time ``min_messages`` more have arrived, and
takes the session again ``rerun_after`` seconds after its last emission, to emit what a
failed run left in it.

While it waits it logs ``waiting: N of M messages on TOPIC`` (or the batch in flight) at the
start and when that line changes (looked at every :data:`STATUS_EVERY` seconds at least), and
an unchanged line again every :data:`STATUS_REPEAT` seconds: a fleet of idle watchers in one
triggerer would otherwise spend most of its CPU writing the same lines to its logs. A Kafka
topic that does not exist is a warning there (``waiting: Topic 'X' does not exist at ...``),
and it keeps watching for it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from sluice.batch import BatchSpec, plan_batch
from sluice.connection_fields import check_no_secrets
from sluice.cursor import BatchCursor, BatchRequest
from sluice.kafka.watch import DEFAULT_INTERVAL, Watcher, watch_topic
from sluice.queues import MessageQueue, queue_from_config
from sluice.sensing import (
    DEFAULT_RERUN_AFTER,
    next_emission,
    plan_waiting,
    sensing_config,
    waiting_status,
)

from ..hooks.queue import Kind, QueueHook, config_from_connection, queue_kind
from .kafka_requests import STATUS_EVERY, Sensing, kafka_requests
from .signals import sigterm_stops_inline_run

__all__ = ["STATUS_EVERY", "STATUS_REPEAT", "QueueMessageTrigger", "describe_batch"]

T = TypeVar("T")

#: Seconds before an unchanged "waiting" line is logged again.
STATUS_REPEAT = 600.0


def describe_batch(spec: BatchSpec) -> str:
    """What a batch holds, for a log line: Kafka counts, MQTT only knows a session and a limit."""
    if spec.kind == "kafka":
        return f"batch {spec.batch_id} on {spec.topic}: {spec.message_count} message(s)"
    limit = f"at most {spec.max_messages}" if spec.max_messages else "all"
    return f"batch {spec.batch_id} on {spec.topic}: session {spec.client_id}'s messages ({limit})"


class QueueMessageTrigger(BaseEventTrigger):
    """Yield ``TriggerEvent(BatchSpec.to_dict())`` when ``min_messages`` wait on ``topic``.

    :param conn_id: a ``sluice_kafka`` or ``sluice_mqtt`` connection.
    :param topic: the Kafka topic, or the MQTT topic filter.
    :param min_messages: how many messages must wait before an event.
    :param max_messages: the most messages one batch holds (None: all that wait).
    :param poll_interval: seconds between two checks of the broker while nothing is emitted
        (Kafka: the shared watch reads every watched topic's ends at least this often, and a
        new message is seen within it; a batch in flight has its commit looked for as often).
    :param config: config keys on top of the connection's (``group_id``, ``client_id`` ...);
        never credentials (this trigger is serialized to the database).
    :param rerun_after: seconds after emitting a batch until its run is taken as failed when
        its offsets are still not committed (Kafka: the same batch is emitted again; MQTT:
        the session is looked at again). The default, 600 s, is above what an ingest of one
        batch usually takes (Spark's start-up plus the read and write, a minute or two) with
        room for a queued DAG run, and short enough that a failed run's messages wait
        minutes, not hours. Set it above your longest ingest run: a batch still being ingested
        when its lease runs out is emitted a second time.
    """

    def __init__(
        self,
        conn_id: str,
        topic: str,
        min_messages: int = 1,
        max_messages: int | None = None,
        poll_interval: float = DEFAULT_INTERVAL,
        config: dict[str, Any] | None = None,
        rerun_after: float = DEFAULT_RERUN_AFTER,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        check_no_secrets(config, f"QueueMessageTrigger({topic})")
        if min_messages < 1:
            raise ValueError(f"min_messages must be at least 1, got {min_messages}.")
        if max_messages is not None and max_messages < min_messages:
            raise ValueError(
                f"max_messages ({max_messages}) must be at least min_messages ({min_messages})."
            )
        if rerun_after <= 0:
            raise ValueError(
                f"rerun_after must be a positive number of seconds, got {rerun_after}; "
                "make it longer than your longest ingest run (the default is "
                f"{DEFAULT_RERUN_AFTER:.0f})."
            )
        self.conn_id = conn_id
        self.topic = topic
        self.min_messages = min_messages
        self.max_messages = max_messages
        self.poll_interval = poll_interval
        self.config = dict(config or {})
        self.rerun_after = rerun_after
        self._pool: ThreadPoolExecutor | None = None
        self._queue: MessageQueue | None = None
        self._queue_config: dict[str, Any] | None = None
        self._watcher: Watcher | None = None
        self._cursor = BatchCursor()
        self._status_at: float | None = None  # when a "waiting" line was logged last
        self._status: str | None = None  # and which

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "topic": self.topic,
                "min_messages": self.min_messages,
                "max_messages": self.max_messages,
                "poll_interval": self.poll_interval,
                "config": dict(self.config),
                "rerun_after": self.rerun_after,
            },
        )

    # ---- the loop (event loop side) ------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        with sigterm_stops_inline_run():
            async for event in self._run():
                yield event

    async def _run(self) -> AsyncIterator[TriggerEvent]:
        conn = await QueueHook.aget_connection(self.conn_id)
        kind = queue_kind(conn)
        config = await asyncio.to_thread(self._settings, conn, kind)
        await self._load_cursor()
        decisions = (
            self._kafka_decisions(config) if kind == "kafka" else self._mqtt_decisions(config)
        )
        try:
            async for decision in decisions:
                await self._save_cursor()
                self._status_at = self._status = None
                again = " again" if decision.retry else ""
                self.log.info(
                    "Emitting%s (attempt %d): %s",
                    again,
                    decision.attempt,
                    describe_batch(decision.spec),
                )
                yield TriggerEvent(decision.spec.to_dict())  # type: ignore[no-untyped-call]
        finally:
            await decisions.aclose()  # type: ignore[attr-defined]
            await self._release()

    async def _kafka_decisions(self, config: dict[str, Any]) -> AsyncIterator[BatchRequest]:
        """The batches to emit, as the shared watch of the cluster shows the group's backlog."""
        self._watcher = watcher = watch_topic(config, self.poll_interval)
        sensing = Sensing(
            self.topic, self.poll_interval, self.rerun_after, self.min_messages, self.max_messages
        )
        requests = kafka_requests(watcher, sensing, lambda: self._cursor, self._log_status)
        try:
            async for cursor, request in requests:
                self._cursor = cursor
                yield request
        finally:
            await requests.aclose()  # type: ignore[attr-defined]

    async def _mqtt_decisions(self, config: dict[str, Any]) -> AsyncIterator[BatchRequest]:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"sluice-trigger-{self.conn_id}")
        while True:
            decision = await self._call(self._poll, config)
            if isinstance(decision, str):
                self._log_status(decision)
                await asyncio.sleep(self.poll_interval)
                continue
            yield decision

    async def cleanup(self) -> None:
        await self._release()

    async def _call(self, func: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            raise RuntimeError("QueueMessageTrigger: the client thread is not running.")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(func, *args))

    async def _release(self) -> None:
        """Stop watching; close the MQTT queue on its own thread, then stop the thread."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(pool, self._close_queue)
        except Exception:
            self.log.warning("Closing the queue on %s failed", self.topic, exc_info=True)
        finally:
            pool.shutdown(wait=True)

    def _log_status(self, status: str, level: int = logging.INFO) -> None:
        now = time.monotonic()
        repeat = self._status_at is not None and now - self._status_at >= STATUS_REPEAT
        if status != self._status or repeat:
            self._status_at, self._status = now, status
            self.log.log(level, "%s", status)

    # ---- the asset state store: the cursor survives a triggerer restart --------------------

    @property
    def _state_key(self) -> str:
        return f"sluice.cursor.{self.conn_id}.{self.topic}"

    async def _load_cursor(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            saved = await store.aget(self._state_key)
        except Exception:  # several watched assets, or no API: plan from the committed offsets
            self.log.warning("Cannot read the sensing cursor from the asset state store")
            return
        if isinstance(saved, str):
            try:
                self._cursor = BatchCursor.from_json(saved)
            except ValueError:
                self.log.warning(
                    "Ignoring the sensing cursor %s in the asset state store (not a Sluice "
                    "cursor): planning from the committed offsets",
                    self._state_key,
                )

    async def _save_cursor(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None or self._cursor.last is None:
            return
        try:
            await store.aset(self._state_key, self._cursor.to_json())
        except Exception:
            self.log.warning("Cannot save the sensing cursor to the asset state store")

    # ---- the client thread -----------------------------------------------------------------

    def _settings(self, conn: Any, kind: Kind) -> dict[str, Any]:
        return sensing_config(kind, config_from_connection(conn, self.topic, self.config))

    def _open(self, kind: Kind, config: dict[str, Any]) -> MessageQueue:
        if self._queue is not None and self._queue_config != config:
            self._close_queue()
        if self._queue is None:
            queue = queue_from_config(kind, config)
            queue.open(None)
            self._queue, self._queue_config = queue, config
        return self._queue

    def _close_queue(self) -> None:
        queue, self._queue, self._queue_config = self._queue, None, None
        if queue is not None:
            queue.close(None)

    def _emit(self, waiting: BatchSpec | None) -> BatchRequest | str:
        self._cursor, decision = next_emission(
            self._cursor,
            waiting,
            time.time(),
            self.rerun_after,
            self.min_messages,
            self.max_messages,
            self.topic,
        )
        return decision

    def _poll(self, config: dict[str, Any]) -> BatchRequest | str:
        """MQTT: what to emit now, or why nothing (see :mod:`sluice.sensing`)."""
        if self._holds_session():
            return self._poll_mqtt_session(config)
        return self._poll_mqtt_watch(config)

    def _holds_session(self) -> bool:
        """MQTT: hold the session before the first emission and once ``rerun_after`` passed
        since the last one; watch the topic in between (the ingest owns the session)."""
        emitted_at = self._cursor.emitted_at
        return emitted_at is None or time.time() - emitted_at >= self.rerun_after

    def _poll_mqtt_session(self, config: dict[str, Any]) -> BatchRequest | str:
        queue = self._open("mqtt", config)
        waiting = plan_waiting(queue, self.min_messages, self.max_messages)
        if waiting is None:
            return waiting_status(queue.read_message_count(), self.min_messages, self.topic)
        decision = self._emit(waiting)
        if isinstance(decision, BatchRequest):
            self._close_queue()  # unacknowledged: the broker keeps them for the ingest
        return decision

    def _poll_mqtt_watch(self, config: dict[str, Any]) -> BatchRequest | str:
        watcher = {
            **config,
            "client_id": f"{config['client_id']}.watch",
            "options.clean_session": True,
            "options.clean_start": True,
            "autocommit": True,
        }
        queue = self._open("mqtt", watcher)
        arrived = queue.read_message_count()
        if arrived < self.min_messages:
            return (
                waiting_status(arrived, self.min_messages, self.topic)
                + " (new since the last batch)"
            )
        queue.clear(None)
        # the session's next batch (a new plan: what the ingest finds in the session then)
        return self._emit(plan_batch(queue_from_config("mqtt", config), self.max_messages))
