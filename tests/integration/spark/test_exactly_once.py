"""Invariant I1 and the data-loss policy on a real broker: the group never commits over a
message that is in no published batch, and messages the broker no longer has fail loudly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, TopicPartition

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.queues import ConfigError
from sluice.sensing import extend_to_latest
from sluice.spark import ingest
from sluice.spark.failpoints import FailpointError, armed
from sluice.spark.kafka_source import commit_offsets
from sluice.spark.remaining import DataLossError
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, KafkaTopic, dataset_rows, open_topic, reading


@pytest.fixture
def one_partition(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    opened = open_topic(apache_kafka_broker, unique_name, partitions=1)
    opened.send([reading(i) for i in range(200)])
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def batch(topic: KafkaTopic, start: int, end: int) -> BatchSpec:
    return BatchSpec(
        "kafka", topic.name, group_id=f"{topic.name}-group", ranges=(OffsetRange(0, start, end),)
    )


def temperatures(sink: Path) -> list[float]:
    return sorted(r["temperature"] for r in dataset_rows(sink))


def test_an_earlier_batch_ingested_after_a_later_one_loses_nothing(
    spark: Any, one_partition: KafkaTopic, tmp_path: Path
) -> None:
    """The finding: [100, 200) committed 200, then the retry of [0, 100) skipped everything."""
    topic = one_partition
    ingest(spark, batch(topic, 100, 200), tmp_path, source=topic.source, schema=SCHEMA)
    retry = ingest(spark, batch(topic, 0, 100), tmp_path, source=topic.source, schema=SCHEMA)

    assert retry.written == 100
    assert temperatures(tmp_path) == [i / 10 for i in range(200)]
    report = audit(tmp_path, topic.source)
    assert report.ok and report.streams[0].partitions[0].committed == 200


def test_a_batch_after_a_failed_one_takes_the_gap_and_never_commits_over_it(
    spark: Any, one_partition: KafkaTopic, tmp_path: Path
) -> None:
    """The event-driven path: [0, 100) fails after the group had committed 0; [100, 200) runs
    next. It ingests [0, 100) too, so the commit of 200 passes nothing unwritten."""
    topic = one_partition
    commit_offsets(
        {"bootstrap_servers": topic.broker.bootstrap}, topic.name, f"{topic.name}-group", {0: 0}
    )
    with armed("stage.after_write"), pytest.raises(FailpointError):
        ingest(spark, batch(topic, 0, 100), tmp_path, source=topic.source, schema=SCHEMA)
    assert dataset_rows(tmp_path) == []

    later = ingest(spark, batch(topic, 100, 200), tmp_path, source=topic.source, schema=SCHEMA)

    assert later.gaps == [OffsetRange(0, 0, 100)] and later.written == 200
    assert later.commits == {0: 200}
    assert temperatures(tmp_path) == [i / 10 for i in range(200)]
    assert audit(tmp_path, topic.source).ok


def test_messages_deleted_by_retention_fail_the_ingest_unless_the_loss_is_accepted(
    spark: Any, one_partition: KafkaTopic, tmp_path: Path
) -> None:
    topic = one_partition
    spec = batch(topic, 0, 200)
    admin = KafkaAdminClient(bootstrap_servers=topic.broker.bootstrap)
    try:
        admin.delete_records({TopicPartition(topic.name, 0): 50})
    finally:
        admin.close()

    with pytest.raises(DataLossError, match=r"offsets 0-49 of partition 0 .* log start \(50\)"):
        ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
    assert dataset_rows(tmp_path) == [] and plan_batch(topic.queue) is not None

    result = ingest(
        spark, spec, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
    )

    assert result.lost == [{"partition": 0, "start": 0, "end": 50, "reason": "retention"}]
    assert result.written == 150 and result.commits == {0: 200}
    report = audit(tmp_path, topic.source)
    partition = report.streams[0].partitions[0]
    assert report.ok and partition.lost == [OffsetRange(0, 0, 50)]


def test_a_recreated_topic_fails_the_ingest_unless_the_loss_is_accepted(
    spark: Any, apache_kafka_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    topic = open_topic(apache_kafka_broker, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(30)])
        ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
        topic.recreate(1)
        topic.send([reading(100 + i) for i in range(10)])
        spec = batch(topic, 0, 10)

        with pytest.raises(DataLossError, match="recreated"):
            ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
        result = ingest(
            spark, spec, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
        )
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.written == 10 and result.commits == {0: 10}
    assert len(dataset_rows(tmp_path)) == 40
    assert audit(tmp_path, topic.source).ok


def test_ingest_of_no_batch_says_what_to_check(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"plan_batch returns None .* spec is not None"):
        ingest(spark, None, tmp_path, source="kafka://127.0.0.1:9")


@pytest.mark.parametrize("crash_at", ["stage.after_write", "commit.before", "commit.after"])
def test_a_batch_taken_up_to_the_latest_is_finished_once_by_the_rerun_of_its_event(
    spark: Any, one_partition: KafkaTopic, tmp_path: Path, crash_at: str
) -> None:
    """``up_to="latest"``: the run of an emitted batch [0, 100) takes the 200 there, crashes;
    the rerun of the same event takes what waits then, and each message lands once."""
    topic = one_partition
    emitted = batch(topic, 0, 100)
    first = extend_to_latest(emitted, topic.source)
    assert first.ranges == (OffsetRange(0, 0, 200),) and first.batch_id != emitted.batch_id
    with armed(crash_at), pytest.raises(FailpointError):
        ingest(spark, first, tmp_path, source=topic.source, schema=SCHEMA)
    topic.send([reading(i) for i in range(200, 250)])

    rerun = extend_to_latest(emitted, topic.source)
    result = ingest(spark, rerun, tmp_path, source=topic.source, schema=SCHEMA)
    if crash_at == "commit.after":  # the crashed run had committed: its event is done
        assert rerun == emitted and result.written == 0
        done = 200
    else:  # the rerun reads past the crashed run's end; what that run published is not read
        assert rerun.ranges == (OffsetRange(0, 0, 250),)
        assert result.written == (250 if crash_at == "stage.after_write" else 50)
        done = 250
    assert temperatures(tmp_path) == [i / 10 for i in range(done)]
    report = audit(tmp_path, topic.source)
    assert report.ok and report.streams[0].partitions[0].committed == done
