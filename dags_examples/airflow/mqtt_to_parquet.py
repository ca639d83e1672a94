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

Environment (see ``_settings.py``): ``SLUICE_EXAMPLE_MQTT_CONN`` [sluice_mqtt_default],
``SLUICE_EXAMPLE_MQTT_TOPIC`` [sluice/iot/readings], ``SLUICE_EXAMPLE_MQTT_CLIENT_ID``
[sluice-mqtt-to-parquet], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000],
``SLUICE_EXAMPLE_SCHEDULE`` [@continuous].
"""

from __future__ import annotations

import os

from _settings import (
    MAX_MESSAGES,
    MIN_MESSAGES,
    MQTT_CONN,
    MQTT_TOPIC,
    READING_SCHEMA,
    SCHEDULE,
    START,
    sink_for,
)
from airflow.sdk import DAG

from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.sensors.queue import QueueMessageSensor

DAG_ID = "mqtt_to_parquet"
CLIENT_ID = os.environ.get("SLUICE_EXAMPLE_MQTT_CLIENT_ID", "sluice-mqtt-to-parquet")

with DAG(
    dag_id=DAG_ID,
    schedule=SCHEDULE,
    start_date=START,
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
        sink=sink_for(DAG_ID),
        schema=READING_SCHEMA,
    )
    wait_for_messages >> ingest
