"""The crash matrix on an Iceberg sink: a Kafka ingest SIGKILLed at every failpoint (among
them between the Iceberg commit and the Kafka commit, ``commit.before``), then run again:
every message exactly once in the table (``sluice audit``), lag 0, every dead letter once; on
local disk with ``sluice compact`` and ``sluice expire`` days later between the crash and the
rerun, on the S3 server, and on the REST catalog.
And ``sluice ingest`` / ``sluice audit`` on an ``iceberg://`` sink."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.testing.plugin import Broker
from tests.unit.cli.runner import assert_ok, run

from ..spark.conftest import SCHEMA, KafkaTopic, opened_topic, reading
from ..spark.crashes import (
    assert_exactly_once,
    dead_letter_origins,
    maintain_days_later,
    run_child,
)
from ..spark.test_crash_matrix import BAD, KAFKA_POINTS
from .conftest import Lake, sluice_summaries, table_rows


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    yield from opened_topic(apache_kafka_broker, unique_name)


#: (store, maintained): a SQLite catalog with its warehouse on local disk, with ``sluice
#: compact`` and ``sluice expire`` days later between the crash and the rerun; or on the S3
#: server, rerun at once; or the REST catalog (its warehouse on the S3 server), rerun at once
LAKES = [("local", True), ("s3", False), ("rest", False)]
LAKE_FIXTURES = {"local": "sqlite_lake", "s3": "s3_sqlite_lake", "rest": "rest_lake"}


#: Every point on the local warehouse; on S3 and the REST catalog, every point from the
#: batch's staged files on (before them, nothing of the table or the store has been touched)
CASES = [
    (point, store, maintained)
    for point in KAFKA_POINTS
    for store, maintained in LAKES
    if store == "local" or not point.startswith("read.")
]


@pytest.mark.parametrize(("point", "store", "maintained"), CASES)
def test_kafka_into_iceberg_killed_at_each_failpoint_then_rerun_is_exactly_once(
    spark: Any,
    topic: KafkaTopic,
    point: str,
    store: str,
    maintained: bool,
    request: pytest.FixtureRequest,
) -> None:
    sqlite_lake: Lake = request.getfixturevalue(LAKE_FIXTURES[store])
    topic.send([reading(i) for i in range(40)] + BAD)
    spec = topic.plan()
    sink = sqlite_lake.sink()
    options = {"source": topic.source, "schema": SCHEMA, "dead_letter": True}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    if maintained:
        maintain_days_later(sink, point)
    ingest(spark, spec, sink, **options)

    assert_exactly_once(audit(sink, topic.source), 42)
    rows = table_rows(sqlite_lake)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(40)]
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"
    bad = table_rows(sqlite_lake, "readings__quarantine")
    assert len(bad) == 2, "a rerun replaces the quarantine rows of a crashed run"
    origins = sorted((r["partition"], r["offset"]) for r in bad)
    assert dead_letter_origins(topic.broker.bootstrap, f"{topic.name}.dlq") == origins
    assert [s["sluice.batch-id"] for s in sluice_summaries(sqlite_lake)] == [spec.batch_id]


def test_sluice_ingest_and_audit_on_an_iceberg_sink(
    spark: Any, noida_broker: Broker, unique_name: str, sqlite_lake: Lake
) -> None:
    topic = f"{noida_broker.url}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "30", "--malformed", "3"))
    uri = f"{topic}?group_id={unique_name}"
    sink = sqlite_lake.sink("iot", "?quarantine=" + f"{sqlite_lake.namespace}.rejected")
    schema = "device STRING, temperature DOUBLE, humidity DOUBLE, ts STRING"
    partitions = "day(timestamp),bucket(4,device)"
    assert_ok(run("ingest", uri, "--sink", sink, "--schema", schema, "--partition-by", partitions))

    spec = sqlite_lake.table("iot").spec()
    assert [f.name for f in spec.fields] == ["timestamp_day", "device_bucket"]
    assert len(table_rows(sqlite_lake, "iot")) == 27
    assert len(table_rows(sqlite_lake, "rejected")) == 3
    out = assert_ok(run("audit", sink, "--source", noida_broker.url))
    assert f"kafka topic '{unique_name}', group '{unique_name}': 1 batch(es)" in out
    assert "committed 30, written 27, quarantined 3, doubled 0, missing 0" in out
    assert out.strip().endswith("OK: every message is in the sink once.")
