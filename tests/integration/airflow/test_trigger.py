"""QueueMessageTrigger against real brokers: the event is the waiting batch, a range is never
emitted twice, the client lives on the trigger's own thread and is closed at the end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from sluice.batch import BatchSpec
from sluice.mqtt import MqttMessageQueue
from sluice.testing.brokers import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.triggers.queue import QueueMessageTrigger
from tests.integration.airflow.conftest import SetConnection

TIMEOUT = 30


def publish(conn_id: str, topic: str, values: list[Any]) -> None:
    task = QueuePublishOperator(task_id="publish", conn_id=conn_id, topic=topic, messages=values)
    assert task.execute({}) == len(values)  # type: ignore[arg-type]


async def until(condition: Any, what: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.05)


def trigger_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sluice-trigger-")]


def test_kafka_trigger_emits_the_waiting_batch_and_never_a_range_twice(
    noida_broker: BrokerProcess, set_connection: SetConnection, unique_name: str
) -> None:
    conn_id = set_connection("kafka_trigger", "sluice_kafka", noida_broker.host, noida_broker.port)
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    publish(conn_id, unique_name, [{"n": i} for i in range(5)])
    trigger = QueueMessageTrigger(
        conn_id, unique_name, poll_interval=0.1, config={"group_id": f"{unique_name}-g"}
    )

    async def scenario() -> tuple[TriggerEvent, TriggerEvent, list[str], bool]:
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            first = await asyncio.wait_for(anext(events), TIMEOUT)
            queue = trigger._queue
            threads = trigger_threads()
            # The ingest has not committed anything: the same 5 messages still wait. Only
            # the 3 new ones may come next.
            publish(conn_id, unique_name, [{"n": i} for i in range(5, 8)])
            second = await asyncio.wait_for(anext(events), TIMEOUT)
            return first, second, threads, trigger._queue is queue
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    first, second, threads, same_queue = asyncio.run(scenario())
    one, two = BatchSpec.from_dict(first.payload), BatchSpec.from_dict(second.payload)
    assert (one.kind, one.topic, one.group_id) == ("kafka", unique_name, f"{unique_name}-g")
    assert one.message_count == 5
    assert all(r.start == 0 for r in one.ranges)
    assert two.message_count == 3
    ends = {r.partition: r.end for r in one.ranges}
    assert all(r.start == ends.get(r.partition, 0) for r in two.ranges)
    assert threads == [threads[0]] and threads[0].startswith("sluice-trigger-kafka_trigger")
    assert same_queue, "the queue was opened again between polls"
    assert trigger._queue is None and trigger._pool is None
    assert trigger_threads() == []


def test_mqtt_trigger_hands_the_session_over_then_watches(
    mosquitto_broker: BrokerProcess, set_connection: SetConnection, unique_name: str
) -> None:
    conn_id = set_connection(
        "mqtt_trigger", "sluice_mqtt", mosquitto_broker.host, mosquitto_broker.port
    )
    topic, session = f"sluice/{unique_name}", f"{unique_name}-session"
    trigger = QueueMessageTrigger(
        conn_id, topic, min_messages=3, poll_interval=0.1, config={"client_id": session}
    )

    def connected() -> bool:
        return trigger._queue is not None and trigger._queue.is_open()

    async def scenario() -> tuple[TriggerEvent, TriggerEvent]:
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            waiting = asyncio.ensure_future(anext(events))
            await until(connected, "the trigger holds the session")
            publish(conn_id, topic, [{"n": i} for i in range(3)])
            first = await asyncio.wait_for(waiting, TIMEOUT)
            assert trigger._queue is None  # the session is free for the ingest
            waiting = asyncio.ensure_future(anext(events))
            await until(connected, "the trigger watches the topic")
            publish(conn_id, topic, [{"n": i} for i in range(3, 6)])
            second = await asyncio.wait_for(waiting, TIMEOUT)
            return first, second
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    first, second = asyncio.run(scenario())
    spec = BatchSpec.from_dict(first.payload)
    assert (spec.kind, spec.topic, spec.client_id) == ("mqtt", topic, session)
    assert second.payload == first.payload
    # Nothing was acknowledged: the session's next owner (the ingest) gets all six.
    queue = MqttMessageQueue()
    queue.configure(
        {
            "connection.host": mosquitto_broker.host,
            "connection.port": mosquitto_broker.port,
            "topic": topic,
            "client_id": session,
            "options.qos": 1,
            "autocommit": False,
        }
    )
    queue.open(None)
    try:
        got = []
        for _ in range(6):
            message = queue.receive(None, 10_000)
            assert message is not None, f"only {len(got)} of 6 messages were kept for the session"
            got.append(message.get_message_as_string())
            queue.complete(message)
    finally:
        queue.close(None)
    assert sorted(got) == sorted(f'{{"n": {i}}}' for i in range(6))
    assert trigger_threads() == []


class MemoryStateStore:
    """Stands in for the asset state store the triggerer gives a watcher's trigger (a triggerer
    restart cannot be produced on demand here)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_a_restarted_watcher_does_not_emit_what_it_emitted_before(
    noida_broker: BrokerProcess, set_connection: SetConnection, unique_name: str
) -> None:
    conn_id = set_connection("kafka_watcher", "sluice_kafka", noida_broker.host, noida_broker.port)
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    publish(conn_id, unique_name, [{"n": i} for i in range(4)])
    store = MemoryStateStore()
    settings = {"poll_interval": 0.1, "config": {"group_id": f"{unique_name}-g"}}

    async def first_event() -> BatchSpec:
        trigger = QueueMessageTrigger(conn_id, unique_name, **settings)  # type: ignore[arg-type]
        trigger.asset_state_store = store  # type: ignore[assignment]
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            return BatchSpec.from_dict((await asyncio.wait_for(anext(events), TIMEOUT)).payload)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    before = asyncio.run(first_event())
    assert [(r.start, r.end) for r in before.ranges] == [(0, 4)]
    publish(conn_id, unique_name, [{"n": i} for i in range(4, 6)])
    after = asyncio.run(first_event())  # a new instance, as after a triggerer restart
    assert [(r.start, r.end) for r in after.ranges] == [(4, 6)]
