"""Scheduled ingestion: two DAGs, ``kafka_scheduled`` and ``mqtt_scheduled``, built by one
function. No sensor: on its schedule (``@hourly`` unless set) each run ingests whatever waits
then, and is skipped when nothing does, the batch-ingest habit of Spark's
``Trigger.AvailableNow``.

``ingest`` (SparkIngestOperator with ``batch="waiting"``) plans its batch when it runs, from
the consumer group's committed offsets (Kafka) or the persistent session (MQTT), commits
nothing while planning, writes the batch to ``<SLUICE_EXAMPLE_SINK>/<dag_id>`` and only then
commits or acknowledges it. A failed run therefore leaves its messages to the next run, which
takes them with whatever arrived since: no retries are needed for correctness (add some to
catch up sooner). A rerun, a catchup run or a backfill plans what waits at *its* run time, so
it finds the next batch or nothing. With nothing waiting the task is skipped, and says so in
its log (``Nothing waiting on ...``).

Environment (defaults in brackets): ``SLUICE_EXAMPLE_INGEST_SCHEDULE`` [@hourly; a cron
expression, a number of seconds, or "none"], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000]; Kafka: ``SLUICE_EXAMPLE_KAFKA_CONN``
[sluice_kafka_default], ``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings],
``SLUICE_EXAMPLE_KAFKA_SCHEDULED_GROUP`` [sluice-kafka-scheduled]; MQTT:
``SLUICE_EXAMPLE_MQTT_CONN`` [sluice_mqtt_default], ``SLUICE_EXAMPLE_MQTT_TOPIC``
[sluice/iot/readings], ``SLUICE_EXAMPLE_MQTT_SCHEDULED_CLIENT_ID`` [sluice-mqtt-scheduled]
(read by ``sluice_airflow.examples``; a DAG of your own would write its values in).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from airflow.sdk import DAG

from sluice_airflow.examples import (
    READING_SCHEMA,
    example_ingest_schedule,
    example_setting,
    example_settings,
)
from sluice_airflow.operators.spark import SparkIngestOperator


def scheduled_to_parquet(
    dag_id: str, queue: Literal["kafka", "mqtt"], config: dict[str, Any]
) -> DAG:
    """Ingest what waits on the example's topic at every scheduled run (see the module doc)."""
    settings = example_settings(dag_id, queue)  # connection, topic, sink, sizes
    with DAG(
        dag_id=dag_id,
        schedule=example_ingest_schedule(),
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,  # two runs at once would plan the same messages
        tags=["sluice", queue, "scheduled"],
        doc_md=__doc__,
    ) as dag:
        SparkIngestOperator(
            task_id="ingest",
            conn_id=settings.conn_id,
            batch="waiting",  # plan the batch now, from what waits
            topic=settings.topic,
            config=config,
            max_messages=settings.max_messages,
            sink=settings.sink,
            schema=READING_SCHEMA,  # JSON readings: device, temperature, ts
        )
    return dag


kafka_scheduled = scheduled_to_parquet(
    "kafka_scheduled",
    "kafka",
    config={"group_id": example_setting("KAFKA_SCHEDULED_GROUP", "sluice-kafka-scheduled")},
)
mqtt_scheduled = scheduled_to_parquet(
    "mqtt_scheduled",
    "mqtt",
    config={
        "client_id": example_setting("MQTT_SCHEDULED_CLIENT_ID", "sluice-mqtt-scheduled"),
        "options.qos": 1,  # the broker queues QoS 1 readings for the session between runs
    },
)
