"""Sluice over Spark Connect (``sc://``) against pyspark's own Connect server, whose Python
workers have pyarrow and pandas but not Sluice: every client ships it (the Airflow operator
with ``SLUICE_SPARK_SHIP=1``, Dagster's ``SparkResource(ship_sluice=True)``, which both use
``spark_session(..., ship_sluice=True)``). The Spark clusters guide's page runs an Airflow DAG and
a Dagster asset over a Connect server as a user does (tests/system/test_docs.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.brokers import BrokerProcess
from sluice.testing.spark_cluster import ConnectServer
from tests.integration.spark.conftest import KafkaTopic, open_topic
from tests.system.spark.conftest import SCHEMA, run_driver, sink_offsets
from tests.system.spark.test_cluster import publish

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]

MODES = ("driver", "executors")


@pytest.fixture
def two_topics(noida_broker: BrokerProcess, unique_name: str) -> Iterator[list[KafkaTopic]]:
    """One 3-partition topic per reading mode, 300 messages each."""
    topics = [open_topic(noida_broker, f"{unique_name}-{mode}", 3) for mode in MODES]
    for topic in topics:
        publish(topic, 300, partitions=3)
    yield topics
    for topic in topics:
        topic.queue.close(None)
        topic.producer.close()


def both_modes(topics: list[KafkaTopic], tmp_path: Path, master: str) -> dict[str, Any]:
    return {
        "master": master,
        "source": topics[0].source,
        "schema": SCHEMA,
        "specs": [topic.plan().to_dict() for topic in topics],
        "sinks": [str(tmp_path / mode) for mode in MODES],
        "modes": list(MODES),
    }


def check(results: list[dict[str, Any]], topics: list[KafkaTopic], tmp_path: Path) -> None:
    for result, topic, mode in zip(results, topics, MODES, strict=True):
        assert (result["read"], result["written"]) == (300, 300), result
        assert sink_offsets(tmp_path / mode) == sorted((p, o) for p in range(3) for o in range(100))
        assert topic.queue.read_message_count() == 0


def test_airflow_operator_ingests_over_spark_connect(
    connect_server: ConnectServer,
    two_topics: list[KafkaTopic],
    noida_broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    """SparkIngestOperator(spark_master="sc://..."); SLUICE_SPARK_SHIP=1 ships Sluice."""
    connection = {"conn_type": "sluice_kafka", "host": noida_broker.host, "port": noida_broker.port}
    job = both_modes(two_topics, tmp_path, connect_server.url) | {"connection": connection}
    results = run_driver("airflow", job, SLUICE_SPARK_SHIP="1")
    assert [r["mode"] for r in results] == list(MODES)
    check(results, two_topics, tmp_path)


def test_dagster_spark_resource_ingests_over_spark_connect(
    connect_server: ConnectServer,
    two_topics: list[KafkaTopic],
    noida_broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    job = both_modes(two_topics, tmp_path, connect_server.url) | {
        "bootstrap": noida_broker.bootstrap,
        "ship": True,
    }
    results = run_driver("dagster", job)
    check(results, two_topics, tmp_path)


def test_spark_reader_over_spark_connect(
    connect_server: ConnectServer, two_topics: list[KafkaTopic], tmp_path: Path
) -> None:
    """options.reader 'spark' on a Connect server started with the Kafka source's jars."""
    job = both_modes(two_topics, tmp_path, connect_server.url) | {
        "ship": True,
        "source": f"{two_topics[0].source}?reader=spark",
    }
    results = run_driver("python", job)
    assert [r["mode"] for r in results] == ["spark", "spark"]
    check(results, two_topics, tmp_path)
