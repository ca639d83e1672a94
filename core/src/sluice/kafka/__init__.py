"""Kafka transport on kafka-python: KafkaConnection and KafkaMessageQueue, as pip-services'
Kafka components."""

from .connection import KafkaConnection
from .queue import KafkaMessageQueue

__all__ = ["KafkaConnection", "KafkaMessageQueue"]
