"""Helpers for the Spark ingestion tests: a topic of the test's own and its messages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from sluice import read_dataset
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.brokers import BrokerProcess, KafkaCluster, start_kafka
from sluice.kafka import KafkaMessageQueue
from sluice.kafka.ranges import read_range_records
from sluice.testing import wait_until
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

    def close(self) -> None:
        """Close the planning queue and the producer."""
        self.queue.close(None)
        self.producer.close()

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


def opened_topic(broker: Broker, name: str, partitions: int = 3) -> Iterator[KafkaTopic]:
    """A topic for a fixture to ``yield from``: closed when the test is done with it."""
    topic = open_topic(broker, name, partitions)
    try:
        yield topic
    finally:
        topic.close()


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on Apache Kafka (the reference broker)."""
    yield from opened_topic(apache_kafka_broker, unique_name)


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


HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def cleaning_kafka() -> Iterator[BrokerProcess]:
    """An Apache Kafka broker of the module's own whose log cleaner wakes every 100 ms instead
    of every 15 s when it found nothing to clean, and whose retention check runs every 200 ms
    (the broker's own deletions and compaction, in seconds)."""
    broker = start_kafka(
        properties={"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200"}
    )
    try:
        yield broker
    finally:
        broker.close()


def topic_with(
    broker: BrokerProcess | KafkaCluster,
    name: str,
    configs: dict[str, str],
    replicas: list[int] | None = None,
) -> KafkaTopic:
    """A one-partition topic created with ``configs`` (on the nodes ``replicas``, the first
    its preferred leader), and its planning queue."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        if replicas is None:
            new = NewTopic(name, 1, 1, topic_configs=configs)
        else:
            new = NewTopic(name, -1, -1, {0: replicas}, topic_configs=configs)
        admin.create_topics([new])
    finally:
        admin.close()
    return open_topic(broker, name, partitions=1)


def send_at(topic: KafkaTopic, messages: list[tuple[bytes, bytes | None]], at_ms: int) -> None:
    """Send (key, value) pairs with the create time ``at_ms``: the broker rolls segments and
    applies retention by these timestamps, so the test decides which segment goes."""
    send = topic.producer.send
    sent = [send(topic.name, value=v, key=k, timestamp_ms=at_ms) for k, v in messages]
    topic.producer.flush(10)
    for future in sent:
        future.get(10)


def readable_offsets(topic: KafkaTopic, end: int) -> list[int]:
    """The offsets below ``end`` that hold a record now."""
    kwargs = {"bootstrap_servers": topic.broker.bootstrap}
    found = read_range_records(kwargs, topic.name, [OffsetRange(0, 0, end)], 30)
    return [r.offset for _, records in found for r in records]


#: Offsets 0-17 of :func:`compacted_topic` that hold a record once its cleaner has run.
COMPACTED_SURVIVORS = [12, 13, 14, 16, 17]


def compacted_topic(broker: BrokerProcess, name: str) -> KafkaTopic:
    """A one-partition topic with cleanup.policy compact on ``broker`` (``cleaning_kafka``),
    compacted: keys a-d written four times each (offsets 0-15, create time an hour old, then
    a tombstone of key d at 16); the record of key e at 17, with the current time, rolls the
    log, and the cleaner compacts offsets 0-16: each key keeps its last record and d its
    tombstone (:data:`COMPACTED_SURVIVORS`)."""
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "60000",
        "min.cleanable.dirty.ratio": "0.01",
    }
    topic = topic_with(broker, name, configs)
    now = int(time.time() * 1000)
    rounds = [(key, reading(10 * n + i)) for n in range(4) for i, key in enumerate(b"abcd")]
    send_at(topic, [(bytes([k]), v) for k, v in rounds], now - HOUR_MS)
    send_at(topic, [(b"d", None)], now - HOUR_MS)
    send_at(topic, [(b"e", reading(99))], now)
    wait_until(
        lambda: readable_offsets(topic, 18) == COMPACTED_SURVIVORS,
        timeout=30,
        message="the log cleaner to compact offsets 0-16",
    )
    return topic


def run_spark_process(code: str, args: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """Run ``code`` in a Python process of its own (its own Spark, its own JVM) with ``args``
    and environment ``env``; the JSON of its ``RESULT`` line, with its stderr as ``stderr``."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return {**result, "stderr": done.stderr}
