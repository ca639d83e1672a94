"""MQTT to Parquet: a deferrable sensor waits for readings on a persistent session, Spark
drains the session into Parquet and only then acknowledges the messages.

MQTT cannot show a backlog, so the batch is "what the session ``SLUICE_EXAMPLE_MQTT_CLIENT_ID``
holds" (at most ``SLUICE_EXAMPLE_MAX_MESSAGES``). The sensor connects as that session, sees
readings arrive (acknowledging none), lets the session go and returns the batch; ``ingest``
receives them with manual acknowledgements, writes ``<SLUICE_EXAMPLE_SINK>/mqtt_to_parquet``
and acknowledges. Delivery is at-least-once, de-duplicated by message id (publish with Sluice
envelopes, the default). Publishers must use QoS 1 for the broker to queue readings for the
session while nobody is connected.

The connection, e.g. ``AIRFLOW_CONN_SLUICE_MQTT_DEFAULT='{"conn_type": "sluice_mqtt",
"host": "localhost", "port": 1883}'``.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_MQTT_CONN`` [sluice_mqtt_default],
``SLUICE_EXAMPLE_MQTT_TOPIC`` [sluice/iot/readings], ``SLUICE_EXAMPLE_MQTT_CLIENT_ID``
[sluice-mqtt-to-parquet], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
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


DAG_ID = "mqtt_to_parquet"
MQTT_CONN = setting("MQTT_CONN", "sluice_mqtt_default")
MQTT_TOPIC = setting("MQTT_TOPIC", "sluice/iot/readings")
CLIENT_ID = setting("MQTT_CLIENT_ID", "sluice-mqtt-to-parquet")
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
    max_active_runs=1,  # one connection to the session at a time
    tags=["sluice", "mqtt"],
    doc_md=__doc__,
) as dag:
    wait_for_messages = QueueMessageSensor(
        task_id="wait_for_messages",
        conn_id=MQTT_CONN,
        topic=MQTT_TOPIC,
        config={"client_id": CLIENT_ID, "options.qos": 1},
        min_messages=MIN_MESSAGES,
        max_messages=MAX_MESSAGES,
        deferrable=True,
        timeout=3600,
        soft_fail=True,
    )
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id=MQTT_CONN,
        sink=SINK,
        schema=READING_SCHEMA,
    )
    wait_for_messages >> ingest
