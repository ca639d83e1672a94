"""The confluent-kafka range reader (``options.reader`` ``confluent``) on real brokers: the
same exact ranges, the same Arrow columns and the same errors as the kafka-python reader."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaProducer

from sluice.batch import OffsetRange
from sluice.errors import DataLossError
from sluice.kafka.confluent_ranges import read_range_messages
from sluice.kafka.ranges import LostRange, read_range_records
from sluice.kafka.ranges import RangeReader as KeptReader
from sluice.queues.uri import queue_from_config
from sluice.spark.kafka_source import READERS, ReaderKwargs, read_ranges, reader_kwargs
from sluice.testing import BrokerProcess
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

PASSWORD = "pw-Secret-4711"

RangeReader = Callable[..., Iterator[tuple[int, list[Any]]]]


def offsets_of(message: Any) -> int:
    """The offset of a kafka-python record or a confluent-kafka message."""
    offset = message.offset
    return int(offset() if callable(offset) else offset)


def kwargs_for(bootstrap: str, **config: Any) -> ReaderKwargs:
    """A batch reader's arguments for validated queue config keys (``options_reader=...``)."""
    keys = {
        k.replace("options_", "options.").replace("credential_", "credential."): v
        for k, v in config.items()
    }
    return reader_kwargs(queue_from_config("kafka", {"connection.uri": bootstrap, **keys}).config)


def read_offsets(
    read: RangeReader,
    bootstrap: str,
    topic: str,
    ranges: list[OffsetRange],
    lost: LostRange | None = None,
) -> dict[int, list[int]]:
    kwargs = kwargs_for(bootstrap)
    read_back: dict[int, list[int]] = {}
    for partition, records in read(kwargs, topic, ranges, 10, lost):
        read_back.setdefault(partition, []).extend(offsets_of(r) for r in records)
    return {partition: offsets for partition, offsets in read_back.items() if offsets}


@pytest.fixture
def filled_topic(kafka_broker: Broker, unique_name: str) -> str:
    """A 3-partition topic with 10 records in each partition: offsets 0-9."""
    create_kafka_topic(kafka_broker.bootstrap, unique_name, 3)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        for partition in range(3):
            for i in range(10):
                producer.send(unique_name, value=b"v%d" % i, partition=partition)
        producer.flush(10)
    finally:
        producer.close()
    return unique_name


@pytest.mark.parametrize(
    "read", [read_range_records, read_range_messages], ids=["kafka-python", "confluent"]
)
def test_reads_exactly_the_ranges_not_one_message_more_or_less(
    kafka_broker: Broker, filled_topic: str, read: RangeReader
) -> None:
    ranges = [
        OffsetRange(0, 3, 7),  # starts and ends mid-partition
        OffsetRange(1, 0, 10),  # the whole partition, to its end
        OffsetRange(2, 9, 10),  # its last message only
    ]
    read_back = read_offsets(read, kafka_broker.bootstrap, filled_topic, ranges)

    assert read_back == {0: [3, 4, 5, 6], 1: list(range(10)), 2: [9]}
    assert read_offsets(read, kafka_broker.bootstrap, filled_topic, [OffsetRange(0, 5, 5)]) == {}


def test_a_kept_range_reader_reads_range_after_range_through_one_consumer(
    kafka_broker: Broker, filled_topic: str
) -> None:
    """A sensor routing batch after batch keeps one reader: each read gives exactly its
    ranges (a partition read before, back or forward, paused at its last end), a failed read
    leaves the next one a new consumer, and a close while a read is under way waits for it."""
    kwargs = kwargs_for(kafka_broker.bootstrap)

    def offsets(reader: KeptReader, ranges: list[OffsetRange], timeout: float = 10) -> Any:
        found: dict[int, list[int]] = {}
        for partition, records in reader.records(filled_topic, ranges, timeout):
            found.setdefault(partition, []).extend(r.offset for r in records)
        return found

    with KeptReader(kwargs) as reader:
        assert offsets(reader, [OffsetRange(0, 2, 4)]) == {0: [2, 3]}
        consumer = reader._consumer
        assert offsets(reader, [OffsetRange(0, 4, 6), OffsetRange(1, 0, 1)]) == {
            0: [4, 5],
            1: [0],
        }
        assert offsets(reader, [OffsetRange(0, 0, 2)]) == {0: [0, 1]}  # back, same partition
        assert offsets(reader, [OffsetRange(2, 9, 10), OffsetRange(0, 8, 8)]) == {2: [9]}
        assert reader._consumer is consumer  # one consumer for every read
        with pytest.raises(TimeoutError):
            offsets(reader, [OffsetRange(1, 8, 12)], timeout=1)  # past the partition's end
        assert reader._consumer is None
        assert offsets(reader, [OffsetRange(1, 8, 10)]) == {1: [8, 9]}  # a new one

        reading = reader.records(filled_topic, [OffsetRange(2, 0, 10)], 10)
        first = next(reading)
        reader.close()  # as a cancelled trigger's poller does while its thread reads
        assert reader._consumer is not None  # still reading
        rest = [r.offset for _, records in reading for r in records]
        assert [r.offset for r in first[1]] + rest == list(range(10))
        assert reader._consumer is None
        with pytest.raises(RuntimeError, match="closed"):
            offsets(reader, [OffsetRange(0, 0, 1)])


def test_both_readers_give_the_same_arrow_columns(kafka_broker: Broker, unique_name: str) -> None:
    create_kafka_topic(kafka_broker.bootstrap, unique_name, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    headers = [
        [],
        [("message_id", b"m-1"), ("trace", b"t")],
        [("dup", b"a"), ("dup", b"b"), ("empty", b"")],
        [("message_id", b"first"), ("message_id", b"last")],
    ]
    now_ms = int(time.time() * 1000)  # noida-db's retention deletes old records at once
    try:
        for i in range(40):
            producer.send(
                unique_name,
                key=None if i % 10 == 5 else b"k%d" % i,
                value=None if i % 10 == 7 else b"" if i % 11 == 0 else b"value %d" % i,
                headers=headers[i % len(headers)],
                timestamp_ms=now_ms + i,
                partition=i % 2,
            )
        producer.flush(10)
    finally:
        producer.close()
    ranges = [OffsetRange(0, 2, 20), OffsetRange(1, 0, 17)]

    def table(reader: str) -> pa.Table:
        kwargs = kwargs_for(kafka_broker.bootstrap, options_reader=reader)
        batches = list(read_ranges(kwargs, unique_name, ranges, 7, 10))
        assert all(b.num_rows <= 7 for b in batches)
        return pa.Table.from_batches(batches).sort_by(
            [("partition", "ascending"), ("offset", "ascending")]
        )

    kafka_python, confluent = (table(reader) for reader in READERS)

    assert confluent.num_rows == 18 + 17
    assert confluent.equals(kafka_python), (confluent.to_pylist()[:3], kafka_python.to_pylist()[:3])
    rows = confluent.to_pylist()
    assert {r["message_id"] for r in rows} >= {"m-1", "last", None}
    assert rows[0]["timestamp"] is not None and rows[0]["key"] == b"k4"
    assert {r["key"] for r in rows} >= {None} and {r["value"] for r in rows} >= {None, b""}


def test_a_stalled_read_raises_the_same_message_as_kafka_python(
    kafka_broker: Broker, filled_topic: str
) -> None:
    """A range that ends past its partition's end: nothing more arrives."""
    ranges = [OffsetRange(0, 8, 12), OffsetRange(1, 0, 2)]
    messages = []
    for read in (read_range_records, read_range_messages):
        kwargs = kwargs_for(kafka_broker.bootstrap)
        with pytest.raises(TimeoutError) as stalled:
            for _ in read(kwargs, filled_topic, ranges, 1):
                pass
        messages.append(str(stalled.value))

    assert messages[0] == messages[1]
    assert messages[1].startswith(
        f"Reading topic '{filled_topic}' stalled: no message for 1 s while waiting for "
        "partition 0 at offset 10 of 12. Check that the broker is up"
    )


def test_a_start_deleted_by_retention_is_a_data_loss_on_both_readers_never_a_reset(
    noida_broker: Broker, unique_name: str
) -> None:
    """noida-db deletes a segment whose records are older than its retention within a second
    or two (checked here). Neither reader resets past an offset it was asked for (I3): a range
    whose start is gone raises DataLossError naming the offsets, unless the caller accepts the
    loss; then the reader reports the range gone and reads what is left, without stalling."""
    from kafka import KafkaConsumer, TopicPartition

    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    producer = KafkaProducer(bootstrap_servers=noida_broker.bootstrap)
    probe = KafkaConsumer(bootstrap_servers=noida_broker.bootstrap)
    tp = TopicPartition(unique_name, 0)
    try:
        for i in range(10):
            producer.send(
                unique_name, value=b"old", partition=0, timestamp_ms=1_600_000_000_000 + i
            )
        producer.flush(10)
        deadline = time.monotonic() + 20
        while probe.beginning_offsets([tp])[tp] < 10:
            assert time.monotonic() < deadline, "noida-db's retention deleted nothing"
            time.sleep(0.2)
        for _ in range(4):
            producer.send(unique_name, value=b"new", partition=0)
        producer.flush(10)
    finally:
        producer.close()
        probe.close()

    bootstrap = noida_broker.bootstrap
    for read in (read_range_records, read_range_messages):
        for wanted, gone in (((2, 8), "2-7"), ((3, 13), "3-9")):
            with pytest.raises(DataLossError, match=rf"offsets {gone} of partition 0 .* retention"):
                read_offsets(read, bootstrap, unique_name, [OffsetRange(0, *wanted)])
        reported: list[OffsetRange] = []  # a stall would raise TimeoutError
        assert (
            read_offsets(read, bootstrap, unique_name, [OffsetRange(0, 2, 8)], reported.append)
            == {}
        )
        assert read_offsets(
            read, bootstrap, unique_name, [OffsetRange(0, 3, 13)], reported.append
        ) == {0: [10, 11, 12]}
        assert reported == [OffsetRange(0, 2, 8), OffsetRange(0, 3, 10)]


def test_an_ingest_reader_pickles_with_its_choice(kafka_broker: Broker, filled_topic: str) -> None:
    """Executor mode pickles the arguments into Spark tasks (with Spark's cloudpickle)."""
    from pyspark import cloudpickle

    kwargs = kwargs_for(kafka_broker.bootstrap, options_reader="confluent")
    shipped = cloudpickle.loads(cloudpickle.dumps(kwargs))

    assert isinstance(shipped, ReaderKwargs) and shipped.reader == "confluent"
    assert shipped == kwargs
    batches = list(read_ranges(shipped, filled_topic, [OffsetRange(2, 4, 6)], 100, 10))
    assert [b.to_pydict()["offset"] for b in batches] == [[4, 5]]


@pytest.mark.parametrize("broker_fixture", ["secure_kafka_broker", "tansu_with_authentication"])
def test_a_refused_login_names_the_topic_and_never_the_password(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, broker_fixture: str
) -> None:
    """Apache Kafka refuses an unknown SCRAM user, Tansu every SCRAM login (see
    test_broker_bugs.py): the reader fails at once, not after the stall timeout."""
    broker: BrokerProcess = request.getfixturevalue(broker_fixture)
    kwargs = kwargs_for(
        broker.listeners.get("SASL_PLAINTEXT", broker.bootstrap),
        credential_username="someone",
        credential_password=PASSWORD,
        credential_mechanism="scram-sha-512",
        options_reader="confluent",
    )
    started = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"Reading topic 'orders' failed: .*\(_AUTHENTICATION\)"
    ) as failure:
        list(read_ranges(kwargs, "orders", [OffsetRange(0, 0, 1)], 100, 20))

    assert time.monotonic() - started < 10
    assert PASSWORD not in str(failure.value) and PASSWORD not in caplog.text
    assert PASSWORD not in repr(kwargs)
