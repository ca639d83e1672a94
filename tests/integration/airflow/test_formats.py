"""The formats through Airflow (dag.test()): QueuePublishOperator and SparkIngestOperator
with a schema registry behind a password, named by an Airflow connection; the password
nowhere it must not be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.formats.encode import Encoder
from sluice.registry_server import start_schema_registry

from ..formats.conftest import READING_PROTO, dataset_rows, write_schema
from ..formats.test_orchestrators import PASSWORD

AIRFLOW_DAG = """
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.operators.spark import SparkIngestOperator

with {dag} as dag:
    publish = QueuePublishOperator(
        task_id="publish", conn_id="sluice_kafka_default", topic={topic!r},
        messages=[{{"id": "r1", "temperature": 1.5}}, {{"id": "r2", "temperature": "hot"}}],
        value_format="protobuf", value_schema={proto!r}, schema_registry_conn_id="registry",
    )
    ingest = SparkIngestOperator(
        task_id="ingest", conn_id="sluice_kafka_default", batch="waiting", topic={topic!r},
        config={{"group_id": {group!r}}}, sink={sink!r}, value_format="protobuf",
        schema_registry_conn_id="registry",
    )
    publish >> ingest
"""


@pytest.mark.usefixtures("airflow_db")
def test_airflow_publishes_and_ingests_protobuf_with_the_registry_of_a_connection(
    spark: Any,
    kafka_conn: str,
    set_connection: Any,
    unique_name: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from tests.integration.airflow.dag_runs import everything_seen, run_test_dag

    registry = start_schema_registry("airflow", PASSWORD)
    try:
        port = registry.server_address[1]
        set_connection("registry", "http", "127.0.0.1", port, login="airflow", password=PASSWORD)
        proto = write_schema(tmp_path, "reading.proto", READING_PROTO)
        sink = tmp_path / "lake"
        with pytest.raises(ValueError, match="cannot write"):  # "hot" is no double
            Encoder("protobuf", unique_name, f"{proto}").encode({"id": "r2", "temperature": "hot"})
        run = run_test_dag(
            unique_name.replace("-", "_"),
            AIRFLOW_DAG,
            topic=unique_name,
            group=f"{unique_name}-g",
            proto=str(proto),
            sink=str(sink),
        )
        assert run.states == {"publish": "failed", "ingest": "upstream_failed"}

        good = AIRFLOW_DAG.replace(', {{"id": "r2", "temperature": "hot"}}', "")
        run = run_test_dag(
            unique_name.replace("-", "_") + "_2",
            good,
            topic=unique_name,
            group=f"{unique_name}-g",
            proto=str(proto),
            sink=str(sink),
        )
        assert run.succeeded, run.states
        assert run.xcom("ingest")["written"] == 1
        (row,) = dataset_rows(sink)
        assert (row["id"], row["temperature"]) == ("r1", 1.5)
        for where, text in everything_seen(run.dag_run, capfd).items():
            assert PASSWORD not in text, f"the registry's password in {where}"
    finally:
        registry.stop()
