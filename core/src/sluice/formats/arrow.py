"""Arrow types of decoded payloads: the union of several writer schemas (the table's schema
grows by the fields new versions add), whether one writer schema fits a table's, naming the
fields that do not, and decoded records turned into one Arrow column, record by record when
one of them does not convert."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["conflicts", "merge", "misfits", "to_arrow"]

# A writer's type may be narrower than the table's (the values convert without loss).
_WIDENS = {
    (pa.int8(), pa.int16()),
    (pa.int8(), pa.int32()),
    (pa.int8(), pa.int64()),
    (pa.int16(), pa.int32()),
    (pa.int16(), pa.int64()),
    (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()),
    (pa.int32(), pa.float64()),
    (pa.int64(), pa.float64()),
}


def _show(t: pa.DataType) -> str:
    from_arrow = _spark_name(t)
    return from_arrow or str(t)


def _spark_name(t: pa.DataType) -> str | None:
    try:
        from pyspark.sql.pandas.types import from_arrow_type

        return str(from_arrow_type(t).simpleString())
    except Exception:
        return None


def merge(base: pa.StructType, other: pa.StructType) -> pa.StructType:
    """``base`` with the fields of ``other`` it lacks appended (nested structs too); a field
    both have keeps ``base``'s type (see :func:`conflicts`)."""
    fields = []
    names = {f.name for f in other}
    by_name = {f.name: f for f in other}
    for f in base:
        if (
            f.name in names
            and pa.types.is_struct(f.type)
            and pa.types.is_struct(by_name[f.name].type)
        ):
            f = f.with_type(merge(f.type, by_name[f.name].type))
        fields.append(f.with_nullable(True))
    known = {f.name for f in base}
    fields += [f.with_nullable(True) for f in other if f.name not in known]
    return pa.struct(fields)


def misfits(writer: pa.DataType, table: pa.DataType, path: str = "") -> list[str]:
    """Why values of ``writer`` type do not fit a column of ``table`` type, one text per field
    (empty: they fit). A field the table lacks does not fit; one the writer lacks is null."""
    if writer == table or (writer, table) in _WIDENS or pa.types.is_null(writer):
        return []
    name = f"'{path}'" if path else "the payload"
    if pa.types.is_struct(writer) and pa.types.is_struct(table):
        out = []
        columns = {f.name: f.type for f in table}
        for f in writer:
            where = f"{path}.{f.name}" if path else f.name
            if f.name not in columns:
                out.append(f"field '{where}' is not in the table's schema")
            else:
                out += misfits(f.type, columns[f.name], where)
        return out
    if pa.types.is_list(writer) and pa.types.is_list(table):
        return misfits(writer.value_type, table.value_type, f"{path}[]")
    if pa.types.is_map(writer) and pa.types.is_map(table):
        return misfits(writer.key_type, table.key_type, f"{path}{{key}}") + misfits(
            writer.item_type, table.item_type, f"{path}{{value}}"
        )
    return [f"field {name} is {_show(writer)}, the table has {_show(table)}"]


def conflicts(types: Sequence[tuple[str, pa.StructType]]) -> dict[str, list[str]]:
    """For each named writer type after the first, why it does not fit the merge of those
    before it (only those that do not fit)."""
    out: dict[str, list[str]] = {}
    if not types:
        return out
    table = types[0][1]
    for name, t in types[1:]:
        problems = misfits(t, merge(table, t))
        if problems:
            out[name] = problems
        table = merge(table, t)
    return out


def to_arrow(rows: list[Any], type_: pa.DataType, errors: list[str | None]) -> pa.Array:
    """``rows`` (Python values, None for records not decoded) as an array of ``type_``. A row
    that does not convert is null and gets its reason in ``errors``."""
    try:
        return pa.array(rows, type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    kept: list[Any] = []
    for index, row in enumerate(rows):
        if row is None:
            kept.append(None)
            continue
        try:
            pa.array([row], type=type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            errors[index] = f"a value does not fit the table's schema: {exc}"
            kept.append(None)
        else:
            kept.append(row)
    return pa.array(kept, type=type_)
