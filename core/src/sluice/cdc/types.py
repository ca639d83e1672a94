"""The columns' types a Debezium envelope's schema declares, and its values as Python values of
those types.

With ``schemas.enable`` (Kafka Connect's JSON converter) every envelope carries the Connect
schema of its row: ``int32``, ``string``... and *logical types* named by ``name``, whose JSON
value is an encoding (docs/guides/cdc.md, "Types"):

- ``org.apache.kafka.connect.data.Decimal``: the unscaled value's big-endian two's complement
  bytes, in base64, with the scale in ``parameters.scale`` (and the precision in
  ``parameters["connect.decimal.precision"]``): a ``decimal128(precision, scale)`` column;
- ``io.debezium.data.VariableScaleDecimal`` (a NUMERIC without a scale): ``{"scale", "value"}``,
  kept exactly as the decimal's text (a string column);
- dates as days since the epoch, times and timestamps as milli-, micro- or nanoseconds
  (``io.debezium.time.*``, ``org.apache.kafka.connect.data.*``): date, time and timestamp
  columns; ``io.debezium.time.ZonedTimestamp`` (``timestamptz``), an ISO-8601 text, a UTC
  timestamp column;
- ``bytes`` in base64: a binary column; JSON, XML, UUID, enums: string columns.

Without a schema (``schemas.enable=false``) a value is what JSON makes of it, and the column's
type is inferred from the values (:mod:`sluice.cdc.columns`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["ColumnType", "row_types", "struct_types"]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class ColumnType:
    """A column's type as the envelope's schema declares it, and how its JSON value becomes a
    Python value of that type (None: as it is)."""

    arrow: pa.DataType
    convert: Convert | None = None

    def value(self, raw: Any) -> Any:
        if raw is None or self.convert is None:
            return raw
        return self.convert(raw)


def _bytes(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if not isinstance(raw, str):
        raise ValueError(f"expected base64 text, got {type(raw).__name__}")
    return base64.b64decode(raw, validate=True)


def _decimal(scale: int) -> Convert:
    """The Decimal logical type's value: its unscaled bytes (base64 in JSON), or a decimal
    already (an Avro decoder's)."""

    def convert(raw: Any) -> decimal.Decimal:
        if isinstance(raw, decimal.Decimal):
            return raw
        return _scaled(int.from_bytes(_bytes(raw), "big", signed=True), scale)

    return convert


def _scaled(unscaled: int, scale: int) -> decimal.Decimal:
    """``unscaled`` * 10**-``scale``, exactly (no context rounding)."""
    return decimal.Decimal(f"{unscaled}E{-scale}")


def _variable_decimal(raw: Any) -> str:
    if not isinstance(raw, Mapping) or "scale" not in raw or "value" not in raw:
        raise ValueError("not a VariableScaleDecimal ({'scale': ..., 'value': ...})")
    unscaled = int.from_bytes(_bytes(raw["value"]), "big", signed=True)
    return str(_scaled(unscaled, int(raw["scale"])))


def _integer(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"expected an integer, got {type(raw).__name__}")
    return raw


def _days(raw: Any) -> dt.date:
    return _EPOCH_DATE + dt.timedelta(days=_integer(raw))


def _since_epoch(unit: int) -> Convert:
    """A naive timestamp from a count of 1/``unit`` seconds since the epoch."""

    def convert(raw: Any) -> dt.datetime:
        seconds, rest = divmod(_integer(raw), unit)
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=rest * 1_000_000 // unit)

    return convert


def _time_of_day(unit: int) -> Convert:
    def convert(raw: Any) -> dt.time:
        micros = _integer(raw) * 1_000_000 // unit
        return (dt.datetime.min + dt.timedelta(microseconds=micros)).time()

    return convert


def _zoned(raw: Any) -> dt.datetime:
    if not isinstance(raw, str):
        raise ValueError(f"expected an ISO-8601 timestamp, got {type(raw).__name__}")
    value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"the timestamp {raw!r} has no offset")
    return value.astimezone(dt.UTC)


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)


_MICROS = pa.timestamp("us")
#: Logical types by name: (Arrow type, converter). Decimals take parameters (:func:`_of`).
_LOGICAL: dict[str, ColumnType] = {
    "io.debezium.data.VariableScaleDecimal": ColumnType(pa.string(), _variable_decimal),
    "org.apache.kafka.connect.data.Date": ColumnType(pa.date32(), _days),
    "io.debezium.time.Date": ColumnType(pa.date32(), _days),
    "org.apache.kafka.connect.data.Time": ColumnType(pa.time64("us"), _time_of_day(1_000)),
    "io.debezium.time.Time": ColumnType(pa.time64("us"), _time_of_day(1_000)),
    "io.debezium.time.MicroTime": ColumnType(pa.time64("us"), _time_of_day(1_000_000)),
    "io.debezium.time.NanoTime": ColumnType(pa.time64("us"), _time_of_day(1_000_000_000)),
    "org.apache.kafka.connect.data.Timestamp": ColumnType(_MICROS, _since_epoch(1_000)),
    "io.debezium.time.Timestamp": ColumnType(_MICROS, _since_epoch(1_000)),
    "io.debezium.time.MicroTimestamp": ColumnType(_MICROS, _since_epoch(1_000_000)),
    "io.debezium.time.NanoTimestamp": ColumnType(_MICROS, _since_epoch(1_000_000_000)),
    "io.debezium.time.ZonedTimestamp": ColumnType(pa.timestamp("us", tz="UTC"), _zoned),
    "io.debezium.time.ZonedTime": ColumnType(pa.string()),
    "io.debezium.data.Json": ColumnType(pa.string(), _text),
    "io.debezium.data.Xml": ColumnType(pa.string()),
    "io.debezium.data.Uuid": ColumnType(pa.string()),
    "io.debezium.data.Enum": ColumnType(pa.string()),
    "io.debezium.data.EnumSet": ColumnType(pa.string()),
    "io.debezium.time.MicroDuration": ColumnType(pa.int64(), _integer),
}
_PRIMITIVE: dict[str, ColumnType] = {
    "int8": ColumnType(pa.int8()),
    "int16": ColumnType(pa.int16()),
    "int32": ColumnType(pa.int32()),
    "int64": ColumnType(pa.int64()),
    "float": ColumnType(pa.float32()),
    "float32": ColumnType(pa.float32()),
    "double": ColumnType(pa.float64()),
    "float64": ColumnType(pa.float64()),
    "boolean": ColumnType(pa.bool_()),
    "string": ColumnType(pa.string()),
    "bytes": ColumnType(pa.binary(), _bytes),
}


def _of(schema: Mapping[str, Any]) -> ColumnType | None:
    """The column type of one field's Connect schema; None when Sluice does not know it (the
    column's type is then inferred from its values)."""
    name = schema.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            return ColumnType(pa.string(), lambda raw: str(_decimal(scale)(raw)))
        return ColumnType(pa.decimal128(precision, scale), _decimal(scale))
    if isinstance(name, str) and name in _LOGICAL:
        return _LOGICAL[name]
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        item = _of(schema["items"])
        if item is None:
            return None
        return ColumnType(pa.list_(item.arrow), _each(item))
    if isinstance(kind, str):
        return _PRIMITIVE.get(kind)
    return None


def _each(item: ColumnType) -> Convert:
    def convert(raw: Any) -> list[Any]:
        if not isinstance(raw, list):
            raise ValueError(f"expected a list, got {type(raw).__name__}")
        return [item.value(v) for v in raw]

    return convert


_CACHE: dict[tuple[Any, ...], dict[str, ColumnType]] = {}


def struct_types(schema: Any) -> dict[str, ColumnType]:
    """The types a struct's Connect schema (``{"type": "struct", "fields": [...]}``, e.g. a
    message key's) declares for its fields; {} when it declares none."""
    fields = schema.get("fields") if isinstance(schema, Mapping) else None
    if not isinstance(fields, list):
        return {}
    signature = tuple(
        (f.get("field"), f.get("type"), f.get("name"), json.dumps(f.get("parameters")))
        for f in fields
        if isinstance(f, Mapping)
    )
    found = _CACHE.get(signature)
    if found is None:
        found = {}
        for field in fields:
            if isinstance(field, Mapping) and isinstance(field.get("field"), str):
                kind = _of(field)
                if kind is not None:
                    found[field["field"]] = kind
        if len(_CACHE) > 1_000:
            _CACHE.clear()
        _CACHE[signature] = found
    return found


def row_types(envelope_schema: Any) -> dict[str, ColumnType]:
    """The columns' types the schema of an envelope (``{"type": "struct", "fields": [...
    {"field": "after", "fields": [...]}]}``) declares for its row; {} when it declares none."""
    if not isinstance(envelope_schema, Mapping):
        return {}
    row = None
    for field in envelope_schema.get("fields") or ():
        if isinstance(field, Mapping) and field.get("field") in ("after", "before"):
            row = field
            if field.get("field") == "after":
                break
    return struct_types(row)
