"""Apache Iceberg's Kafka Connect sink runs here (:mod:`sluice.testing.iceberg_connect`):
its jars resolve, a Connect worker of Apache Kafka's own loads it, and it commits a topic's
messages into a table of the session's REST catalog, the harness ``bench/iceberg_connect.py``
measures Sluice beside."""

from __future__ import annotations

import json
import uuid

import pytest

from sluice.brokers import BrokerProcess, create_kafka_topic
from sluice.testing.iceberg_connect import METADATA_COLUMNS, sink_config, start_iceberg_connect
from sluice.testing.rest_catalog import RestCatalogServer
from sluice.testing.waiting import wait_until

pytestmark = pytest.mark.kafka


def test_the_sink_commits_a_topic_into_the_rest_catalog(
    apache_kafka_broker: BrokerProcess, rest_catalog: RestCatalogServer, unique_name: str
) -> None:
    from kafka import KafkaProducer
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("connect", **rest_catalog.client_properties())
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    bootstrap = apache_kafka_broker.bootstrap
    create_kafka_topic(bootstrap, unique_name, 3)
    create_kafka_topic(bootstrap, f"{unique_name}-control", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(12):
        value = {"device": f"d-{i}", "temperature": 0.5 + i}
        producer.send(unique_name, json.dumps(value).encode(), partition=i % 3)
    producer.flush()
    producer.close()

    with start_iceberg_connect(bootstrap, rest_catalog) as worker:
        config = sink_config(
            unique_name,
            f"{namespace}.readings",
            rest_catalog,
            control_topic=f"{unique_name}-control",
            commit_interval_ms=1000,
        )
        assert not any("secret" in key or "access-key" in key for key in config)
        worker.put_connector("iceberg", config)
        worker.wait_running("iceberg")

        def committed() -> list[dict[str, object]] | None:
            if not catalog.table_exists(f"{namespace}.readings"):
                return None
            rows = catalog.load_table(f"{namespace}.readings").scan().to_arrow().to_pylist()
            return rows if len(rows) >= 12 else None

        rows = wait_until(committed, 90, 0.5, "the sink's first commit")
        assert rows is not None

    assert sorted((r["device"], r["temperature"]) for r in rows) == sorted(
        (f"d-{i}", 0.5 + i) for i in range(12)
    )
    assert set(METADATA_COLUMNS) <= set(rows[0])
    offsets = sorted((r["_kafka_metadata_partition"], r["_kafka_metadata_offset"]) for r in rows)
    assert offsets == sorted((p, o) for p in range(3) for o in range(4))
