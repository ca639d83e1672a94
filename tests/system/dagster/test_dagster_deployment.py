"""The example Definitions in one real Dagster deployment (code server, webserver, daemon)
for the module's tests:

- the Kafka sensor, turned on through GraphQL, requests one run for the published messages,
  the run ingests them exactly once, and a restarted daemon asks for no second run of the
  same batch;
- the MQTT schedule, ticking every minute (turned on first, so that its ticks overlap the
  sensor's test): its first run fails (the dataset's path is a file), the next tick's run
  takes the failed run's messages with those published since, the tick after it skips with
  nothing waiting; ``sluice audit`` finds every message once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster_deployment import START_SENSOR, DagsterDeployment, runs, selector_of, wait_for

from sluice.audit import audit
from sluice.kafka import KafkaConnection
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic

pytestmark = [pytest.mark.kafka, pytest.mark.mqtt]

ROOT = Path(__file__).resolve().parents[3]
SENSOR = "kafka_events_sensor"
SCHEDULE = "mqtt_readings_schedule"

TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status ticks(limit: 50) {
    status timestamp skipReason runIds error { message stack cause { message stack } } } } } } }"""
RUN_ERRORS = """query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection {
  events { __typename ... on ErrorEvent { error { message cause { message stack } } } } } } }"""
START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
  __typename ... on ScheduleStateResult { scheduleState { status } }
  ... on PythonError { message } } }"""
SCHEDULE_TICKS = """query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) {
  __typename ... on Schedule { scheduleState { status ticks(limit: 50) {
    status timestamp skipReason runIds error { message } } } } } }"""


@dataclass
class Example:
    """The deployment of the example Definitions and what its tests publish to."""

    deployment: DagsterDeployment
    kafka_topic: str
    mqtt_topic: str  # the filter of the schedule's session; readings go to its subtopics
    mqtt: BrokerProcess
    lake: Path

    @property
    def logs(self) -> tuple[Any, ...]:
        d = self.deployment
        return (d.daemon, d.code_server, d.webserver)


def publish_readings(broker: BrokerProcess, topic: str, devices: list[str]) -> None:
    """IoT readings at QoS 1 (the broker queues them for the schedule's session)."""
    queue = MqttMessageQueue()
    queue.configure(
        {
            "connection.host": broker.host,
            "connection.port": broker.port,
            "topic": topic,
            "options.qos": 1,
        }
    )
    queue.open(None)
    try:
        for device in devices:
            reading = {"device": device, "temperature": 20.5, "ts": "2026-01-01T12:00:00Z"}
            queue.send(None, MessageEnvelope(None, "reading", reading))
    finally:
        queue.close(None)


@pytest.fixture(scope="module")
def example(
    noida_broker: BrokerProcess,
    mosquitto_broker: BrokerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Example]:
    """The deployment, with the MQTT schedule turned on: five readings wait in its session
    and its dataset's path is a file, so its first run fails."""
    name = f"dagster-system-{uuid.uuid4().hex[:8]}"
    tmp_path = tmp_path_factory.mktemp("dagster-system")
    create_kafka_topic(noida_broker.bootstrap, name, 1)
    env = {
        "SLUICE_EXAMPLE_KAFKA_BOOTSTRAP": noida_broker.bootstrap,
        "SLUICE_EXAMPLE_KAFKA_TOPIC": name,
        "SLUICE_EXAMPLE_MQTT_URL": mosquitto_broker.url,
        "SLUICE_EXAMPLE_MQTT_TOPIC": f"{name}/#",
        "SLUICE_EXAMPLE_MQTT_CLIENT_ID": name,
        "SLUICE_EXAMPLE_SINK": str(tmp_path / "lake"),
        "SLUICE_EXAMPLE_SENSOR_INTERVAL": "2",
        "SLUICE_EXAMPLE_INGEST_CRON": "* * * * *",
        "SLUICE_SPARK_MASTER": "local[1]",
    }
    deployment = DagsterDeployment(
        ROOT / "dags_examples" / "dagster_defs.py", tmp_path / "dagster_home", env, ROOT
    )
    found = Example(deployment, name, f"{name}/#", mosquitto_broker, tmp_path / "lake")
    # The session exists before the readings are published (as after an earlier tick), so
    # the broker keeps them for it.
    session = MqttMessageQueue()
    session.configure(
        {
            "connection.uri": mosquitto_broker.url,
            "topic": found.mqtt_topic,
            "client_id": name,
            "options.qos": 1,
            "autocommit": False,
        }
    )
    session.open(None)
    session.close(None)
    publish_readings(mosquitto_broker, f"{name}/line-1", [f"m-{i}" for i in range(5)])
    found.lake.mkdir()
    (found.lake / "mqtt_readings").write_text("a file where the dataset goes: no run can write")
    try:
        deployment.start()
        selector = wait_for(
            lambda: selector_of(deployment, SCHEDULE, "schedules"),
            60,
            "the code location",
            *found.logs,
        )
        started = deployment.graphql(START_SCHEDULE, {"s": selector})["startSchedule"]
        assert started["__typename"] == "ScheduleStateResult", started
        yield found
    finally:
        deployment.stop()


def ticks(deployment: DagsterDeployment, selector: dict[str, str]) -> list[dict[str, Any]]:
    sensor = deployment.graphql(TICKS, {"s": selector})["sensorOrError"]
    found: list[dict[str, Any]] = sensor["sensorState"]["ticks"]
    return found


def run_errors(deployment: DagsterDeployment, run_id: str) -> list[Any]:
    logs = deployment.graphql(RUN_ERRORS, {"id": run_id})["logsForRun"]
    return [e["error"] for e in logs.get("events", []) if e.get("error")]


def finished_run(deployment: DagsterDeployment) -> dict[str, Any] | None:
    for run in runs(deployment, "sluice/sensor", SENSOR):
        if run["status"] in ("FAILURE", "CANCELED"):
            errors = run_errors(deployment, run["runId"])
            raise AssertionError(f"run {run['runId']} ended {run['status']}: {errors}")
        if run["status"] == "SUCCESS":
            return run
    return None


def test_one_run_per_batch_exactly_once_across_a_daemon_restart(
    example: Example, noida_broker: BrokerProcess
) -> None:
    deployment, unique_name, logs = example.deployment, example.kafka_topic, example.logs
    selector = wait_for(
        lambda: selector_of(deployment, SENSOR, "sensors"), 60, "the code location", *logs
    )
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

    published = time.monotonic()
    run = wait_for(lambda: finished_run(deployment), 300, "a successful ingest run", *logs)
    print(f"sensor: publish -> run succeeded in {time.monotonic() - published:.1f} s")
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dagster/run_key"] == tags["sluice/batch_id"]
    table = pq.read_table(str(example.lake / "kafka_events"))
    assert sorted(table.column("temperature").to_pylist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert table.column("batch_id").unique().to_pylist() == [tags["sluice/batch_id"]]

    skipped = [t["skipReason"] or "" for t in ticks(deployment, selector)]
    assert any("still being ingested" in reason for reason in skipped), skipped

    restarted = deployment.restart_daemon()

    def ticks_since_restart() -> list[dict[str, Any]]:
        later = [t for t in ticks(deployment, selector) if t["timestamp"] > restarted]
        return later if len([t for t in later if t["status"] != "STARTED"]) >= 2 else []

    later = wait_for(ticks_since_restart, 180, "two sensor ticks after the restart", *logs)
    done = [t for t in later if t["status"] != "STARTED"]
    assert all(t["status"] == "SKIPPED" for t in done), [t["error"] for t in done]
    assert all("no messages waiting" in (t["skipReason"] or "") for t in done), done
    sensor_runs = runs(deployment, "sluice/sensor", SENSOR)
    assert [r["runId"] for r in sensor_runs] == [run["runId"]], "one run, one batch"


def schedule_runs(example: Example, status: str) -> list[dict[str, Any]]:
    """The schedule's runs that ended ``status``, oldest first."""
    found = runs(example.deployment, "sluice/schedule", SCHEDULE)
    return sorted((r for r in found if r["status"] == status), key=lambda r: r["startTime"])


def schedule_ticks(example: Example) -> list[dict[str, Any]]:
    selector = selector_of(example.deployment, SCHEDULE, "schedules")
    answer = example.deployment.graphql(SCHEDULE_TICKS, {"s": selector})["scheduleOrError"]
    found: list[dict[str, Any]] = answer["scheduleState"]["ticks"]
    return found


def test_the_schedule_ingests_a_failed_runs_messages_with_the_next_tick_then_skips(
    example: Example,
) -> None:
    logs = example.logs
    failed = wait_for(
        lambda: schedule_runs(example, "FAILURE"), 300, "a failed scheduled run", *logs
    )[0]
    errors = json.dumps(run_errors(example.deployment, failed["runId"]))
    assert str(example.lake / "mqtt_readings") in errors, errors

    line_2 = [f"m-{i}" for i in range(5, 8)]
    publish_readings(example.mqtt, example.mqtt_topic.replace("#", "line-2"), line_2)
    (example.lake / "mqtt_readings").unlink()
    ok = wait_for(
        lambda: schedule_runs(example, "SUCCESS"), 300, "a successful scheduled run", *logs
    )[0]
    seen = time.time()  # the ticks after this one
    tags = {t["key"]: t["value"] for t in ok["tags"]}
    assert tags["dagster/run_key"] == tags["sluice/batch_id"]
    assert tags["dagster/schedule_name"] == tags["sluice/schedule"] == SCHEDULE
    [tick] = [t for t in schedule_ticks(example) if ok["runId"] in t["runIds"]]
    print(f"schedule: tick -> run succeeded in {ok['endTime'] - tick['timestamp']:.1f} s")

    # One run took the failed run's five readings and the three published since.
    table = pq.read_table(str(example.lake / "mqtt_readings"))
    assert sorted(table.column("device").to_pylist()) == [f"m-{i}" for i in range(8)]
    assert table.column("batch_id").unique().to_pylist() == [tags["sluice/batch_id"]]
    report = audit(example.lake / "mqtt_readings")
    assert report.ok, "\n".join(report.lines())
    assert [(s.messages, s.doubled) for s in report.streams] == [(8, 0)]

    # The tick after it finds the session empty and says so.
    def skipped_later() -> list[dict[str, Any]]:
        return [
            t for t in schedule_ticks(example) if t["status"] == "SKIPPED" and t["timestamp"] > seen
        ]

    skipped = wait_for(skipped_later, 90, "a skipped tick after the recovery", *logs)
    where = f"mqtt topic '{example.mqtt_topic}' at {example.mqtt.bootstrap}"
    assert skipped[0]["skipReason"] == f"{where}: no messages waiting.", skipped
    assert schedule_runs(example, "SUCCESS") == [ok], "nothing else to ingest"
