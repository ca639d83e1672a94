"""Helpers for the MQTT tests: queues on the test's own topic that close themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing.plugin import Broker

QueueFactory = Callable[..., MqttMessageQueue]
WAIT_MS = 10_000


@pytest.fixture
def make_queue(unique_name: str) -> Iterator[Callable[..., MqttMessageQueue]]:
    """``make_queue(broker, **config)``: an opened queue on ``sluice/<test>`` (QoS 1)."""
    opened: list[MqttMessageQueue] = []

    def make(broker: Broker, **config: Any) -> MqttMessageQueue:
        queue = MqttMessageQueue(unique_name)
        queue.configure(
            {
                "connection.host": broker.host,
                "connection.port": broker.port,
                "topic": f"sluice/{unique_name}",
                "options.qos": 1,
                "options.connect_timeout": 5000,
                **config,
            }
        )
        queue.open(None)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        if queue.is_open():
            queue.close(None)


def receive_all(
    queue: MqttMessageQueue, count: int, complete: bool = True
) -> list[MessageEnvelope]:
    got: list[MessageEnvelope] = []
    for _ in range(count):
        message = queue.receive(None, WAIT_MS)
        assert message is not None, f"only {len(got)} of {count} messages arrived"
        got.append(message)
        if complete:
            queue.complete(message)
    return got
