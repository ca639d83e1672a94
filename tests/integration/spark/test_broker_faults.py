"""Faults Apache Kafka makes by itself (docs/fault-model.md), on a real broker and a real
Spark: its own retention deleting segments, its log cleaner compacting a topic, and an
unclean leader election truncating a partition's log on the three-node cluster.

The retention and compaction tests run on a broker of this module's own (``cleaning_kafka``,
tests/integration/spark/conftest.py): its log cleaner wakes every 100 ms instead of every 15 s
when it found nothing to clean, and its retention check runs every 200 ms. The truncation
test uses the session's cluster (``kafka_cluster``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.brokers import BrokerProcess, KafkaCluster
from sluice.errors import DataLossError
from sluice.kafka import KafkaMessageQueue
from sluice.kafka.ranges import log_bounds
from sluice.spark import ingest
from sluice.spark.kafka_source import READERS
from sluice.testing import wait_until

from .conftest import (
    HOUR_MS,
    SCHEMA,
    KafkaTopic,
    compacted_topic,
    dataset_rows,
    quarantine_rows,
    reading,
    send_at,
    topic_with,
)
from .crashes import with_reader


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
    """The batch of offsets 0-17 of a compacted topic (:func:`compacted_topic`) reads the
    survivors, quarantines the tombstone (no value) and commits 18, and the audit finds
    nothing lost or missing."""
    topic = compacted_topic(cleaning_kafka, unique_name)
    source = with_reader(topic.source, reader)
    try:
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


def leader_and_isr(cluster: KafkaCluster, topic: str, down: int) -> tuple[int, list[int]] | None:
    """Partition 0's leader and in-sync replicas, as the nodes but ``down`` say (None while
    they cannot answer: a metadata client still tries the node that is down)."""
    nodes = ",".join(n.bootstrap for i, n in enumerate(cluster.nodes, 1) if i != down)
    try:
        admin = KafkaAdminClient(bootstrap_servers=nodes, request_timeout_ms=5000)
        try:
            partition = admin.describe_topics([topic])[0]["partitions"][0]
        finally:
            admin.close()
    except (KafkaError, OSError):
        return None
    return int(partition["leader_id"]), sorted(partition["isr_nodes"])


def plan_for(topic: KafkaTopic, group: str) -> BatchSpec | None:
    """The next batch of ``group`` (a planning queue of its own, closed after)."""
    queue = KafkaMessageQueue(topic.name)
    queue.configure(
        {
            "connection.uri": topic.broker.bootstrap,
            "topic": topic.name,
            "group_id": group,
            "from_beginning": True,
        }
    )
    queue.open(None)
    try:
        return plan_batch(queue)
    finally:
        queue.close(None)


def unclean_election(cluster: KafkaCluster, topic: KafkaTopic, leader: int, follower: int) -> None:
    """Offsets 0-49 on both replicas; the follower killed and out of the ISR; offsets 50-99
    on the leader alone (acks=1: acknowledged); the leader killed and the stale follower
    started: the controller elects it (the topic allows unclean elections), and the log ends
    at 50 again. The old leader starts again, truncates its log to the new leader's and
    catches up."""
    both = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for i in range(50):
            both.send(topic.name, reading(i), partition=0)
        both.flush(10)
    finally:
        both.close()
    cluster.kill(follower)
    wait_until(
        lambda: leader_and_isr(cluster, topic.name, follower) == (leader, [leader]),
        timeout=60,
        interval=0.5,
        message=f"node {follower} out of the ISR (fenced once its broker session expires)",
    )
    topic.send([reading(i) for i in range(50, 100)], partition=0)  # acks=1


def refused(spark: Any, spec: BatchSpec, sink: Path, source: str, why: str) -> None:
    """The ingest of ``spec`` fails naming the truncation, whether the loss is accepted or not."""
    for fail_on_data_loss in (True, False):
        with pytest.raises(DataLossError, match=rf"{why}.*truncated|truncated.*{why}"):
            ingest(
                spark, spec, sink, source=source, schema=SCHEMA, fail_on_data_loss=fail_on_data_loss
            )


def test_a_log_truncated_by_an_unclean_election_fails_naming_the_range_never_skips(
    spark: Any, kafka_cluster: KafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Two groups of one topic (replicas on nodes 1 and 2, unclean leader election enabled,
    min.insync.replicas 1) see offsets 0-99 before an unclean election truncates the log to
    50: group ``a`` has planned [0, 100) and not read it; group ``b`` has ingested and
    committed it. Then 30 new messages take offsets 50-79, and later 30 more 80-109.

    Group ``a``: the ingest fails naming offsets 50-99, accepted or not (before: a
    ValueError, "planned on another topic"); planned anew, it reads what the log holds (the
    old 0-49 and the 60 new messages). Group ``b``: its sink holds the old offsets 50-99,
    which new messages now take: every ingest fails, accepted or not, naming the range, never
    a silent skip (before, it was taken for a recreated topic: accepted, the log was read
    again from offset 0, and 0-49 were in the sink twice while the audit said OK)."""
    configs = {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}
    topic = topic_with(kafka_cluster, unique_name, configs, replicas=[1, 2])
    source = topic.source
    a, b = tmp_path / "a", tmp_path / "b"
    try:
        unclean_election(kafka_cluster, topic, leader=1, follower=2)
        planned = plan_for(topic, f"{unique_name}-a")
        assert planned is not None and [(r.start, r.end) for r in planned.ranges] == [(0, 100)]
        ingested = plan_for(topic, f"{unique_name}-b")
        assert ingested is not None
        assert ingest(spark, ingested, b, source=source, schema=SCHEMA).commits == {0: 100}

        kafka_cluster.kill(1)
        kafka_cluster.start_node(2)
        wait_until(
            lambda: leader_and_isr(kafka_cluster, topic.name, 1) == (2, [2]),
            timeout=60,
            interval=0.5,
            message="the unclean election of node 2",
        )
        kafka_cluster.start_node(1)
        wait_until(
            lambda: leader_and_isr(kafka_cluster, topic.name, 0) == (2, [1, 2]),
            timeout=60,
            interval=0.5,
            message="node 1 in sync again",
        )
        kwargs = {"bootstrap_servers": kafka_cluster.bootstrap}
        assert log_bounds(kwargs, topic.name, [0])[0] == (0, 50), "truncated"

        refused(
            spark, planned, a, source, r"offsets 50-99 of partition 0 .* past its log end \(50\)"
        )
        topic.send([reading(i) for i in range(200, 230)], partition=0)
        from_start = plan_for(topic, f"{unique_name}-b")  # its committed 100 is past the end
        assert from_start is not None and [(r.start, r.end) for r in from_start.ranges] == [(0, 80)]
        refused(spark, from_start, b, source, r"ends at offset 80, below offset 100")
        topic.send([reading(i) for i in range(230, 260)], partition=0)
        past = plan_for(topic, f"{unique_name}-b")
        assert past is not None and [(r.start, r.end) for r in past.ranges] == [(100, 110)]
        refused(spark, past, b, source, r"the message at offset 99 is not the one the sink wrote")
        later = plan_for(topic, f"{unique_name}-a")  # planned anew: what the log holds now
        assert later is not None and [(r.start, r.end) for r in later.ranges] == [(0, 110)]
        following = ingest(spark, later, a, source=source, schema=SCHEMA)
        report = audit(a, source)
    finally:
        topic.queue.close(None)
        topic.producer.close()
        for number, node in enumerate(kafka_cluster.nodes, 1):
            if node.pid is None:
                kafka_cluster.start_node(number)

    assert following.written == 110 and following.commits == {0: 110}
    temperatures = sorted(r["temperature"] for r in dataset_rows(a))
    assert temperatures == [i / 10 for i in [*range(50), *range(200, 260)]]
    assert sorted(r["offset"] for r in dataset_rows(b)) == list(range(100)), "b: untouched"
    partition = report.streams[0].partitions[0]
    assert report.ok and partition.missing == [] and partition.doubled == 0, "\n".join(
        report.lines()
    )
