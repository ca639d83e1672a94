"""The formats end to end through the CLI and Dagster (execute_in_process), each only
translating its settings onto sluice.formats and sluice.spark.ingest: publish with a registry
behind a password, ingest, quarantine reasons, and the password nowhere it must not be.
(Airflow: tests/integration/airflow/test_formats.py, beside the Airflow harness.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.formats.encode import Encoder
from sluice.registry_server import start_schema_registry

from ..spark.conftest import KafkaTopic
from .conftest import (
    READING_AVRO,
    dataset_rows,
    quarantine_rows,
    reading,
    write_schema,
)

IOT_AVRO = {
    "type": "record",
    "name": "Iot",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "temperature", "type": "double"},
        {"name": "humidity", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
PASSWORD = "registry-pw-5e9c1"


def test_cli_publishes_peeks_and_ingests_avro_through_a_registry_with_a_password(
    spark: Any, noida_broker: Any, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.cli.runner import assert_ok, run, table_rows

    registry = start_schema_registry("cli", PASSWORD)
    try:
        monkeypatch.setenv("REGISTRY", registry.url.replace("http://", f"http://cli:{PASSWORD}@"))
        schema = write_schema(tmp_path, "readings.avsc", IOT_AVRO)
        topic = f"{noida_broker.url}/{unique_name}"
        out = assert_ok(
            run(
                "publish",
                topic,
                "--sample",
                "iot",
                "--count",
                "20",
                "--malformed",
                "2",
                "--format",
                "avro",
                "--schema",
                str(schema),
                "--registry",
                "env:REGISTRY",
            )
        )
        assert "Published 20 messages" in out
        peeked = assert_ok(
            run("peek", topic, "-n", "3", "--format", "avro", "--registry", "env:REGISTRY")
        )
        assert "'device': 'sensor-" in peeked and "temperature" in peeked

        result = run(
            "ingest",
            f"{topic}?group_id={unique_name}",
            "--sink",
            str(tmp_path / "lake"),
            "--format",
            "avro",
            "--registry",
            "env:REGISTRY",
        )
        shown = {row[0]: row[1] for row in table_rows(assert_ok(result))}
        assert (shown["written"], shown["quarantined"]) == ("18", "2")
        assert all(
            "truncated: 3 byte(s)" in r["reason"] for r in quarantine_rows(tmp_path / "lake")
        )
        assert PASSWORD not in result.output + out + peeked
    finally:
        registry.stop()


def test_dagster_ingests_avro_with_a_schema_registry_resource(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    from dagster import EnvVar

    from sluice_dagster import KafkaQueueResource, SchemaRegistryResource, SparkResource
    from sluice_dagster.jobs import make_ingest_job
    from sluice_dagster.ops import ingest_run_config

    registry = start_schema_registry("dagster", PASSWORD)
    try:
        encoder = Encoder(
            "avro",
            topic.name,
            json.dumps(READING_AVRO),
            registry.url.replace("http://", f"http://dagster:{PASSWORD}@"),
        )
        topic.send([encoder.encode(reading(i)) for i in range(5)] + [b"\x00\x00\x00"])
        spec = topic.plan()
        job = make_ingest_job(
            "readings",
            "queue",
            str(tmp_path / "lake"),
            value_format="avro",
            schema_registry_key="registry",
        )
        import os

        os.environ["SLUICE_TEST_REGISTRY_PW"] = PASSWORD
        result = job.execute_in_process(
            run_config=ingest_run_config(spec, "readings_ingest"),
            resources={
                "queue": KafkaQueueResource(
                    bootstrap=topic.broker.bootstrap,
                    topic=topic.name,
                    group_id=f"{topic.name}-group",
                ),
                "spark": SparkResource(),
                "registry": SchemaRegistryResource(
                    url=registry.url, username="dagster", password=EnvVar("SLUICE_TEST_REGISTRY_PW")
                ),
            },
        )
        assert result.success
        metadata = result.output_for_node("readings_ingest")
        assert (metadata["written"], metadata["quarantined"]) == (5, 1)
        assert sorted(r["id"] for r in dataset_rows(tmp_path / "lake")) == [
            f"r{i}" for i in range(5)
        ]
        assert plan_batch(topic.queue) is None
        events = "".join(str(e) for e in result.all_events)
        assert PASSWORD not in events
    finally:
        registry.stop()
