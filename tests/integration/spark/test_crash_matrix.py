"""The crash matrix: an ingest SIGKILLed at every failpoint, then run again (with ``sluice
compact`` and ``sluice expire`` days later in between, in one column of it).

Kafka is effectively-once, whichever range reader reads (``options.reader``): every message
exactly once in the sink (``sluice audit``), the group's lag 0, and every bad record exactly
once on the dead-letter topic. MQTT (QoS 1, persistent session, envelopes) is at-least-once
with de-duplication: every message present, no message id twice.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec, plan_batch
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope
from sluice.spark import ingest
from sluice.spark.failpoints import FAILPOINTS
from sluice.spark.kafka_source import READERS, SPARK_READER
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, KafkaTopic, dataset_rows, quarantine_rows, reading, sink_in
from .crashes import (
    assert_exactly_once,
    dead_letter_origins,
    maintain_days_later,
    run_child,
    with_reader,
)

KAFKA_POINTS = [p for p in FAILPOINTS if p != "commit.midway"]
BAD = [b"not json", b'{"temperature": "warm"}']


#: (reader, store, maintained): each reader (Spark's Kafka source too) on local disk, and the
#: default one on S3 (``s3://``); the default one with ``sluice compact`` (local disk only)
#: and ``sluice expire`` days later between the crash and the rerun (the others rerun at once)
READER_STORES = [(reader, "local", reader == READERS[0]) for reader in READERS] + [
    (SPARK_READER, "local", False),
    (READERS[0], "s3", True),
]
#: Where the second Python reader differs from the first: while it reads and stages. From
#: the staged files on, both give the same Arrow files to the same sink code.
READING_POINTS = ("read.before", "read.after_first_chunk", "stage.after_write")
CASES = [
    (point, reader, store, maintained)
    for point in KAFKA_POINTS
    for reader, store, maintained in READER_STORES
    if reader != READERS[1] or point in READING_POINTS
]


@pytest.mark.parametrize(("point", "reader", "store", "maintained"), CASES)
def test_kafka_killed_at_each_failpoint_then_rerun_is_exactly_once(
    spark: Any,
    topic: KafkaTopic,
    point: str,
    reader: str,
    store: str,
    maintained: bool,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    topic.send([reading(i) for i in range(40)] + BAD)
    spec = topic.plan()
    sink = sink_in(store, tmp_path, request)
    source = with_reader(topic.source, reader)
    options = {"source": source, "schema": SCHEMA, "dead_letter": True}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    if maintained:
        maintain_days_later(sink, point)
    ingest(spark, spec, sink, **options)

    assert_exactly_once(audit(sink, topic.source), 42)
    assert sorted(r["temperature"] for r in dataset_rows(sink)) == [i / 10 for i in range(40)]
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"
    bad = sorted((r["partition"], r["offset"]) for r in quarantine_rows(sink))
    assert dead_letter_origins(topic.broker.bootstrap, f"{topic.name}.dlq") == bad


def test_kafka_twenty_ingests_killed_at_random_moments(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """Each round sends messages, plans from the committed offsets and kills the ingest at a
    random moment of its run (up to a little more than the last round that ran to its end
    took: the first runs to its end; some finish first); a last ingest finishes. Bounded: 20
    rounds. One reader is enough here: what is under test is the protocol around it, and
    every reader is killed at each failpoint above."""
    reader = READERS[0]
    chooser = random.Random(20261122)
    sink, sent = tmp_path / "sink", 0
    options = {"source": with_reader(topic.source, reader), "schema": SCHEMA, "dead_letter": True}
    outcomes, one_run = [], 0.0
    for number in range(20):
        topic.send([reading(sent + i) for i in range(15)] + BAD[:1])
        sent += 15
        spec = topic.plan()
        started = time.monotonic()
        code, _ = run_child(
            spark,
            {"spec": spec.to_dict(), "sink": sink, **options},
            kill_after=chooser.uniform(0.05, 1.1) * one_run if number else None,
        )
        if code == 0:  # the last round that ran to its end sets the next one's span
            one_run = time.monotonic() - started
        assert number or code == 0, "the first round runs to its end"
        outcomes.append(code)
    waiting = plan_batch(topic.queue)
    if waiting is not None:  # none when the last round's child finished before its kill
        ingest(spark, waiting, sink, **options)

    assert outcomes.count(-9) >= 5, f"most rounds should be killed: {outcomes}"
    assert_exactly_once(audit(sink, topic.source), sent + 20)
    assert sorted(r["temperature"] for r in dataset_rows(sink)) == [i / 10 for i in range(sent)]
    assert plan_batch(topic.queue) is None


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


def publish_envelopes(broker: Broker, topic: str, payloads: list[Any]) -> list[str]:
    publisher = MqttMessageQueue()
    publisher.configure(
        {
            "connection.uri": broker.url,
            "topic": topic,
            "options.qos": 1,
            "options.autosubscribe": False,
        }
    )
    publisher.open(None)
    sent = []
    try:
        for payload in payloads:
            envelope = MessageEnvelope(None, "reading", payload)
            publisher.send(None, envelope)
            sent.append(str(envelope.message_id))
    finally:
        publisher.close(None)
    return sent


@pytest.mark.parametrize("point", FAILPOINTS)
def test_mqtt_killed_at_each_failpoint_then_rerun_has_every_message_once(
    spark: Any,
    mosquitto_broker: Broker,
    mqtt_session: tuple[str, str],
    point: str,
    tmp_path: Path,
) -> None:
    topic, client_id = mqtt_session
    dead = f"{topic}-dead"
    sent = publish_envelopes(
        mosquitto_broker, topic, [json.loads(reading(i)) for i in range(25)] + BAD
    )
    spec = BatchSpec("mqtt", topic, client_id=client_id, max_messages=100)
    source = {"connection.uri": mosquitto_broker.url, "options.dead_letter_topic": dead}
    sink = tmp_path / "sink"
    options = {"source": source, "schema": SCHEMA, "dead_letter": True}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    ingest(spark, spec, sink, **options)

    report = audit(sink)
    assert report.ok, "\n".join(report.lines())
    ids = [r["message_id"] for r in dataset_rows(sink) + quarantine_rows(sink)]
    assert sorted(ids) == sorted(sent), "every message once"
    assert leftovers(mosquitto_broker, topic, client_id) == [], "every message was acknowledged"


def leftovers(broker: Broker, topic: str, client_id: str) -> list[str]:
    """Ids the session still holds: it reconnects, a marker is published after it, and what
    arrives before the marker was left unacknowledged (MQTT keeps a topic's order)."""
    session = MqttMessageQueue()
    session.configure(
        {
            "connection.uri": broker.url,
            "topic": topic,
            "client_id": client_id,
            "options.qos": 1,
            "autocommit": False,
        }
    )
    session.open(None)
    try:
        (marker,) = publish_envelopes(broker, topic, [{"marker": True}])
        found = []
        while True:
            message = session.receive(None, 10_000)
            assert message is not None, "the marker never arrived"
            session.complete(message)
            if str(message.message_id) == marker:
                return found
            found.append(str(message.message_id))
    finally:
        session.close(None)
