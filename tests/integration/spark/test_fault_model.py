"""The environment fails too (docs/fault-model.md): each scenario of the fault-model issue
that used to lose or double messages silently, on a real broker and a real Spark.

- retention that moves while a batch is read;
- a topic deleted and recreated, its new log longer than the old position (noida-db has no
  topic ids: the fingerprint finds it; Tansu has them);
- raw MQTT JSON that has a ``message_id`` field;
- two runs of one stream at once;
- transactions: committed records only, on both readers, planned up to the last stable offset;
- chunks bounded by bytes.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange, plan_batch
from sluice.errors import DataLossError
from sluice.mqtt import MqttMessageQueue
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.ingest import source_config
from sluice.spark.kafka_source import (
    READERS,
    SPARK_READER,
    committed_offsets,
    read_ranges,
    reader_kwargs,
)
from sluice.spark.sinks import ConcurrentIngestError
from sluice.testing import wait_until
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

from .conftest import SCHEMA, KafkaTopic, dataset_rows, open_topic, reading
from .crashes import with_reader


def delete_below(topic: KafkaTopic, offset: int, partition: int = 0) -> None:
    """Retention: the broker deletes the partition's records below ``offset``."""
    admin = KafkaAdminClient(bootstrap_servers=topic.broker.bootstrap)
    try:
        admin.delete_records({TopicPartition(topic.name, partition): offset})
    finally:
        admin.close()


def refused_then_accepted(spark: Any, topic: KafkaTopic, spec: BatchSpec, sink: Path) -> Any:
    """The ingest of ``spec`` on a recreated topic fails; with the loss accepted, its result."""
    with pytest.raises(DataLossError, match="recreated"):
        ingest(spark, spec, sink, source=topic.source, schema=SCHEMA)
    return ingest(spark, spec, sink, source=topic.source, schema=SCHEMA, fail_on_data_loss=False)


@pytest.fixture
def one_partition(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    opened = open_topic(apache_kafka_broker, unique_name, partitions=1)
    opened.send([reading(i) for i in range(200)])
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def whole(topic: KafkaTopic, start: int = 0, end: int = 200) -> BatchSpec:
    return BatchSpec(
        "kafka", topic.name, group_id=f"{topic.name}-group", ranges=(OffsetRange(0, start, end),)
    )


def group_offset(topic: KafkaTopic) -> int | None:
    kwargs = {"bootstrap_servers": topic.broker.bootstrap}
    return committed_offsets(kwargs, topic.name, f"{topic.name}-group", [0])[0]


@pytest.mark.parametrize(
    ("reader", "mode"),
    [(r, m) for r in READERS for m in ("driver", "executors")] + [(SPARK_READER, "auto")],
)
def test_retention_moving_during_the_read_is_a_data_loss_never_a_silent_reset(
    spark: Any, one_partition: KafkaTopic, reader: str, mode: str, tmp_path: Path
) -> None:
    """The finding: the log start was 0 when the batch was planned; retention deleted [0, 50)
    before the reader fetched it; the reader reset to the new log start and the ingest wrote
    150, recorded no loss and committed 200, even with fail_on_data_loss=True."""
    topic = one_partition
    options = {"source": with_reader(topic.source, reader), "schema": SCHEMA, "mode": mode}

    with (
        armed("read.before", lambda: delete_below(topic, 50)),
        pytest.raises(
            DataLossError,
            match=r"offsets 0-49 of partition 0 .* deleted by retention while the batch was read",
        ),
    ):
        ingest(spark, whole(topic), tmp_path, **options)
    assert dataset_rows(tmp_path) == []
    assert group_offset(topic) is None, "nothing was committed"

    # accepted: retention moves again while the accepted run reads
    with armed("read.before", lambda: delete_below(topic, 80)):
        result = ingest(spark, whole(topic), tmp_path, fail_on_data_loss=False, **options)

    assert result.lost == [
        {"partition": 0, "start": 0, "end": 50, "reason": "retention"},
        {"partition": 0, "start": 50, "end": 80, "reason": "retention"},
    ]
    assert result.written == 120 and result.commits == {0: 200}
    assert sorted(r["offset"] for r in dataset_rows(tmp_path)) == list(range(80, 200))
    report = audit(tmp_path, topic.source)
    partition = report.streams[0].partitions[0]
    assert report.ok and partition.lost == [OffsetRange(0, 0, 80)], "\n".join(report.lines())


@pytest.mark.parametrize("broker", ["noida_broker", "tansu_broker"])
def test_a_recreated_topic_longer_than_the_old_position_is_recognised(
    spark: Any, broker: str, request: pytest.FixtureRequest, unique_name: str, tmp_path: Path
) -> None:
    """The finding: 30 messages ingested and committed; the topic deleted and created again,
    40 new messages; the next batch [30, 40) wrote 10 of them and never read offsets 0-29 of
    the new topic, and the audit passed. noida-db has no topic ids (the fingerprint of the
    last message written finds it), Tansu has them."""
    kafka: Broker = request.getfixturevalue(broker)
    topic = open_topic(kafka, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(30)])
        ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
        topic.recreate(1)
        topic.send([reading(100 + i) for i in range(40)])
        spec = whole(topic, 30, 40)
        evidence = "topic id" if broker == "tansu_broker" else "offset 29 is not the one"

        with pytest.raises(DataLossError, match=rf"recreated .*{evidence}"):
            ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
        result = ingest(
            spark, spec, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
        )
        waiting = plan_batch(topic.queue)
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.written == 40, "the new topic is read from its log start"
    assert [loss["reason"] for loss in result.lost] == ["recreated"]
    temperatures = sorted(r["temperature"] for r in dataset_rows(tmp_path))
    assert temperatures == sorted([i / 10 for i in range(30)] + [(100 + i) / 10 for i in range(40)])
    assert result.commits == {0: 40} and waiting is None
    assert audit(tmp_path, topic.source).ok


def test_a_recreated_topic_is_recognised_in_a_partition_the_sink_never_wrote(
    spark: Any, noida_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    """Nemesis seed 1105: retention took every message of partition 0 before it was read (the
    loss recorded, no row, so no fingerprint there); the topic was recreated; partition 1's
    fingerprint found it, but partition 0 was read from the old topic's committed offset 3
    and offsets 0-2 of the new topic were never read."""
    topic = open_topic(noida_broker, unique_name, partitions=2)
    try:
        topic.send([reading(i) for i in range(3)], partition=0)
        topic.send([reading(10 + i) for i in range(5)], partition=1)
        planned = topic.plan()
        delete_below(topic, 3, partition=0)  # after planning, before reading
        first = ingest(
            spark, planned, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
        )
        assert (first.written, first.commits) == (5, {0: 3, 1: 5})
        topic.recreate(2)
        topic.send([reading(100 + i) for i in range(8)], partition=0)
        topic.send([reading(200 + i) for i in range(8)], partition=1)
        spec = topic.plan()
        assert {r.partition: r.start for r in spec.ranges} == {0: 3, 1: 5}, "old positions"

        result = refused_then_accepted(spark, topic, spec, tmp_path)
        waiting = plan_batch(topic.queue)
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.written == 16, "both partitions of the new topic from their log start"
    assert result.commits == {0: 8, 1: 8} and waiting is None
    temperatures = sorted(r["temperature"] for r in dataset_rows(tmp_path))
    new = [(100 + i) / 10 for i in range(8)] + [(200 + i) / 10 for i in range(8)]
    assert temperatures == sorted([(10 + i) / 10 for i in range(5)] + new)
    assert audit(tmp_path, topic.source).ok


def test_a_recreated_topic_is_read_in_a_partition_the_plan_left_out(
    spark: Any, noida_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    """Nemesis seed 57: the recreated topic's partition 1 had grown exactly to the old
    committed offset, so nothing waited there by the group's offsets and the plan left it
    out; partition 0's fingerprint found the new topic, and partition 1's new messages were
    never read (the audit passed: the old rows carry the same offsets)."""
    topic = open_topic(noida_broker, unique_name, partitions=2)
    try:
        topic.send([reading(i) for i in range(3)], partition=0)
        topic.send([reading(10 + i) for i in range(4)], partition=1)
        first = ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA)
        assert (first.written, first.commits) == (7, {0: 3, 1: 4})
        topic.recreate(2)
        topic.send([reading(100 + i) for i in range(5)], partition=0)
        topic.send([reading(200 + i) for i in range(4)], partition=1)  # ends at the old 4
        spec = topic.plan()
        assert [(r.partition, r.start, r.end) for r in spec.ranges] == [(0, 3, 5)]

        result = refused_then_accepted(spark, topic, spec, tmp_path)
        waiting = plan_batch(topic.queue)
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.written == 9, "both partitions of the new topic from their log start"
    assert waiting is None
    temperatures = sorted(r["temperature"] for r in dataset_rows(tmp_path))
    old = [i / 10 for i in range(3)] + [(10 + i) / 10 for i in range(4)]
    new = [(100 + i) / 10 for i in range(5)] + [(200 + i) / 10 for i in range(4)]
    assert temperatures == sorted(old + new)
    assert audit(tmp_path, topic.source).ok


def test_raw_mqtt_json_with_a_message_id_field_keeps_every_payload(
    spark: Any, mosquitto_broker: Broker, unique_name: str, tmp_path: Path
) -> None:
    """The finding: devices publish {"message_id": n, ...} with five distinct counters; the
    ingest took each as a Sluice envelope without a payload: written 0, quarantined 5,
    duplicates 15."""
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
    device = MqttMessageQueue()
    device.configure(
        {
            "connection.uri": mosquitto_broker.url,
            "topic": unique_name,
            "options.qos": 1,
            "options.serialize_envelope": False,
            "options.autosubscribe": False,
        }
    )
    device.open(None)
    try:
        for i in range(20):
            payload = {"message_id": i % 5, "device": f"dev-{i}", "temperature": i / 10}
            device.send_as_object(None, "reading", payload)
    finally:
        device.close(None)
    spec = BatchSpec("mqtt", unique_name, client_id=f"{unique_name}-ingest", max_messages=100)

    result = ingest(spark, spec, tmp_path, source=mosquitto_broker.url, schema=SCHEMA)

    assert (result.written, result.quarantined, result.duplicates) == (20, 0, 0)
    assert sorted(r["device"] for r in dataset_rows(tmp_path)) == sorted(
        f"dev-{i}" for i in range(20)
    )


def blocked_at(point: str) -> tuple[Callable[[], None], threading.Event, threading.Event]:
    """A failpoint action that holds the thread that armed it (the first run) at ``point``
    until released; other threads pass."""
    owner, reached, release = threading.current_thread(), threading.Event(), threading.Event()

    def hold() -> None:
        if threading.current_thread() is owner:
            return
        reached.set()
        assert release.wait(60), "the test never released the first run"

    return hold, reached, release


def test_a_second_run_of_a_stream_is_refused_and_never_touches_the_first_runs_work(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """The finding: ParquetSink.stage() deleted every staging/<batch_id>-*, the live run's
    included, and a run killed between the rename and the fold let an overlapping batch publish
    the same offsets again. Now one run per stream holds it; a second one, of the same batch
    or an overlapping one, gets ConcurrentIngestError at once and touches nothing."""
    topic.send([reading(i) for i in range(40)])
    first_spec = topic.plan()
    options = {"source": topic.source, "schema": SCHEMA}
    hold, reached, release = blocked_at("stage.after_write")
    errors: list[BaseException] = []

    def first() -> None:
        try:
            ingest(spark, first_spec, tmp_path, **options)
        except BaseException as exc:
            errors.append(exc)

    with armed("stage.after_write", hold):
        runner = threading.Thread(target=first)
        runner.start()
        try:
            assert reached.wait(120), f"the first run never staged its batch: {errors}"
            staged = sorted((tmp_path / "_sluice" / "staging").rglob("*.parquet"))
            assert staged, "the first run's batch is in staging"
            topic.send([reading(40 + i) for i in range(5)])
            for spec in (first_spec, topic.plan()):  # the same batch, and an overlapping one
                with pytest.raises(ConcurrentIngestError, match="is running on this sink"):
                    ingest(spark, spec, tmp_path, **options)
            assert sorted((tmp_path / "_sluice" / "staging").rglob("*.parquet")) == staged
        finally:
            release.set()
            runner.join(120)
    assert not errors, errors

    ingest(spark, topic.plan(), tmp_path, **options)
    temperatures = sorted(r["temperature"] for r in dataset_rows(tmp_path))
    assert temperatures == [i / 10 for i in range(45)]
    assert audit(tmp_path, topic.source).ok and plan_batch(topic.queue) is None


def transactional_topic(broker: Broker, name: str) -> KafkaProducer:
    """Offsets 0-9 committed, then 10 aborted (flushed: in the log), 10 committed, and a
    transaction of 5 left open (close the producer returned when done): read_committed sees
    20 records, up to the open one."""
    create_kafka_topic(broker.bootstrap, name, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=name)
    producer.init_transactions()
    for kind, count in (("committed", 10), ("aborted", 10), ("committed", 10), ("open", 5)):
        producer.begin_transaction()
        for i in range(count):
            producer.send(name, json.dumps({"device": kind, "temperature": i}).encode())
        producer.flush(10)
        if kind == "committed":
            producer.commit_transaction()
        elif kind == "aborted":
            producer.abort_transaction()
    return producer


@pytest.mark.parametrize(
    ("reader", "mode"), [(r, "driver") for r in READERS] + [(READERS[0], "executors")]
)
def test_transactions_are_read_committed_on_both_readers_up_to_the_last_stable_offset(
    spark: Any,
    apache_kafka_broker: Broker,
    unique_name: str,
    reader: str,
    mode: str,
    tmp_path: Path,
) -> None:
    """The finding: kafka-python read aborted records, the confluent reader did not but
    stalled on the open transaction: one BatchSpec gave different rows by options.reader.
    On Apache Kafka: a real transaction coordinator, its control records and its LSO."""
    broker = apache_kafka_broker
    transactions = transactional_topic(broker, unique_name)
    source = with_reader(f"kafka://{broker.bootstrap}", reader)
    planner = open_topic(broker, unique_name, partitions=1)
    try:
        spec = planner.plan()
        end = spec.ranges[0].end
        result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA, mode=mode)
        waiting = plan_batch(planner.queue)
        report = audit(tmp_path, source)
    finally:
        planner.queue.close(None)
        planner.producer.close()
        transactions.close(1)

    rows = dataset_rows(tmp_path)
    assert sorted(r["device"] for r in rows) == ["committed"] * 20, "no aborted record"
    assert end < 38 and result.commits == {0: end}, "planned up to the open transaction"
    assert waiting is None, "the open transaction's records are not planned"
    assert report.ok, "\n".join(report.lines())


@pytest.mark.parametrize("reader", READERS)
def test_reading_chunks_are_bounded_by_bytes_as_well_as_rows(
    topic: KafkaTopic, reader: str
) -> None:
    """The finding: chunks were bounded by rows only (100,000 messages of 1 MB: 100 GB). And
    at full size (bench/scale.py, 1,000 messages of 5 MiB) the largest chunk passed its bound
    by one message: 272,629,760 bytes against 268,435,456. No chunk passes it now, except a
    message larger than the bound, which goes alone."""
    value = b"x" * 10_000
    topic.send([value] * 50, partition=0)  # keys k0 ... k49
    spec = BatchSpec("kafka", topic.name, group_id="g")
    kwargs = reader_kwargs(source_config(spec, with_reader(topic.source, reader)))

    def chunks(chunk_bytes: int) -> list[list[int]]:
        """Each chunk's messages, as their bytes of key and value."""
        ranges = [OffsetRange(0, 0, 50)]
        batches = list(read_ranges(kwargs, topic.name, ranges, 1000, 10, chunk_bytes=chunk_bytes))
        values = [v for b in batches for v in b.column("value").to_pylist()]
        assert values == [value] * 50, "every message once, in order"
        return [
            [len(r["key"]) + len(r["value"]) for r in b.select(["key", "value"]).to_pylist()]
            for b in batches
        ]

    for bound in (35_000, 10_000 * 3 + len(b"k0k1k2")):  # the second: 3 messages exactly
        found = chunks(bound)
        assert all(sum(c) <= bound for c in found), (bound, found)
        for chunk, following in itertools.pairwise(found):  # full: the next one would not fit
            assert sum(chunk) + following[0] > bound, (bound, found)
        assert len(found[0]) == 3, (bound, found)
    assert [len(c) for c in chunks(5_000)] == [1] * 50, "a message above the bound goes alone"


@pytest.fixture(params=["apache_kafka", "tansu"])
def broker_with_topic_ids(request: pytest.FixtureRequest) -> Broker:
    """A broker whose topics have ids (KIP-516): Apache Kafka, and Tansu."""
    broker: Broker = request.getfixturevalue(f"{request.param}_broker")
    return broker


def test_a_recreated_topics_batch_of_the_same_ranges_is_never_taken_as_published(
    spark: Any, broker_with_topic_ids: Broker, unique_name: str, tmp_path: Path
) -> None:
    """Issue 37, finding 7: a batch's id came from its ranges alone, and the sink's find()
    ran before the recreated-topic checks, so the first batch of a topic created again (the
    same ranges) was taken as published and committed unread. Now a plan holds the topic's
    id, so it is another batch; and a batch found in the sink whose topic was recreated since
    is refused, never committed."""
    topic = open_topic(broker_with_topic_ids, unique_name, partitions=1)
    try:
        topic.send([reading(i) for i in range(10)])
        first = topic.plan()
        assert first.topic_id, "the broker has topic ids: the plan names the topic"
        ingest(spark, first, tmp_path, source=topic.source, schema=SCHEMA)
        topic.recreate(1)
        topic.send([reading(100 + i) for i in range(10)])

        # A retry of the first batch (its ranges are the new topic's messages now).
        with pytest.raises(DataLossError, match="neither taken as published nor committed"):
            ingest(spark, first, tmp_path, source=topic.source, schema=SCHEMA)
        assert group_offset(topic) in (None, 10), "the retry committed nothing"

        second = wait_until(
            lambda: (spec := topic.plan()).topic_id != first.topic_id and spec,
            30,
            0.5,
            "a plan that names the new topic",
        )
        assert second.ranges == first.ranges and second.batch_id != first.batch_id
        result = ingest(
            spark, second, tmp_path, source=topic.source, schema=SCHEMA, fail_on_data_loss=False
        )
    finally:
        topic.queue.close(None)
        topic.producer.close()

    assert result.written == 10 and result.commits == {0: 10}
    temperatures = sorted(row["temperature"] for row in dataset_rows(tmp_path))
    assert temperatures == sorted([i / 10 for i in range(10)] + [(100 + i) / 10 for i in range(10)])
