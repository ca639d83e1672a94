"""Sluice for pip-services code: one import line instead of pip-services3-kafka/-mqtt's.

pip-services code keeps its ``ConfigParams``, ``References``, ``MessageEnvelope`` and
container configuration; only its imports change::

    # from pip_services3_kafka.queues import KafkaMessageQueue
    # from pip_services3_kafka.build import DefaultKafkaFactory
    from sluice.pipservices import DefaultKafkaFactory, KafkaMessageQueue

The factories create Sluice's components under pip-services' own descriptors:

==========================================================  ================================
descriptor                                                  component
==========================================================  ================================
``pip-services:message-queue:kafka:*:1.0``                  :class:`KafkaMessageQueue`
``pip-services:connection:kafka:*:1.0``                     :class:`KafkaConnection`
``pip-services:queue-factory:kafka:*:1.0``                  :class:`KafkaMessageQueueFactory`
``pip-services:message-queue:mqtt:*:1.0``                   :class:`MqttMessageQueue`
``pip-services:connection:mqtt:*:1.0``                      :class:`MqttConnection`
``pip-services:queue-factory:mqtt:*:1.0``                   :class:`MqttMessageQueueFactory`
``pip-services:message-queue:memory:*:*``                   :class:`MemoryMessageQueue`
``pip-services:factory:message-queue:memory:1.0``           :class:`MemoryMessageQueueFactory`
==========================================================  ================================

A queue's name is the descriptor's name (``...:kafka:orders:1.0`` makes queue ``orders``,
which is also its topic unless ``topic`` is configured). The Kafka and MQTT classes import
their client library only when used, so this module works with either extra alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pip_services3_commons.refer import Descriptor
from pip_services3_components.build import CompositeFactory, Factory
from pip_services3_messaging.build import MessageQueueFactory

from .queues.base import MessageQueue
from .queues.envelope import MessageEnvelope
from .queues.memory import MemoryMessageQueue

if TYPE_CHECKING:
    from .kafka import KafkaConnection, KafkaMessageQueue
    from .mqtt import MqttConnection, MqttMessageQueue

__all__ = [
    "DefaultKafkaFactory",
    "DefaultMessagingFactory",
    "DefaultMqttFactory",
    "DefaultSluiceFactory",
    "KafkaConnection",
    "KafkaMessageQueue",
    "KafkaMessageQueueFactory",
    "MemoryMessageQueue",
    "MemoryMessageQueueFactory",
    "MessageEnvelope",
    "MqttConnection",
    "MqttMessageQueue",
    "MqttMessageQueueFactory",
]

KAFKA_QUEUE = Descriptor("pip-services", "message-queue", "kafka", "*", "1.0")
KAFKA_CONNECTION = Descriptor("pip-services", "connection", "kafka", "*", "1.0")
KAFKA_QUEUE_FACTORY = Descriptor("pip-services", "queue-factory", "kafka", "*", "1.0")
MQTT_QUEUE = Descriptor("pip-services", "message-queue", "mqtt", "*", "1.0")
MQTT_CONNECTION = Descriptor("pip-services", "connection", "mqtt", "*", "1.0")
MQTT_QUEUE_FACTORY = Descriptor("pip-services", "queue-factory", "mqtt", "*", "1.0")
MEMORY_QUEUE = Descriptor("pip-services", "message-queue", "memory", "*", "*")
MEMORY_QUEUE_FACTORY = Descriptor("pip-services", "factory", "message-queue", "memory", "1.0")
#: Where a container finds this module's composite factory, should it be registered as one.
SLUICE_FACTORY = Descriptor("sluice", "factory", "default", "default", "1.0")


def _kafka_queue(name: str | None) -> KafkaMessageQueue:
    from .kafka import KafkaMessageQueue

    return KafkaMessageQueue(name)


def _kafka_connection() -> KafkaConnection:
    from .kafka import KafkaConnection

    return KafkaConnection()


def _mqtt_queue(name: str | None) -> MqttMessageQueue:
    from .mqtt import MqttMessageQueue

    return MqttMessageQueue(name)


def _mqtt_connection() -> MqttConnection:
    from .mqtt import MqttConnection

    return MqttConnection()


def _name(locator: Any) -> str | None:
    """The name a descriptor gives its component (pip-services passes it to the queue)."""
    get_name = getattr(locator, "get_name", None)
    return get_name() if callable(get_name) else None


class _QueueFactory(MessageQueueFactory):  # type: ignore[misc]
    """pip-services' ``MessageQueueFactory``: ``create_queue(name)`` gives a queue configured
    with the factory's configuration and references."""

    DESCRIPTOR: ClassVar[Descriptor]

    def __init__(self) -> None:
        super().__init__()
        self.register(self.DESCRIPTOR, lambda locator: self.create_queue(_name(locator)))

    def create_queue(self, name: str | None) -> MessageQueue:
        queue = self._make(name)
        if self._config is not None:
            queue.configure(self._config)
        if self._references is not None:
            queue.set_references(self._references)
        return queue

    def _make(self, name: str | None) -> MessageQueue:
        raise NotImplementedError


class KafkaMessageQueueFactory(_QueueFactory):
    DESCRIPTOR = KAFKA_QUEUE

    def _make(self, name: str | None) -> MessageQueue:
        return _kafka_queue(name)


class MqttMessageQueueFactory(_QueueFactory):
    DESCRIPTOR = MQTT_QUEUE

    def _make(self, name: str | None) -> MessageQueue:
        return _mqtt_queue(name)


class MemoryMessageQueueFactory(_QueueFactory):
    DESCRIPTOR = MEMORY_QUEUE

    def _make(self, name: str | None) -> MessageQueue:
        return MemoryMessageQueue(name)


class DefaultKafkaFactory(Factory):  # type: ignore[misc]
    """pip-services3-kafka's ``DefaultKafkaFactory``, making Sluice's Kafka components."""

    def __init__(self) -> None:
        super().__init__()
        self.register(KAFKA_QUEUE, lambda locator: _kafka_queue(_name(locator)))
        self.register(KAFKA_CONNECTION, lambda locator: _kafka_connection())
        self.register_as_type(KAFKA_QUEUE_FACTORY, KafkaMessageQueueFactory)


class DefaultMqttFactory(Factory):  # type: ignore[misc]
    """pip-services3-mqtt's ``DefaultMqttFactory``, making Sluice's MQTT components."""

    def __init__(self) -> None:
        super().__init__()
        self.register(MQTT_QUEUE, lambda locator: _mqtt_queue(_name(locator)))
        self.register(MQTT_CONNECTION, lambda locator: _mqtt_connection())
        self.register_as_type(MQTT_QUEUE_FACTORY, MqttMessageQueueFactory)


class DefaultMessagingFactory(Factory):  # type: ignore[misc]
    """pip-services3-messaging's ``DefaultMessagingFactory``, making Sluice's memory queue
    (which fixes the defects of pip-services' own, see docs/architecture.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.register(MEMORY_QUEUE, lambda locator: MemoryMessageQueue(_name(locator)))
        self.register_as_type(MEMORY_QUEUE_FACTORY, MemoryMessageQueueFactory)


class DefaultSluiceFactory(CompositeFactory):  # type: ignore[misc]
    """Every factory above in one: ``container.add_factory(DefaultSluiceFactory())``."""

    def __init__(self) -> None:
        super().__init__()
        self.add(DefaultKafkaFactory())
        self.add(DefaultMqttFactory())
        self.add(DefaultMessagingFactory())


def __getattr__(name: str) -> Any:
    """The Kafka and MQTT classes, imported on first use (each needs its extra)."""
    if name in ("KafkaConnection", "KafkaMessageQueue"):
        from . import kafka

        return getattr(kafka, name)
    if name in ("MqttConnection", "MqttMessageQueue"):
        from . import mqtt

        return getattr(mqtt, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
