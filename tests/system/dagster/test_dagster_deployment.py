"""The example Definitions in a real Dagster deployment (webserver + daemon): the Kafka sensor,
turned on through GraphQL, requests one run for the published messages, the run ingests them
exactly once, and a restarted daemon asks for no second run of the same batch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster_deployment import DagsterDeployment, wait_for

from sluice.kafka import KafkaConnection
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[3]
SENSOR = "kafka_events_sensor"

REPOSITORIES = """{ repositoriesOrError { __typename ... on RepositoryConnection { nodes {
  name location { name } sensors { name sensorState { status } } } } } }"""
START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
  __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""
TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status ticks(limit: 50) {
    status timestamp skipReason runIds error { message } } } } } }"""
RUN_ERRORS = """query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection {
  events { __typename ... on ErrorEvent { error { message cause { message stack } } } } } } }"""
RUNS = """query($v: String!) { runsOrError(filter: {tags: [{key: "sluice/sensor", value: $v}]}) {
  __typename ... on Runs { results { runId status tags { key value } } } } }"""


@pytest.fixture
def deployment(
    noida_broker: BrokerProcess, unique_name: str, tmp_path: Path
) -> Iterator[DagsterDeployment]:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    env = {
        "SLUICE_EXAMPLE_KAFKA_BOOTSTRAP": noida_broker.bootstrap,
        "SLUICE_EXAMPLE_KAFKA_TOPIC": unique_name,
        "SLUICE_EXAMPLE_SINK": str(tmp_path / "lake"),
        "SLUICE_EXAMPLE_SENSOR_INTERVAL": "2",
        "SLUICE_SPARK_MASTER": "local[1]",
    }
    deployment = DagsterDeployment(
        ROOT / "dags_examples" / "dagster_defs.py", tmp_path / "dagster_home", env, ROOT
    )
    try:
        yield deployment.start()
    finally:
        deployment.stop()


def sensor_selector(deployment: DagsterDeployment) -> dict[str, str] | None:
    data = deployment.graphql(REPOSITORIES)["repositoriesOrError"]
    for repo in data.get("nodes", []):
        if SENSOR in [s["name"] for s in repo["sensors"]]:
            return {
                "repositoryName": repo["name"],
                "repositoryLocationName": repo["location"]["name"],
                "sensorName": SENSOR,
            }
    return None


def ticks(deployment: DagsterDeployment, selector: dict[str, str]) -> list[dict[str, Any]]:
    sensor = deployment.graphql(TICKS, {"s": selector})["sensorOrError"]
    found: list[dict[str, Any]] = sensor["sensorState"]["ticks"]
    return found


def runs(deployment: DagsterDeployment) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = deployment.graphql(RUNS, {"v": SENSOR})["runsOrError"]["results"]
    return found


def finished_run(deployment: DagsterDeployment) -> dict[str, Any] | None:
    for run in runs(deployment):
        if run["status"] in ("FAILURE", "CANCELED"):
            logs = deployment.graphql(RUN_ERRORS, {"id": run["runId"]})["logsForRun"]
            errors = [e["error"] for e in logs.get("events", []) if e.get("error")]
            raise AssertionError(f"run {run['runId']} ended {run['status']}: {errors}")
        if run["status"] == "SUCCESS":
            return run
    return None


def test_one_run_per_batch_exactly_once_across_a_daemon_restart(
    deployment: DagsterDeployment, noida_broker: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    logs = (deployment.daemon, deployment.code_server, deployment.webserver)
    selector = wait_for(lambda: sensor_selector(deployment), 60, "the code location", *logs)
    started = deployment.graphql(START_SENSOR, {"s": selector})["startSensor"]
    assert started["__typename"] == "Sensor", started
    wait_for(lambda: ticks(deployment, selector), 60, "the sensor's first tick", *logs)

    connection = KafkaConnection()
    connection.configure({"connection.uri": noida_broker.bootstrap})
    connection.open(None)
    try:
        values = [
            {"value": json.dumps({"device": f"d{i}", "temperature": float(i)}).encode()}
            for i in range(5)
        ]
        connection.publish(unique_name, values, {"partition": 0})
    finally:
        connection.close(None)

    run = wait_for(lambda: finished_run(deployment), 150, "a successful ingest run", *logs)
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dagster/run_key"] == tags["sluice/batch_id"]
    table = pq.read_table(str(tmp_path / "lake" / "kafka_events"))
    assert sorted(table.column("temperature").to_pylist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert table.column("batch_id").unique().to_pylist() == [tags["sluice/batch_id"]]

    skipped = [t["skipReason"] or "" for t in ticks(deployment, selector)]
    assert any("still being ingested" in reason for reason in skipped), skipped

    restarted = time.time()
    deployment.restart_daemon()

    def ticks_since_restart() -> list[dict[str, Any]]:
        later = [t for t in ticks(deployment, selector) if t["timestamp"] > restarted]
        return later if len([t for t in later if t["status"] != "STARTED"]) >= 2 else []

    later = wait_for(ticks_since_restart, 90, "two sensor ticks after the restart", *logs)
    done = [t for t in later if t["status"] != "STARTED"]
    assert all(t["status"] == "SKIPPED" for t in done), done
    assert all("no messages waiting" in (t["skipReason"] or "") for t in done), done
    assert [r["runId"] for r in runs(deployment)] == [run["runId"]], "one run, one batch"
