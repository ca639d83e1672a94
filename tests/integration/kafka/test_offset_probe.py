"""Repeated offset questions reuse one probe consumer per topic and still see new messages."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import IncompatibleBrokerVersion

import sluice.kafka.clients
import sluice.kafka.connection
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.kafka import KafkaMessageQueue
from sluice.kafka.offsets import ENDS_CONSUMER, _tracker, refresh_ends
from sluice.testing import wait_until

from .conftest import QueueFactory


class CountedConsumer(KafkaConsumer):  # type: ignore[misc]
    """A real KafkaConsumer whose constructions are counted."""

    made: ClassVar[list[CountedConsumer]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        CountedConsumer.made.append(self)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[CountedConsumer]:
    """The consumers KafkaConnection makes for its offset questions (not its subscriptions)."""
    CountedConsumer.made = []

    def counted_consumer(**kwargs: Any) -> KafkaConsumer:
        return sluice.kafka.clients.skip_bootstrap_backoff(CountedConsumer(**kwargs))

    monkeypatch.setattr(sluice.kafka.connection, "new_consumer", counted_consumer)
    return CountedConsumer.made


def send(queue: KafkaMessageQueue, partition: int, count: int = 1) -> None:
    """``count`` messages to ``partition`` in one batch (Tansu then lists a wrong end),
    acknowledged by the broker when this returns."""
    queue._conn().publish(queue.topic, [{"value": b"m"}] * count, {"partition": partition})


def planned(queue: KafkaMessageQueue) -> tuple[OffsetRange, ...]:
    spec = plan_batch(queue)
    return spec.ranges if spec is not None else ()


def test_repeated_plans_reuse_one_consumer_and_see_each_new_message(
    make_queue: QueueFactory, counted: list[CountedConsumer]
) -> None:
    queue = make_queue(partitions=2)
    assert planned(queue) == ()
    for step in range(1, 6):
        send(queue, partition=1, count=3)
        assert planned(queue) == (OffsetRange(1, 0, 3 * step),), "sent messages must show at once"
    send(queue, partition=0)
    assert planned(queue) == (OffsetRange(0, 0, 1), OffsetRange(1, 0, 15))
    assert queue.read_message_count() == 16
    assert len(counted) == 1, "every plan must ask the same long-lived probe consumer"
    assert counted[0].subscription() is None, "the probe must never subscribe to the group"

    queue.close(None)
    assert counted[0]._closed, "closing the queue's connection must close its probe"


def test_each_refresh_of_the_ends_is_answered_by_a_fetch_even_where_a_partition_is_empty(
    make_queue: QueueFactory,
) -> None:
    """Within an incremental fetch session (KIP-227) Apache Kafka leaves a partition with
    nothing new out of a fetch's answer: a long-lived consumer's refresh then waited its whole
    timeout for an empty partition, every time after its first (a plan took 5 s; the
    triggers' watch saw new messages 4 to 14 s late). Consumers that refresh ends fetch
    without sessions, and refresh_ends refuses one that does not."""
    queue = make_queue(partitions=2)
    send(queue, partition=1)
    settings = {"bootstrap_servers": queue._config["connection.uri"], "group_id": None}
    tps = [TopicPartition(queue.topic, p) for p in (0, 1)]
    with pytest.raises(ValueError, match="ENDS_CONSUMER"):
        refresh_ends(KafkaConsumer(**settings), tps)

    # read_committed: the refresh fetches empty partitions too (Tansu lists their end as 0)
    consumer = KafkaConsumer(**settings, isolation_level="read_committed", **ENDS_CONSUMER)
    try:
        consumer.assign(tps)
        tracker = _tracker(consumer)
        for _ in range(3):
            asked = tracker.sequence
            ends = refresh_ends(consumer, tps, timeout_s=60)
            assert ends == {tps[0]: 0, tps[1]: 1}
            unanswered = [tp for tp in tps if tracker.latest[tp].sequence <= asked]
            assert not unanswered, f"no fetch answered the refresh of {unanswered}"
    finally:
        consumer.close(autocommit=False)


def test_a_watermark_from_before_a_topic_was_recreated_never_raises_its_end(
    make_queue: QueueFactory,
) -> None:
    """A refresh takes a fetch's watermark only from a fetch answered after it asked: the
    newest watermark a long-lived consumer holds may be the old topic's, whose end lies past
    the new log's (a plan from it would cover offsets that do not exist; the cluster soak,
    seed 11, planned a recreated topic with its old ends)."""
    queue = make_queue(partitions=1)
    send(queue, partition=0, count=10)
    settings = {"bootstrap_servers": queue._config["connection.uri"], "group_id": None}
    tp = TopicPartition(queue.topic, 0)
    consumer = KafkaConsumer(**settings, isolation_level="read_committed", **ENDS_CONSUMER)
    try:
        consumer.assign([tp])
        assert refresh_ends(consumer, [tp]) == {tp: 10}
        admin = KafkaAdminClient(bootstrap_servers=settings["bootstrap_servers"])
        try:
            admin.delete_topics([queue.topic])
            wait_until(
                lambda: queue.topic not in admin.list_topics(), timeout=30, message="deleted"
            )
            admin.create_topics([NewTopic(queue.topic, 1, 1)])
        finally:
            admin.close()
        # a new producer: the queue's idempotent one holds the old topic's sequence numbers
        producer = KafkaProducer(bootstrap_servers=settings["bootstrap_servers"])
        for _ in range(2):
            producer.send(queue.topic, b"m", partition=0).get(10)
        producer.close()
        # no time to fetch: the end is what ListOffsets says, not the old topic's watermark
        assert refresh_ends(consumer, [tp], timeout_s=0) == {tp: 2}
    finally:
        consumer.close(autocommit=False)


def test_plans_from_several_threads_share_the_probe(
    make_queue: QueueFactory, counted: list[CountedConsumer]
) -> None:
    queue = make_queue(partitions=3)
    for partition in (0, 2, 2):
        send(queue, partition)
    with ThreadPoolExecutor(4) as pool:
        specs: list[BatchSpec | None] = list(pool.map(lambda _: plan_batch(queue), range(12)))
    assert {spec.ranges for spec in specs if spec is not None} == {
        (OffsetRange(0, 0, 1), OffsetRange(2, 0, 2))
    }
    assert len(specs) == 12 and None not in specs
    assert len(counted) == 1


def test_the_probe_follows_partitions_added_to_the_topic(
    make_queue: QueueFactory, counted: list[CountedConsumer]
) -> None:
    queue = make_queue(partitions=1)
    send(queue, partition=0)
    assert planned(queue) == (OffsetRange(0, 0, 1),)
    admin = KafkaAdminClient(**queue._conn().client_config())
    try:
        admin.create_partitions({queue.topic: 2})
    except IncompatibleBrokerVersion:
        pytest.skip("the broker cannot add partitions (Tansu 0.6 has no CreatePartitions)")
    finally:
        admin.close()
    wait_until(
        lambda: len(queue._conn().end_offsets(queue.topic)) == 2,
        timeout=20,
        message="the probe to list the added partition",
    )
    producer = KafkaProducer(**queue._conn().client_config())  # the queue's has old metadata
    try:
        producer.send(queue.topic, b"m", partition=1).get(10)
    finally:
        producer.close()
    assert planned(queue) == (OffsetRange(0, 0, 1), OffsetRange(1, 0, 1))
    assert len(counted) == 1
