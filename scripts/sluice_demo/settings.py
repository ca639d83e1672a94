"""What the demo runs on: paths, topics, names of the example DAG and Dagster objects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_DAGS = ROOT / "dags_examples" / "airflow"
DAGSTER_DEFS = ROOT / "dags_examples" / "dagster_defs.py"

KAFKA_TOPIC = "iot.readings"
KAFKA_PARTITIONS = 2
MQTT_TOPIC = "sluice/iot/readings"
AIRFLOW_DAG = "kafka_to_parquet"
AIRFLOW_GROUP = "sluice-kafka-to-parquet"  # the example DAG's consumer group (its default)
AIRFLOW_DAG_FILE = "queue_to_parquet.py"  # it holds the DAG, as the variable of its id
DAGSTER_SENSOR = "mqtt_readings_sensor"
DAGSTER_JOB = "mqtt_readings"
SPARK_MASTER = "local[2]"
S3_BUCKET = "lake"  # the bucket `sluice brokers up --s3` creates
#: Sensor ticks tried before giving up, and the pause between them.
TICKS, TICK_PAUSE_S = 5, 2.0
NOTHING_WAITING = "no messages waiting"  # the queue sensor's skip reason (sluice.cursor)
#: Output entries the demo owns: removed at the start of a run, so reruns do not pile up.
OWNED_OUTPUTS = (AIRFLOW_DAG, DAGSTER_JOB, "iceberg", "ingested.png", "summary.json", "demo.log")


Closer = Callable[[], object]


class DemoError(Exception):
    """A step failed; the message is the one line the user sees."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (a KeyboardInterrupt, which libraries let through)."""
