"""The wire format: a MessageEnvelope as a Kafka record and back.

The value is the envelope's message as is (None: a tombstone); the key is the envelope's key,
else its message id (as pip-services-kafka does); the headers are the envelope's own plus
``message_id``, ``message_type`` and ``correlation_id`` (each only when not None). A record
without a ``message_id`` header gets the id ``<topic>-<partition>-<offset>``.
"""

from __future__ import annotations

import datetime
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from ..queues.envelope import MessageEnvelope

__all__ = ["dead_letter_headers", "header_message_id", "to_envelope", "to_record"]

#: Header names Sluice writes; they are envelope fields on the receiving side, not user headers.
ID_HEADER, TYPE_HEADER, CORRELATION_HEADER = "message_id", "message_type", "correlation_id"
_ENVELOPE_HEADERS = {ID_HEADER, TYPE_HEADER, CORRELATION_HEADER}


def to_record(message: MessageEnvelope) -> dict[str, Any]:
    headers = [(n, v) for n, v in message.headers if n not in _ENVELOPE_HEADERS]
    headers.append((ID_HEADER, str(message.message_id).encode()))
    if message.message_type is not None:
        headers.append((TYPE_HEADER, message.message_type.encode()))
    if message.correlation_id is not None:
        headers.append((CORRELATION_HEADER, str(message.correlation_id).encode()))
    return {
        "value": message.message,
        "key": message.key if message.key is not None else str(message.message_id).encode(),
        "headers": headers,
        "timestamp": message.timestamp,
    }


def header_message_id(headers: Any) -> str | None:
    """The record's ``message_id`` header as text (the last one with a value wins, as in
    :func:`to_envelope`); None when it has none, or an empty one (its id is then its
    coordinates). Spark's own Kafka source reads it the same way
    (:func:`sluice.spark.jvm_reader.read_with_spark`)."""
    found = None
    for name, value in headers or ():
        if name == ID_HEADER and value is not None:
            found = bytes(value).decode("utf-8", "replace")
    return found or None


def record_id(headers: Any, topic: str, partition: int, offset: int) -> str:
    """A Kafka record's message id: its ``message_id`` header (:func:`header_message_id`),
    else its coordinates ``<topic>-<partition>-<offset>``, as every reader gives it."""
    return header_message_id(headers) or f"{topic}-{partition}-{offset}"


def to_envelope(record: ConsumerRecord) -> MessageEnvelope:
    fields: dict[str, str] = {}
    user_headers: list[tuple[str, bytes]] = []
    for name, value in record.headers or []:
        if name in _ENVELOPE_HEADERS:
            if value is not None:  # a header without a value: as if it were not there
                fields[name] = bytes(value).decode("utf-8", "replace")
        else:
            user_headers.append((name, value))
    envelope = MessageEnvelope(
        fields.get(CORRELATION_HEADER),
        fields.get(TYPE_HEADER),
        record.value,
        key=record.key,
        headers=user_headers,
    )
    envelope.message_id = record_id(record.headers, record.topic, record.partition, record.offset)
    envelope.topic, envelope.partition, envelope.offset = (
        record.topic,
        record.partition,
        record.offset,
    )
    envelope.timestamp = record.timestamp
    if record.timestamp is not None and record.timestamp >= 0:
        envelope.sent_time = datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.UTC)
    return envelope


def dead_letter_headers(
    topic: str, partition: int | None, offset: int | None, reason: str | None
) -> list[tuple[str, bytes]]:
    """The headers a dead letter carries: where it came from and why it was set aside."""
    return [
        ("sluice.original_topic", topic.encode()),
        ("sluice.original_partition", str(partition).encode()),
        ("sluice.original_offset", str(offset).encode()),
        ("sluice.reason", (reason or "moved to dead letter").encode()),
    ]
