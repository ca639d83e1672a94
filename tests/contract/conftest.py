"""One contract every transport must pass: the same tests for memory, Kafka (each broker) and MQTT.

``queue_kit`` builds queues of one transport on a topic of the test's own; calling
``kit.open_queue()`` again gives a new consumer of the same topic and group/session, which
is how the suite restarts a consumer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from sluice.queues import MessageQueue, queue_from_uri
from sluice.testing.plugin import KAFKA_ENV, MQTT_ENV, ExternalBroker, external_broker
from sluice.testing.topics import create_kafka_topic

KAFKA_PARTITIONS = 3


@dataclass
class QueueKit:
    """Opens queues of one transport on one topic, and closes them at the end of the test."""

    transport: str
    uri: str
    prepare: Callable[[], None] = lambda: None
    opened: list[MessageQueue] = field(default_factory=list)

    def open_queue(self) -> MessageQueue:
        queue = queue_from_uri(self.uri)
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


def _transports() -> list[str]:
    kafka = ["kafka-external"] if os.environ.get(KAFKA_ENV) else ["kafka-noida", "kafka-tansu"]
    return ["memory", *kafka, "mqtt"]


@pytest.fixture(params=_transports())
def queue_kit(request: pytest.FixtureRequest, unique_name: str) -> Iterator[QueueKit]:
    transport: str = request.param
    topic = unique_name
    if transport == "memory":
        kit = QueueKit(transport, f"memory:///{topic}")
    elif transport.startswith("kafka"):
        broker = (
            external_broker(KAFKA_ENV, "kafka", 9092)
            if transport == "kafka-external"
            else request.getfixturevalue(f"{transport.removeprefix('kafka-')}_broker")
        )
        assert broker is not None
        bootstrap = broker.bootstrap
        kit = QueueKit(
            transport,
            _kafka_uri(bootstrap, topic),
            lambda: create_kafka_topic(bootstrap, topic, KAFKA_PARTITIONS),
        )
    else:
        broker = external_broker(MQTT_ENV, "mqtt", 1883) or request.getfixturevalue(
            "mosquitto_broker"
        )
        assert isinstance(broker, ExternalBroker) or broker.scheme == "mqtt"
        kit = QueueKit(
            transport,
            f"mqtt://{broker.host}:{broker.port}/sluice/{topic}?qos=1&autocommit=false"
            f"&client_id={topic}&clean_session=false&autosubscribe=true",
        )
    kit.prepare()
    try:
        yield kit
    finally:
        kit.close_all()
