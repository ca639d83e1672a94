"""Queue to Parquet: two DAGs, ``kafka_to_parquet`` and ``mqtt_to_parquet``, built by one
function. In each, a deferrable sensor waits for readings and Spark ingests exactly that
batch, then commits (Kafka) or acknowledges (MQTT) it.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000],
``SLUICE_EXAMPLE_SCHEDULE`` [@continuous; "none": triggered by hand], and per DAG below.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from airflow.sdk import DAG

from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.sensors.queue import QueueMessageSensor


def setting(name: str, default: str) -> str:
    """The environment variable ``SLUICE_EXAMPLE_<name>``, else ``default``."""
    return os.environ.get(f"SLUICE_EXAMPLE_{name}", default)


SINKS = setting("SINK", "/tmp/sluice/datasets")
MIN_MESSAGES = int(setting("MIN_MESSAGES", "1"))
MAX_MESSAGES = int(setting("MAX_MESSAGES", "100000"))
_schedule = setting("SCHEDULE", "@continuous")
SCHEDULE = None if _schedule.lower() == "none" else _schedule
#: JSON readings such as {"device": "sensor-1", "temperature": 21.5, "ts": "2026-01-01T12:00:00Z"}
READING_SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"

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
    dag_id: str, conn_id: str, topic: str, config: dict[str, Any], doc: str, tag: str
) -> DAG:
    """Wait for a batch on ``topic`` (deferrable, in the triggerer), then ingest it."""
    with DAG(
        dag_id=dag_id,
        schedule=SCHEDULE,
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,  # one batch of the group (one connection to the session) at a time
        tags=["sluice", tag],
        doc_md=doc,
    ) as dag:
        wait_for_messages = QueueMessageSensor(
            task_id="wait_for_messages",
            conn_id=conn_id,
            topic=topic,
            config=config,
            min_messages=MIN_MESSAGES,
            max_messages=MAX_MESSAGES,
            deferrable=True,
            timeout=3600,
            soft_fail=True,  # no readings for an hour: skip this run, the next one waits again
        )
        ingest = SparkIngestOperator(
            task_id="ingest",
            conn_id=conn_id,
            sink=os.path.join(SINKS, dag_id),
            schema=READING_SCHEMA,
        )
        wait_for_messages >> ingest
    return dag


kafka_to_parquet = queue_to_parquet(
    "kafka_to_parquet",
    conn_id=setting("KAFKA_CONN", "sluice_kafka_default"),
    topic=setting("KAFKA_TOPIC", "iot.readings"),
    config={"group_id": setting("KAFKA_GROUP", "sluice-kafka-to-parquet")},
    doc=KAFKA_DOC,
    tag="kafka",
)
mqtt_to_parquet = queue_to_parquet(
    "mqtt_to_parquet",
    conn_id=setting("MQTT_CONN", "sluice_mqtt_default"),
    topic=setting("MQTT_TOPIC", "sluice/iot/readings"),
    config={"client_id": setting("MQTT_CLIENT_ID", "sluice-mqtt-to-parquet"), "options.qos": 1},
    doc=MQTT_DOC,
    tag="mqtt",
)
