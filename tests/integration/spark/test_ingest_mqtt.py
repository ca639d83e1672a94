"""sluice.spark.ingest of an MQTT persistent session on a real mosquitto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import BatchSpec
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.spark import ingest
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, dataset_rows, quarantine_rows, reading


def mqtt_queue(broker: Broker, **config: Any) -> MqttMessageQueue:
    queue = MqttMessageQueue()
    queue.configure({"connection.uri": broker.url, "options.qos": 1, **config})
    queue.open(None)
    return queue


@pytest.fixture
def session(mosquitto_broker: Broker, unique_name: str) -> Iterator[BatchSpec]:
    """The batch of a persistent session subscribed to ``<unique_name>/#``."""
    mqtt_queue(mosquitto_broker, topic=f"{unique_name}/#", client_id=unique_name).close(None)
    yield BatchSpec("mqtt", f"{unique_name}/#", client_id=unique_name, max_messages=50)


def test_mqtt_batch_goes_to_the_dataset_bad_ones_to_quarantine_and_the_dead_letter_topic(
    spark: Any, mosquitto_broker: Broker, session: BatchSpec, tmp_path: Path
) -> None:
    base = session.topic[:-2]
    letters = mqtt_queue(mosquitto_broker, topic=f"{base}-dead", client_id=f"{base}-dead")
    publisher = mqtt_queue(
        mosquitto_broker, topic=f"{base}/line-1", **{"options.autosubscribe": False}
    )
    try:
        for i in range(6):
            publisher.send(None, MessageEnvelope(None, "reading", json.loads(reading(i))))
        publisher.send(None, MessageEnvelope(None, "reading", b'{"temperature": "warm"}'))
        source = {
            "connection.uri": mosquitto_broker.url,
            "options.dead_letter_topic": f"{base}-dead",
        }

        result = ingest(spark, session, tmp_path, source=source, schema=SCHEMA, dead_letter=True)
        dead = letters.receive(None, 10000)
        again = ingest(spark, session, tmp_path, source=source, schema=SCHEMA)
    finally:
        publisher.close(None)
        letters.close(None)

    assert (result.read, result.written, result.quarantined, result.committed) == (7, 6, 1, True)
    rows = dataset_rows(tmp_path)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(6)]
    assert {r["topic"] for r in rows} == {f"{base}/line-1"}
    assert [r["reason"] for r in quarantine_rows(tmp_path)] == [
        "does not match the schema: 'temperature' is not double"
    ]
    assert dead is not None and dead.header("sluice.reason") == (
        b"does not match the schema: 'temperature' is not double"
    )
    assert again.read == 0, "every message was acknowledged after the write"


def test_mqtt_ingest_refuses_qos_0(spark: Any, session: BatchSpec, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"needs options\.qos 1"):
        ingest(spark, session, tmp_path, source="mqtt://127.0.0.1:1883?qos=0")


def test_one_id_names_an_mqtt_batch_everywhere(
    spark: Any, mosquitto_broker: Broker, session: BatchSpec, tmp_path: Path
) -> None:
    """Two waves planned from the session: each has its own id, which is the directory, the
    record and the result's; a rerun of a published batch leaves new messages to the next."""
    base = session.topic[:-2]
    planner = mqtt_queue(mosquitto_broker, topic=session.topic, client_id=f"{base}-plan")
    publisher = mqtt_queue(mosquitto_broker, topic=f"{base}/a", **{"options.autosubscribe": False})
    source = {"connection.uri": mosquitto_broker.url}
    try:
        specs = []
        for wave in range(2):
            publisher.send(None, MessageEnvelope(None, "reading", json.loads(reading(wave))))
            spec = _with_session(planner.plan_batch(50), session)
            result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)
            assert result.batch_id == spec.batch_id and result.written == 1
            assert (tmp_path / f"batch_id={spec.batch_id}").is_dir()
            specs.append(spec)
        publisher.send(None, MessageEnvelope(None, "reading", json.loads(reading(9))))
        rerun = ingest(spark, specs[-1], tmp_path, source=source, schema=SCHEMA)
        following = ingest(
            spark,
            _with_session(planner.plan_batch(50), session),
            tmp_path,
            source=source,
            schema=SCHEMA,
        )
    finally:
        publisher.close(None)
        planner.close(None)

    assert specs[0].batch_id != specs[1].batch_id
    assert (rerun.written, rerun.skipped) == (0, 1), "left for the next batch"
    assert following.written == 1
    assert sorted(r["temperature"] for r in dataset_rows(tmp_path)) == [0.0, 0.1, 0.9]


def _with_session(spec: BatchSpec, session: BatchSpec) -> BatchSpec:
    """``spec`` (planned by another client) for the ingest session of ``session``."""
    return BatchSpec(
        "mqtt", spec.topic, client_id=session.client_id, max_messages=50, sequence=spec.sequence
    )
