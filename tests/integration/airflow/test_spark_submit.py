"""SparkIngestOperator(submit=True): the ingest runs under spark-submit in its own process;
the source's password reaches it through a private file, never the command line."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sluice.batch import plan_batch
from sluice.brokers import BrokerProcess
from sluice.kafka import KafkaMessageQueue
from sluice.testing.topics import create_kafka_topic
from sluice_airflow.operators.publish import QueuePublishOperator
from sluice_airflow.operators.spark import SparkIngestOperator
from tests.integration.airflow.conftest import SetConnection


def test_submit_mode_ingests_with_the_password_off_the_command_line(
    noida_broker: BrokerProcess,
    set_connection: SetConnection,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    password: str,
) -> None:
    conn = set_connection(
        "submit",
        "sluice_kafka",
        noida_broker.host,
        noida_broker.port,
        login="u",
        password=password,
        extra={"connection.protocol": "sasl_plaintext"},  # noida-db has no TLS
    )
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    readings = [{"device": "d", "temperature": float(n)} for n in range(3)]
    QueuePublishOperator(task_id="p", conn_id=conn, topic=unique_name, messages=readings).execute(
        {}  # type: ignore[arg-type]
    )
    queue = KafkaMessageQueue(unique_name)
    queue.configure(
        {"connection.uri": noida_broker.bootstrap, "topic": unique_name, "group_id": "g"}
        | {"from_beginning": True, "autocommit": False}
    )
    queue.open(None)
    try:
        spec = plan_batch(queue)
    finally:
        queue.close(None)
    assert spec is not None
    task = SparkIngestOperator(
        task_id="ingest",
        conn_id=conn,
        sink=str(tmp_path / "out"),
        batch=spec.to_dict(),
        schema="device STRING, temperature DOUBLE",
        submit=True,
        spark_master="local[1]",
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        },
    )
    result = task.execute({})  # type: ignore[arg-type]
    assert isinstance(result, dict)
    assert (result["batch_id"], result["read"], result["written"]) == (spec.batch_id, 3, 3)
    rows = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert sorted(rows.column("temperature").to_pylist()) == [0.0, 1.0, 2.0]
    output = "".join(capsys.readouterr())
    named = re.search(r"--source @(\S+)", output)
    assert named, output  # the command line names the file, not the source
    assert password not in output
    # Its private directory is gone (other tests may be submitting at the same time, so only
    # this task's own directory is checked).
    assert Path(named.group(1)).parent.name.startswith("sluice-submit-")
    assert not Path(named.group(1)).parent.exists()
