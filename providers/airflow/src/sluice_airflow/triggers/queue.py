"""QueueMessageTrigger: fires with a BatchSpec once enough messages wait on a Kafka or MQTT topic.

It serves a deferrable :class:`~sluice_airflow.sensors.queue.QueueMessageSensor` (one event)
and an ``AssetWatcher`` (an event per new batch, for as long as the watcher runs). Nothing is
committed or acknowledged: the ingest does that after writing the batch.

The blocking client runs on a thread the trigger owns (kafka-python and paho are not asyncio
libraries, and a kafka-python client must stay on one thread); the queue stays open between
polls. Kafka: one instance never emits the same offsets twice (it remembers where the ranges
it emitted ended, per partition, and keeps that in the watched asset's state store when it has
one, so a triggerer restart does not emit them again either). MQTT: the trigger holds the
persistent session until messages wait, then lets go of it (so the ingest can drain it) and
emits; from then on it watches the topic with a client of its own and emits again each time
``min_messages`` more have arrived.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from sluice.batch import BatchSpec, plan_batch
from sluice.connection_fields import check_no_secrets
from sluice.queues import MessageQueue, queue_from_config
from sluice.sensing import EmittedRanges, sensing_config

from ..hooks.queue import Kind, QueueHook, config_from_connection, queue_kind

__all__ = ["QueueMessageTrigger", "describe_batch"]

T = TypeVar("T")


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
    :param poll_interval: seconds between checks while too few messages wait.
    :param config: config keys on top of the connection's (``group_id``, ``client_id`` ...);
        never credentials (this trigger is serialized to the database).
    """

    def __init__(
        self,
        conn_id: str,
        topic: str,
        min_messages: int = 1,
        max_messages: int | None = None,
        poll_interval: float = 1.0,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        check_no_secrets(config, f"QueueMessageTrigger({topic})")
        if min_messages < 1:
            raise ValueError(f"min_messages must be at least 1, got {min_messages}.")
        if max_messages is not None and max_messages < min_messages:
            raise ValueError(
                f"max_messages ({max_messages}) must be at least min_messages ({min_messages})."
            )
        self.conn_id = conn_id
        self.topic = topic
        self.min_messages = min_messages
        self.max_messages = max_messages
        self.poll_interval = poll_interval
        self.config = dict(config or {})
        self._pool: ThreadPoolExecutor | None = None
        self._queue: MessageQueue | None = None
        self._emitted = EmittedRanges()
        self._mqtt_spec: BatchSpec | None = None  # set once the MQTT session was handed over

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
            },
        )

    # ---- the loop (event loop side) ------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        conn = await QueueHook.aget_connection(self.conn_id)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"sluice-trigger-{self.conn_id}")
        try:
            kind = queue_kind(conn)
            config = await self._call(self._settings, conn, kind)
            await self._load_emitted()
            while True:
                spec = await self._call(self._poll, kind, config)
                if spec is None:
                    await asyncio.sleep(self.poll_interval)
                    continue
                self._emitted.record(spec)
                await self._save_emitted()
                self.log.info("Waiting: %s", describe_batch(spec))
                yield TriggerEvent(spec.to_dict())  # type: ignore[no-untyped-call]
        finally:
            await self._release()

    async def cleanup(self) -> None:
        await self._release()

    async def _call(self, func: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            raise RuntimeError("QueueMessageTrigger: the client thread is not running.")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(func, *args))

    async def _release(self) -> None:
        """Close the queue on its own thread, then stop the thread."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(pool, self._close_queue)
        except Exception:
            self.log.warning("Closing the queue on %s failed", self.topic, exc_info=True)
        finally:
            pool.shutdown(wait=True)

    # ---- the asset state store: emitted Kafka ranges survive a triggerer restart -------------

    @property
    def _state_key(self) -> str:
        return f"sluice.emitted.{self.conn_id}.{self.topic}"

    async def _load_emitted(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            saved = await store.aget(self._state_key)
        except Exception:  # several watched assets, or no API: start afresh
            self.log.warning("Cannot read the emitted ranges from the asset state store")
            return
        if isinstance(saved, str):
            self._emitted = EmittedRanges.from_json(saved)

    async def _save_emitted(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None or not self._emitted.ends:
            return
        try:
            await store.aset(self._state_key, self._emitted.to_json())
        except Exception:
            self.log.warning("Cannot save the emitted ranges to the asset state store")

    # ---- the client thread -----------------------------------------------------------------

    def _settings(self, conn: Any, kind: Kind) -> dict[str, Any]:
        return sensing_config(kind, config_from_connection(conn, self.topic, self.config))

    def _open(self, kind: Kind, config: dict[str, Any]) -> MessageQueue:
        if self._queue is None:
            queue = queue_from_config(kind, config)
            queue.open(None)
            self._queue = queue
        return self._queue

    def _close_queue(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None:
            queue.close(None)

    def _poll(self, kind: Kind, config: dict[str, Any]) -> BatchSpec | None:
        if kind == "kafka":
            waiting = plan_batch(self._open(kind, config))
            return self._emitted.fresh(waiting, self.min_messages, self.max_messages)
        if self._mqtt_spec is None:
            return self._poll_mqtt_session(config)
        return self._poll_mqtt_watch(config)

    def _poll_mqtt_session(self, config: dict[str, Any]) -> BatchSpec | None:
        queue = self._open("mqtt", config)
        if queue.read_message_count() < self.min_messages:
            return None
        spec = plan_batch(queue, self.max_messages)
        self._close_queue()  # unacknowledged: the broker keeps them for the session's next owner
        self._mqtt_spec = spec
        return spec

    def _poll_mqtt_watch(self, config: dict[str, Any]) -> BatchSpec | None:
        watcher = {
            **config,
            "client_id": f"{config['client_id']}.watch",
            "options.clean_session": True,
            "options.clean_start": True,
            "autocommit": True,
        }
        queue = self._open("mqtt", watcher)
        if queue.read_message_count() < self.min_messages:
            return None
        queue.clear(None)
        return self._mqtt_spec
