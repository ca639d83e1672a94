"""Crash recovery: an ingest SIGKILLed at each step, then run again, loses and doubles nothing.

Kafka is effectively-once: every message exactly once. MQTT (QoS 1, persistent session,
envelopes) is at-least-once with de-duplication by message id: every message, no id twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import BatchSpec, plan_batch
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.spark import ingest
from sluice.testing import wait_until
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, KafkaTopic, dataset_rows, reading

STAGES = ["read", "written", "committed"]
CHILD = Path(__file__).with_name("crash_child.py")


def kill_ingest_at(stage: str, spec: BatchSpec, sink: Path, source: str) -> None:
    """Start an ingest in a child process and SIGKILL it once it reaches ``stage``."""
    marker = sink.parent / f"{sink.name}.{stage}.reached"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), spec.to_json(), str(sink), source, stage, str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: marker.exists() or child.poll() is not None, timeout=180, message=stage)
        assert marker.exists(), f"the ingest ended before {stage}: {child.stderr.read()!r}"  # type: ignore[union-attr]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        child.stderr.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("stage", STAGES)
def test_kafka_every_message_exactly_once_after_a_crash(
    spark: Any, topic: KafkaTopic, stage: str, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(40)])
    spec = topic.plan()
    sink = tmp_path / "dataset"

    kill_ingest_at(stage, spec, sink, topic.source)
    ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)

    rows = dataset_rows(sink)
    coordinates = sorted((r["partition"], r["offset"]) for r in rows)
    assert len(coordinates) == len(set(coordinates)) == 40
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(40)]
    assert plan_batch(topic.queue) is None, "everything is committed after the rerun"


@pytest.fixture
def mqtt_session(mosquitto_broker: Broker, unique_name: str) -> Iterator[tuple[str, str]]:
    """(topic, client id) of a persistent QoS 1 session that already subscribed."""
    session = MqttMessageQueue()
    session.configure(
        {
            "connection.uri": mosquitto_broker.url,
            "topic": unique_name,
            "client_id": f"{unique_name}-ingest",
            "options.qos": 1,
        }
    )
    session.open(None)
    session.close(None)
    yield unique_name, f"{unique_name}-ingest"


@pytest.mark.parametrize("stage", STAGES)
def test_mqtt_every_message_at_least_once_and_no_id_twice_after_a_crash(
    spark: Any,
    mosquitto_broker: Broker,
    mqtt_session: tuple[str, str],
    stage: str,
    tmp_path: Path,
) -> None:
    topic, client_id = mqtt_session
    publisher = MqttMessageQueue()
    publisher.configure(
        {
            "connection.uri": mosquitto_broker.url,
            "topic": topic,
            "options.qos": 1,
            "options.autosubscribe": False,
        }
    )
    publisher.open(None)
    sent = []
    try:
        for i in range(25):
            envelope = MessageEnvelope(None, "reading", json.loads(reading(i)))
            publisher.send(None, envelope)
            sent.append(envelope.message_id)
    finally:
        publisher.close(None)
    spec = BatchSpec("mqtt", topic, client_id=client_id, max_messages=100)
    source = f"mqtt://127.0.0.1:{mosquitto_broker.port}?qos=1"
    sink = tmp_path / "dataset"

    kill_ingest_at(stage, spec, sink, source)
    ingest(spark, spec, sink, source=source, schema=SCHEMA)

    ids = [r["message_id"] for r in dataset_rows(sink)]
    assert len(ids) == len(set(ids)), "no message id twice"
    assert set(ids) == set(sent), "every message at least once"
