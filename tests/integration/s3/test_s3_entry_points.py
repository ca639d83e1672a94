"""Object storage from the entry points users call: ``sluice ingest`` / ``sluice audit`` on
``s3://`` and on an Iceberg warehouse on S3, a Dagster asset writing an Iceberg table on S3
(its secret nowhere in logs or metadata), and ``sluice brokers up --s3``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, Definitions, materialize

from sluice.audit import audit
from sluice.testing import BrokerProcess
from sluice.testing.plugin import S3Bucket
from sluice.testing.topics import create_kafka_topic
from sluice_dagster import KafkaQueueResource, SparkResource, make_ingest_asset, make_queue_sensor
from sluice_dagster.testing import SensorTicker
from tests.unit.cli.runner import assert_ok, run

from ..dagster.conftest import publish_kafka
from ..iceberg.conftest import Lake, table_rows


def test_sluice_ingest_and_audit_on_s3(
    spark: Any, noida_broker: BrokerProcess, unique_name: str, s3_bucket: S3Bucket
) -> None:
    topic = f"{noida_broker.url}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "40", "--malformed", "2"))
    sink = s3_bucket.uri("cli/readings")
    schema = "device STRING, temperature DOUBLE"
    assert_ok(run("ingest", f"{topic}?group_id={unique_name}", "--sink", sink, "--schema", schema))
    out = assert_ok(run("audit", sink, "--source", noida_broker.url))
    assert "committed 40, written 38, quarantined 2, doubled 0, missing 0" in out
    assert out.strip().endswith("OK: every message is in the sink once.")


@pytest.fixture
def instance() -> Any:
    with DagsterInstance.ephemeral() as found:
        yield found


def test_a_dagster_asset_writes_an_iceberg_table_on_s3_and_shows_no_secret(
    spark: Any,
    noida_broker: BrokerProcess,
    unique_name: str,
    s3_sqlite_lake: Lake,
    s3_bucket: S3Bucket,
    instance: DagsterInstance,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    publish_kafka(noida_broker.bootstrap, unique_name, range(5), partition=0)
    sink = s3_sqlite_lake.sink("orders")
    events = make_ingest_asset("events", "queue", sink, schema="id INT, name STRING")
    sensor = make_queue_sensor("events_sensor", "queue", asset_selection=[events])
    queue = KafkaQueueResource(
        bootstrap=noida_broker.bootstrap, topic=unique_name, group_id=f"{unique_name}-lake"
    )
    resources = {"queue": queue, "spark": SparkResource()}
    definitions = Definitions(assets=[events], sensors=[sensor], resources=resources)
    request = SensorTicker.from_definitions(definitions, "events_sensor", instance).request()
    with caplog.at_level(logging.DEBUG):
        result = materialize(
            [events],
            run_config=request.run_config,
            tags=request.tags,
            instance=instance,
            resources=resources,
        )
    assert result.success
    assert sorted(r["id"] for r in table_rows(s3_sqlite_lake, "orders")) == list(range(5))
    [materialization] = result.asset_materializations_for_node("events")
    shown = json.dumps({k: str(v.value) for k, v in materialization.metadata.items()})
    secret = s3_bucket.server.secret_key
    assert secret not in shown and secret not in caplog.text
    records = instance.all_logs(result.run_id)
    assert not [r for r in records if secret in str(r)]
    assert audit(sink, noida_broker.url).ok


def test_sluice_brokers_up_s3_runs_a_server_with_the_bucket_lake(tmp_path: Path) -> None:
    env = {"SLUICE_HOME": str(tmp_path / "home")}
    out = assert_ok(run("brokers", "up", "--s3", "--kafka", "none", "--no-mqtt", env=env))
    try:
        assert "Started seaweedfs (S3)" in out and "AWS_ENDPOINT_URL=http://127.0.0.1:" in out
        status = json.loads(assert_ok(run("brokers", "status", "--json", env=env)))
        (server,) = status["brokers"]
        assert server["alive"] and server["name"] == "seaweedfs"
        import botocore.session

        from sluice.cli.brokers import S3_ACCESS_KEY, S3_SECRET_KEY

        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=server["url"],
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            region_name="us-east-1",
        )
        assert "lake" in [b["Name"] for b in client.list_buckets()["Buckets"]]
    finally:
        assert_ok(run("brokers", "down", "--purge", env=env))
