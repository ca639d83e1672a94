"""The example DAGs, each run once with ``dag.test()`` against real brokers and the session's
local Spark; the Parquet they write is read back with pyarrow. The Kafka run uses a SASL
password, which must appear nowhere: task logs, XCom, rendered template fields, the
serialized DAG and trigger."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from sluice.batch import BatchSpec
from sluice.brokers import BrokerProcess
from sluice.mqtt import MqttMessageQueue
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.testing import import_dag_file, run_dag
from tests.airflow_env import DAGS_FOLDER
from tests.integration.airflow import dag_runs
from tests.integration.airflow.conftest import SetConnection

pytestmark = pytest.mark.usefixtures("airflow_db", "spark")

READINGS = [
    {"device": f"sensor-{n % 2}", "temperature": 20.0 + n, "ts": f"2026-01-01T12:00:0{n}Z"}
    for n in range(5)
]


def publish(conn_id: str, topic: str, messages: list[Any]) -> None:
    task = QueuePublishOperator(task_id="publish", conn_id=conn_id, topic=topic, messages=messages)
    task.execute({})  # type: ignore[arg-type]


def dataset_rows(path: Path) -> list[dict[str, Any]]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    rows: list[dict[str, Any]] = table.select(["device", "temperature"]).to_pylist()
    return sorted(rows, key=lambda r: (r["temperature"], r["device"]))


def expected_rows(more: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    rows = [{"device": r["device"], "temperature": r["temperature"]} for r in [*READINGS, *more]]
    return sorted(rows, key=lambda r: (r["temperature"], r["device"]))


def example(file: str, monkeypatch: pytest.MonkeyPatch, sink: Path, **env: str) -> Any:
    """The example DAG file ``file``, imported with the test's settings in the environment."""
    monkeypatch.setenv("SLUICE_EXAMPLE_SINK", str(sink))
    monkeypatch.setenv("SLUICE_EXAMPLE_SCHEDULE", "none")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return import_dag_file(DAGS_FOLDER / f"{file}.py")


def test_kafka_to_parquet_keeps_the_password_secret(
    noida_broker: BrokerProcess,
    set_connection: SetConnection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    password: str,
) -> None:
    conn = set_connection(
        "sluice_kafka_default",
        "sluice_kafka",
        noida_broker.host,
        noida_broker.port,
        login="sluice",
        password=password,
        extra={"connection.protocol": "sasl_plaintext", "options.session_timeout": 6000},
    )
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    publish(conn, unique_name, [*READINGS, "not json"])
    dag = example(
        "queue_to_parquet",
        monkeypatch,
        tmp_path,
        SLUICE_EXAMPLE_KAFKA_TOPIC=unique_name,
        SLUICE_EXAMPLE_KAFKA_GROUP=f"{unique_name}-group",
    ).kafka_to_parquet
    run = run_dag(dag)
    assert run.states == {"wait_for_messages": "success", "ingest": "success"}
    values = run.xcoms()
    spec = BatchSpec.from_dict(values["wait_for_messages"])
    assert (spec.topic, spec.group_id, spec.message_count) == (
        unique_name,
        f"{unique_name}-group",
        6,
    )
    result = values["ingest"]
    assert (result["batch_id"], result["read"], result["written"], result["quarantined"]) == (
        spec.batch_id,
        6,
        5,
        1,
    )
    assert result["committed"] is True
    assert dataset_rows(tmp_path / "kafka_to_parquet") == expected_rows()

    # the password, nowhere
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        dag.get_task("wait_for_messages").execute({})
    seen = {
        "serialized trigger": json.dumps(deferred.value.trigger.serialize()),
        **dag_runs.everything_seen(run.dag_run, capfd),
    }
    # what was searched holds what it should: task logs, XCom, rendered fields, serialized DAG
    assert "Ingesting batch" in seen["task output"]
    assert spec.batch_id in seen["database"]
    assert str(tmp_path / "kafka_to_parquet") in seen["database"]
    assert "sluice_airflow.sensors.queue" in seen["database"]
    assert [where for where, text in seen.items() if password in text] == []


def test_mqtt_to_parquet(
    mosquitto_broker: BrokerProcess,
    set_connection: SetConnection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    broker = mosquitto_broker
    conn = set_connection("sluice_mqtt_default", "sluice_mqtt", broker.host, broker.port)
    topic, session = f"sluice/{unique_name}", f"{unique_name}-ingest"
    # The persistent session exists before the readings are published (as after a first run),
    # so the broker keeps them for it.
    queue = MqttMessageQueue()
    queue.configure(
        {
            "connection.host": broker.host,
            "connection.port": broker.port,
            "topic": topic,
            "client_id": session,
            "options.qos": 1,
            "autocommit": False,
        }
    )
    queue.open(None)
    queue.close(None)
    publish(conn, topic, READINGS)
    dag = example(
        "queue_to_parquet",
        monkeypatch,
        tmp_path,
        SLUICE_EXAMPLE_MQTT_TOPIC=topic,
        SLUICE_EXAMPLE_MQTT_CLIENT_ID=session,
    ).mqtt_to_parquet
    run = run_dag(dag)
    assert run.states == {"wait_for_messages": "success", "ingest": "success"}
    values = run.xcoms()
    spec = BatchSpec.from_dict(values["wait_for_messages"])
    assert (spec.kind, spec.topic, spec.client_id) == ("mqtt", topic, session)
    assert (values["ingest"]["read"], values["ingest"]["written"]) == (5, 5)
    assert dataset_rows(tmp_path / "mqtt_to_parquet") == expected_rows()
    # the ingest task's log tells every phase (sluice.spark.progress.ProgressLog)
    logged = "\n".join(dag_runs.everything_seen(run.dag_run, capfd).values())
    phases = ("starting Spark", "starting:", "read: 5", "writing:", "publishing batch")
    for phase in (*phases, "committing:", f"committed: batch {spec.batch_id}"):
        assert phase in logged, (phase, logged[-3000:])


def test_kafka_event_driven_ingests_the_watchers_batch(
    noida_broker: BrokerProcess,
    kafka_conn: str,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn = kafka_conn
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    publish(conn, unique_name, READINGS)
    module = example(
        "kafka_event_driven",
        monkeypatch,
        tmp_path,
        SLUICE_EXAMPLE_KAFKA_TOPIC=unique_name,
        SLUICE_EXAMPLE_KAFKA_EVENT_GROUP=f"{unique_name}-group",
    )
    dag = module.dag
    assert dag.schedule == [module.readings]
    (watcher,) = module.readings.watchers
    trigger = type(watcher.trigger)(**watcher.trigger.serialize()[1])  # as the triggerer does

    async def first_event() -> Any:
        events = trigger.run()
        try:
            return (await asyncio.wait_for(anext(events), 30)).payload
        finally:
            await events.aclose()

    batch = asyncio.run(first_event())
    planned = BatchSpec.from_dict(batch)
    assert planned.message_count == 5
    # readings that arrive after the event, while the run is queued: up_to="latest" takes them
    later = [{**r, "device": f"late-{r['device']}"} for r in READINGS[:3]]
    publish(conn, unique_name, later)
    # dag.test() cannot attach asset events to its run; a run triggered with the batch as
    # conf takes the same path from there (triggering_asset_events: tests/unit/airflow).
    run = run_dag(dag, run_conf={"batch": batch})
    assert run.states == {"ingest": "success"}
    result = run.xcom("ingest")
    assert result["written"] == 8 and result["skipped"] == 0
    assert result["batch_id"] != planned.batch_id
    assert result["ranges"] == [{"partition": 0, "start": 0, "end": 8}]
    assert dataset_rows(tmp_path / "kafka_event_driven") == expected_rows(later)
