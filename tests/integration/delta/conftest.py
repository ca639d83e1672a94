"""Delta Lake sinks: tables in the test's directory, on a real delta-rs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.testing.plugin import Broker

from ..spark.conftest import KafkaTopic, opened_topic


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on Apache Kafka (the reference broker)."""
    yield from opened_topic(apache_kafka_broker, unique_name)
