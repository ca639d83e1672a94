"""New kafka-python consumers ask for their topics' metadata without first waiting out the
back-off their bootstrap started (sluice.kafka.clients)."""

from __future__ import annotations

from kafka import KafkaConsumer

from sluice.kafka.clients import new_consumer
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic


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
