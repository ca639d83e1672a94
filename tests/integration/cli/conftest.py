"""Fixtures for the CLI tests: the session's noida-db and mosquitto, and reading a topic."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from sluice.brokers import BrokerProcess
from sluice.testing import wait_until


@pytest.fixture
def kafka(noida_broker: BrokerProcess) -> str:
    """``kafka://127.0.0.1:PORT`` of the session's noida-db."""
    return noida_broker.url


@pytest.fixture
def mqtt(mosquitto_broker: BrokerProcess) -> str:
    """``mqtt://127.0.0.1:PORT`` of the session's mosquitto."""
    return mosquitto_broker.url


def read_topic(bootstrap: str, topic: str, timeout: float = 20.0) -> list[Any]:
    """Every record of ``topic`` (all partitions) in partition and offset order, read
    without a consumer group."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return []
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list[Any] = []

        def caught_up() -> bool:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(caught_up, timeout, interval=0, message=f"the records of {topic}")
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
