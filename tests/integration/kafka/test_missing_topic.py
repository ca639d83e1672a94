"""A Kafka topic that does not exist is an error where a batch is planned or sensed (issue 25:
a DAG with a misspelt topic waited forever), and planning never creates it.

On Apache Kafka (auto.create.topics.enable=true, as the emulators) too; there, on a fresh
cluster, the watch's first committed-offsets read meets COORDINATOR_NOT_AVAILABLE while the
broker creates __consumer_offsets, which the watch waits out (the emulators answer at once)."""

from __future__ import annotations

import pytest

from sluice.errors import TopicNotFoundError
from sluice.kafka.watch import watch_topic
from sluice.sensing import plan_now
from sluice.testing.plugin import Broker
from tests.integration.cli.conftest import read_topic


@pytest.mark.parametrize("broker_fixture", ["apache_kafka_broker", "noida_broker"])
def test_planning_and_watching_a_missing_topic_fail_naming_it(
    broker_fixture: str, request: pytest.FixtureRequest, unique_name: str
) -> None:
    broker: Broker = request.getfixturevalue(broker_fixture)
    config = {"connection.uri": broker.bootstrap, "topic": unique_name, "group_id": "g"}
    # the Airflow sensor's poke, batch="waiting" and `sluice ingest` plan through plan_now
    with pytest.raises(TopicNotFoundError, match=f"Topic '{unique_name}' does not exist at "):
        plan_now("kafka", config)
    # the Airflow trigger and the Dagster sensor ask the cluster's shared watch
    watcher = watch_topic(config)
    try:
        with pytest.raises(TopicNotFoundError, match="check its name"):
            watcher.backlog()
    finally:
        watcher.close()
    assert read_topic(broker.bootstrap, unique_name) == []  # nothing created it
