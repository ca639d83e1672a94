"""Kafka, event-driven: an AssetWatcher runs this DAG for every new batch of readings.

The asset ``sluice_example_kafka_readings`` is watched by a QueueMessageTrigger in the
triggerer: each time ``SLUICE_EXAMPLE_MIN_MESSAGES`` new readings wait on
``SLUICE_EXAMPLE_KAFKA_TOPIC`` it emits an asset event carrying the batch (a BatchSpec; the
same offsets are never emitted twice), and the scheduler runs this DAG. ``ingest`` takes the
batches from the run's triggering asset events (a run may gather several) and writes them to
``<SLUICE_EXAMPLE_SINK>/kafka_event_driven``, committing the group's offsets after each.
Triggered by hand, it ingests the batch given as conf ``{"batch": <BatchSpec dict>}``.

Environment (see ``_settings.py``): ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default],
``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings], ``SLUICE_EXAMPLE_KAFKA_EVENT_GROUP``
[sluice-kafka-event-driven], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000].
"""

from __future__ import annotations

import os

from _settings import (
    KAFKA_CONN,
    KAFKA_TOPIC,
    MAX_MESSAGES,
    MIN_MESSAGES,
    READING_SCHEMA,
    START,
    sink_for,
)
from airflow.sdk import DAG, Asset, AssetWatcher

from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.triggers.queue import QueueMessageTrigger

DAG_ID = "kafka_event_driven"
GROUP = os.environ.get("SLUICE_EXAMPLE_KAFKA_EVENT_GROUP", "sluice-kafka-event-driven")

trigger = QueueMessageTrigger(
    conn_id=KAFKA_CONN,
    topic=KAFKA_TOPIC,
    min_messages=MIN_MESSAGES,
    max_messages=MAX_MESSAGES,
    config={"group_id": GROUP},
)
readings = Asset(
    "sluice_example_kafka_readings",
    watchers=[AssetWatcher(name="sluice_example_kafka_watcher", trigger=trigger)],
)

with DAG(
    dag_id=DAG_ID,
    schedule=[readings],
    start_date=START,
    catchup=False,
    max_active_runs=1,  # batches are ingested in order, one at a time
    tags=["sluice", "kafka", "event-driven"],
    doc_md=__doc__,
) as dag:
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id=KAFKA_CONN,
        sink=sink_for(DAG_ID),
        batch=None,  # from the triggering asset events (or dag_run.conf["batch"])
        schema=READING_SCHEMA,
    )
