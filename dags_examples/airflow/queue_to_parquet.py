"""Queue to Parquet: two DAGs, ``kafka_to_parquet`` and ``mqtt_to_parquet``, built by one
function. In each, a deferrable sensor waits for readings and Spark ingests exactly that
batch, then commits (Kafka) or acknowledges (MQTT) it.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000],
``SLUICE_EXAMPLE_SCHEDULE`` [@continuous; "none": triggered by hand], and per DAG below
(read by ``sluice_airflow.examples``; a DAG of your own would write its values in).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from airflow.sdk import DAG

from sluice_airflow.examples import READING_SCHEMA, example_setting, example_settings
from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.sensors.queue import QueueMessageSensor

KAFKA_DOC = """Kafka to Parquet. ``wait_for_messages`` (QueueMessageSensor, deferrable) returns the
batch (a BatchSpec: topic, consumer group and offset ranges) once ``SLUICE_EXAMPLE_MIN_MESSAGES``
readings wait on ``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings]; ``ingest`` (SparkIngestOperator)
writes it to ``<SLUICE_EXAMPLE_SINK>/kafka_to_parquet`` and only then commits the offsets of the
group ``SLUICE_EXAMPLE_KAFKA_GROUP`` [sluice-kafka-to-parquet], so a failed run's batch is
planned again by the next run and nothing is lost or duplicated.

The connection ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default], e.g.
``AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT='{"conn_type": "sluice_kafka", "host": "localhost",
"port": 9092, "extra": {"options.session_timeout": 10000}}'``."""

MQTT_DOC = """MQTT to Parquet. MQTT cannot show a backlog, so the batch is "what the persistent
session ``SLUICE_EXAMPLE_MQTT_CLIENT_ID`` [sluice-mqtt-to-parquet] holds" (at most
``SLUICE_EXAMPLE_MAX_MESSAGES``) on ``SLUICE_EXAMPLE_MQTT_TOPIC`` [sluice/iot/readings]. The
sensor connects as that session, sees readings arrive (acknowledging none), lets the session go
and returns the batch; ``ingest`` receives them with manual acknowledgements, writes
``<SLUICE_EXAMPLE_SINK>/mqtt_to_parquet`` and acknowledges. Delivery is at-least-once,
de-duplicated by message id (publish with Sluice envelopes, the default). Publishers must use
QoS 1 for the broker to queue readings for the session while nobody is connected.

The connection ``SLUICE_EXAMPLE_MQTT_CONN`` [sluice_mqtt_default], e.g.
``AIRFLOW_CONN_SLUICE_MQTT_DEFAULT='{"conn_type": "sluice_mqtt", "host": "localhost",
"port": 1883}'``."""


def queue_to_parquet(
    dag_id: str, queue: Literal["kafka", "mqtt"], config: dict[str, Any], doc: str
) -> DAG:
    """Wait for a batch on the example's topic (deferrable, in the triggerer), then ingest it."""
    settings = example_settings(dag_id, queue)  # connection, topic, sink, sizes, schedule
    with DAG(
        dag_id=dag_id,
        schedule=settings.schedule,
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,  # one batch of the group (one connection to the session) at a time
        tags=["sluice", queue],
        doc_md=doc,
    ) as dag:
        wait_for_messages = QueueMessageSensor(
            task_id="wait_for_messages",
            conn_id=settings.conn_id,
            topic=settings.topic,
            config=config,
            min_messages=settings.min_messages,
            max_messages=settings.max_messages,
            deferrable=True,
            timeout=3600,
            soft_fail=True,  # no readings for an hour: skip this run, the next one waits again
            # Airflow 3.3 may fail a deferred task that resumes right after it deferred
            # (apache/airflow#72716); the sensor commits nothing, so a retry is safe.
            retries=2,
            retry_delay=datetime.timedelta(seconds=5),
        )
        ingest = SparkIngestOperator(
            task_id="ingest",
            conn_id=settings.conn_id,
            sink=settings.sink,
            schema=READING_SCHEMA,  # JSON readings: device, temperature, ts
        )
        wait_for_messages >> ingest
    return dag


kafka_to_parquet = queue_to_parquet(
    "kafka_to_parquet",
    "kafka",
    config={"group_id": example_setting("KAFKA_GROUP", "sluice-kafka-to-parquet")},
    doc=KAFKA_DOC,
)
mqtt_to_parquet = queue_to_parquet(
    "mqtt_to_parquet",
    "mqtt",
    config={
        "client_id": example_setting("MQTT_CLIENT_ID", "sluice-mqtt-to-parquet"),
        "options.qos": 1,  # the broker queues QoS 1 readings for the session while it is away
    },
    doc=MQTT_DOC,
)
