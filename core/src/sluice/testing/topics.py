"""Topics for tests: a Kafka topic with a chosen number of partitions."""

from __future__ import annotations


def create_kafka_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions at ``bootstrap``, unless it exists."""
    from sluice.kafka import KafkaConnection  # needs the kafka extra: import only when used

    connection = KafkaConnection()
    connection.configure({"connection.uri": bootstrap, "options.num_partitions": partitions})
    connection.open(None)
    try:
        connection.create_queue(topic)
    finally:
        connection.close(None)
