"""Topics for tests: a Kafka topic with a chosen number of partitions."""

from ..brokers import create_kafka_topic

__all__ = ["create_kafka_topic"]
