"""Avro (fastavro): a writer schema's Arrow type, decoding records, encoding them.

Types map as Spark's own Avro source maps them: record -> struct, enum -> string, array ->
list, map -> map<string, _>, ``[null, X]`` -> nullable X, fixed and bytes -> binary;
logical types: decimal -> decimal(p, s), date -> date, timestamp-millis/micros -> timestamp
(UTC), local-timestamp-millis/micros -> timestamp without time zone, uuid -> string,
time-millis/micros -> int/bigint. A union of several non-null types has no column type and is
a :class:`~sluice.queues.config.ConfigError` naming the field.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from ..queues.config import ConfigError
from .wire import DecodeError

__all__ = ["AvroCodec", "arrow_type", "parse"]

_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_UTC = pa.timestamp("us", tz="UTC")
_OBJECT = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")
# Logical types decoded as their underlying values: fastavro's uuid.UUID and datetime.time
# have no Arrow conversion (Spark has no TIME type), and dates and timestamps are far cheaper
# as numbers (Arrow takes days and microseconds; milliseconds are scaled, :func:`_scaler`).
_AS_IS = {
    "uuid",
    "time-millis",
    "time-micros",
    "date",
    "timestamp-millis",
    "timestamp-micros",
    "local-timestamp-millis",
    "local-timestamp-micros",
}
_MILLIS = {"timestamp-millis", "local-timestamp-millis"}


def parse(schema: str | Mapping[str, Any] | list[Any], where: str = "the Avro schema") -> Any:
    """A fastavro parsed schema from JSON text or a parsed JSON value."""
    import fastavro

    try:
        value = json.loads(schema) if isinstance(schema, str) else schema
        return fastavro.parse_schema(value, _write_hint=False)  # type: ignore[arg-type]
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigError(f"{where} is not a valid Avro schema: {exc}") from None


def _strip(schema: Any) -> Any:
    """``schema`` without the logical types decoded as their underlying values."""
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: _strip(v) for k, v in schema.items()}
        if out.get("logicalType") in _AS_IS:
            del out["logicalType"]
        return out
    return schema


def arrow_type(schema: Any, path: str = "") -> pa.DataType:
    """The Arrow type of values of the (parsed) Avro ``schema``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        raise ConfigError(f"Avro type {schema!r} of field '{path}' is not defined")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) == 1:
            return arrow_type(branches[0], path)
        if not branches:
            return pa.null()
        raise ConfigError(
            f"field '{path or 'the payload'}' is a union of several types "
            f"({', '.join(_name(b) for b in branches)}), which has no column type: Sluice "
            "decodes unions with null only. Give a schema (Spark DDL) that leaves it out, or "
            "change the Avro schema."
        )
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal":
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros", "timestamp-nanos"):
        return _UTC
    if logical in ("local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"):
        return pa.timestamp("us")
    if kind == "record" or kind == "error":
        return pa.struct(
            [
                pa.field(f["name"], arrow_type(f["type"], _join(path, f["name"])))
                for f in schema["fields"]
            ]
        )
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], f"{path}[]"))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], f"{path}{{value}}"))
    if kind == "fixed":
        return pa.binary()
    return arrow_type(kind, path)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


Scaler = Callable[[Any], Any]


def _scaler(schema: Any) -> Scaler | None:
    """What turns a decoded value of ``schema`` (expanded) into Arrow's units: milliseconds
    to microseconds (None: nothing to do)."""
    if isinstance(schema, list):
        scalers = [_scaler(s) for s in schema if s != "null"]
        return scalers[0] if len(scalers) == 1 else None
    if not isinstance(schema, dict):
        return None
    if schema.get("logicalType") in _MILLIS:
        return lambda v: v * 1000 if v is not None else None
    kind = schema.get("type")
    if kind in ("record", "error"):
        found = [(f["name"], _scaler(f["type"])) for f in schema["fields"]]
        parts: list[tuple[str, Scaler]] = [(n, c) for n, c in found if c is not None]
        if not parts:
            return None

        def record(v: Any) -> Any:
            if isinstance(v, dict):
                for name, scale in parts:
                    v[name] = scale(v.get(name))
            return v

        return record
    if kind == "array":
        item = _scaler(schema["items"])
        return None if item is None else (lambda v: [item(x) for x in v] if v is not None else v)
    if kind == "map":
        value = _scaler(schema["values"])
        if value is None:
            return None
        return lambda v: {k: value(x) for k, x in v.items()} if v is not None else v
    return None


class AvroCodec:
    """Decodes and encodes the records of one writer schema (JSON text)."""

    def __init__(self, schema: str | Mapping[str, Any], where: str = "the Avro schema") -> None:
        self.text = schema if isinstance(schema, str) else json.dumps(schema)
        self.where = where
        self.parsed = parse(self.text, where)
        self.reading = parse(_strip(json.loads(self.text)), where)
        if not isinstance(self.parsed, dict) or self.parsed.get("type") != "record":
            raise ConfigError(f"{where} must be an Avro record (a payload with fields)")
        import fastavro
        from fastavro import schemaless_reader

        # Parsed with fastavro's marker: schemaless_reader takes it as it is (without it,
        # every call parses the schema again: a third of the time per record)
        self._reader_schema = fastavro.parse_schema(_strip(json.loads(self.text)))
        self._read = schemaless_reader

        expanded = fastavro.parse_schema(json.loads(self.text), expand=True, _write_hint=False)
        self.type: pa.StructType = arrow_type(expanded)
        self._scale = _scaler(expanded)

    def decode(self, data: bytes, start: int = 0) -> dict[str, Any]:
        """The record in ``data[start:]`` (without copying it), which it must fill exactly."""
        buffer = io.BytesIO(data)  # shares the bytes
        if start:
            buffer.seek(start)
        try:
            record = self._read(buffer, self._reader_schema, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError ...
            raise DecodeError(
                f"truncated or corrupt Avro payload ({self.where}): {type(exc).__name__}: {exc}"[
                    :300
                ]
            ) from None
        if buffer.tell() != len(data):
            raise DecodeError(
                f"corrupt Avro payload ({self.where}): {len(data) - buffer.tell()} byte(s) left "
                "over after the record"
            )
        if not isinstance(record, dict):
            raise DecodeError(f"the Avro payload ({self.where}) is not a record")
        return self._scale(record) if self._scale is not None else record

    def encode(self, record: Mapping[str, Any]) -> bytes:
        from fastavro import schemaless_writer

        buffer = io.BytesIO()
        try:
            schemaless_writer(buffer, self.parsed, _coerce(self.parsed, record))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"cannot write {record!r} with {self.where}: {exc}") from None
        return buffer.getvalue()


def _coerce(schema: Any, value: Any) -> Any:
    """A JSON value made writable by ``schema``: ISO texts for dates and timestamps, numbers
    for decimals."""
    if value is None:
        return None
    if isinstance(schema, list):
        for branch in schema:
            if branch != "null":
                return _coerce(branch, value)
        return value
    if not isinstance(schema, dict):
        return value
    logical = schema.get("logicalType")
    if logical and "timestamp" in logical and isinstance(value, str):
        return datetime.fromisoformat(value)
    if logical == "date" and isinstance(value, str):
        return date.fromisoformat(value)
    if logical == "decimal" and isinstance(value, (int, float, str)):
        return Decimal(str(value))
    if schema.get("type") == "record" and isinstance(value, Mapping):
        return {f["name"]: _coerce(f["type"], value.get(f["name"])) for f in schema["fields"]}
    if schema.get("type") == "array" and isinstance(value, list):
        return [_coerce(schema["items"], v) for v in value]
    if schema.get("type") == "map" and isinstance(value, Mapping):
        return {k: _coerce(schema["values"], v) for k, v in value.items()}
    return value
