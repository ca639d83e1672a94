"""QueueMessageTrigger against real brokers: the event is the waiting batch, one batch is in
flight at a time, a failed run's batch is emitted again (never skipped). A Kafka trigger has
no thread of its own (it awaits the cluster's shared watch, which stops with its last
watcher); an MQTT trigger's client lives on the trigger's own thread, closed at the end."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from sluice.batch import BatchSpec
from sluice.brokers import BrokerProcess
from sluice.kafka.watch import stop_watches
from sluice.mqtt import MqttMessageQueue
from sluice.spark.kafka_source import commit_offsets
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.triggers.queue import QueueMessageTrigger
from tests.integration.airflow.conftest import SetConnection

TIMEOUT = 30


def publish(conn_id: str, topic: str, values: list[Any]) -> None:
    task = QueuePublishOperator(task_id="publish", conn_id=conn_id, topic=topic, messages=values)
    assert task.execute({}) == len(values)  # type: ignore[arg-type]


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


async def until(condition: Any, what: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.05)


def trigger_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sluice-trigger-")]


def watch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "sluice-kafka-watch"]


def ranges(event: TriggerEvent) -> list[tuple[int, int, int]]:
    return [(r.partition, r.start, r.end) for r in BatchSpec.from_dict(event.payload).ranges]


def test_kafka_trigger_emits_the_waiting_batch_then_nothing_until_it_is_committed(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str
) -> None:
    conn_id = kafka_conn
    stop_watches()  # other tests' sensors keep their watches; this one counts threads
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    group = f"{unique_name}-g"
    publish(conn_id, unique_name, [{"n": i} for i in range(5)])
    trigger = QueueMessageTrigger(
        conn_id, unique_name, poll_interval=0.1, config={"group_id": group}, rerun_after=120
    )

    async def scenario() -> tuple[TriggerEvent, TriggerEvent, list[str]]:
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            first = await asyncio.wait_for(anext(events), TIMEOUT)
            threads = trigger_threads() + watch_threads()
            # Not committed yet: the batch is in flight, the 3 new messages wait for the next
            # one. Once the ingest commits, the next batch starts at the committed offsets,
            # long before the lease of 120 s runs out.
            publish(conn_id, unique_name, [{"n": i} for i in range(5, 8)])
            waiting = asyncio.ensure_future(anext(events))
            await until(lambda: trigger._status_at is not None, "the trigger says it waits")
            assert not waiting.done()
            ends = {p: end for p, _, end in ranges(first)}
            commit_offsets({"bootstrap_servers": noida_broker.bootstrap}, unique_name, group, ends)
            second = await asyncio.wait_for(waiting, TIMEOUT)
            return first, second, threads
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    first, second, threads = asyncio.run(scenario())
    one, two = BatchSpec.from_dict(first.payload), BatchSpec.from_dict(second.payload)
    assert (one.kind, one.topic, one.group_id) == ("kafka", unique_name, group)
    assert one.message_count == 5
    assert all(r.start == 0 for r in one.ranges)
    assert two.message_count == 3
    ends = {r.partition: r.end for r in one.ranges}
    assert all(r.start == ends.get(r.partition, 0) for r in two.ranges)
    assert threads == ["sluice-kafka-watch"], "a Kafka trigger needs no thread of its own"
    assert trigger._watcher is None and trigger._pool is None
    wait_until(lambda: not watch_threads(), "the watch stops with its last watcher")
    assert trigger_threads() == []


def test_a_failed_batch_is_emitted_again_and_nothing_is_skipped(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str
) -> None:
    """Issue 10, "Messages lost": the watcher emits [0,4), its run fails (nothing committed),
    new messages arrive. The watcher must not emit [4,7): once the lease ran out it emits
    [0,4) again (same batch_id), and after the commit the next batch starts at 4."""
    conn_id = kafka_conn
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    group, lease = f"{unique_name}-g", 1.5
    publish(conn_id, unique_name, [{"n": i} for i in range(4)])
    store = MemoryStateStore()
    trigger = QueueMessageTrigger(
        conn_id, unique_name, poll_interval=0.1, config={"group_id": group}, rerun_after=lease
    )
    trigger.asset_state_store = store  # type: ignore[assignment]

    async def scenario() -> tuple[list[TriggerEvent], list[float], int]:
        events: AsyncIterator[TriggerEvent] = trigger.run()
        got, times = [], []
        try:
            got.append(await asyncio.wait_for(anext(events), TIMEOUT))
            times.append(time.monotonic())
            publish(conn_id, unique_name, [{"n": i} for i in range(4, 7)])  # the run "failed"
            got.append(await asyncio.wait_for(anext(events), TIMEOUT))
            times.append(time.monotonic())
            attempt = trigger._cursor.attempt
            commit_offsets(
                {"bootstrap_servers": noida_broker.bootstrap}, unique_name, group, {0: 4}
            )
            got.append(await asyncio.wait_for(anext(events), TIMEOUT))
            return got, times, attempt
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    (first, again, following), (emitted, re_emitted), attempt = asyncio.run(scenario())
    assert ranges(first) == [(0, 0, 4)]
    assert again.payload == first.payload, "a failed run's batch was not emitted again"
    assert re_emitted - emitted >= lease * 0.9, "emitted again before its lease ran out"
    assert attempt == 1
    assert ranges(following) == [(0, 4, 7)]
    saved = json.loads(store.values[f"sluice.cursor.{conn_id}.{unique_name}"])
    assert saved["last"]["batch_id"] == BatchSpec.from_dict(following.payload).batch_id
    assert saved["attempt"] == 0


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
    # the session's next batch: each MQTT plan is a batch of its own
    following = BatchSpec.from_dict(second.payload)
    assert (following.kind, following.topic, following.client_id) == ("mqtt", topic, session)
    assert following.batch_id != spec.batch_id
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


def test_mqtt_trigger_looks_at_the_session_again_after_rerun_after(
    mosquitto_broker: BrokerProcess, set_connection: SetConnection, unique_name: str
) -> None:
    """A failed run leaves its messages in the session; with no new message arriving, the
    trigger finds them there once its lease ran out, and emits the session's next batch."""
    conn_id = set_connection(
        "mqtt_lease", "sluice_mqtt", mosquitto_broker.host, mosquitto_broker.port
    )
    topic, session = f"sluice/{unique_name}", f"{unique_name}-session"
    trigger = QueueMessageTrigger(
        conn_id, topic, poll_interval=0.1, config={"client_id": session}, rerun_after=1.0
    )

    def holds_session() -> bool:
        queue = trigger._queue
        return (
            queue is not None
            and queue.is_open()
            and trigger._queue_config is not None
            and (trigger._queue_config["client_id"] == session)
        )

    async def scenario() -> tuple[TriggerEvent, TriggerEvent, float]:
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            waiting = asyncio.ensure_future(anext(events))
            await until(holds_session, "the trigger holds the session")
            publish(conn_id, topic, [{"n": i} for i in range(2)])
            first = await asyncio.wait_for(waiting, TIMEOUT)
            emitted = time.monotonic()
            second = await asyncio.wait_for(anext(events), TIMEOUT)  # nobody drained it
            return first, second, time.monotonic() - emitted
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    first, second, elapsed = asyncio.run(scenario())
    assert elapsed >= 0.9, "the session was taken again before rerun_after"
    one, two = BatchSpec.from_dict(first.payload), BatchSpec.from_dict(second.payload)
    assert (two.kind, two.client_id) == ("mqtt", session) and two.batch_id != one.batch_id


class MemoryStateStore:
    """Stands in for the asset state store the triggerer gives a watcher's trigger (a triggerer
    restart cannot be produced on demand here)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_a_restarted_watcher_remembers_its_batch_in_flight(
    noida_broker: BrokerProcess, kafka_conn: str, unique_name: str
) -> None:
    conn_id = kafka_conn
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    group = f"{unique_name}-g"
    publish(conn_id, unique_name, [{"n": i} for i in range(4)])
    store = MemoryStateStore()

    async def first_event() -> tuple[BatchSpec, int]:
        trigger = QueueMessageTrigger(
            conn_id, unique_name, poll_interval=0.1, config={"group_id": group}, rerun_after=1.0
        )
        trigger.asset_state_store = store  # type: ignore[assignment]
        events: AsyncIterator[TriggerEvent] = trigger.run()
        try:
            event = await asyncio.wait_for(anext(events), TIMEOUT)
            return BatchSpec.from_dict(event.payload), trigger._cursor.attempt
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    before, _ = asyncio.run(first_event())
    assert [(r.start, r.end) for r in before.ranges] == [(0, 4)]
    publish(conn_id, unique_name, [{"n": i} for i in range(4, 6)])
    # A new instance, as after a triggerer restart: nothing was committed, so its run failed;
    # a fresh cursor would emit [0,6), a batch of another id writing 0..3 a second time.
    again, attempt = asyncio.run(first_event())
    assert (again, attempt) == (before, 1)
    commit_offsets({"bootstrap_servers": noida_broker.bootstrap}, unique_name, group, {0: 4})
    after, attempt = asyncio.run(first_event())
    assert ([(r.start, r.end) for r in after.ranges], attempt) == ([(4, 6)], 0)
