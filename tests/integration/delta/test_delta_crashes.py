"""The crash matrix on a Delta sink, at the failpoints where a Delta sink differs from the others
(the next state file written and not yet named by the log, its commit, the quarantine commit
after it, the offsets' commit; the other steps do nothing of the sink's own): an ingest
SIGKILLed there, then run again; and at every failpoint, then ``sluice compact`` and ``sluice
expire`` with their defaults as if days had passed, then run again. Kafka: every message
exactly once (``sluice audit``), lag 0, every dead letter once, and ONE commit with the
stream's ``txn`` (a rerun after the commit learns it from the log). MQTT: every message id
once, none left unacknowledged.

Each on a local table, and on tables on object stores: on SeaweedFS (the tests' S3 server)
the Delta points and maintenance after the crashes that leave the sink something to clean up,
on moto (a second S3 implementation) the Delta points, on Azurite (Azure Blob Storage) two of
them (:data:`AZURE_POINTS`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec, plan_batch
from sluice.spark import ingest
from sluice.spark.sinks import StreamKey
from sluice.spark.sinks.delta import app_id
from sluice.testing.plugin import Broker

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import (
    assert_exactly_once,
    dead_letter_origins,
    maintain_days_later,
    run_child,
)
from ..spark.test_crash_matrix import BAD, leftovers, mqtt_session, publish_envelopes
from ..spark.test_crash_matrix import KAFKA_POINTS as EVERY_KAFKA_POINT
from .conftest import DeltaPlace
from .test_ingest_delta import commits, delta_rows

__all__ = ["mqtt_session"]  # the fixture, shared with the crash matrix

KAFKA_POINTS = [
    "publish.after_intent",
    "publish.after_rename",
    "publish.after_state",
    "commit.before",
]
#: On Azurite (Azure Blob Storage): the state written and not yet named by the log, and the
#: commit done with the offsets not yet committed (the other two points differ from these in
#: nothing Azure-specific, and each case costs a Spark child process)
AZURE_POINTS = ["publish.after_intent", "publish.after_state"]
#: (failpoint, whether maintenance runs days later between the crash and the rerun, where)
KAFKA_CASES = (
    [(p, False, "local") for p in KAFKA_POINTS]
    + [(p, True, "local") for p in EVERY_KAFKA_POINT]
    + [(p, False, "seaweedfs") for p in KAFKA_POINTS]
    + [(p, True, "seaweedfs") for p in ["stage.after_write", *KAFKA_POINTS]]
    + [(p, False, "moto") for p in KAFKA_POINTS]
    + [(p, False, "azurite") for p in AZURE_POINTS]
)


@pytest.mark.parametrize(("point", "maintained", "place"), KAFKA_CASES)
def test_kafka_into_delta_killed_at_each_failpoint_then_rerun_is_exactly_once(
    spark: Any,
    topic: KafkaTopic,
    point: str,
    maintained: bool,
    place: str,
    delta_place: Callable[[str], DeltaPlace],
) -> None:
    where = delta_place(place)
    topic.send([reading(i) for i in range(40)] + BAD)
    spec = topic.plan()
    table = where.uri("readings")
    sink = where.sink("readings")
    options = {"source": topic.source, "schema": SCHEMA, "dead_letter": True}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    stream = app_id(StreamKey.of(spec))
    if point == "publish.after_intent":  # its next state is written; the log does not name it
        assert [f for f in where.files("readings", "_sluice", "streams") if f.endswith("/1.json")]
        assert where.table("readings").transaction_version(stream) is None
    if maintained:
        maintain_days_later(sink, point)
    ingest(spark, spec, sink, **options)

    assert_exactly_once(audit(sink, topic.source), 42)
    assert sorted(r["temperature"] for r in delta_rows(table)) == [i / 10 for i in range(40)]
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"
    bad = delta_rows(f"{table}/_quarantine")
    assert len(bad) == 2, "the quarantine is committed once"
    origins = sorted((r["partition"], r["offset"]) for r in bad)
    assert dead_letter_origins(topic.broker.bootstrap, f"{topic.name}.dlq") == origins
    assert [c["sluice.batch-id"] for c in commits(table)] == [spec.batch_id], "one commit"
    assert where.table("readings").transaction_version(stream) == 1
    assert where.table("readings", "_quarantine").transaction_version(stream) == 1


@pytest.mark.parametrize("place", ["local", "seaweedfs"])
@pytest.mark.parametrize("point", ["publish.after_rename"])
def test_mqtt_into_delta_killed_then_rerun_has_every_message_once(
    spark: Any,
    mosquitto_broker: Broker,
    mqtt_session: tuple[str, str],
    point: str,
    place: str,
    delta_place: Callable[[str], DeltaPlace],
) -> None:
    topic, client_id = mqtt_session
    sent = publish_envelopes(
        mosquitto_broker, topic, [json.loads(reading(i)) for i in range(25)] + BAD
    )
    spec = BatchSpec("mqtt", topic, client_id=client_id, max_messages=100)
    source = {"connection.uri": mosquitto_broker.url}
    where = delta_place(place)
    table, sink = where.uri("readings"), where.sink("readings")
    options = {"source": source, "schema": SCHEMA}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    ingest(spark, spec, sink, **options)

    report = audit(sink)
    assert report.ok, "\n".join(report.lines())
    ids = [r["message_id"] for r in delta_rows(table) + delta_rows(f"{table}/_quarantine")]
    assert sorted(ids) == sorted(sent), "every message once"
    assert leftovers(mosquitto_broker, topic, client_id) == [], "every message was acknowledged"
