"""Helpers for the Kafka tests: topics of the test's own and queues that close themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluice.brokers import BrokerProcess, start_tansu
from sluice.kafka import KafkaMessageQueue
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

QueueFactory = Callable[..., KafkaMessageQueue]


@pytest.fixture
def make_queue(kafka_broker: Broker, unique_name: str) -> Iterator[QueueFactory]:
    """``make_queue(partitions=3, **config)``: an opened queue on the test's topic."""
    opened: list[KafkaMessageQueue] = []
    created: set[str] = set()

    def make(partitions: int = 3, **config: Any) -> KafkaMessageQueue:
        settings: dict[str, Any] = {
            "connection.uri": kafka_broker.bootstrap,
            "topic": unique_name,
            "group_id": f"{unique_name}-group",
            "from_beginning": True,
            "autocommit": False,
            "options.session_timeout": 6000,
            **config,
        }
        if settings["topic"] not in created:
            create_kafka_topic(kafka_broker.bootstrap, settings["topic"], partitions)
            created.add(settings["topic"])
        queue = KafkaMessageQueue(settings["topic"])
        queue.configure(settings)
        queue.open(None)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close(None)


@pytest.fixture
def tansu_with_authentication() -> Iterator[BrokerProcess]:
    """A Tansu that requires SASL (and refuses every SCRAM login)."""
    broker = start_tansu()
    try:
        broker.stop()
        broker.argv.append("--authentication")
        broker.start()
        yield broker
    finally:
        broker.close()
