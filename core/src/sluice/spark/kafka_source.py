"""Reading exactly a batch's offset ranges from Kafka, and committing them afterwards.

The reader assigns the partitions (it joins no consumer group), seeks each to its range's
start and reads until its position reaches the range's end: not one message more, and never
resetting past one it was asked for (a range deleted while it is read is a
:class:`~sluice.errors.DataLossError`, or skipped when the ingest accepts data loss). It reads
committed records only by default (``options.isolation_level``), as the planners plan up to
the last stable offset. It runs on the driver, or inside a Spark task (one per range) in
executor mode, so it takes plain kafka-python keyword arguments that pickle:
:class:`ReaderKwargs`, which also name the client library that reads (``options.reader``:
kafka-python, or the optional confluent-kafka) and whether a loss is accepted.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from ..batch import OffsetRange
from ..kafka.clients import new_consumer
from ..kafka.config import (
    DEFAULT_READER,
    READER_CHOICES,
    READERS,
    SPARK_READER,
    credentials,
    unretried_consumer_config,
)
from ..kafka.logs import hide_secret
from ..kafka.offsets import ENDS_CONSUMER, refresh_ends, tracked_consumer
from ..kafka.ranges import LostRange, read_range_records
from ..queues.config import ConfigError
from .records import RecordColumns, confluent_message_bytes, kafka_record_bytes

__all__ = [
    "DEFAULT_READER",
    "READERS",
    "READER_CHOICES",
    "SPARK_READER",
    "Positions",
    "ReaderKwargs",
    "chosen_reader",
    "commit_offsets",
    "committed_offsets",
    "fingerprints_at",
    "partition_positions",
    "read_ranges",
    "reader_kwargs",
    "topic_id",
]

#: A range reader: (kafka-python arguments, topic, ranges, stall timeout, accepted losses)
#: -> (partition, records)
RangeReader = Callable[
    [Mapping[str, Any], str, Sequence[OffsetRange], float, LostRange | None],
    Iterator[tuple[int, list[Any]]],
]
#: Bytes of keys and values a chunk read on the driver holds at most (one message may pass).
DEFAULT_CHUNK_BYTES = 256 << 20
#: The :class:`RecordColumns` method that appends a range reader's records.
Extend = Callable[[RecordColumns, Sequence[Any], str, int], None]


class ReaderKwargs(dict[str, Any]):
    """kafka-python keyword arguments of a batch reader, :attr:`reader`: which range reader
    reads with them (``options.reader``), and :attr:`accept_loss`: whether a range deleted
    while it is read is skipped (the ingest records it) instead of failing.

    The choices travel with the arguments (to the driver's reading thread, pickled into Spark
    tasks) and stay out of them: ``KafkaConsumer(**kwargs)`` sees only kafka-python's keys.
    """

    def __init__(
        self, kwargs: Mapping[str, Any], reader: str = DEFAULT_READER, accept_loss: bool = False
    ) -> None:
        super().__init__(kwargs)
        self.reader = reader
        self.accept_loss = accept_loss

    def __repr__(self) -> str:  # the values hold the password
        return (
            f"ReaderKwargs(reader={self.reader!r}, accept_loss={self.accept_loss}, "
            f"keys={sorted(self)})"
        )

    def __reduce__(self) -> Any:  # pickled into Spark tasks: keep the choices
        return (ReaderKwargs, (dict(self), self.reader, self.accept_loss))


def reader_kwargs(config: Mapping[str, Any], accept_loss: bool = False) -> ReaderKwargs:
    """kafka-python arguments for a batch reader of the cluster ``config`` (validated queue
    config values) names, reading with its ``options.reader``; they contain the password, so
    they never go to a log. ``accept_loss``: see :class:`ReaderKwargs`."""
    hide_secret(credentials(dict(config))[1])
    reader = str(config.get("options.reader") or DEFAULT_READER)
    if reader != SPARK_READER:  # Spark's source is checked when the ranges are read
        _range_reader(reader)  # a reader that cannot run fails before anything is read
    kwargs = {**unretried_consumer_config(dict(config)), "enable_auto_commit": False}
    return ReaderKwargs(kwargs, reader, accept_loss)


class _Reader(NamedTuple):
    """A range reader, the :class:`RecordColumns` method that appends its records, and the
    bytes (key and value) of each of its records."""

    read: RangeReader
    extend: Extend
    sizes: Callable[[Sequence[Any]], list[int]]


def chosen_reader(reader: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """The reader ``options.reader`` names in this process: ``auto`` is ``confluent`` when
    confluent-kafka imports here and takes every one of ``kwargs`` (kafka-python's
    arguments; None: not checked), else ``kafka-python``."""
    if reader != "auto":
        return reader
    try:
        from ..kafka.confluent_ranges import librdkafka_config
    except ImportError:
        return "kafka-python"
    if kwargs is not None:
        try:
            librdkafka_config(kwargs)
        except ConfigError:
            return "kafka-python"
    return "confluent"


def _range_reader(reader: str, kwargs: Mapping[str, Any] | None = None) -> _Reader:
    """The range reader named by ``options.reader`` (``auto``: :func:`chosen_reader`)."""
    reader = chosen_reader(reader, kwargs) if reader == "auto" else reader
    if reader == "kafka-python":
        return _Reader(read_range_records, RecordColumns.extend_kafka, kafka_record_bytes)
    if reader != "confluent":
        raise ConfigError(
            f"config key 'options.reader' must be one of "
            f"{', '.join(map(repr, READER_CHOICES))}, "
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
    return _Reader(read_range_messages, RecordColumns.extend_confluent, confluent_message_bytes)


def read_ranges(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    chunk_size: int,
    stall_timeout_s: float,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``ranges`` as Arrow batches of at most ``chunk_size`` rows and at most
    ``chunk_bytes`` bytes of keys and values (a message larger than that is a batch of its
    own), read by the range reader ``kwargs`` name (:class:`ReaderKwargs`; plain arguments:
    kafka-python's, see :func:`sluice.kafka.ranges.read_range_records`)."""
    # In a Spark task (executor mode) the driver's registration is not in this process: hide
    # the password from this process's kafka-python and librdkafka logs before anything logs.
    hide_secret(kwargs.get("sasl_plain_password"))
    reader = _range_reader(getattr(kwargs, "reader", DEFAULT_READER), kwargs)
    lost = _skip if getattr(kwargs, "accept_loss", False) else None
    columns, size = RecordColumns(), 0
    for partition, records in reader.read(kwargs, topic, ranges, stall_timeout_s, lost):
        ends = list(itertools.accumulate(reader.sizes(records)))  # bytes of records[:k + 1]
        done = 0
        while done < len(records):
            before = ends[done - 1] if done else 0
            # records[done:upto] fit in what is left of the chunk's bytes
            upto = bisect.bisect_right(ends, before + chunk_bytes - size, done)
            if upto == done and not len(columns):  # one message above the bound goes alone
                upto = done + 1
            upto = min(upto, done + chunk_size - len(columns))
            if upto > done:
                reader.extend(columns, records[done:upto], topic, partition)
                size += ends[upto - 1] - before
                done = upto
            if len(columns) >= chunk_size or size >= chunk_bytes or done < len(records):
                # let go of the messages before the chunk is handed on (one copy held, not two)
                chunk, columns, size = columns.to_batch(), RecordColumns(), 0
                yield chunk
                del chunk  # and of the chunk while the next one is read
    if len(columns):
        yield columns.to_batch()


def _skip(_: OffsetRange) -> None:
    """An accepted loss: the ingest finds the range missing and records it."""


def committed_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> dict[int, int | None]:
    """The group's committed offset of each partition (None where it has none)."""
    consumer = new_consumer(**kwargs, group_id=group_id)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close(autocommit=False)


@dataclass(frozen=True)
class Positions:
    """Where a group and a topic's partitions stand, read before a batch is read."""

    committed: dict[int, int | None]  # the group's committed offset (None: never committed)
    bounds: dict[int, tuple[int, int]]  # (log start, end) of each partition that exists
    topic_id: str | None  # None where the broker has no topic ids (KIP-516)


def partition_positions(
    kwargs: Mapping[str, Any], topic: str, group_id: str, partitions: Sequence[int]
) -> Positions:
    """The group's committed offset of each of ``partitions``, (log start, end) of each of
    them that exists (the end at the consumer's isolation level: the last stable offset when
    reading committed records), and the topic's id."""
    consumer = tracked_consumer(**kwargs, group_id=group_id, **ENDS_CONSUMER)
    try:
        # the topic's metadata first: after the group's coordinator is looked up (committed)
        # a metadata request waits out kafka-python's back-off, 100 ms one time in two
        existing = consumer.partitions_for_topic(topic) or set()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
        found = consumer._client.cluster.topic_id(topic)
        topic_id = str(found) if found else None
        tps = [TopicPartition(topic, p) for p in partitions if p in existing]
        if not tps:
            return Positions(committed, {}, topic_id)
        consumer.assign(tps)
        starts = consumer.beginning_offsets(tps)
        ends = refresh_ends(consumer, tps)
        bounds = {tp.partition: (starts[tp], ends[tp]) for tp in tps}
        return Positions(committed, bounds, topic_id)
    finally:
        consumer.close(autocommit=False)


def topic_id(kwargs: Mapping[str, Any], topic: str) -> str | None:
    """The topic's id now (None where the broker has no topic ids, KIP-516)."""
    consumer = new_consumer(**kwargs, group_id=None)
    try:
        consumer.partitions_for_topic(topic)  # a metadata request naming the topic
        found = consumer._client.cluster.topic_id(topic)
        return str(found) if found else None
    finally:
        consumer.close(autocommit=False)


def fingerprints_at(
    kwargs: Mapping[str, Any], topic: str, offsets: Mapping[int, int], stall_timeout_s: float
) -> dict[int, str | None]:
    """The fingerprint (:mod:`.fingerprints`) of the message at each ``{partition: offset}``;
    None where that offset holds no message (compacted away, or a transaction marker).

    Read by the batch's range reader (Spark's source: the default one): a fetch at an offset
    brings the whole producer batch it lies in, up to thousands of messages, and kafka-python
    decodes in Python those before it too (0.7 s of a 1.8 s warm batch of 10,000 messages,
    where librdkafka takes a few milliseconds)."""
    from .fingerprints import message_fingerprint

    name = getattr(kwargs, "reader", DEFAULT_READER)
    reader = _range_reader(DEFAULT_READER if name == SPARK_READER else name, kwargs)
    found: dict[int, str | None] = dict.fromkeys(offsets)
    ranges = [OffsetRange(p, o, o + 1) for p, o in offsets.items()]
    plain = {**kwargs, "isolation_level": "read_uncommitted"}  # the record, whatever became of it
    for partition, records in reader.read(plain, topic, ranges, stall_timeout_s, _skip):
        columns = RecordColumns()
        reader.extend(columns, records, topic, partition)
        for at, key, value, timestamp in zip(
            columns.offsets, columns.keys, columns.values, columns.timestamps, strict=True
        ):
            if at == offsets[partition]:
                found[partition] = message_fingerprint(key, value, timestamp)
    return found


def commit_offsets(
    kwargs: Mapping[str, Any], topic: str, group_id: str, offsets: Mapping[int, int]
) -> None:
    """Commit ``offsets`` ({partition: next offset to read}) for ``group_id``, as a client that
    is not a member of the group (so the group must have no active members)."""
    if not offsets:
        return
    consumer = new_consumer(**kwargs, group_id=group_id)
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
