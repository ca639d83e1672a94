"""Raw messages as Arrow columns."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from sluice.spark.records import RAW_SCHEMA, RecordColumns, largest_message_bytes
from sluice.spark.writing import BATCH_BYTES, BATCH_ROWS, batch_rows


def record(
    offset: int, headers: list[tuple[str, bytes]], timestamp: int = 1_700_000_000_123
) -> SimpleNamespace:
    return SimpleNamespace(
        key=b"k", value=b"v%d" % offset, offset=offset, timestamp=timestamp, headers=headers
    )


def test_kafka_records_become_columns_with_their_headers_and_coordinates() -> None:
    columns = RecordColumns()
    columns.extend_kafka(
        [record(5, [("message_id", b"m5"), ("trace", b"t")]), record(6, [], timestamp=-1)], "t", 2
    )
    batch = columns.to_batch()
    assert batch.schema == RAW_SCHEMA
    rows = batch.to_pylist()
    assert [(r["topic"], r["partition"], r["offset"], r["value"]) for r in rows] == [
        ("t", 2, 5, b"v5"),
        ("t", 2, 6, b"v6"),
    ]
    assert rows[0]["headers"] == [
        {"key": "message_id", "value": b"m5"},
        {"key": "trace", "value": b"t"},
    ]
    assert rows[1]["headers"] == []
    assert rows[0]["timestamp"] == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC
    )
    assert rows[1]["timestamp"] is None, "Kafka's -1 means no timestamp"
    assert rows[0]["message_id"] == "m5", "the message_id header is the message's id"
    assert rows[1]["message_id"] is None, "classification falls back to topic-partition-offset"


def test_messages_without_coordinates_keep_their_own_id() -> None:
    columns = RecordColumns()
    columns.append(None, None, "sensors/a", None, None, "id-1")
    (row,) = columns.to_batch().to_pylist()
    assert (row["partition"], row["offset"], row["message_id"], row["value"]) == (
        None,
        None,
        "id-1",
        None,
    )


def test_the_largest_message_bound_covers_key_value_and_headers() -> None:
    columns = RecordColumns()
    columns.append(b"key", b"x" * 1000, "t", None, [("trace", b"y" * 50), ("id", b"z")], None)
    columns.append(None, b"small", "t", None, None, None)
    columns.append(b"k", None, "t", None, None, None)  # a tombstone

    largest = largest_message_bytes(columns.to_batch())

    assert 3 + 1000 + 5 + 50 + 2 + 1 <= largest <= 3 + 1000 + 2 * (5 + 50)


def test_batches_for_the_writing_tasks_stay_under_the_byte_limit() -> None:
    assert batch_rows(None) == BATCH_ROWS
    assert batch_rows(200) == BATCH_ROWS
    big = batch_rows(1_000_000)
    assert big * 2 * 1_000_000 <= BATCH_BYTES, "a batch of them stays under the limit"
    assert (big + 1) * (2 * 1_000_000 + 1024) > BATCH_BYTES, "and holds as many as fit"
    assert batch_rows(BATCH_BYTES) == 1
