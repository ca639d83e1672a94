"""Kafka and MQTT batches into Iceberg tables on real catalogs (SQL on SQLite and PostgreSQL;
REST, its warehouse on the S3 server)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.spark.sinks import iceberg
from sluice.testing.plugin import Broker

from ..spark.conftest import SCHEMA, KafkaTopic, open_topic, reading
from ..spark.test_crash_matrix import publish_envelopes
from .conftest import Lake, data_files, sluice_summaries, table_rows

BAD = [b"not json", b'{"temperature": "warm"}']


def test_kafka_batches_in_both_reading_modes_land_in_the_table_named_by_their_snapshots(
    spark: Any, topic: KafkaTopic, lake: Lake
) -> None:
    sink = lake.sink()
    topic.send([reading(i) for i in range(30)] + BAD)
    first = ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA, mode="driver")
    topic.send([reading(30 + i) for i in range(30)])
    second_spec = topic.plan()
    second = ingest(spark, second_spec, sink, source=topic.source, schema=SCHEMA, mode="executors")

    assert (first.written, first.quarantined, second.written) == (30, 2, 30)
    rows = table_rows(lake)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(60)]
    assert {r["batch_id"] for r in rows} == {first.batch_id, second.batch_id}
    bad = table_rows(lake, "readings__quarantine")
    assert sorted(r["value"] for r in bad) == sorted(BAD) and {r["batch_id"] for r in bad} == {
        first.batch_id
    }
    # Spark reads the table's data files as they are (on S3, the REST catalog's warehouse,
    # Parquet readers do: this Spark has no s3:// file system)
    files = data_files(lake)
    assert files and all(f.startswith(lake.table().location()) for f in files)
    if files[0].startswith("file:"):
        read_back = spark.read.parquet(*files).select("offset").collect()
        offsets = sorted(r.offset for r in read_back)
    else:
        io = lake.table().io
        offsets = sorted(
            o for f in files for o in pq.read_table(io.new_input(f).open())["offset"].to_pylist()
        )
    assert offsets == sorted(r["offset"] for r in rows)
    # each batch is one snapshot naming it; the table's properties hold the stream's state
    summaries = sluice_summaries(lake)
    assert [s["sluice.batch-id"] for s in summaries] == [first.batch_id, second.batch_id]
    assert all(s["sluice.topic"] == topic.name for s in summaries)
    assert all(s["sluice.group"] == f"{topic.name}-group" for s in summaries)
    assert summaries[1]["sluice.ranges"] == ",".join(
        f"{r.partition}:{r.start}-{r.end}" for r in second_spec.ranges
    )
    properties = lake.table().properties
    (state,) = [v for k, v in properties.items() if k.startswith("sluice.stream.")]
    assert sum(e - s for i in json.loads(state)["written"].values() for s, e in i) == 62
    lines = iceberg.IcebergSink(sink).snapshot_lines()
    assert len(lines) == 2 and first.batch_id in lines[0] and lines[1].endswith("30 rows")
    assert plan_batch(topic.queue) is None
    report = audit(sink, topic.source)
    assert report.ok and sum(p.written for p in report.streams[0].partitions) == 60


def test_a_rerun_of_a_published_batch_commits_no_new_snapshot(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    topic.send([reading(i) for i in range(10)])
    spec = topic.plan()
    ingest(spark, spec, sqlite_lake.sink(), source=topic.source, schema=SCHEMA)
    again = ingest(spark, spec, sqlite_lake.sink(), source=topic.source, schema=SCHEMA)

    assert again.written == 0 and again.skipped == 10
    assert len(sluice_summaries(sqlite_lake)) == 1 and len(table_rows(sqlite_lake)) == 10


def test_mqtt_batches_land_once_with_their_ids_digested_and_a_large_state_in_a_file(
    spark: Any,
    mosquitto_broker: Broker,
    unique_name: str,
    sqlite_lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(iceberg, "INLINE_LIMIT", 0)
    client_id = f"{unique_name}-ingest"
    spec = BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100)
    source = {"connection.uri": mosquitto_broker.url}
    # the session subscribes first: an empty batch
    ingest(spark, spec, sqlite_lake.sink(), source=source, schema=SCHEMA)
    sent = publish_envelopes(
        mosquitto_broker, unique_name, [json.loads(reading(i)) for i in range(12)]
    )
    result = ingest(
        spark,
        BatchSpec("mqtt", unique_name, client_id=client_id, max_messages=100, sequence=2),
        sqlite_lake.sink(),
        source=source,
        schema=SCHEMA,
    )

    assert result.written == 12
    assert sorted(r["message_id"] for r in table_rows(sqlite_lake)) == sorted(sent)
    last = sluice_summaries(sqlite_lake)[-1]
    assert last["sluice.message-count"] == "12"
    assert (
        last["sluice.message-digest"]
        == hashlib.sha256("\n".join(sorted(sent)).encode()).hexdigest()
    )
    properties = sqlite_lake.table().properties
    assert not any(k.startswith("sluice.stream.") for k in properties)
    (state_file,) = [v for k, v in properties.items() if k.startswith("sluice.stream-file.")]
    assert set(sent) <= set(
        json.loads(Path(state_file.removeprefix("file://")).read_text())["recent_ids"]
    )
    assert audit(sqlite_lake.sink()).ok


def test_a_new_nullable_field_is_added_and_a_changed_type_is_refused_naming_it(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    sink = sqlite_lake.sink()
    topic.send([reading(i) for i in range(5)])
    ingest(spark, topic.plan(), sink, source=topic.source, schema=SCHEMA)
    topic.send([json.dumps({"device": "d", "temperature": 1.5, "site": "north"}).encode()])
    ingest(spark, topic.plan(), sink, source=topic.source, schema=f"{SCHEMA}, site STRING")

    field = sqlite_lake.table().schema().find_field("site")
    assert not field.required
    assert sorted((r["site"] or "") for r in table_rows(sqlite_lake)) == [""] * 5 + ["north"]

    topic.send([json.dumps({"device": "d", "temperature": "hot"}).encode()])
    with pytest.raises(ConfigError, match=r"temperature.*double.*string"):
        ingest(
            spark,
            topic.plan(),
            sink,
            source=topic.source,
            schema="device STRING, temperature STRING",
        )
    assert len(table_rows(sqlite_lake)) == 6


def test_two_ingests_into_one_table_at_once_both_land_after_a_commit_conflict(
    spark: Any,
    noida_broker: Broker,
    unique_name: str,
    postgres_lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two topics, one table: both ingests reach the commit together (a barrier), one wins,
    the other reloads, folds its batch into the fresh state and commits."""
    topics = [open_topic(noida_broker, f"{unique_name}-{n}", partitions=1) for n in "ab"]
    sink = postgres_lake.sink()
    for number, opened in enumerate(topics):
        opened.send([reading(100 * number + i) for i in range(20)])
    ingest(
        spark,
        BatchSpec(
            "kafka",
            topics[0].name,
            group_id=f"{topics[0].name}-group",
            ranges=(OffsetRange(0, 0, 1),),
        ),
        sink,
        source=topics[0].source,
        schema=SCHEMA,
    )
    barrier = threading.Barrier(2, timeout=60)
    attempts: list[str] = []
    original = iceberg.IcebergSink._commit_batch

    def commit_together(self: Any, record: Any, *more: Any) -> Any:
        attempts.append(record.batch_id)
        if attempts.count(record.batch_id) == 1:
            self._load(self.target.table)  # both read the same table version...
            barrier.wait()  # ...then commit at once
        return original(self, record, *more)

    monkeypatch.setattr(iceberg.IcebergSink, "_commit_batch", commit_together)
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(opened: KafkaTopic) -> None:
        try:
            results[opened.name] = ingest(
                spark, opened.plan(), sink, source=opened.source, schema=SCHEMA
            )
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=run, args=(t,)) for t in topics]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        for opened in topics:
            opened.queue.close(None)
            opened.producer.close()

    assert not errors, errors
    assert len(attempts) >= 3, f"one commit should have been retried: {attempts}"
    temperatures = sorted(r["temperature"] for r in table_rows(postgres_lake))
    assert temperatures == sorted([i / 10 for i in range(20)] + [(100 + i) / 10 for i in range(20)])
    states = [k for k in postgres_lake.table().properties if k.startswith("sluice.stream")]
    assert len(states) == 2, "the table's properties hold both streams' states"
    for opened in topics:
        assert audit(sink, opened.source).ok


def test_files_of_sparks_own_writer_land_in_the_table_as_the_other_readers_do(
    cold_spark: Any, apache_kafka_broker: Broker, unique_name: str, sqlite_lake: Lake
) -> None:
    """options.reader 'spark' in a cold session stages files written by Spark's Parquet
    writer (no Python worker: :mod:`sluice.spark.jvm_writer`) and a small quarantine the
    driver wrote with pyarrow; the table takes them like the other readers' files: the rows,
    the quarantine, the snapshot's batch, the audit."""
    topic = open_topic(apache_kafka_broker, unique_name)
    try:
        topic.send([reading(i) for i in range(30)] + BAD)
        source = f"{topic.source}?reader=spark"
        result = ingest(cold_spark, topic.plan(), sqlite_lake.sink(), source=source, schema=SCHEMA)
        assert (result.mode, result.written, result.quarantined) == ("spark", 30, 2)
        rows = table_rows(sqlite_lake)
        assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(30)]
        assert {r["batch_id"] for r in rows} == {result.batch_id}
        bad = table_rows(sqlite_lake, "readings__quarantine")
        assert sorted(r["value"] for r in bad) == sorted(BAD)
        written_by = {
            table: {
                str(pq.read_metadata(f.removeprefix("file://")).created_by).split(" version")[0]
                for f in data_files(sqlite_lake, table)
            }
            for table in ("readings", "readings__quarantine")
        }
        # the rows by Spark's writer; the few small quarantined ones by the driver (pyarrow)
        assert written_by == {
            "readings": {"parquet-mr"},
            "readings__quarantine": {"parquet-cpp-arrow"},
        }
        assert plan_batch(topic.queue) is None
        assert audit(sqlite_lake.sink(), topic.source).ok
    finally:
        topic.close()


def test_a_lean_table_records_its_columns_and_a_full_one_keeps_the_message(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    """The default table holds the fields, Kafka's coordinates and batch_id, and records the
    choice in a property when it is made; append follows it, another is refused; a table
    without the property that Sluice wrote (before the property) keeps the whole message, and
    one made outside Sluice records lean rows on its first batch."""
    lean, full = sqlite_lake.sink("lean"), sqlite_lake.sink("full")
    topic.send([reading(i) for i in range(20)] + BAD)
    first = topic.plan()
    ingest(spark, first, lean, source=topic.source, schema=SCHEMA)
    ingest(spark, first, full, source=topic.source, schema=SCHEMA, keep_message=True)

    fields = [f.split()[0] for f in SCHEMA.split(", ")]
    coordinates = ["partition", "offset", "timestamp"]
    table = sqlite_lake.table("lean")
    assert table.schema().as_arrow().names == [*fields, *coordinates, "batch_id"]
    assert table.properties[iceberg.KEEP_PROPERTY] == "[]"
    message = ["key", "value", "topic", *coordinates, "headers", "message_id"]
    assert sqlite_lake.table("full").schema().as_arrow().names == [*fields, *message, "batch_id"]
    assert {r["value"] for r in table_rows(sqlite_lake, "lean__quarantine")} == set(BAD)

    topic.send([reading(i) for i in range(20, 30)])
    second = topic.plan()
    with pytest.raises(ConfigError, match=r"made with keep_message=False.*\['key'\] was given"):
        ingest(spark, second, lean, source=topic.source, schema=SCHEMA, keep_message=["key"])
    ingest(spark, second, lean, source=topic.source, schema=SCHEMA)
    assert len(table_rows(sqlite_lake, "lean")) == 30
    assert audit(lean, topic.source).ok

    # a table made before the property existed
    with sqlite_lake.table("full").transaction() as transaction:
        transaction.remove_properties(iceberg.KEEP_PROPERTY)
    with pytest.raises(ConfigError, match="made with keep_message=True"):
        ingest(spark, second, full, source=topic.source, schema=SCHEMA, keep_message=False)
    ingest(spark, second, full, source=topic.source, schema=SCHEMA)
    assert {r["value"] for r in table_rows(sqlite_lake, "full")} >= {reading(25)}

    # a table made outside Sluice, written by no batch yet: the first batch records lean rows
    made = sqlite_lake.catalog.create_table(
        f"{sqlite_lake.namespace}.made", schema=pa.schema([pa.field("device", pa.string())])
    )
    assert iceberg.KEEP_PROPERTY not in made.properties
    ingest(spark, second, sqlite_lake.sink("made"), source=topic.source, schema=SCHEMA)
    made = sqlite_lake.table("made")
    assert made.properties[iceberg.KEEP_PROPERTY] == "[]"
    assert "value" not in made.schema().as_arrow().names
