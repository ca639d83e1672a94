"""The oracle of change data capture: does a lake table equal its PostgreSQL source table?

:func:`source_table` reads ``SELECT *`` of a table with its columns' types (PostgreSQL's
catalog); :func:`compare` sets a lake table (an Arrow table read from Iceberg or Delta)
against it, every row and every column, and lists each difference in words: a missing or
extra row, a missing or extra column, a column of the wrong type, a cell of another value.

``typed``: the converter carried the schema, so the lake should hold each column in the
type of the source: int4 as int32, int8 as int64, text as a string, bool as a bool,
NUMERIC(p, s) as decimal(p, s), timestamptz as a UTC timestamp (microseconds). Without a
schema (``typed=False``) only the values are compared, as the converter conveys them:
NUMERIC as its text (Debezium's ``decimal.handling.mode=string``), timestamptz as
Debezium's ISO text in UTC; a lake that holds them typed compares equal too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = ["Column", "SourceTable", "compare", "lake_type", "source_table"]

#: Columns Sluice adds to a current-state table (left out of the comparison).
SLUICE_PREFIX = "_sluice"
#: How many differing cells of one column a report shows.
EXAMPLES = 3


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # PostgreSQL's data_type: integer, bigint, text, boolean, numeric, ...
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.type == "numeric":
            return f"numeric({self.precision},{self.scale})"
        return self.type


@dataclass
class SourceTable:
    """A source table's columns and rows by key (``id``)."""

    name: str
    columns: list[Column]
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)


def source_table(dsn: str, table: str, schema: str = "public", key: str = "id") -> SourceTable:
    """``SELECT *`` of ``schema.table``, its timestamps read in UTC."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
            cur.execute(
                "SELECT column_name, data_type, numeric_precision, numeric_scale "
                "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "ORDER BY ordinal_position",
                (schema, table),
            )
            columns = [Column(*row) for row in cur.fetchall()]
            cur.execute(f'SELECT * FROM "{schema}"."{table}"')
            names = [d.name for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()
    return SourceTable(table, columns, {row[key]: row for row in rows})


def lake_type(column: Column) -> Any:
    """The Arrow type a lake table should hold ``column`` in, when the schema is known."""
    import pyarrow as pa

    simple = {
        "integer": pa.int32(),
        "bigint": pa.int64(),
        "smallint": pa.int16(),
        "text": pa.string(),
        "boolean": pa.bool_(),
        "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    }
    if column.type == "numeric":
        return pa.decimal128(column.precision or 38, column.scale or 0)
    return simple[column.type]


def _same_type(found: Any, wanted: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_large_string(found) or pa.types.is_string_view(found):
        found = pa.string()
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(wanted):
        zone = (found.tz or "").upper()
        return found.unit == wanted.unit and zone in ("UTC", "+00:00", "ETC/UTC")
    return bool(found == wanted)


def _conveyed(value: Any, column: Column) -> Any:
    """A source or lake value as the comparison sees it: NUMERIC as a Decimal, timestamptz
    as an aware UTC datetime (from Debezium's ISO text, too)."""
    if value is None:
        return None
    if column.type == "numeric":
        try:
            return Decimal(str(value))
        except ArithmeticError:
            return value  # not a number (base64 bytes, a placeholder): compared as it is
    if column.type == "timestamp with time zone":
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return value
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    return value


def _equal(found: Any, wanted: Any, column: Column, typed: bool) -> bool:
    if typed and column.type == "numeric" and isinstance(found, Decimal) and wanted is not None:
        # the exact value and its scale: 1.10 is not 1.1
        return bool(found.as_tuple() == wanted.as_tuple())
    left, right = _conveyed(found, column), _conveyed(wanted, column)
    if left is None or right is None:
        return left is None and right is None
    # same type too: True == 1 in Python, a bool column holding 1 is not equal
    return type(left) is type(right) and bool(left == right)


def _shown(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 12]}...({len(text)} chars)"


def compare(source: SourceTable, lake: Any, typed: bool, key: str = "id") -> list[str]:
    """Every difference between ``lake`` (an Arrow table) and ``source``, in words; empty
    when they are equal."""
    found: list[str] = []
    where = source.name
    lake_columns = [n for n in lake.column_names if not n.startswith(SLUICE_PREFIX)]
    wanted = {c.name: c for c in source.columns}
    for name in wanted:
        if name not in lake_columns:
            found.append(f"{where}.{name} ({wanted[name]}): no such column in the lake")
    for name in lake_columns:
        if name not in wanted:
            found.append(f"{where}.{name}: a column the source does not have")
    if typed:
        for name, column in wanted.items():
            if name in lake_columns:
                held, should = lake.schema.field(name).type, lake_type(column)
                if not _same_type(held, should):
                    found.append(f"{where}.{name} ({column}): lake type {held}, expected {should}")
    if key not in lake_columns:
        return [*found, f"{where}: the lake has no key column {key!r}"]
    rows = lake.select(lake_columns).to_pylist()
    by_key: dict[Any, dict[str, Any]] = {}
    for row in rows:
        if row[key] in by_key:
            found.append(f"{where}: key {row[key]!r} has two rows in the lake")
        by_key[row[key]] = row
    missing = sorted(k for k in source.rows if k not in by_key)
    extra = sorted(k for k in by_key if k not in source.rows)
    if missing:
        found.append(f"{where}: {len(missing)} rows missing from the lake, keys {_few(missing)}")
    if extra:
        found.append(
            f"{where}: {len(extra)} rows in the lake that the source does not have, "
            f"keys {_few(extra)}"
        )
    for name, column in wanted.items():
        if name not in lake_columns:
            continue
        differing = [
            (k, by_key[k][name], row[name])
            for k, row in sorted(source.rows.items())
            if k in by_key and not _equal(by_key[k][name], row[name], column, typed)
        ]
        if differing:
            shown = "; ".join(
                f"key {k}: lake {_shown(held)}, source {_shown(should)}"
                for k, held, should in differing[:EXAMPLES]
            )
            found.append(
                f"{where}.{name} ({column}): {len(differing)} of {len(source.rows)} rows "
                f"differ, e.g. {shown}"
            )
    return found


def _few(keys: Iterable[Any], count: int = 5) -> str:
    keys = list(keys)
    shown = ", ".join(map(str, keys[:count]))
    return shown + (f" and {len(keys) - count} more" if len(keys) > count else "")
