"""Raw messages as Arrow columns: what every source hands to Spark.

Columns: key, value (binary), topic, partition, offset, timestamp (UTC), headers
(list of key/value structs) and message_id: the source's own; for a Kafka record its
``message_id`` header (:func:`sluice.kafka.records.header_message_id`), else null, which
:mod:`sluice.spark.classify` makes ``<topic>-<partition>-<offset>``. The header is looked up
here, in Python, because a Spark lambda function over the headers would keep the whole
classification out of code generation.
Rows are gathered column by column with list comprehensions over a poll's records, so building
a batch costs little beyond the client library's own parsing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..kafka.records import header_message_id

__all__ = [
    "RAW_SCHEMA",
    "RAW_SCHEMA_DDL",
    "RecordColumns",
    "confluent_message_bytes",
    "kafka_record_bytes",
    "largest_message_bytes",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Spark takes microseconds only
#: confluent-kafka's timestamp type of a message without one (confluent_kafka is optional).
TIMESTAMP_NOT_AVAILABLE = 0
HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])

RAW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP),
        ("headers", pa.list_(HEADER_TYPE)),
        ("message_id", pa.string()),
    ]
)

#: The same schema in Spark DDL (for mapInArrow).
RAW_SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, message_id STRING"
)

Headers = Sequence[tuple[str, bytes | None]]


def largest_message_bytes(batch: pa.RecordBatch) -> int:
    """At least the bytes of the largest message of ``batch`` (key, value and headers)."""

    def longest(array: pa.Array) -> int:
        return int(pc.max(pc.binary_length(array)).as_py() or 0)

    headers = batch.column("headers")
    pairs = pc.list_flatten(headers)
    most_headers = int(pc.max(pc.list_value_length(headers)).as_py() or 0)
    header_bytes = most_headers * (longest(pairs.field("key")) + longest(pairs.field("value")))
    return longest(batch.column("key")) + longest(batch.column("value")) + header_bytes


def kafka_record_bytes(records: Sequence[Any]) -> list[int]:
    """Bytes of key and value of each kafka-python ``ConsumerRecord``."""
    return [len(r.value or b"") + len(r.key or b"") for r in records]


def confluent_message_bytes(messages: Sequence[Any]) -> list[int]:
    """Bytes of key and value of each confluent-kafka ``Message`` (``len()`` of a message is
    its value's length)."""
    return [len(m) + len(m.key() or b"") for m in messages]


class RecordColumns:
    """A growing batch of raw messages, one Python list per column."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.topics: list[str] = []
        self.partitions: list[int | None] = []
        self.offsets: list[int | None] = []
        self.timestamps: list[int | None] = []  # ms since the epoch
        self.headers: list[Headers | None] = []
        self.message_ids: list[str | None] = []

    def __len__(self) -> int:
        return len(self.values)

    def extend_kafka(self, records: Sequence[Any], topic: str, partition: int) -> None:
        """Append kafka-python ``ConsumerRecord``s of one partition."""
        self.keys += [r.key for r in records]
        self.values += [r.value for r in records]
        self.offsets += [r.offset for r in records]
        self.timestamps += [r.timestamp for r in records]
        self.headers += [r.headers for r in records]
        self.topics += [topic] * len(records)
        self.partitions += [partition] * len(records)
        self.message_ids += [header_message_id(r.headers) if r.headers else None for r in records]

    def extend_confluent(self, messages: Sequence[Any], topic: str, partition: int) -> None:
        """Append confluent-kafka ``Message``s of one partition (the same columns as
        :meth:`extend_kafka`; a message without a timestamp gets null)."""
        headers = [m.headers() for m in messages]
        self.keys += [m.key() for m in messages]
        self.values += [m.value() for m in messages]
        self.offsets += [m.offset() for m in messages]
        self.timestamps += [
            ms if kind != TIMESTAMP_NOT_AVAILABLE else None
            for kind, ms in (m.timestamp() for m in messages)
        ]
        self.headers += headers
        self.topics += [topic] * len(messages)
        self.partitions += [partition] * len(messages)
        self.message_ids += [header_message_id(h) if h else None for h in headers]

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        topic: str,
        timestamp: int | None,
        headers: Headers | None,
        message_id: str | None,
    ) -> None:
        """Append one message that has no partition and offset (MQTT)."""
        self.keys.append(key)
        self.values.append(value)
        self.topics.append(topic)
        self.partitions.append(None)
        self.offsets.append(None)
        self.timestamps.append(timestamp)
        self.headers.append(headers)
        self.message_ids.append(message_id)

    def to_batch(self) -> pa.RecordBatch:
        values = pa.array(self.values, pa.binary())
        timestamps = pa.array(self.timestamps, pa.int64())
        timestamps = pc.if_else(pc.less(timestamps, 0), None, timestamps)  # -1: no timestamp
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                values,
                pa.array(self.topics, pa.string()),
                pa.array(self.partitions, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pc.multiply(timestamps, 1000).cast(TIMESTAMP),
                self._header_array(),
                pa.array(self.message_ids, pa.string()),
            ],
            schema=RAW_SCHEMA,
        )

    def _header_array(self) -> pa.Array:
        lists = [h or () for h in self.headers]
        offsets = pa.array(
            list(itertools.accumulate((len(h) for h in lists), initial=0)), pa.int32()
        )
        pairs = list(itertools.chain.from_iterable(lists))
        structs = pa.StructArray.from_arrays(
            [
                pa.array([name for name, _ in pairs], pa.string()),
                pa.array([data for _, data in pairs], pa.binary()),
            ],
            fields=list(HEADER_TYPE),
        )
        return pa.ListArray.from_arrays(offsets, structs, type=pa.list_(HEADER_TYPE))
