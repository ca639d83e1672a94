"""The settings Sluice's example DAGs (``dags_examples/airflow``) share, read from the
environment when a DAG file is imported, so one file runs unchanged against any broker.

::

    from sluice_airflow.examples import READING_SCHEMA, example_setting, example_settings

    settings = example_settings("kafka_to_parquet", "kafka")
    GROUP = example_setting("KAFKA_GROUP", "sluice-kafka-to-parquet")

Every variable is ``SLUICE_EXAMPLE_<NAME>``; each example's docstring lists the ones it reads.
A DAG of your own would write these values in, or read its own variables.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "READING_SCHEMA",
    "ExampleSettings",
    "example_ingest_schedule",
    "example_setting",
    "example_settings",
]

#: JSON readings such as {"device": "sensor-1", "temperature": 21.5, "ts": "2026-01-01T12:00:00Z"}
READING_SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"

_DEFAULTS = {
    "kafka": ("sluice_kafka_default", "iot.readings"),
    "mqtt": ("sluice_mqtt_default", "sluice/iot/readings"),
}


def example_setting(name: str, default: str) -> str:
    """The environment variable ``SLUICE_EXAMPLE_<name>``, else ``default``."""
    return os.environ.get(f"SLUICE_EXAMPLE_{name}", default)


@dataclass(frozen=True)
class ExampleSettings:
    """What every example reads: its connection, topic, sink, batch sizes and schedule."""

    conn_id: str
    """``SLUICE_EXAMPLE_<KAFKA|MQTT>_CONN`` [sluice_kafka_default / sluice_mqtt_default]"""
    topic: str
    """``SLUICE_EXAMPLE_<KAFKA|MQTT>_TOPIC`` [iot.readings / sluice/iot/readings]"""
    sink: str
    """``<SLUICE_EXAMPLE_SINK>/<dag_id>`` [/tmp/sluice/datasets/<dag_id>]"""
    min_messages: int
    """``SLUICE_EXAMPLE_MIN_MESSAGES`` [1]"""
    max_messages: int
    """``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000]"""
    schedule: str | None
    """``SLUICE_EXAMPLE_SCHEDULE`` [@continuous]; ``none``: triggered by hand only"""


def example_settings(dag_id: str, queue: Literal["kafka", "mqtt"]) -> ExampleSettings:
    """The settings of the example ``dag_id`` reading from a ``queue`` broker."""
    conn_id, topic = _DEFAULTS[queue]
    prefix = queue.upper()
    schedule = example_setting("SCHEDULE", "@continuous")
    return ExampleSettings(
        conn_id=example_setting(f"{prefix}_CONN", conn_id),
        topic=example_setting(f"{prefix}_TOPIC", topic),
        sink=os.path.join(example_setting("SINK", "/tmp/sluice/datasets"), dag_id),
        min_messages=int(example_setting("MIN_MESSAGES", "1")),
        max_messages=int(example_setting("MAX_MESSAGES", "100000")),
        schedule=None if schedule.lower() == "none" else schedule,
    )


def example_ingest_schedule() -> str | datetime.timedelta | None:
    """The schedule of the scheduled-ingestion examples: ``SLUICE_EXAMPLE_INGEST_SCHEDULE``
    [@hourly], a preset or cron expression (``0 2 * * *``), a whole number of seconds
    (``30``: every 30 s, a ``timedelta``), or ``none`` (triggered by hand only)."""
    value = example_setting("INGEST_SCHEDULE", "@hourly").strip()
    if value.lower() == "none":
        return None
    if value.isdigit():
        return datetime.timedelta(seconds=int(value))
    return value
