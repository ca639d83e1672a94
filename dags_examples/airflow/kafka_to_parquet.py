"""Kafka to Parquet: a deferrable sensor waits for readings, Spark ingests exactly that batch.

``wait_for_messages`` (QueueMessageSensor, deferrable) returns the batch (a BatchSpec: topic,
consumer group and offset ranges) once ``SLUICE_EXAMPLE_MIN_MESSAGES`` readings wait on
``SLUICE_EXAMPLE_KAFKA_TOPIC``; ``ingest`` (SparkIngestOperator) writes it to
``<SLUICE_EXAMPLE_SINK>/kafka_to_parquet`` and only then commits the group's offsets, so a
failed run's batch is planned again by the next run and nothing is lost or duplicated.

The connection, e.g. ``AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT='{"conn_type": "sluice_kafka",
"host": "localhost", "port": 9092, "extra": {"options.session_timeout": 10000}}'``.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default],
``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings], ``SLUICE_EXAMPLE_KAFKA_GROUP``
[sluice-kafka-to-parquet], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000],
``SLUICE_EXAMPLE_SCHEDULE`` [@continuous].
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.sensors.queue import QueueMessageSensor


def setting(name: str, default: str) -> str:
    """The environment variable ``SLUICE_EXAMPLE_<name>``, else ``default``."""
    return os.environ.get(f"SLUICE_EXAMPLE_{name}", default)


DAG_ID = "kafka_to_parquet"
KAFKA_CONN = setting("KAFKA_CONN", "sluice_kafka_default")
KAFKA_TOPIC = setting("KAFKA_TOPIC", "iot.readings")
GROUP = setting("KAFKA_GROUP", "sluice-kafka-to-parquet")
SINK = os.path.join(setting("SINK", "/tmp/sluice/datasets"), DAG_ID)
MIN_MESSAGES = int(setting("MIN_MESSAGES", "1"))
MAX_MESSAGES = int(setting("MAX_MESSAGES", "100000"))
_schedule = setting("SCHEDULE", "@continuous")
SCHEDULE = None if _schedule.lower() == "none" else _schedule  # "none": triggered by hand
#: JSON readings such as {"device": "sensor-1", "temperature": 21.5, "ts": "2026-01-01T12:00:00Z"}
READING_SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"

with DAG(
    dag_id=DAG_ID,
    schedule=SCHEDULE,
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,  # one batch of the group at a time
    tags=["sluice", "kafka"],
    doc_md=__doc__,
) as dag:
    wait_for_messages = QueueMessageSensor(
        task_id="wait_for_messages",
        conn_id=KAFKA_CONN,
        topic=KAFKA_TOPIC,
        config={"group_id": GROUP},
        min_messages=MIN_MESSAGES,
        max_messages=MAX_MESSAGES,
        deferrable=True,
        timeout=3600,
        soft_fail=True,  # no readings for an hour: skip this run, the next one waits again
    )
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id=KAFKA_CONN,
        sink=SINK,
        schema=READING_SCHEMA,
    )
    wait_for_messages >> ingest
