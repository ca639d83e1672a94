"""sluice.spark.ingest on a real Kafka-protocol broker and a real local Spark, reading with
each range reader (``options.reader``: kafka-python, confluent)."""

from __future__ import annotations

import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.kafka import KafkaMessageQueue
from sluice.queues import ConfigError
from sluice.spark import IngestEvent, ingest
from sluice.spark.kafka_source import READERS
from sluice.spark.workers import python_workers_checked
from sluice.testing.plugin import Broker

from .conftest import SCHEMA, KafkaTopic, dataset_rows, open_topic, quarantine_rows, reading
from .crashes import with_reader

SCHEMA_FIELDS = [field.split()[0] for field in SCHEMA.split(", ")]

BAD_VALUES: dict[str, bytes | None] = {
    "invalid JSON": b'{"device": "a", "temperature": ',
    "does not match the schema: 'temperature' is not double": b'{"temperature": "hot"}',
    "empty value": b"",
    "tombstone: the record has no value": None,
    # 1 MB and a bit: the brokers' own limit is 1 MiB per record batch
    "value is 1001000 bytes, over the limit of 1000000 (max_value_bytes)": b"x" * 1_001_000,
    "value is not valid UTF-8": b'{"device": "\xff\xfe"}',
}


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest) -> str:
    """The range reader of the ingest (``options.reader``)."""
    return str(request.param)


@pytest.fixture
def source(topic: KafkaTopic, reader: str) -> str:
    """The topic's source URI, reading with ``reader``."""
    return with_reader(topic.source, reader)


def test_good_rows_land_in_the_dataset_and_bad_ones_in_quarantine_with_their_reason(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(20)])
    topic.send(list(BAD_VALUES.values()))
    spec = topic.plan()

    result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA, dead_letter=True)

    assert (result.read, result.written, result.quarantined) == (26, 20, 6)
    rows = dataset_rows(tmp_path)
    assert sorted(r["temperature"] for r in rows) == [i / 10 for i in range(20)]
    assert {r["device"] for r in rows} == {f"dev-{i}" for i in range(7)}
    # the schema's fields and Kafka's coordinates: the message itself only in the quarantine
    assert all(set(r) == {*SCHEMA_FIELDS, "partition", "offset", "timestamp"} for r in rows)
    bad = quarantine_rows(tmp_path)
    assert sorted(r["reason"] for r in bad) == sorted(BAD_VALUES)
    assert {r["value"] for r in bad} == set(BAD_VALUES.values()), "the whole record is kept"
    assert plan_batch(topic.queue) is None, "the offsets are committed after the write"
    assert result.committed and result.bytes == sum(
        len(v or b"") for v in BAD_VALUES.values()
    ) + sum(len(reading(i)) for i in range(20))

    dead = KafkaMessageQueue(f"{topic.name}.dlq")
    dead.configure(
        {"connection.uri": topic.broker.bootstrap, "group_id": "dlq-reader", "from_beginning": True}
    )
    dead.open(None)
    try:
        letters = [dead.receive(None, 10000) for _ in BAD_VALUES]
    finally:
        dead.close(None)
    reasons = sorted((m.header("sluice.reason") or b"").decode() for m in letters if m is not None)
    assert reasons == sorted(BAD_VALUES)


def test_a_rerun_of_the_same_batch_writes_nothing_twice(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(30)])
    spec = topic.plan()
    first = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)
    again = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)

    assert (first.written, again.read, again.skipped) == (30, 0, 30)
    assert len(dataset_rows(tmp_path)) == 30


def test_a_batch_overlapping_one_written_but_not_committed_skips_its_part(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    """A crash between write and commit, then a sensor plans a bigger batch over the same
    messages: the new batch writes only what the first did not."""
    topic.send([reading(i) for i in range(12)])
    first = topic.plan()

    def crash_after_write(event: IngestEvent) -> None:
        if event.stage == "written":
            raise RuntimeError("crash before the commit")

    with pytest.raises(RuntimeError, match="crash before the commit"):
        ingest(spark, first, tmp_path, source=source, progress=crash_after_write)
    topic.send([reading(i) for i in range(12, 20)])
    second = topic.plan()
    assert second.message_count == 20, "nothing was committed"

    result = ingest(spark, second, tmp_path, source=source)

    assert (result.written, result.skipped) == (8, 12)
    rows = dataset_rows(tmp_path)
    assert {r["value"] for r in rows} == {reading(i) for i in range(20)}, "no schema: the value"
    coordinates = [(r["partition"], r["offset"]) for r in rows]
    assert len(coordinates) == len(set(coordinates)) == 20


def test_reads_exactly_the_planned_ranges_and_commits_their_ends(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(9)], partition=1)
    spec = topic.plan(max_messages=5)
    topic.send([reading(i) for i in range(9, 12)], partition=1)

    result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)

    assert spec.ranges == (OffsetRange(1, 0, 5),)
    assert sorted(r["offset"] for r in dataset_rows(tmp_path)) == [0, 1, 2, 3, 4]
    assert result.read == 5
    assert topic.plan().ranges == (OffsetRange(1, 5, 12),)


def test_reads_in_chunks_of_chunk_size(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(250)])
    events: list[IngestEvent] = []

    ingest(spark, topic.plan(), tmp_path, source=source, chunk_size=100, progress=events.append)

    assert [e.read for e in events if e.stage == "reading"] == [0, 100, 200, 250]
    stages = list(dict.fromkeys(e.stage for e in events))  # each phase, in order
    assert stages == [
        "starting", "reading", "read", "writing", "publishing", "written", "committing",
        "committed",
    ]  # fmt: skip
    writing = [(e.done, e.parts) for e in events if e.stage == "writing"]
    assert writing[-1][0] == writing[-1][1] and writing[-1][1], writing  # the tracker's tasks


@pytest.mark.parametrize("broker_name", ["noida", "tansu"])
def test_driver_and_executor_modes_write_the_same_dataset(
    spark: Any,
    broker_name: str,
    reader: str,
    request: pytest.FixtureRequest,
    unique_name: str,
    tmp_path: Path,
) -> None:
    broker: Broker = request.getfixturevalue(f"{broker_name}_broker")
    topic = open_topic(broker, unique_name)
    try:
        topic.send([reading(i) for i in range(60)] + [b"not json"])
        spec = topic.plan()
        results = {}
        for mode in ("driver", "executors"):
            own = BatchSpec(
                "kafka", spec.topic, group_id=f"{unique_name}-{mode}", ranges=spec.ranges
            )
            results[mode] = ingest(
                spark,
                own,
                tmp_path / mode,
                source=with_reader(topic.source, reader),
                schema=SCHEMA,
                mode=mode,
                chunk_size=25,
            )
    finally:
        topic.queue.close(None)
        topic.producer.close()

    def table(sink: Path) -> list[tuple[Any, ...]]:
        return sorted(tuple(sorted(r.items())) for r in dataset_rows(sink))

    assert [results[m].mode for m in ("driver", "executors")] == ["driver", "executors"]
    assert len(table(tmp_path / "driver")) == 60
    assert table(tmp_path / "driver") == table(tmp_path / "executors")
    assert quarantine_rows(tmp_path / "driver") == quarantine_rows(tmp_path / "executors")
    assert results["driver"].bytes == results["executors"].bytes > 0


def test_bad_arguments_are_named(spark: Any, topic: KafkaTopic, tmp_path: Path) -> None:
    topic.send([reading(0)])
    spec = topic.plan()
    with pytest.raises(ConfigError, match="not a valid Spark DDL"):
        ingest(spark, spec, tmp_path, source=topic.source, schema="device STRNG,,")
    with pytest.raises(ConfigError, match=r"collide with the message columns.*payload_column"):
        ingest(spark, spec, tmp_path, source=topic.source, schema="offset INT")
    with pytest.raises(ConfigError, match="kafka batch but the source is a mqtt:// source"):
        ingest(spark, spec, tmp_path, source="mqtt://127.0.0.1:1883")
    with pytest.raises(ConfigError, match="not a local directory"):
        ingest(spark, spec, "hdfs://namenode/data", source=topic.source)
    with pytest.raises(ValueError, match="does not match its content"):
        ingest(spark, {**spec.to_dict(), "topic": "other"}, tmp_path, source=topic.source)
    assert plan_batch(topic.queue) == spec, "nothing was read or committed"


def test_payload_column_keeps_the_parsed_payload_as_one_struct(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([b'{"offset": 7, "key": "a"}'])
    ingest(
        spark,
        topic.plan(),
        tmp_path,
        source=source,
        schema="offset INT, key STRING",
        payload_column="payload",
        keep_message=["key"],
    )
    (row,) = dataset_rows(tmp_path)
    assert row["payload"] == {"offset": 7, "key": "a"}
    assert row["offset"] == 0 and row["key"] == b"k0"


def test_a_stopped_broker_fails_the_ingest_and_commits_nothing(
    spark: Any, private_noida: Broker, reader: str, unique_name: str, tmp_path: Path
) -> None:
    topic = open_topic(private_noida, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(5)])
        spec = topic.plan()
    finally:
        topic.queue.close(None)
        topic.producer.close()
    private_noida.stop()
    source = {
        "connection.uri": private_noida.bootstrap,
        "options.request_timeout": 2000,
        "options.connect_timeout": 500,
        "options.max_retries": 1,
        "options.reader": reader,
    }

    with pytest.raises(Exception) as failure:
        ingest(spark, spec, tmp_path, source=source)

    assert private_noida.bootstrap in str(failure.value) or "Kafka" in str(failure.value)
    assert dataset_rows(tmp_path) == []
    private_noida.restart()
    result = ingest(spark, spec, tmp_path, source=source)
    assert result.written == 5


def test_raw_values_are_kept_as_bytes_and_only_oversized_ones_quarantined(
    spark: Any, topic: KafkaTopic, source: str, tmp_path: Path
) -> None:
    topic.send([b"\x00\x01binary", b"", b"not json at all", b"y" * 2000])
    result = ingest(
        spark,
        topic.plan(),
        tmp_path,
        source=source,
        value_format="raw",
        max_value_bytes=1000,
    )
    assert (result.written, result.quarantined) == (3, 1)
    assert sorted(r["value"] for r in dataset_rows(tmp_path)) == [
        b"",
        b"\x00\x01binary",
        b"not json at all",
    ]
    assert [r["reason"] for r in quarantine_rows(tmp_path)] == [
        "value is 2000 bytes, over the limit of 1000 (max_value_bytes)"
    ]


def test_the_confluent_reader_without_confluent_kafka_fails_before_reading(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ingest takes options.reader from its source; without the package it says how to
    install it, and reads, writes and commits nothing."""
    topic.send([reading(0)])
    spec = topic.plan()
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # what an absent package does
    monkeypatch.delitem(sys.modules, "sluice.kafka.confluent_ranges", raising=False)

    with pytest.raises(ConfigError, match=r"pip install 'sluice-core\[confluent\]'"):
        ingest(spark, spec, tmp_path, source=with_reader(topic.source, "confluent"))

    assert dataset_rows(tmp_path) == []
    assert plan_batch(topic.queue) == spec, "nothing was committed"


def test_auto_reads_on_the_executors_from_a_lower_count_once_the_session_is_warm(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mode="auto"``: a session's first ingest keeps the driver up to
    AUTO_EXECUTOR_MESSAGES_COLD; later ones read on the executors from AUTO_EXECUTOR_MESSAGES
    on (thresholds lowered here to a small batch's size), though the first, written by
    Spark's own writer, started no Python worker."""
    ingest_module = import_module("sluice.spark.ingest")
    monkeypatch.setattr(ingest_module, "AUTO_EXECUTOR_MESSAGES", 20)
    monkeypatch.setattr(ingest_module, "AUTO_EXECUTOR_MESSAGES_COLD", 1_000)
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", False, raising=False)
    monkeypatch.setattr(spark, "_sluice_ingested", False, raising=False)
    modes, workers = [], []
    for first in (0, 30):
        topic.send([reading(first + i) for i in range(30)])
        result = ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
        assert result.written == 30
        modes.append(result.mode)
        workers.append(python_workers_checked(spark))
    assert modes == ["driver", "executors"]
    assert workers == [False, True]
    assert sorted(r["temperature"] for r in dataset_rows(tmp_path)) == [i / 10 for i in range(60)]


def test_auto_reads_a_large_batch_with_sparks_kafka_source_where_the_session_has_it(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mode="auto"`` from AUTO_SPARK_SOURCE_MESSAGES on (lowered here to a small batch's
    size) reads with Spark's own Kafka source, which the session has, and Python's writer
    writes; not with ``options.reader`` set, nor in a session without the source: then
    executor mode reads. The rows are the same either way."""
    ingest_module = import_module("sluice.spark.ingest")
    monkeypatch.setattr(ingest_module, "AUTO_EXECUTOR_MESSAGES", 20)
    monkeypatch.setattr(ingest_module, "AUTO_SPARK_SOURCE_MESSAGES", 20)
    monkeypatch.setattr(spark, "_sluice_ingested", True, raising=False)
    topic.send([reading(i) for i in range(30)] + [b"{not json"])
    spec = topic.plan()
    found = {}
    for number, (case, source, loads) in enumerate(
        (
            ("auto", topic.source, None),
            ("confluent", with_reader(topic.source, "confluent"), None),
            ("no source", topic.source, False),
        )
    ):
        if loads is not None:
            monkeypatch.setattr(spark, "_sluice_kafka_source_loads", loads, raising=False)
        own = BatchSpec(
            "kafka", spec.topic, group_id=f"{spec.group_id}-{number}", ranges=spec.ranges
        )
        sink = tmp_path / case
        result = ingest(spark, own, sink, source=source, schema=SCHEMA)
        assert (result.written, result.quarantined) == (30, 1)
        good = sorted((r["partition"], r["offset"], r["temperature"]) for r in dataset_rows(sink))
        found[case] = (result.mode, good, [r["reason"] for r in quarantine_rows(sink)])
    assert {case: mode for case, (mode, _, _) in found.items()} == {
        "auto": "spark",
        "confluent": "executors",
        "no source": "executors",
    }
    assert found["auto"][1:] == found["confluent"][1:] == found["no source"][1:]
    assert sorted(t for _, _, t in found["auto"][1]) == [i / 10 for i in range(30)]
    assert found["auto"][2] == ["invalid JSON"]


def test_a_small_batch_read_on_the_driver_of_a_warm_session_is_written_by_the_driver(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once Python writes (a warm session), a batch read on the driver of at most
    DRIVER_WRITE_BYTES comes back to the driver as Arrow and is written there, with no
    Python task; a larger one (the bound lowered here) is written by Spark's tasks."""
    from pyspark.sql.classic.dataframe import DataFrame

    ingest_module = import_module("sluice.spark.ingest")
    monkeypatch.setattr(spark, "_sluice_ingested", True, raising=False)
    calls: list[str] = []
    for name in ("toArrow", "mapInArrow"):
        real = getattr(DataFrame, name)

        def spy(self: Any, *args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return _real(self, *args, **kw)

        monkeypatch.setattr(DataFrame, name, spy)
    written = []
    for first, bound in ((0, ingest_module.DRIVER_WRITE_BYTES), (10, 0)):
        monkeypatch.setattr(ingest_module, "DRIVER_WRITE_BYTES", bound)
        calls.clear()
        topic.send([reading(first + i) for i in range(10)] + [b"not json"])
        result = ingest(
            spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA, mode="driver"
        )
        assert (result.written, result.quarantined, result.committed) == (10, 1, True)
        written.append(calls[:])
    assert written == [["toArrow"], ["mapInArrow"]]
    assert sorted(r["temperature"] for r in dataset_rows(tmp_path)) == [i / 10 for i in range(20)]
    assert len(quarantine_rows(tmp_path)) == 2
