"""Kafka, event-driven: an AssetWatcher runs this DAG for every new batch of readings.

The asset ``sluice_example_kafka_readings`` is watched by a QueueMessageTrigger in the
triggerer: each time ``SLUICE_EXAMPLE_MIN_MESSAGES`` new readings wait on
``SLUICE_EXAMPLE_KAFKA_TOPIC`` it emits an asset event carrying the batch (a BatchSpec
planned from the group's committed offsets), and the scheduler runs this DAG. One batch is in
flight at a time: the next one is emitted once the group's offsets are committed past it, and
a batch still not committed 10 minutes (the trigger's ``rerun_after``) after it was emitted is
taken as failed and emitted again, unchanged. ``ingest`` takes the batches from the run's
triggering asset events (a run may gather several) and writes them to
``<SLUICE_EXAMPLE_SINK>/kafka_event_driven``, committing the group's offsets after each.
With ``up_to="latest"`` a batch also takes the readings that arrived while its run was queued
and the task started (at most ``max_messages`` in all): they are in the table one run sooner.
Triggered by hand, it ingests the batch given as conf ``{"batch": <BatchSpec dict>}``.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default],
``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings], ``SLUICE_EXAMPLE_KAFKA_EVENT_GROUP``
[sluice-kafka-event-driven], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000] (read by
``sluice_airflow.examples``; a DAG of your own would write its values in).
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Asset, AssetWatcher

from sluice_airflow.examples import READING_SCHEMA, example_setting, example_settings
from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.triggers.queue import QueueMessageTrigger

DAG_ID = "kafka_event_driven"
settings = example_settings(DAG_ID, "kafka")  # connection, topic, sink, sizes (not schedule)
GROUP = example_setting("KAFKA_EVENT_GROUP", "sluice-kafka-event-driven")

trigger = QueueMessageTrigger(
    conn_id=settings.conn_id,
    topic=settings.topic,
    min_messages=settings.min_messages,
    max_messages=settings.max_messages,
    config={"group_id": GROUP},
)
readings = Asset(
    "sluice_example_kafka_readings",
    watchers=[AssetWatcher(name="sluice_example_kafka_watcher", trigger=trigger)],
)

with DAG(
    dag_id=DAG_ID,
    schedule=[readings],
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,  # batches are ingested in order, one at a time
    tags=["sluice", "kafka", "event-driven"],
    doc_md=__doc__,
) as dag:
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id=settings.conn_id,
        sink=settings.sink,
        batch=None,  # from the triggering asset events (or dag_run.conf["batch"])
        schema=READING_SCHEMA,  # JSON readings: device, temperature, ts
        up_to="latest",  # and what arrived since the batch was planned
        max_messages=settings.max_messages,
    )
