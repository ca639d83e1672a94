"""Scheduled ingestion (``dags_examples/airflow/scheduled_to_parquet.py``): runs of the example
DAGs with ``dag.test()``, one after another as a schedule would start them, against real
brokers and the session's local Spark. Each run plans what waits then: nothing waits, so the
task is skipped and says so; a run that fails after publishing (failpoint ``commit.before``)
leaves its messages to the next run, which takes them with the new ones, and ``sluice audit``
finds every message once."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import AuditReport, audit
from sluice.brokers import BrokerProcess
from sluice.mqtt import MqttMessageQueue
from sluice.spark.failpoints import armed
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.testing import DagRunResult, run_dag
from tests.integration.airflow.conftest import SetConnection
from tests.integration.airflow.test_examples import READINGS, dataset_rows, example, publish

pytestmark = pytest.mark.usefixtures("airflow_db", "spark")


def run_once(
    dag: Any, capfd: pytest.CaptureFixture[str], **kwargs: Any
) -> tuple[DagRunResult, str]:
    """One ``dag.test()`` run (a new run, as a schedule makes) and the output it logged."""
    capfd.readouterr()
    run = run_dag(dag, **kwargs)
    return run, "".join(capfd.readouterr())


def held(report: AuditReport) -> int:
    """Offsets the audited sink holds (good and quarantined), each counted once."""
    assert report.ok, "\n".join(report.lines())
    return sum(p.written + p.quarantined for s in report.streams for p in s.partitions)


def test_kafka_runs_ingest_what_waits_skip_when_nothing_does_and_recover_a_failed_run(
    noida_broker: BrokerProcess,
    kafka_conn: str,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    topic, group = unique_name, f"{unique_name}-group"
    create_kafka_topic(noida_broker.bootstrap, topic, 2)
    dag = example(
        "scheduled_to_parquet",
        monkeypatch,
        tmp_path,
        SLUICE_EXAMPLE_KAFKA_TOPIC=topic,
        SLUICE_EXAMPLE_KAFKA_SCHEDULED_GROUP=group,
    ).kafka_scheduled
    sink, source = tmp_path / "kafka_scheduled", f"kafka://{noida_broker.bootstrap}"
    assert dag.schedule == "@hourly" and dag.max_active_runs == 1

    run, logged = run_once(dag, capfd)
    assert run.states == {"ingest": "skipped"}
    assert run.succeeded, "a skipped ingest is a successful run"
    assert f"Nothing waiting on {topic} for group {group} (0 messages)" in logged
    assert "the task is skipped" in logged
    assert run.xcom("ingest") is None
    assert not sink.exists(), "nothing was written for nothing"

    # A run that fails after publishing its batch and before committing the group's offsets.
    publish(kafka_conn, topic, READINGS)
    with armed("commit.before"):
        failed, logged = run_once(dag, capfd)
    assert failed.states == {"ingest": "failed"}
    assert "failpoint commit.before was armed" in logged
    assert held(audit(sink, source)) == 5  # in the sink, not committed

    # The next run plans from the committed offsets: the failed run's five and three new ones.
    publish(kafka_conn, topic, ["not json", *READINGS[:2]])
    run, logged = run_once(dag, capfd)
    assert run.states == {"ingest": "success"}
    summary = run.xcom("ingest")
    assert (summary["read"], summary["written"], summary["quarantined"]) == (3, 2, 1)
    assert summary["skipped"] == 5, "the failed run's batch is in the sink: not written twice"
    assert summary["committed"] is True
    assert "Planned from what waits now: batch" in logged
    report = audit(sink, source)
    assert held(report) == 8
    assert sorted(p.committed for p in report.streams[0].partitions) == sorted(
        p.log_end for p in report.streams[0].partitions
    ), "the group committed everything"
    assert len(dataset_rows(sink)) == 7

    # Nothing waits again; an old run (a catchup or backfill run) finds nothing either.
    run, logged = run_once(dag, capfd)
    assert run.states == {"ingest": "skipped"}
    old = datetime.datetime(2026, 1, 1, 5, tzinfo=datetime.UTC)
    run, logged = run_once(dag, capfd, logical_date=old)
    assert run.states == {"ingest": "skipped"}
    assert f"Nothing waiting on {topic} for group {group} (0 messages)" in logged
    assert held(audit(sink, source)) == 8

    # Asked to, a run with nothing waiting succeeds with a summary of the usual shape.
    succeed = SparkIngestOperator(
        task_id="ingest_or_nothing",
        conn_id=kafka_conn,
        batch="waiting",
        topic=topic,
        config={"group_id": group},
        sink=str(sink),
        if_nothing_waiting="succeed",
    )
    empty = succeed.execute({})  # type: ignore[arg-type]
    assert isinstance(empty, dict) and set(empty) == set(summary)
    assert (empty["batch_id"], empty["read"], empty["written"], empty["ranges"]) == (None, 0, 0, [])
    assert (empty["kind"], empty["topic"], empty["committed"]) == ("kafka", topic, False)


def test_mqtt_runs_drain_the_session_and_skip_when_it_is_empty(
    mosquitto_broker: BrokerProcess,
    set_connection: SetConnection,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    broker = mosquitto_broker
    conn = set_connection("sluice_mqtt_default", "sluice_mqtt", broker.host, broker.port)
    topic, session = f"sluice/{unique_name}", f"{unique_name}-scheduled"
    dag = example(
        "scheduled_to_parquet",
        monkeypatch,
        tmp_path,
        SLUICE_EXAMPLE_MQTT_TOPIC=topic,
        SLUICE_EXAMPLE_MQTT_SCHEDULED_CLIENT_ID=session,
    ).mqtt_scheduled

    # The first run finds an empty session (and makes it exist: the broker keeps for it what
    # is published from then on).
    run, logged = run_once(dag, capfd)
    assert run.states == {"ingest": "skipped"}
    assert f"Nothing waiting on {topic} for session {session} (0 messages)" in logged
    assert "Ingesting batch" not in logged, "no Spark ingest for an empty session"

    publish(conn, topic, READINGS)
    run, _ = run_once(dag, capfd)
    assert run.states == {"ingest": "success"}
    summary = run.xcom("ingest")
    assert (summary["kind"], summary["read"], summary["written"]) == ("mqtt", 5, 5)
    assert summary["committed"] is True
    report = audit(tmp_path / "mqtt_scheduled")
    assert report.ok and [s.messages for s in report.streams] == [5]

    run, logged = run_once(dag, capfd)
    assert run.states == {"ingest": "skipped"}, "the batch was acknowledged"
    assert f"Nothing waiting on {topic} for session {session}" in logged
    queue = MqttMessageQueue()  # nothing left in the session either
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
    try:
        assert queue.receive(None, 1000) is None
    finally:
        queue.close(None)
