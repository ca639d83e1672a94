"""Object storage tests: the session's S3 server (SeaweedFS) behind the counting,
fault-injecting proxy (``s3_bucket``, ``s3_proxy`` from :mod:`sluice.testing.plugin`), real
Kafka (noida-db) and the session's Spark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sluice import read_dataset
from sluice.testing.plugin import Broker

from ..iceberg.conftest import s3_sqlite_lake
from ..spark.conftest import KafkaTopic, opened_topic

__all__ = ["rows", "s3_sqlite_lake", "topic"]


@pytest.fixture
def topic(noida_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    yield from opened_topic(noida_broker, unique_name)


def rows(sink: str, quarantine: bool = False) -> list[dict[str, Any]]:
    """The committed rows of a Parquet dataset, as Sluice reads them."""
    table = read_dataset(sink, quarantine).to_table()
    return table.drop_columns(["batch_id"]).to_pylist() if table.num_rows else []
