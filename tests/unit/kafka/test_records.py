"""The wire format between MessageEnvelope and a Kafka record (see sluice.kafka.records)."""

from __future__ import annotations

from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from sluice.kafka.records import header_message_id, to_envelope, to_record
from sluice.queues import MessageEnvelope


def consumed(record: dict[str, Any], offset: int = 7) -> ConsumerRecord:
    """What a consumer would hand back for ``record`` written at ``t``/2/``offset``."""
    return ConsumerRecord(
        "t", 2, -1, offset, 1_700_000_000_000, 0, record["key"], record["value"],
        record["headers"], None, -1, -1, -1,
    )  # fmt: skip


def test_an_envelope_survives_the_round_trip() -> None:
    sent = MessageEnvelope("corr", "order", b"\x00payload", key="k", headers={"h": "v"})
    record = to_record(sent)
    assert record["value"] == b"\x00payload" and record["key"] == b"k"
    assert ("message_id", sent.message_id.encode()) in record["headers"]

    got = to_envelope(consumed(record))
    assert (got.message, got.key, got.headers) == (b"\x00payload", b"k", [("h", b"v")])
    assert (got.message_id, got.message_type, got.correlation_id) == (
        sent.message_id,
        "order",
        "corr",
    )
    assert (got.topic, got.partition, got.offset, got.timestamp) == ("t", 2, 7, 1_700_000_000_000)


def test_without_a_key_the_message_id_is_the_key_and_none_fields_have_no_header() -> None:
    sent = MessageEnvelope(None, None, None)
    record = to_record(sent)
    assert record["value"] is None and record["key"] == sent.message_id.encode()
    assert [name for name, _ in record["headers"]] == ["message_id"]


def test_a_foreign_record_gets_its_coordinates_as_id() -> None:
    got = to_envelope(consumed({"key": None, "value": None, "headers": []}, offset=41))
    assert (got.message, got.key, got.message_id) == (None, None, "t-2-41")
    assert (got.message_type, got.correlation_id, got.headers) == (None, None, [])


def test_the_last_message_id_header_with_a_value_counts() -> None:
    assert header_message_id([("message_id", b"a"), ("x", b""), ("message_id", b"b")]) == "b"
    assert header_message_id([("message_id", b"a"), ("message_id", None)]) == "a"
    assert header_message_id([("message_id", b"")]) is None
    assert header_message_id(None) is None


def test_envelope_headers_without_a_value_are_as_if_absent() -> None:
    headers = [("message_type", None), ("correlation_id", None), ("message_id", None)]
    got = to_envelope(consumed({"key": None, "value": b"{}", "headers": headers}))
    assert (got.message_type, got.correlation_id, got.message_id) == (None, None, "t-2-7")
