"""Reading exactly a batch's offset ranges from Kafka, and committing them afterwards.

The reader assigns the partitions (it joins no consumer group), seeks each to its range's
start and reads until its position reaches the range's end: not one message more. It runs on
the driver, or inside a Spark task (one per range) in executor mode, so it takes plain
kafka-python keyword arguments that pickle: :class:`ReaderKwargs`, which also name the client
library that reads (``options.reader``: kafka-python, or the optional confluent-kafka).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from ..batch import OffsetRange
from ..kafka.config import DEFAULT_READER, READERS, client_config, credentials
from ..kafka.logs import hide_secret
from ..kafka.offsets import refresh_ends
from ..kafka.ranges import read_range_records
from ..queues.config import ConfigError
from .records import RecordColumns

__all__ = [
    "DEFAULT_READER",
    "READERS",
    "ReaderKwargs",
    "commit_offsets",
    "committed_offsets",
    "partition_positions",
    "read_ranges",
    "reader_kwargs",
]

#: A range reader: (kafka-python arguments, topic, ranges, stall timeout) -> (partition, records)
RangeReader = Callable[
    [Mapping[str, Any], str, Sequence[OffsetRange], float], Iterator[tuple[int, list[Any]]]
]
#: The :class:`RecordColumns` method that appends a range reader's records.
Extend = Callable[[RecordColumns, Sequence[Any], str, int], None]


class ReaderKwargs(dict[str, Any]):
    """kafka-python keyword arguments of a batch reader, and :attr:`reader`: which range
    reader reads with them (``options.reader``).

    The choice travels with the arguments (to the driver's reading thread, pickled into Spark
    tasks) and stays out of them: ``KafkaConsumer(**kwargs)`` sees only kafka-python's keys.
    """

    def __init__(self, kwargs: Mapping[str, Any], reader: str = DEFAULT_READER) -> None:
        super().__init__(kwargs)
        self.reader = reader

    def __repr__(self) -> str:  # the values hold the password
        return f"ReaderKwargs(reader={self.reader!r}, keys={sorted(self)})"


def reader_kwargs(config: Mapping[str, Any]) -> ReaderKwargs:
    """kafka-python arguments for a batch reader of the cluster ``config`` (validated queue
    config values) names, reading with its ``options.reader``; they contain the password, so
    they never go to a log."""
    hide_secret(credentials(dict(config))[1])
    reader = str(config.get("options.reader") or DEFAULT_READER)
    _range_reader(reader)  # a reader that cannot run fails before anything is read
    kwargs = {
        **client_config(dict(config)),
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",  # a start deleted by retention: read what is left
    }
    return ReaderKwargs(kwargs, reader)


def _range_reader(reader: str) -> tuple[RangeReader, Extend]:
    """The range reader named by ``options.reader`` and the way its records become columns."""
    if reader == "kafka-python":
        return read_range_records, RecordColumns.extend_kafka
    if reader != "confluent":
        raise ConfigError(
            f"config key 'options.reader' must be one of {', '.join(map(repr, READERS))}, "
            f"got {reader!r}."
        )
    try:
        from ..kafka.confluent_ranges import read_range_messages
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "confluent_kafka":
            raise
        raise ConfigError(
            "config key 'options.reader' is 'confluent', but confluent-kafka is not installed "
            "here: pip install 'sluice-core[confluent]' (on the Spark executors too when they "
            "read), or set options.reader to 'kafka-python'."
        ) from None
    return read_range_messages, RecordColumns.extend_confluent


def read_ranges(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    chunk_size: int,
    stall_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``ranges`` as Arrow batches of at most ``chunk_size`` rows, read by the
    range reader ``kwargs`` name (:class:`ReaderKwargs`; plain arguments: kafka-python's, see
    :func:`sluice.kafka.ranges.read_range_records`)."""
    # In a Spark task (executor mode) the driver's registration is not in this process: hide
    # the password from this process's kafka-python and librdkafka logs before anything logs.
    hide_secret(kwargs.get("sasl_plain_password"))
    read, extend = _range_reader(getattr(kwargs, "reader", DEFAULT_READER))
    columns = RecordColumns()
    for partition, records in read(kwargs, topic, ranges, stall_timeout_s):
        while records:
            room = chunk_size - len(columns)
            extend(columns, records[:room], topic, partition)
            records = records[room:]
            if len(columns) >= chunk_size:
                yield columns.to_batch()
                columns = RecordColumns()
    if len(columns):
        yield columns.to_batch()


def committed_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """The group's committed offset of each partition (None where it has none)."""
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close(autocommit=False)


def partition_positions(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> tuple[dict[int, int | None], dict[int, tuple[int, int]]]:
    """The group's committed offset of each of ``partitions`` (None where it has none), and
    (log start, log end) of each partition of ``topic`` that exists."""
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
        existing = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions if p in existing]
        if not tps:
            return committed, {}
        consumer.assign(tps)
        starts = consumer.beginning_offsets(tps)
        ends = refresh_ends(consumer, tps)
        return committed, {tp.partition: (starts[tp], ends[tp]) for tp in tps}
    finally:
        consumer.close(autocommit=False)


def commit_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, offsets: Mapping[int, int]
) -> None:
    """Commit ``offsets`` ({partition: next offset to read}) for ``group_id``, as a client that
    is not a member of the group (so the group must have no active members)."""
    if not offsets:
        return
    consumer = KafkaConsumer(**kwargs, group_id=group_id)
    try:
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )
    except (CommitFailedError, KafkaError) as exc:
        raise RuntimeError(
            f"Committing the batch's offsets of topic '{topic}' for group '{group_id}' failed: "
            f"{exc}. The data is written; rerunning the same batch commits without writing it "
            "again. If the group has running consumers, ingest with a group of its own."
        ) from None
    finally:
        consumer.close(autocommit=False)
