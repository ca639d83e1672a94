"""Settings the Sluice examples share, from environment variables (defaults in brackets).

- ``SLUICE_EXAMPLE_KAFKA_CONN`` [sluice_kafka_default], ``SLUICE_EXAMPLE_MQTT_CONN``
  [sluice_mqtt_default]: connection ids, of type ``sluice_kafka`` / ``sluice_mqtt``.
- ``SLUICE_EXAMPLE_KAFKA_TOPIC`` [iot.readings], ``SLUICE_EXAMPLE_MQTT_TOPIC``
  [sluice/iot/readings]: where the readings arrive.
- ``SLUICE_EXAMPLE_SINK`` [/tmp/sluice/datasets]: each example writes the Parquet dataset
  ``<sink>/<its id>``.
- ``SLUICE_EXAMPLE_MIN_MESSAGES`` [1], ``SLUICE_EXAMPLE_MAX_MESSAGES`` [100000]: batch size.
- ``SLUICE_EXAMPLE_SCHEDULE`` [@continuous]: schedule of the sensor examples ("none": manual).

This module holds no workflow, so the scheduler's file processor skips it (its heuristic looks
for two words this file avoids); the examples import it from their own folder, which is on
``sys.path`` when they are parsed.
"""

from __future__ import annotations

import datetime
import os

KAFKA_CONN = os.environ.get("SLUICE_EXAMPLE_KAFKA_CONN", "sluice_kafka_default")
MQTT_CONN = os.environ.get("SLUICE_EXAMPLE_MQTT_CONN", "sluice_mqtt_default")
KAFKA_TOPIC = os.environ.get("SLUICE_EXAMPLE_KAFKA_TOPIC", "iot.readings")
MQTT_TOPIC = os.environ.get("SLUICE_EXAMPLE_MQTT_TOPIC", "sluice/iot/readings")
SINK = os.environ.get("SLUICE_EXAMPLE_SINK", "/tmp/sluice/datasets")
MIN_MESSAGES = int(os.environ.get("SLUICE_EXAMPLE_MIN_MESSAGES", "1"))
MAX_MESSAGES = int(os.environ.get("SLUICE_EXAMPLE_MAX_MESSAGES", "100000"))
_schedule = os.environ.get("SLUICE_EXAMPLE_SCHEDULE", "@continuous")
SCHEDULE = None if _schedule.lower() == "none" else _schedule

#: The JSON readings the examples ingest, e.g.
#: {"device": "sensor-1", "temperature": 21.5, "ts": "2026-01-01T12:00:00Z"}
READING_SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def sink_for(name: str) -> str:
    return os.path.join(SINK, name)
