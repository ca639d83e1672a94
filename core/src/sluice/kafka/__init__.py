"""Kafka transport on kafka-python: KafkaConnection (seed 001) and KafkaMessageQueue (seed 000)."""

from .connection import KafkaConnection
from .queue import KafkaMessageQueue

__all__ = ["KafkaConnection", "KafkaMessageQueue"]
