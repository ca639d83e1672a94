"""The readers' contract (issue 39): one BatchSpec given to every reader (``options.reader``:
kafka-python, confluent, spark) gives the same rows and the same quarantine. On Apache Kafka:
committed, aborted and open transactions, tombstones, headers, keys and no key, messages at
the size bound and above it; and a compacted topic whose cleaner has removed offsets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from sluice.audit import audit
from sluice.batch import OffsetRange, plan_batch
from sluice.brokers import BrokerProcess
from sluice.errors import DataLossError
from sluice.kafka.ranges import read_range_records
from sluice.spark import IngestEvent, ingest
from sluice.spark.failpoints import armed
from sluice.spark.fingerprints import message_fingerprint
from sluice.spark.ingest import source_config
from sluice.spark.jvm_writer import QUARANTINE_ROW_BYTES
from sluice.spark.kafka_source import READERS, SPARK_READER, fingerprints_at, reader_kwargs
from sluice.spark.layout import KEEPABLE
from sluice.spark.sinks import StreamKey, open_sink
from sluice.spark.workers import python_workers_checked
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

from .conftest import (
    SCHEMA,
    compacted_topic,
    dataset_rows,
    open_topic,
    quarantine_rows,
    reading,
)
from .crashes import with_reader

ALL_READERS = (*READERS, SPARK_READER)
#: partition 1's last messages: device -> headers, each giving the id of ID_EXPECTED (None:
#: the coordinates' id)
ID_HEADERS: dict[str, list[tuple[str, bytes | None]]] = {
    "two-ids": [("message_id", b"first"), ("message_id", b"second")],
    "id-without-value": [("message_id", b"first"), ("message_id", None)],
    "empty-id": [("message_id", b"")],
}
ID_EXPECTED = {"two-ids": "second", "id-without-value": "first", "empty-id": None}
BAD_ID = b"bad-\xff"  # not UTF-8: every reader replaces the byte, as Python's decode does
LIMIT = 1_000_000  # ingest's max_value_bytes
SCHEMA_FIELDS = [f.split()[0] for f in SCHEMA.split(", ")]


def at_size(size: int) -> bytes:
    """A JSON reading of exactly ``size`` bytes."""
    head = b'{"device": "big", "temperature": 1.5, "pad": "'
    return head + b"p" * (size - len(head) - 2) + b'"}'


def fill(broker: Broker, name: str) -> None:
    """Partition 0: keyed and unkeyed messages with headers, a tombstone, bad JSON, messages
    at the size bound and one byte above it, then transactions: committed, aborted, committed,
    and one left open (the plan stops at it). Partitions 1 and 2: a few plain readings (so
    that Spark's source, making a task per core at least, splits partition 0's range)."""
    create_kafka_topic(broker.bootstrap, name, 3)
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=4 * 2**20)
    sent = [
        plain.send(name, reading(0), key=b"k0", partition=0, headers=[("message_id", b"m-0")]),
        plain.send(name, reading(1), partition=0, headers=[("h", b"\x00\xff"), ("e", b"")]),
        plain.send(name, None, key=b"gone", partition=0),  # tombstone
        plain.send(name, b"{not json", key=b"k3", partition=0),
        plain.send(name, at_size(LIMIT), key=b"big", partition=0),
        plain.send(name, at_size(LIMIT + 1), key=b"bigger", partition=0),
        *(
            plain.send(name, reading(i), key=f"p{i}".encode(), partition=i % 2 + 1)
            for i in range(10)
        ),
    ]
    plain.flush(30)
    for future in sent:
        future.get(30)
    plain.close()
    # message_id headers: the last one with a value counts; an empty one gives the
    # coordinates' id (kafka-python's producer sends no header without a value)
    ids = ConfluentProducer({"bootstrap.servers": broker.bootstrap})
    for device, headers in ID_HEADERS.items():
        value = json.dumps({"device": device, "temperature": 0.5}).encode()
        ids.produce(name, value, partition=1, headers=headers)
    # a quarantined message with an id: Spark's writer makes its id on quarantined rows only
    ids.produce(name, b"{not json either", partition=1, headers=[("message_id", BAD_ID)])
    assert ids.flush(30) == 0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=name)
    producer.init_transactions()
    for kind, count in (("committed", 5), ("aborted", 5), ("committed", 5), ("open", 3)):
        producer.begin_transaction()
        for i in range(count):
            value = json.dumps({"device": kind, "temperature": i}).encode()
            producer.send(name, value, key=f"{kind}{i}".encode(), partition=0)
        producer.flush(10)
        if kind == "committed":
            producer.commit_transaction()
        elif kind == "aborted":
            producer.abort_transaction()
    return producer  # type: ignore[return-value]  # closed by the caller: the open transaction


def rows_of(sink: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(dataset rows, quarantined rows) in offset order, without the batch id."""

    def order(row: dict[str, Any]) -> tuple[int, int]:
        return row["partition"], row["offset"]

    bad = [{k: v for k, v in r.items() if k != "batch_id"} for r in quarantine_rows(sink)]
    return sorted(dataset_rows(sink), key=order), sorted(bad, key=order)


def last_messages(sink: Path, spec: Any) -> dict[int, tuple[int, str]]:
    """{partition: (offset, fingerprint)} of the last message written, as the sink's stream
    state keeps them for the recreated-topic check."""
    return dict(open_sink(str(sink)).state(StreamKey.of(spec)).fingerprints)


def writers_of(sink: Path) -> set[str]:
    """The libraries that wrote the Parquet files of ``sink``'s rows and quarantine."""
    files = [f for f in sink.rglob("*.parquet") if "_sluice" not in f.parts]
    assert files
    return {str(pq.read_metadata(f).created_by).split(" version")[0] for f in files}


def test_one_batch_gives_the_same_rows_and_quarantine_on_every_reader(
    spark: Any,
    apache_kafka_broker: Broker,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a session whose Python workers have not started and that has not ingested (a cold
    # task's): Spark's own writer writes what is read on the driver, as it writes what its
    # own source reads
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", False, raising=False)
    producer: Any = fill(apache_kafka_broker, unique_name)
    planner = open_topic(apache_kafka_broker, unique_name, partitions=3)
    try:
        spec = planner.plan()
        found, marks = {}, {}
        for reader in ALL_READERS:  # the same ranges, each reader with a group of its own
            monkeypatch.setattr(spark, "_sluice_ingested", False, raising=False)
            own = dataclasses.replace(spec, group_id=f"{unique_name}-{reader}")
            source = with_reader(f"kafka://{apache_kafka_broker.bootstrap}", reader)
            result = ingest(
                spark, own, tmp_path / reader, source=source, schema=SCHEMA, keep_message=True
            )
            assert result.committed
            found[reader] = (rows_of(tmp_path / reader), result.written, result.quarantined)
            marks[reader] = last_messages(tmp_path / reader, own)
        # the default, lean rows: by Python's writer (executor mode) and by Spark's (its source)
        for reader, mode in ((READERS[0], "executors"), (SPARK_READER, "auto")):
            own = dataclasses.replace(spec, group_id=f"{unique_name}-{reader}-lean")
            source = with_reader(f"kafka://{apache_kafka_broker.bootstrap}", reader)
            sink = tmp_path / f"{reader}-lean"
            result = ingest(spark, own, sink, source=source, schema=SCHEMA, mode=mode)
            assert result.committed
            found[f"{reader}-lean"] = (rows_of(sink), result.written, result.quarantined)
            marks[f"{reader}-lean"] = last_messages(sink, own)
    finally:
        planner.queue.close(None)
        planner.producer.close()
        producer.close(1)

    (rows, bad), written, quarantined = found[READERS[0]]
    devices = sorted(r["device"] for r in rows)
    assert devices.count("committed") == 10 and "aborted" not in devices, "read committed"
    assert "open" not in devices, "planned up to the open transaction"
    assert (written, quarantined) == (len(rows), len(bad)) == (26, 4)
    assert sorted(r["reason"] for r in bad) == [
        "invalid JSON",
        "invalid JSON",
        "tombstone: the record has no value",
        f"value is {LIMIT + 1} bytes, over the limit of {LIMIT} (max_value_bytes)",
    ]
    assert [r["message_id"] for r in bad if r["partition"] == 1] == ["bad-\ufffd"]
    first = {r["offset"]: r for r in rows if r["partition"] == 0}
    assert first[0]["message_id"] == "m-0" and first[0]["key"] == b"k0"
    assert first[1]["key"] is None and first[1]["headers"] == [
        {"key": "h", "value": b"\x00\xff"},
        {"key": "e", "value": b""},
    ]
    assert first[4]["device"] == "big", "a value at the size bound is a row"
    by_device = {r["device"]: r for r in rows if r["device"] in ID_HEADERS}
    assert {
        device: None if r["message_id"] == f"{unique_name}-1-{r['offset']}" else r["message_id"]
        for device, r in by_device.items()
    } == ID_EXPECTED
    for reader in ALL_READERS[1:]:
        assert found[reader] == found[READERS[0]], f"{reader} differs from {READERS[0]}"
    lean = [{k: v for k, v in r.items() if k not in KEEPABLE} for r in rows]
    assert set(lean[0]) == {*SCHEMA_FIELDS, "partition", "offset", "timestamp"}
    for reader in (READERS[0], SPARK_READER):  # the same rows, without the message's own
        assert found[f"{reader}-lean"] == ((lean, bad), written, quarantined), reader
    # the last message of each partition, recorded for the recreated-topic check: partition
    # 0's range ends at a transaction marker, so a lean row's task could not take it (the
    # ingest fetched it); every reader and writer records the same
    last = marks[READERS[0]]
    assert sorted(last) == [0, 1, 2] and all(fingerprint for _, fingerprint in last.values())
    assert last[0][0] < spec.ranges[0].end - 1, "partition 0 ends at a transaction marker"
    assert all(found_marks == last for found_marks in marks.values()), marks
    # a small batch is read on the driver (mode auto) or by Spark's source (reader "spark"):
    # either way Spark's own writer writes it, and no Python worker starts
    assert {reader: writers_of(tmp_path / reader) for reader in ALL_READERS} == {
        reader: {"parquet-mr"} for reader in ALL_READERS
    }


@pytest.mark.parametrize(
    ("checked", "ingested"),
    [(False, False), (True, False), (False, True)],
    ids=["cold", "workers-running", "ingested-before"],
)
def test_a_batch_read_on_the_driver_is_written_by_the_faster_writer_of_the_session(
    spark: Any,
    topic: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    checked: bool,
    ingested: bool,
) -> None:
    """A cold session (no Python worker started yet, nothing ingested: a fresh task's)
    writes with Spark's own writer and starts none; once its Python workers run, or from its
    second ingest on (a long-lived session: it starts them then), pyarrow's writer, the
    faster."""
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", checked, raising=False)
    monkeypatch.setattr(spark, "_sluice_ingested", ingested, raising=False)
    topic.send([reading(i) for i in range(20)] + [b"{not json"])
    result = ingest(
        spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA, mode="driver"
    )
    assert (result.written, result.quarantined) == (20, 1)
    warm = checked or ingested
    assert writers_of(tmp_path) == (
        {"parquet-cpp-arrow"} if warm else {"parquet-mr", "parquet-cpp-arrow"}
    )
    assert python_workers_checked(spark) == warm


def cold(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``spark`` as a cold task's session: no Python worker started, nothing ingested."""
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", False, raising=False)
    monkeypatch.setattr(spark, "_sluice_ingested", False, raising=False)


def test_spark_reads_a_batch_once_unless_its_quarantine_is_large(
    spark: Any,
    apache_kafka_broker: Broker,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a cold session, Spark's writer writes the good rows, and a few small quarantined
    messages come back with the observation of their job and the driver writes them
    (pyarrow): one job, one read of the batch, and the same rows as Python's writer gives. A
    quarantined message over QUARANTINE_ROW_BYTES takes a second job, which reads the batch
    again."""
    topic = open_topic(apache_kafka_broker, unique_name, partitions=3)

    def ingested(sink: Path, reader: str, spec: Any) -> tuple[Any, int]:
        """The result, and the tasks of the Spark jobs that wrote the batch."""
        events: list[IngestEvent] = []
        mode = "executors" if reader == READERS[0] else "auto"
        if reader == SPARK_READER:
            cold(spark, monkeypatch)
        source = with_reader(topic.source, reader)
        result = ingest(
            spark, spec, sink, source=source, schema=SCHEMA, mode=mode, progress=events.append
        )
        assert result.committed
        return result, max(e.parts or 0 for e in events if e.stage == "writing")

    try:
        topic.send([reading(i) for i in range(60)] + [b"{not json", b'{"temperature": "warm"}'])
        topic.producer.send(topic.name, None, key=b"gone", partition=1)  # a tombstone
        topic.producer.send(topic.name, b"[1", partition=2, headers=[("h", b"\x00\xff")])
        topic.producer.flush(10)
        spec = topic.plan()
        once, tasks_once = ingested(tmp_path / "once", SPARK_READER, spec)
        once_audit = audit(tmp_path / "once", topic.source)  # before the group goes on
        by_python = dataclasses.replace(spec, group_id=f"{unique_name}-python")
        python, _ = ingested(tmp_path / "python", READERS[0], by_python)
        topic.send([reading(i) for i in range(60)] + [b"{" + b"x" * QUARANTINE_ROW_BYTES])
        twice, tasks_twice = ingested(tmp_path / "twice", SPARK_READER, topic.plan())
    finally:
        topic.close()

    assert (once.written, once.quarantined) == (python.written, python.quarantined) == (60, 4)
    assert (twice.written, twice.quarantined) == (60, 1)
    assert tasks_twice == 2 * tasks_once, "only the large quarantine's job reads it again"
    # the driver's quarantine holds what Python's writer gives, headers and times included
    assert rows_of(tmp_path / "once") == rows_of(tmp_path / "python")
    assert writers_of(tmp_path / "once") == {"parquet-mr", "parquet-cpp-arrow"}
    assert writers_of(tmp_path / "twice") == {"parquet-mr"}
    assert once_audit.ok  # the driver's quarantine file counts: nothing missing or doubled


def test_a_warm_sessions_spark_reader_batch_is_written_by_python_in_rounds_of_tasks(
    spark: Any,
    apache_kafka_broker: Broker,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a session's Python workers run, Python's writer writes what Spark's Kafka source
    reads (the faster then): the same rows and quarantine as Spark's writer in a cold
    session, and a large batch (here: tasks of 10 messages or more) in three rounds of tasks
    per core instead of one per partition."""
    import sluice.spark.jvm_reader as jvm_reader

    monkeypatch.setattr(jvm_reader, "PYTHON_WRITER_TASK_MESSAGES", 10)
    topic = open_topic(apache_kafka_broker, unique_name, partitions=3)
    try:
        topic.send([reading(i) for i in range(90)] + [b"{not json", b'{"temperature": "warm"}'])
        spec = topic.plan()
        found = {}
        for session in ("cold", "warm"):
            if session == "cold":
                cold(spark, monkeypatch)
            else:
                monkeypatch.setattr(spark, "_sluice_python_workers_checked", True)
            events: list[IngestEvent] = []
            own = dataclasses.replace(spec, group_id=f"{unique_name}-{session}")
            sink = tmp_path / session
            result = ingest(
                spark,
                own,
                sink,
                source=with_reader(topic.source, SPARK_READER),
                schema=SCHEMA,
                progress=events.append,
            )
            assert (result.written, result.quarantined) == (90, 2)
            tasks = max(e.parts or 0 for e in events if e.stage == "writing")
            found[session] = (rows_of(sink), writers_of(sink), tasks, audit(sink, topic.source))
    finally:
        topic.close()

    cores = int(spark.sparkContext.defaultParallelism)
    cold_rows, cold_writers, cold_tasks, cold_audit = found["cold"]
    warm_rows, warm_writers, warm_tasks, warm_audit = found["warm"]
    assert warm_rows == cold_rows
    assert cold_writers == {"parquet-mr", "parquet-cpp-arrow"}  # the driver's quarantine
    assert warm_writers == {"parquet-cpp-arrow"}
    assert cold_tasks == cores * -(-max(3, cores) // cores)
    assert warm_tasks == cores * jvm_reader.PYTHON_WRITER_ROUNDS
    assert cold_audit.ok and warm_audit.ok


def test_a_compacted_topic_gives_the_same_rows_and_quarantine_on_every_reader(
    spark: Any, cleaning_kafka: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    """Offsets 0-17 of a topic whose log cleaner has removed all but 12, 13, 14, 16 (key d's
    tombstone) and 17: every reader steps over the gaps, writes the same four rows,
    quarantines the tombstone, and commits 18 without a loss."""
    topic = compacted_topic(cleaning_kafka, unique_name)
    try:
        spec = topic.plan()
        assert [(r.start, r.end) for r in spec.ranges] == [(0, 18)]
        found = {}
        for reader in ALL_READERS:
            own = dataclasses.replace(spec, group_id=f"{unique_name}-{reader}")
            source = with_reader(topic.source, reader)
            result = ingest(
                spark, own, tmp_path / reader, source=source, schema=SCHEMA, keep_message=True
            )
            assert result.committed and result.commits == {0: 18}, reader
            assert result.lost == [], f"{reader}: a compaction gap is not a loss"
            found[reader] = (rows_of(tmp_path / reader), result.written, result.quarantined)
    finally:
        topic.close()

    (rows, bad), written, quarantined = found[READERS[0]]
    assert [r["offset"] for r in rows] == [12, 13, 14, 17]
    assert [(r["offset"], r["reason"]) for r in bad] == [(16, "tombstone: the record has no value")]
    assert (written, quarantined) == (4, 1)
    for reader in ALL_READERS[1:]:
        assert found[reader] == found[READERS[0]], f"{reader} differs from {READERS[0]}"


def test_a_topic_recreated_shorter_while_spark_reads_is_a_data_loss(
    spark: Any, apache_kafka_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    """Spark's source runs with failOnDataLoss off and steps over what it cannot fetch: a
    partition that ends below the range after the read (the topic deleted and created again
    with fewer messages) fails the ingest, nothing written or committed."""
    topic = open_topic(apache_kafka_broker, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(20)])
        spec = topic.plan()

        def recreate() -> None:
            topic.recreate(1)
            topic.send([reading(100 + i) for i in range(5)])

        with (
            armed("read.after_first_chunk", recreate),
            pytest.raises(DataLossError, match=r"partition 0 .* now ends at offset 5"),
        ):
            source = f"{topic.source}?reader=spark&request_timeout=5000"  # the stall limit
            ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)
        assert not dataset_rows(tmp_path) and not quarantine_rows(tmp_path)
        assert plan_batch(topic.queue) is not None, "nothing was committed"
    finally:
        topic.close()


@pytest.mark.parametrize("recreated", [True, False])
def test_a_failed_spark_read_of_a_topic_recreated_shorter_is_a_data_loss(
    spark: Any,
    apache_kafka_broker: Broker,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recreated: bool,
) -> None:
    """Spark's consumer can fail the job itself when the topic is recreated under it (its
    pool raised ConcurrentModificationException there): the ingest then reports the data
    loss, the job's error as its cause; a job failing on a topic that is whole keeps its own
    error. (The job's failure is made here: Spark's does not come on demand.)"""
    from sluice.spark.ingest import _Job

    topic = open_topic(apache_kafka_broker, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(20)])
        spec = topic.plan()

        def failing_write(self: Any, *args: Any, **kwargs: Any) -> Any:
            if recreated:
                topic.recreate(1)
                topic.send([reading(100 + i) for i in range(5)])
            raise RuntimeError("KafkaConsumer is not safe for multi-threaded access")

        monkeypatch.setattr(_Job, "_write", failing_write)
        expected = (
            pytest.raises(DataLossError, match=r"partition 0 .* now ends at offset 5")
            if recreated
            else pytest.raises(RuntimeError, match="not safe for multi-threaded access")
        )
        with expected as failure:
            ingest(spark, spec, tmp_path, source=f"{topic.source}?reader=spark", schema=SCHEMA)
        if recreated:
            assert isinstance(failure.value.__cause__, RuntimeError)
        assert not dataset_rows(tmp_path) and not quarantine_rows(tmp_path)
        assert plan_batch(topic.queue) is not None, "nothing was committed"
    finally:
        topic.close()


@pytest.mark.parametrize("reader", [*READERS, SPARK_READER])
def test_a_messages_fingerprint_is_the_same_whichever_reader_the_batch_names(
    apache_kafka_broker: Broker, unique_name: str, reader: str
) -> None:
    """The recreated-topic check reads one message (in the middle of a producer batch) with
    the batch's reader, and must find what kafka-python's record gives."""
    topic = open_topic(apache_kafka_broker, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(500)], partition=0)
        spec = topic.plan()
        kwargs = reader_kwargs(
            source_config(spec, topic.source_config(**{"options.reader": reader}))
        )
        [(_, records)] = read_range_records(
            dict(kwargs), topic.name, [OffsetRange(0, 321, 322)], 30
        )
        [record] = records
        expected = message_fingerprint(record.key, record.value, record.timestamp)
        assert fingerprints_at(kwargs, topic.name, {0: 321}, 30) == {0: expected}
    finally:
        topic.queue.close(None)
        topic.producer.close()
