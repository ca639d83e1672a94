"""Helpers for the Spark ingestion tests: a topic of the test's own and its messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from sluice import read_dataset
from sluice.batch import BatchSpec, plan_batch
from sluice.kafka import KafkaMessageQueue
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

SCHEMA = "device STRING, temperature DOUBLE"


def reading(i: int) -> bytes:
    return json.dumps({"device": f"dev-{i % 7}", "temperature": i / 10}).encode()


@dataclass
class KafkaTopic:
    """A topic with partitions, a producer and a planning queue (group ``<topic>-group``)."""

    broker: Broker
    name: str
    producer: KafkaProducer
    queue: KafkaMessageQueue

    @property
    def source(self) -> str:
        return f"kafka://{self.broker.bootstrap}"

    def send(self, values: list[bytes | None], partition: int | None = None) -> None:
        """Send ``values`` with keys k0, k1 ... (a raw producer: it allows 1 MB values)."""
        sent = [
            self.producer.send(self.name, value=value, key=f"k{i}".encode(), partition=partition)
            for i, value in enumerate(values)
        ]
        self.producer.flush(10)
        for future in sent:
            future.get(10)  # raises if the broker refused the record

    def recreate(self, partitions: int) -> None:
        """Delete the topic and create it again with ``partitions``, and a new producer (the
        old one's sequence numbers belong to the old topic; it is closed first, or its next
        metadata request would create the topic again with the broker's default)."""
        self.producer.close()
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        try:
            admin.delete_topics([self.name])
        finally:
            admin.close()
        create_kafka_topic(self.broker.bootstrap, self.name, partitions)
        self.producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap)

    def plan(self, max_messages: int | None = None) -> BatchSpec:
        spec = plan_batch(self.queue, max_messages=max_messages)
        assert spec is not None, "nothing waiting"
        return spec

    def source_config(self, **options: Any) -> dict[str, Any]:
        return {"connection.uri": self.broker.bootstrap, **options}


def open_topic(broker: Broker, name: str, partitions: int = 3) -> KafkaTopic:
    create_kafka_topic(broker.bootstrap, name, partitions)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=4 * 2**20)
    queue = KafkaMessageQueue(name)
    queue.configure(
        {
            "connection.uri": broker.bootstrap,
            "topic": name,
            "group_id": f"{name}-group",
            "from_beginning": True,
        }
    )
    queue.open(None)
    return KafkaTopic(broker, name, producer, queue)


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on Apache Kafka (the reference broker)."""
    opened = open_topic(apache_kafka_broker, unique_name)
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def dataset_rows(sink: Path | str) -> list[dict[str, Any]]:
    """Every published row of the dataset (quarantine and staging excluded)."""
    if isinstance(sink, str):  # s3://...: as Sluice's readers see it
        table = read_dataset(sink).to_table()
        return table.drop_columns(["batch_id"]).to_pylist() if table.num_rows else []
    if not any(sink.glob("batch_id=*/*.parquet")):
        return []
    return pq.read_table(sink).drop_columns(["batch_id"]).to_pylist()


def quarantine_rows(sink: Path | str) -> list[dict[str, Any]]:
    """Every published quarantined row (each batch keeps its own in ``_quarantine``)."""
    if isinstance(sink, str):
        table = read_dataset(sink, quarantine=True).to_table()
        return table.drop_columns(["batch_id"]).to_pylist() if table.num_rows else []
    rows = []
    for directory in sorted(sink.glob("batch_id=*/_quarantine")):
        rows += pq.read_table(directory).to_pylist()
    return rows


def sink_in(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """A fresh Parquet sink on local disk (``local``) or on the test's S3 bucket (``s3``)."""
    if store == "s3":
        return str(request.getfixturevalue("s3_bucket").uri("sink"))
    return tmp_path / "sink"
