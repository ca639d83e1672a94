"""Sluice in Dagster: Kafka and MQTT messages ingested into Parquet, one run per batch.

    export DAGSTER_HOME=~/.dagster  # any directory; its dagster.yaml turns telemetry off:
    mkdir -p "$DAGSTER_HOME" && cp dags_examples/dagster.yaml "$DAGSTER_HOME/"
    dagster dev -f dags_examples/dagster_defs.py

- ``kafka_events``: an asset, the Parquet dataset of the Kafka topic; ``kafka_events_sensor``
  materializes it once per batch of waiting messages.
- ``mqtt_readings``: a job that ingests the MQTT session's messages; ``mqtt_readings_sensor``
  runs it once per batch, or ``mqtt_readings_schedule`` once per cron tick
  (``SLUICE_EXAMPLE_INGEST_CRON``, hourly by default) for whatever waits then (a tick with
  nothing waiting is skipped). One job, two ways to start it: turn on one of them.

The sensors and the schedule start stopped: turn them on in the UI (Automation) or with
``dagster sensor start --start-all -f dags_examples/dagster_defs.py`` (``dagster schedule
start mqtt_readings_schedule -f ...``). A run needs the batch its sensor or schedule puts in
the run config, so materializing by hand without one fails.

Settings come from ``SLUICE_EXAMPLE_*`` environment variables (brokers, topics, sink, sensor
interval, logins): README.md, "Quickstart: Dagster", lists them with their defaults.
Passwords are read through ``dagster.EnvVar``, so a value never lands in run config.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dagster import Definitions, EnvVar, in_process_executor

from sluice_dagster import (
    KafkaQueueResource,
    MqttQueueResource,
    SparkResource,
    make_ingest_asset,
    make_ingest_job,
    make_ingest_schedule,
    make_queue_sensor,
)


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _secret(name: str) -> EnvVar | None:
    return EnvVar(name) if os.environ.get(name) else None


def _login(prefix: str) -> dict[str, Any]:
    """``username`` and ``password`` from ``<prefix>_USERNAME`` and ``<prefix>_PASSWORD``."""
    return {
        "username": os.environ.get(f"{prefix}_USERNAME"),
        "password": _secret(f"{prefix}_PASSWORD"),
    }


SINK = Path(_env("SLUICE_EXAMPLE_SINK", "sluice-lake")).absolute()
INTERVAL = int(_env("SLUICE_EXAMPLE_SENSOR_INTERVAL", "30"))
CRON = _env("SLUICE_EXAMPLE_INGEST_CRON", "0 * * * *")
SCHEMA = "device STRING, temperature DOUBLE, humidity DOUBLE, ts TIMESTAMP"  # IoT readings

kafka_events = make_ingest_asset(
    "kafka_events",
    resource_key="kafka_queue",
    sink=str(SINK / "kafka_events"),
    schema=SCHEMA,
    group_name="sluice",
    description="Messages of the Kafka topic, one Parquet partition (batch_id=...) per batch.",
)

mqtt_readings = make_ingest_job(
    "mqtt_readings",
    resource_key="mqtt_queue",
    sink=str(SINK / "mqtt_readings"),
    schema=SCHEMA,
)

defs = Definitions(
    executor=in_process_executor,  # one Spark ingest per run: no need for a step subprocess
    assets=[kafka_events],
    jobs=[mqtt_readings],
    sensors=[
        make_queue_sensor(
            "kafka_events_sensor",
            "kafka_queue",
            asset_selection=[kafka_events],
            max_messages=100_000,
            minimum_interval_seconds=INTERVAL,
        ),
        make_queue_sensor(
            "mqtt_readings_sensor",
            "mqtt_queue",
            job=mqtt_readings,
            max_messages=10_000,
            minimum_interval_seconds=INTERVAL,
        ),
    ],
    schedules=[
        make_ingest_schedule(
            "mqtt_readings_schedule",
            "mqtt_queue",
            CRON,
            job=mqtt_readings,
            max_messages=10_000,
        ),
    ],
    resources={
        "kafka_queue": KafkaQueueResource(
            bootstrap=_env("SLUICE_EXAMPLE_KAFKA_BOOTSTRAP", "localhost:9092"),
            topic=_env("SLUICE_EXAMPLE_KAFKA_TOPIC", "events"),
            group_id="sluice-example",
            **_login("SLUICE_EXAMPLE_KAFKA"),
        ),
        "mqtt_queue": MqttQueueResource(
            uri=_env("SLUICE_EXAMPLE_MQTT_URL", "mqtt://localhost:1883"),
            topic=_env("SLUICE_EXAMPLE_MQTT_TOPIC", "sensors/#"),
            client_id=_env("SLUICE_EXAMPLE_MQTT_CLIENT_ID", "sluice-example"),
            **_login("SLUICE_EXAMPLE_MQTT"),
        ),
        "spark": SparkResource(conf={"spark.ui.enabled": "false"}),
    },
)
