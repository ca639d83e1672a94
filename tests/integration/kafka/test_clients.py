"""New kafka-python consumers ask for their topics' metadata without first waiting out the
back-off their bootstrap started (sluice.kafka.clients)."""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition

from sluice.kafka.clients import new_consumer
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice.testing.waiting import wait_until


def test_a_new_consumers_first_metadata_request_is_not_held_back(
    apache_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    create_kafka_topic(apache_kafka_broker.bootstrap, unique_name, 2)
    plain = KafkaConsumer(bootstrap_servers=apache_kafka_broker.bootstrap, group_id=None)
    ours = new_consumer(bootstrap_servers=apache_kafka_broker.bootstrap, group_id=None)
    try:
        for consumer in (plain, ours):
            consumer._client.cluster.request_update()
        # kafka-python holds the refresh back by its retry back-off after the bootstrap...
        assert plain._client.cluster.ttl() > 0
        # ... which a consumer made by new_consumer does not wait for
        assert ours._client.cluster.ttl() == 0
        assert ours.partitions_for_topic(unique_name) == {0, 1}
    finally:
        plain.close(autocommit=False)
        ours.close(autocommit=False)


def test_a_new_consumers_first_request_for_a_topic_is_not_held_back_either(
    apache_kafka_broker: BrokerProcess, unique_name: str
) -> None:
    """A consumer bootstrapped in its constructor leaves its metadata marked stale, and its
    refresh loop once refreshed it for no topic right away, which started the back-off again:
    its first ListOffsets or fetch then waited up to 100 ms."""
    create_kafka_topic(apache_kafka_broker.bootstrap, unique_name, 2)
    ours = new_consumer(bootstrap_servers=apache_kafka_broker.bootstrap, group_id=None)
    cluster = ours._client.cluster
    try:
        wait_until(
            lambda: not cluster.need_update and not cluster.metadata_refresh_in_progress,
            10,
            0.002,
            "the refresh loop to settle",
        )
        cluster.add_topic(unique_name)  # what a ListOffsets of an unknown topic does
        cluster.request_update()
        assert cluster.ttl() == 0
        assert ours.beginning_offsets([TopicPartition(unique_name, 0)]) == {
            TopicPartition(unique_name, 0): 0
        }
    finally:
        ours.close(autocommit=False)
