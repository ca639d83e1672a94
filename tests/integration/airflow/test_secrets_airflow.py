"""A password inside an Airflow connection's host URI (``kafka://svc:PW@host:port``) appears
nowhere: a real ``dag.test()`` run (deferrable sensor, in-process SparkIngestOperator, a
publish that fails on a dead port), and SparkIngestOperator(submit=True) whose spark-submit
fails, and the spark-submit entry point itself. Every log, XCom, rendered field, trigger,
exception and command line is searched; each check also asserts what it searched was
produced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.brokers import BrokerProcess, free_port
from sluice.spark import submit
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.spark import SparkIngestOperator
from tests.integration.airflow import dag_runs
from tests.integration.airflow.conftest import SetConnection

pytestmark = pytest.mark.usefixtures("airflow_db", "spark")

DAG_SOURCE = """
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.sensors.queue import QueueMessageSensor

with {dag} as dag:
    publish = QueuePublishOperator(
        task_id="publish", conn_id={conn!r}, topic={topic!r},
        messages=[{{"n": n}} for n in range(3)],
    )
    wait = QueueMessageSensor(
        task_id="wait_for_messages", conn_id={conn!r}, topic={topic!r},
        config={{"group_id": {group!r}}}, min_messages=3, poke_interval=1, timeout=60,
        deferrable=False, mode="poke",
    )
    ingest = SparkIngestOperator(
        task_id="ingest", conn_id={conn!r}, sink={sink!r}, schema="n INT",
        config={{"group_id": {group!r}}},
    )
    publish >> wait >> ingest
    QueuePublishOperator(
        task_id="publish_dead", conn_id={dead!r}, topic={topic!r}, messages=[{{"n": 0}}],
    )
"""


def uri_connection(
    set_connection: SetConnection, conn_id: str, password: str, host: str, port: int
) -> str:
    return set_connection(
        conn_id,
        "sluice_kafka",
        f"kafka://svc:{password}@{host}:{port}",
        0,
        extra={
            "connection.protocol": "sasl_plaintext",  # noida-db has no TLS
            "options.max_retries": 1,
            "options.connect_timeout": 500,
            "options.request_timeout": 2000,
        },
    )


def leaks(password: str, seen: dict[str, str]) -> list[str]:
    return [where for where, text in seen.items() if password in text]


def test_a_password_in_the_connection_host_uri_appears_nowhere_in_a_dag_run(
    noida_broker: BrokerProcess,
    set_connection: SetConnection,
    unique_name: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    password: str,
) -> None:
    conn = uri_connection(
        set_connection, "secrets_uri", password, noida_broker.host, noida_broker.port
    )
    dead = uri_connection(set_connection, "secrets_dead", password, "127.0.0.1", free_port())
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    run = dag_runs.run_test_dag(
        "sluice_secrets_uri",
        DAG_SOURCE,
        conn=conn,
        dead=dead,
        topic=unique_name,
        group=f"{unique_name}-g",
        sink=str(tmp_path / "out"),
    )
    assert run.states == {
        "publish": "success",
        "wait_for_messages": "success",
        "ingest": "success",
        "publish_dead": "failed",
    }
    values = run.xcoms()
    assert (values["ingest"]["read"], values["ingest"]["written"]) == (3, 3)
    seen = dag_runs.everything_seen(run.dag_run, capfd)
    everything = "\n".join(seen.values())
    # what was searched holds what it should: the Source line, the failure, XCom, rendered fields
    assert "Source:" in everything and f"svc:***@{noida_broker.host}" in everything
    assert "Cannot connect to Kafka" in everything
    assert values["ingest"]["batch_id"] in seen["database"]
    assert str(tmp_path / "out") in seen["database"]
    assert leaks(password, seen) == []


def test_spark_submit_never_shows_the_password(
    set_connection: SetConnection,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    password: str,
) -> None:
    port = free_port()  # nothing listens: the ingest fails reading
    conn = uri_connection(set_connection, "secrets_submit", password, "127.0.0.1", port)
    spec = BatchSpec(kind="kafka", topic="orders", group_id="g", ranges=(OffsetRange(0, 0, 2),))
    task = SparkIngestOperator(
        task_id="ingest",
        conn_id=conn,
        sink=str(tmp_path / "out"),
        batch=spec.to_dict(),
        submit=True,
        spark_master="local[1]",
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.hadoop.fs.s3a.secret.key": password,
        },
    )
    with pytest.raises(RuntimeError) as failed:
        task.execute({})  # type: ignore[arg-type]

    # the entry point in-process (the session's Spark is reused), the source on its command line
    source = (
        f"kafka://svc:{password}@127.0.0.1:{port}"
        "?options.request_timeout=2000&connection.protocol=sasl_plaintext"
    )
    argv = ["--spec", spec.to_json(), "--sink", str(tmp_path / "out2"), "--source", source]
    with pytest.raises(Exception) as direct:
        submit.main(argv)
    seen = {
        "submit error": str(failed.value),
        "direct error": f"{direct.value!r} {direct.value.__cause__!r}",
        "output": "".join(capfd.readouterr()),
        "logs": caplog.text,
    }
    assert "spark-submit exited with" in seen["submit error"]
    assert f"127.0.0.1:{port}" in seen["submit error"]  # the child's error made it through
    assert f"127.0.0.1:{port}" in seen["direct error"]
    assert "--source @" in seen["output"] + seen["logs"]  # the command line was logged
    assert "spark.hadoop.fs.s3a.secret.key=***" in seen["output"] + seen["logs"]
    assert "holds a password on the command line" in seen["output"]
    assert leaks(password, seen) == []
    assert json.dumps(password) not in "".join(seen.values())
