"""Faults Apache Kafka makes by itself (docs/fault-model.md): its own retention deleting
segments, and its log cleaner compacting a topic, on a real broker and a real Spark.

The broker is one of this module's own: its log cleaner wakes every 100 ms instead of every
15 s when it found nothing to clean, and its retention check runs every 200 ms.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from sluice.audit import audit
from sluice.batch import OffsetRange, plan_batch
from sluice.brokers import BrokerProcess, start_kafka
from sluice.errors import DataLossError
from sluice.kafka.ranges import log_bounds, read_range_records
from sluice.spark import ingest
from sluice.spark.kafka_source import READERS
from sluice.testing import wait_until

from .conftest import SCHEMA, KafkaTopic, dataset_rows, open_topic, quarantine_rows, reading
from .crashes import with_reader

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def cleaning_kafka() -> Iterator[BrokerProcess]:
    broker = start_kafka(
        properties={"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200"}
    )
    try:
        yield broker
    finally:
        broker.close()


def topic_with(broker: BrokerProcess, name: str, configs: dict[str, str]) -> KafkaTopic:
    """A one-partition topic created with ``configs``, and its planning queue."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])
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


def test_segments_deleted_by_retention_fail_the_ingest_unless_the_loss_is_accepted(
    spark: Any, cleaning_kafka: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    """The broker deletes a whole segment by its own retention (not DeleteRecords): offsets
    0-49 carry a create time an hour old, 50-99 a current one, and a segment lasts a minute,
    so the first append of the second half rolls the log at offset 50. The batch is planned
    while the topic keeps everything; then retention.ms becomes ten minutes."""
    topic = topic_with(cleaning_kafka, unique_name, {"segment.ms": "60000", "retention.ms": "-1"})
    try:
        now = int(time.time() * 1000)
        send_at(topic, [(b"k", reading(i)) for i in range(50)], now - HOUR_MS)
        send_at(topic, [(b"k", reading(i)) for i in range(50, 100)], now)
        spec = topic.plan()
        assert [(r.start, r.end) for r in spec.ranges] == [(0, 100)]
        admin = KafkaAdminClient(bootstrap_servers=cleaning_kafka.bootstrap)
        try:
            resource = ConfigResource(
                ConfigResourceType.TOPIC, topic.name, configs={"retention.ms": "600000"}
            )
            admin.alter_configs([resource])
        finally:
            admin.close()
        kwargs = {"bootstrap_servers": cleaning_kafka.bootstrap}
        wait_until(
            lambda: log_bounds(kwargs, topic.name, [0])[0] == (50, 100),
            timeout=30,
            message="the broker's retention to delete the old segment",
        )

        with pytest.raises(
            DataLossError, match=r"offsets 0-49 of partition 0 .* below its log start \(50\)"
        ):
            ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
        assert dataset_rows(tmp_path) == []
        result = ingest(
            spark, spec, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
        )
        waiting = plan_batch(topic.queue)
        report = audit(tmp_path, topic.source)
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.lost == [{"partition": 0, "start": 0, "end": 50, "reason": "retention"}]
    assert result.written == 50 and result.commits == {0: 100} and waiting is None
    assert sorted(r["temperature"] for r in dataset_rows(tmp_path)) == [
        i / 10 for i in range(50, 100)
    ]
    partition = report.streams[0].partitions[0]
    assert report.ok and partition.lost == [OffsetRange(0, 0, 50)], "\n".join(report.lines())


@pytest.mark.parametrize("reader", READERS)
def test_offsets_removed_by_compaction_are_gaps_not_loss(
    spark: Any, cleaning_kafka: BrokerProcess, unique_name: str, reader: str, tmp_path: Path
) -> None:
    """Keys a-d written four times each (offsets 0-15, create time an hour old, then a
    tombstone of key d at 16); the record of key e at 17, with the current time, rolls the
    log, and the cleaner compacts offsets 0-16: each key keeps its last record and d its
    tombstone. The batch of offsets 0-17 reads the survivors, quarantines the tombstone
    (no value) and commits 18, and the audit finds nothing lost or missing."""
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "60000",
        "min.cleanable.dirty.ratio": "0.01",
    }
    topic = topic_with(cleaning_kafka, unique_name, configs)
    source = with_reader(topic.source, reader)
    try:
        now = int(time.time() * 1000)
        rounds = [(key, reading(10 * n + i)) for n in range(4) for i, key in enumerate(b"abcd")]
        send_at(topic, [(bytes([k]), v) for k, v in rounds], now - HOUR_MS)
        send_at(topic, [(b"d", None)], now - HOUR_MS)
        send_at(topic, [(b"e", reading(99))], now)
        survivors = [12, 13, 14, 16, 17]
        wait_until(
            lambda: readable_offsets(topic, 18) == survivors,
            timeout=30,
            message="the log cleaner to compact offsets 0-16",
        )
        spec = topic.plan()
        assert [(r.start, r.end) for r in spec.ranges] == [(0, 18)]

        result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)
        waiting = plan_batch(topic.queue)
        report = audit(tmp_path, source)
    finally:
        topic.queue.close(None)
        topic.producer.close()

    rows = dataset_rows(tmp_path)
    assert sorted(r["offset"] for r in rows) == [12, 13, 14, 17]
    assert sorted(r["temperature"] for r in rows) == [3.0, 3.1, 3.2, 9.9]
    assert [r["offset"] for r in quarantine_rows(tmp_path)] == [16], "the tombstone"
    assert result.lost == [] and result.commits == {0: 18} and waiting is None
    partition = report.streams[0].partitions[0]
    assert report.ok and partition.lost == [] and partition.missing == [], "\n".join(report.lines())
    assert (partition.written, partition.quarantined, partition.doubled) == (4, 1, 0)
