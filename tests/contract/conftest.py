"""One contract every transport must pass: the same tests for memory, Kafka (each broker) and MQTT.

``queue_kit`` builds queues of one transport on a topic of the test's own; calling
``kit.open_queue()`` again gives a new consumer of the same topic and group/session, which
is how the suite restarts a consumer. ``kit.open_dead_letter_queue()`` reads the topic that
``move_to_dead_letter`` writes to: memory and Kafka ``<topic>.dlq`` (their default), MQTT the
dead-letter topic the kit configures.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from sluice.queues import MessageQueue, queue_from_uri
from sluice.testing.plugin import (
    KAFKA_ENV,
    KAFKA_FIXTURES,
    MQTT_ENV,
    ExternalBroker,
    external_broker,
)
from sluice.testing.topics import create_kafka_topic

KAFKA_PARTITIONS = 3


@dataclass
class QueueKit:
    """Opens queues of one transport on one topic, and closes them at the end of the test."""

    transport: str
    uri: str
    dead_letter_uri: str
    prepare: Callable[[], None] = lambda: None
    opened: list[MessageQueue] = field(default_factory=list)

    def open_queue(self) -> MessageQueue:
        return self._open(self.uri)

    def open_dead_letter_queue(self) -> MessageQueue:
        return self._open(self.dead_letter_uri)

    def _open(self, uri: str) -> MessageQueue:
        queue = queue_from_uri(uri)
        queue.open(None)
        self.opened.append(queue)
        return queue

    def close_all(self) -> None:
        for queue in self.opened:
            if queue.is_open():
                queue.close(None)


def _kafka_uri(bootstrap: str, topic: str) -> str:
    return (
        f"kafka://{bootstrap}/{topic}?group_id={topic}-group&from_beginning=true"
        f"&autocommit=false&session_timeout=6000&num_partitions={KAFKA_PARTITIONS}"
    )


def _create_kafka_topics(bootstrap: str, *topics: str) -> None:
    for topic in topics:
        create_kafka_topic(bootstrap, topic, KAFKA_PARTITIONS)


def _mqtt_query(client_id: str) -> str:
    return f"qos=1&autocommit=false&client_id={client_id}&clean_session=false&autosubscribe=true"


def _transports() -> list[str]:
    kafka = (
        ["kafka-external"]
        if os.environ.get(KAFKA_ENV)
        else [f"kafka-{name}" for name in KAFKA_FIXTURES]
    )
    return ["memory", *kafka, "mqtt"]


@pytest.fixture(params=_transports())
def queue_kit(request: pytest.FixtureRequest, unique_name: str) -> Iterator[QueueKit]:
    transport: str = request.param
    topic = unique_name
    if transport == "memory":
        kit = QueueKit(transport, f"memory:///{topic}", f"memory:///{topic}.dlq")
    elif transport.startswith("kafka"):
        broker = (
            external_broker(KAFKA_ENV, "kafka", 9092)
            if transport == "kafka-external"
            else request.getfixturevalue(KAFKA_FIXTURES[transport.removeprefix("kafka-")])
        )
        assert broker is not None
        bootstrap = broker.bootstrap
        kit = QueueKit(
            transport,
            _kafka_uri(bootstrap, topic),
            # joins its group at open, while the test's queue joins its own
            _kafka_uri(bootstrap, f"{topic}.dlq") + "&autosubscribe=true",
            lambda: _create_kafka_topics(bootstrap, topic, f"{topic}.dlq"),
        )
    else:
        broker = external_broker(MQTT_ENV, "mqtt", 1883) or request.getfixturevalue(
            "mosquitto_broker"
        )
        assert isinstance(broker, ExternalBroker) or broker.scheme == "mqtt"
        address = f"mqtt://{broker.host}:{broker.port}"
        kit = QueueKit(
            transport,
            f"{address}/sluice/{topic}?{_mqtt_query(topic)}&dead_letter_topic=sluice/{topic}-dead",
            f"{address}/sluice/{topic}-dead?{_mqtt_query(f'{topic}-dead')}",
        )
    kit.prepare()
    try:
        yield kit
    finally:
        kit.close_all()
