"""Partitioned Iceberg tables: the spec given with the table applied on creation, one partition
value per data file, pruning by pyiceberg's planner, and an existing table's spec kept."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.partitioning import PartitionTerm
from sluice.testing.plugin import Broker

from ..spark.conftest import KafkaTopic, open_topic
from .conftest import Lake, table_rows

SCHEMA = "device STRING, temperature DOUBLE, ts TIMESTAMP"
DAYS = [datetime.date(2026, 1, 5) + datetime.timedelta(days=d) for d in range(3)]


def reading(i: int) -> bytes:
    """A reading on one of three days (by i), from one of five devices."""
    at = datetime.datetime.combine(DAYS[i % 3], datetime.time(i % 24, 7))
    return json.dumps(
        {"device": f"dev-{i % 5}", "temperature": i / 10, "ts": at.isoformat() + "Z"}
    ).encode()


@pytest.fixture
def topic(noida_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    opened = open_topic(noida_broker, unique_name, partitions=2)
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def test_a_partitioned_table_holds_one_partition_value_per_file_and_prunes_by_day(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

    sink = sqlite_lake.sink(query="?partition_by=day(ts),bucket(4,device)")
    topic.send([reading(i) for i in range(30)])
    first = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA, mode="driver")
    # the plain URI: the table's own spec is used
    topic.send([reading(i) for i in range(30, 45)])
    second = ingest(spark, topic.plan(), sqlite_lake.sink(), source=topic.source, schema=SCHEMA)
    assert (first.written, second.written) == (30, 15)

    table = sqlite_lake.table()
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("ts_day", "day"),
        ("device_bucket", "bucket[4]"),
    ]
    tasks = assert_one_partition_value_per_file(table)
    bucket = PartitionTerm("bucket", "device", 4)
    # pruning: a filter on one day plans that day's files only
    start = datetime.datetime.combine(DAYS[1], datetime.time()).isoformat() + "+00:00"
    end = datetime.datetime.combine(DAYS[2], datetime.time()).isoformat() + "+00:00"
    one_day = And(GreaterThanOrEqual("ts", start), LessThan("ts", end))
    planned = list(table.scan(row_filter=one_day).plan_files())
    assert planned and len(planned) < len(tasks)
    assert {t.file.partition[0] for t in planned} == {(DAYS[1] - datetime.date(1970, 1, 1)).days}
    assert table.scan(row_filter=one_day).to_arrow().num_rows == 15
    # and a bucket's files only
    in_bucket = list(table.scan(row_filter=EqualTo("device", "dev-3")).plan_files())
    assert {t.file.partition[1] for t in in_bucket} == set(
        bucket.values(_strings("dev-3")).to_pylist()
    )
    assert sorted(r["temperature"] for r in table_rows(sqlite_lake)) == [i / 10 for i in range(45)]
    assert audit(sink, topic.source).ok

    # another spec for the existing table is refused before anything is read, naming both
    topic.send([reading(45)])
    other = sqlite_lake.sink(query="?partition_by=hour(ts)")
    with pytest.raises(ConfigError, match=r"partitioned by day\(ts\),bucket\(4,device\)"):
        ingest(spark, topic.plan(), other, source=topic.source, schema=SCHEMA)
    assert [(f.name) for f in sqlite_lake.table().spec().fields] == ["ts_day", "device_bucket"]


def test_a_bad_partition_spec_fails_before_anything_is_read_naming_the_problem(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    topic.send([reading(0)])
    spec = topic.plan()
    with pytest.raises(ConfigError, match=r"unknown transform 'days'.*identity, year"):
        ingest(spark, spec, sqlite_lake.sink(query="?partition_by=days(ts)"), source=topic.source)
    with pytest.raises(ConfigError, match=r"no column 'when'.*device, temperature, ts"):
        ingest(spark, spec, sqlite_lake.sink(), source=topic.source, schema=SCHEMA,
               partition_by="day(when)")  # fmt: skip
    with pytest.raises(ConfigError, match=r"day takes a timestamp or date column"):
        ingest(spark, spec, sqlite_lake.sink(), source=topic.source, schema=SCHEMA,
               partition_by=["day(device)"])  # fmt: skip
    assert sqlite_lake.catalog.list_tables(sqlite_lake.namespace) == []
    assert topic.plan() is not None  # nothing committed


def _strings(*values: str) -> Any:
    import pyarrow as pa

    return pa.array(values)


# before the commit point, and between it and the Kafka commit (publish.after_rename is the
# same for the table as commit.before; the unpartitioned crash matrix covers every point)
@pytest.mark.parametrize("point", ["publish.after_intent", "commit.before"])
def test_a_partitioned_ingest_killed_at_publish_or_commit_then_rerun_is_exactly_once(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake, point: str
) -> None:
    from ..spark.crashes import assert_exactly_once, run_child

    topic.send([reading(i) for i in range(12)] + [b"not json"])
    spec = topic.plan()
    sink = sqlite_lake.sink(query="?partition_by=day(ts),bucket(2,device)")
    options = {"source": topic.source, "schema": SCHEMA}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    ingest(spark, spec, sink, **options)

    assert_exactly_once(audit(sink, topic.source), 13)
    assert sorted(r["temperature"] for r in table_rows(sqlite_lake)) == [i / 10 for i in range(12)]
    assert len(table_rows(sqlite_lake, "readings__quarantine")) == 1
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"
    assert_one_partition_value_per_file(sqlite_lake.table())


def assert_one_partition_value_per_file(table: Any) -> list[Any]:
    """Each data file's rows have the one partition value its manifest entry records (and no
    file is in the table twice); returns the scan's tasks."""
    import pyarrow.parquet as pq

    from sluice.spark.partitioning import Partitioning

    spec = Partitioning.of_iceberg(table.spec(), table.schema())
    tasks = list(table.scan().plan_files())
    assert len({t.file.file_path for t in tasks}) == len(tasks)
    for task in tasks:
        rows = pq.read_table(task.file.file_path.removeprefix("file://"))
        for number, term in enumerate(spec.terms):
            values = set(term.values(rows[term.column]).to_pylist())
            assert values == {task.file.partition[number]}, task.file.file_path
    return tasks
