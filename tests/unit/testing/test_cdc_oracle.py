"""The CDC oracle (:mod:`sluice.testing.cdc_oracle`): it finds each kind of difference
between a lake table and its source, and none when they are equal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sluice.testing.cdc_oracle import Column, SourceTable, compare

COLUMNS = [
    Column("id", "integer"),
    Column("name", "text"),
    Column("active", "boolean"),
    Column("balance", "numeric", 12, 2),
    Column("updated_at", "timestamp with time zone"),
]
WHEN = datetime(2026, 6, 22, 9, 31, 24, 869915, tzinfo=UTC)
ROWS = [
    {"id": 1, "name": "ada", "active": True, "balance": Decimal("1.10"), "updated_at": WHEN},
    {"id": 2, "name": None, "active": False, "balance": None, "updated_at": None},
]
TYPED = pa.schema(
    [
        ("id", pa.int32()),
        ("name", pa.string()),
        ("active", pa.bool_()),
        ("balance", pa.decimal128(12, 2)),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("_sluice_source_position", pa.int64()),
    ]
)


def source() -> SourceTable:
    return SourceTable("customers", COLUMNS, {r["id"]: dict(r) for r in ROWS})


def lake(rows: list[dict[str, Any]], schema: pa.Schema = TYPED) -> pa.Table:
    return pa.Table.from_pylist([{**r, "_sluice_source_position": 8} for r in rows], schema)


def test_an_equal_typed_table_has_no_difference() -> None:
    assert compare(source(), lake(ROWS), typed=True) == []


def test_each_kind_of_difference_is_named() -> None:
    changed = [
        {**ROWS[0], "balance": Decimal("1.11"), "active": 1},  # 1 is no bool
        {"id": 3, "name": "extra", "active": 0, "balance": None, "updated_at": None},
    ]
    schema = TYPED.set(TYPED.get_field_index("active"), pa.field("active", pa.int64()))
    found = "\n".join(compare(source(), lake(changed, schema), typed=True))
    assert "customers.active (boolean): lake type int64, expected bool" in found
    assert "customers: 1 rows missing from the lake, keys 2" in found
    assert "customers: 1 rows in the lake that the source does not have, keys 3" in found
    assert "customers.balance (numeric(12,2)): 1 of 2 rows differ" in found
    assert "customers.active (boolean): 1 of 2 rows differ" in found


def test_without_schemas_values_compare_as_the_converter_conveys_them() -> None:
    """NUMERIC as its text, timestamptz as Debezium's ISO text in UTC: equal; the base64
    bytes of a Decimal and a placeholder are not."""
    conveyed = [
        {**ROWS[0], "balance": "1.10", "updated_at": "2026-06-22T09:31:24.869915Z"},
        {**ROWS[1]},
    ]
    schema = pa.schema([("balance", pa.string()), ("updated_at", pa.string())])
    schema = pa.schema([f if f.name not in schema.names else schema.field(f.name) for f in TYPED])
    assert compare(source(), lake(conveyed, schema), typed=False) == []
    assert compare(source(), lake(conveyed, schema), typed=True)[:2] == [
        "customers.balance (numeric(12,2)): lake type string, expected decimal128(12, 2)",
        "customers.updated_at (timestamp with time zone): lake type string, expected "
        "timestamp[us, tz=UTC]",
    ]
    later = WHEN.astimezone(timezone(timedelta(hours=5, minutes=30))) + timedelta(microseconds=1)
    wrong = [{**conveyed[0], "balance": "AG4=", "updated_at": later.isoformat()}, ROWS[1]]
    found = compare(source(), lake(wrong, schema), typed=False)
    assert [line.split(":")[0] for line in found] == [
        "customers.balance (numeric(12,2))",
        "customers.updated_at (timestamp with time zone)",
    ]


def test_a_missing_column_and_a_column_the_source_lacks() -> None:
    rows = [{k: v for k, v in r.items() if k != "name"} | {"note": "x"} for r in ROWS]
    found = compare(source(), pa.Table.from_pylist(rows), typed=False)
    assert found == [
        "customers.name (text): no such column in the lake",
        "customers.note: a column the source does not have",
    ]
