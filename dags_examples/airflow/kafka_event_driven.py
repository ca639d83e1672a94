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
Triggered by hand, it ingests the batch given as conf ``{"batch": <BatchSpec dict>}``.

Environment (defaults in brackets): ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default],
``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings], ``SLUICE_EXAMPLE_KAFKA_EVENT_GROUP``
[sluice-kafka-event-driven], ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets],
``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000].
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG, Asset, AssetWatcher

from sluice_airflow.operators.spark import SparkIngestOperator
from sluice_airflow.triggers.queue import QueueMessageTrigger


def setting(name: str, default: str) -> str:
    """The environment variable ``SLUICE_EXAMPLE_<name>``, else ``default``."""
    return os.environ.get(f"SLUICE_EXAMPLE_{name}", default)


DAG_ID = "kafka_event_driven"
KAFKA_CONN = setting("KAFKA_CONN", "sluice_kafka_default")
KAFKA_TOPIC = setting("KAFKA_TOPIC", "iot.readings")
GROUP = setting("KAFKA_EVENT_GROUP", "sluice-kafka-event-driven")
SINK = os.path.join(setting("SINK", "/tmp/sluice/datasets"), DAG_ID)
MIN_MESSAGES = int(setting("MIN_MESSAGES", "1"))
MAX_MESSAGES = int(setting("MAX_MESSAGES", "100000"))
#: JSON readings such as {"device": "sensor-1", "temperature": 21.5, "ts": "2026-01-01T12:00:00Z"}
READING_SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"

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
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,  # batches are ingested in order, one at a time
    tags=["sluice", "kafka", "event-driven"],
    doc_md=__doc__,
) as dag:
    ingest = SparkIngestOperator(
        task_id="ingest",
        conn_id=KAFKA_CONN,
        sink=SINK,
        batch=None,  # from the triggering asset events (or dag_run.conf["batch"])
        schema=READING_SCHEMA,
    )
