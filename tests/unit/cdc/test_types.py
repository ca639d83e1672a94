"""Debezium's logical types read from the envelope's schema (JSON with schemas): the lake's
columns take the source's types, and the values are exact."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from sluice.cdc import UNAVAILABLE, Change, parse_change, reduce_messages


def field(name: str, kind: str, logical: str | None = None, **parameters: str) -> dict:
    out: dict[str, Any] = {"field": name, "type": kind, "optional": True}
    if logical:
        out["name"] = logical
    if parameters:
        out["parameters"] = parameters
    return out


ROW = [
    field("id", "int32"),
    field(
        "price",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        scale="2",
        **{"connect.decimal.precision": "10"},
    ),
    field("seen", "string", "io.debezium.time.ZonedTimestamp"),
    field("made", "int64", "io.debezium.time.MicroTimestamp"),
    field("day", "int32", "io.debezium.time.Date"),
    field("blob", "bytes"),
    field("doc", "string", "io.debezium.data.Json"),
    field("note", "string"),
    field("big", "int64"),
]


def wrapped(after: dict[str, Any], op: str = "c") -> bytes:
    row = {"type": "struct", "fields": ROW, "optional": True, "name": "shop.public.items.Value"}
    schema = {
        "type": "struct",
        "fields": [{**row, "field": "before"}, {**row, "field": "after"}],
        "name": "shop.public.items.Envelope",
    }
    payload = {"op": op, "before": None, "after": after, "source": {"lsn": 24023128}}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def key(value: int) -> bytes:
    schema = {"type": "struct", "fields": [field("id", "int32")], "name": "shop.public.items.Key"}
    return json.dumps({"schema": schema, "payload": {"id": value}}).encode()


def unscaled(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big", signed=True)).decode()


def test_values_take_the_types_the_schema_names() -> None:
    after = {
        "id": 1,
        "price": unscaled(-12345),
        "seen": "2026-11-28T10:15:30.123456+01:00",
        "made": 1_700_000_000_123_456,
        "day": 20_000,
        "blob": base64.b64encode(b"\x00\x01").decode(),
        "doc": '{"a": 1}',
        "note": None,
        "big": 2**40,
    }
    change = parse_change(wrapped(after), key(1), 0, 0)
    assert isinstance(change, Change) and change.row is not None
    assert change.row["price"] == decimal.Decimal("-123.45")
    assert change.row["seen"] == dt.datetime(2026, 11, 28, 9, 15, 30, 123456, tzinfo=dt.UTC)
    assert change.row["made"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert change.row["day"] == dt.date(2024, 10, 4)
    assert change.row["blob"] == b"\x00\x01"
    reduced = reduce_messages(
        pa.table(
            {
                "key": pa.array([key(1)], pa.binary()),
                "value": pa.array([wrapped(after)], pa.binary()),
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([0], pa.int64()),
            }
        )
    )
    table = reduced.rows()
    assert table.schema.field("id").type == pa.int32()
    assert table.schema.field("price").type == pa.decimal128(10, 2)
    assert table.schema.field("seen").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("made").type == pa.timestamp("us")
    assert table.schema.field("day").type == pa.date32()
    assert table.schema.field("blob").type == pa.binary()
    assert table.schema.field("note").type == pa.string()  # null, but typed by the schema


def test_an_unsent_toasted_column_is_left_out_of_the_row() -> None:
    after = {"id": 1, "note": UNAVAILABLE, "blob": base64.b64encode(UNAVAILABLE.encode()).decode()}
    change = parse_change(wrapped(after, "u"), key(1), 0, 0)
    assert isinstance(change, Change) and change.row is not None
    assert change.unavailable == {"note", "blob"}
    assert "note" not in change.row and "blob" not in change.row


def test_a_value_its_logical_type_cannot_read_is_set_aside() -> None:
    reduced = reduce_messages(
        pa.table(
            {
                "key": pa.array([key(1), key(2)], pa.binary()),
                "value": pa.array(
                    [wrapped({"id": 1, "price": "not base64!"}), wrapped({"id": 2})], pa.binary()
                ),
                "partition": pa.array([0, 0], pa.int32()),
                "offset": pa.array([0, 1], pa.int64()),
            }
        )
    )
    assert list(reduced.changes) == [(2,)]
    assert "column 'price'" in reduced.malformed[(0, 0)]
