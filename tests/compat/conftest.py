"""The pip-services compatibility suite: Sluice driven only through pip-services' classes.

Every test builds its queues the way pip-services code does (``ConfigParams``, ``References``,
pip-services' ``MessageEnvelope``, the factories of :mod:`sluice.pipservices`, a container),
on real brokers. Only the import lines differ from code written for pip-services3-kafka/-mqtt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pip_services3_commons.config import ConfigParams
from pip_services3_commons.refer import Descriptor
from pip_services3_messaging.queues import IMessageQueue

from sluice.pipservices import DefaultSluiceFactory
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

WAIT_MS = 10_000
TRANSPORTS = ["memory", "kafka", "mqtt"]


@dataclass(frozen=True)
class Transport:
    """How pip-services code would configure a queue of one transport."""

    kind: str  # the descriptor's type: memory, kafka or mqtt
    topic: str
    settings: tuple[Any, ...]  # ConfigParams.from_tuples(...) arguments

    def config(self, *extra: Any) -> ConfigParams:
        return ConfigParams.from_tuples(*self.settings, *extra)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, unique_name: str) -> Transport:
    kind: str = request.param
    if kind == "memory":
        return Transport(kind, unique_name, ())
    if kind == "kafka":
        broker: Broker = request.getfixturevalue("noida_broker")
        create_kafka_topic(broker.bootstrap, unique_name, 1)
        return Transport(
            kind,
            unique_name,
            (
                "topic", unique_name,
                "connection.protocol", "tcp",
                "connection.host", broker.host,
                "connection.port", broker.port,
                "options.autosubscribe", True,
            ),
        )  # fmt: skip
    broker = request.getfixturevalue("mosquitto_broker")
    topic = f"sluice/{unique_name}"
    return Transport(
        kind,
        topic,
        (
            "topic", topic,
            "connection.protocol", "mqtt",
            "connection.host", broker.host,
            "connection.port", broker.port,
            "options.qos", 1,
        ),
    )  # fmt: skip


@pytest.fixture
def open_queue(transport: Transport) -> Iterator[Callable[..., IMessageQueue]]:
    """``open_queue(*extra_config)``: a queue made by the factory from its descriptor, then
    configured and opened as pip-services code does; closed at the end of the test."""
    opened: list[IMessageQueue] = []
    factory = DefaultSluiceFactory()

    def make(*extra: Any) -> IMessageQueue:
        descriptor = Descriptor("pip-services", "message-queue", transport.kind, "compat", "1.0")
        queue: IMessageQueue = factory.create(descriptor)
        queue.configure(transport.config(*extra))
        queue.open(None)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close(None)


#: pip-services3-kafka's own suite: run by test_pipservices_suite.py in a pytest of its own.
collect_ignore = ["pip_services3_kafka_3_1_11"]
