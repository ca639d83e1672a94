"""JSON Schema: a schema's Arrow type, validating documents (fastjsonschema), and values for
Arrow.

Types: ``string`` -> string (``format: date-time`` -> timestamp UTC, ``date`` -> date),
``integer`` -> bigint, ``number`` -> double, ``boolean``, ``array`` -> array of ``items``,
``object`` with ``properties`` -> struct, ``object`` with only ``additionalProperties`` -> map
from string; ``["x", "null"]`` -> nullable x; local ``$ref`` (``#/definitions/...``,
``#/$defs/...``) are followed. ``oneOf``/``anyOf`` of several types have no column type and
are a :class:`~sluice.queues.config.ConfigError` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import Any

import pyarrow as pa

from ..queues.config import ConfigError
from .wire import DecodeError

__all__ = ["JsonSchemaCodec", "arrow_type"]

_UTC = pa.timestamp("us", tz="UTC")
_SIMPLE = {
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
    "null": pa.null(),
}


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in node:
        ref = str(node["$ref"])
        if not ref.startswith("#/"):
            raise ConfigError(
                f"field '{path}' refers to {ref}: Sluice follows local references (#/...) only"
            )
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        node, seen = target, seen + 1
        if seen > 50:
            raise ConfigError(f"field '{path}': $ref {ref} is recursive, which has no column type")
    return node


def arrow_type(
    node: Mapping[str, Any], root: Mapping[str, Any] | None = None, path: str = ""
) -> pa.DataType:
    """The Arrow type of values valid under the JSON Schema ``node``."""
    root = node if root is None else root
    node = _resolve(node, root, path)
    for word in ("oneOf", "anyOf"):
        if word in node:
            branches = [_resolve(b, root, path) for b in node[word]]
            kinds = [b for b in branches if b.get("type") != "null"]
            if len(kinds) == 1:
                return arrow_type(kinds[0], root, path)
            raise ConfigError(
                f"field '{path or 'the payload'}' is a {word} of several types, which has no "
                "column type: give a schema (Spark DDL) instead"
            )
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ConfigError(
                f"field '{path or 'the payload'}' may be {', '.join(map(str, kinds))}, which has "
                "no column type: give a schema (Spark DDL) instead"
            )
        kind = kinds[0]
    if kind is None and "properties" in node:
        kind = "object"
    if kind is None and "enum" in node and all(isinstance(v, str) for v in node["enum"]):
        kind = "string"
    if kind == "string":
        fmt = node.get("format")
        return _UTC if fmt == "date-time" else pa.date32() if fmt == "date" else pa.string()
    if kind in _SIMPLE:
        return _SIMPLE[str(kind)]
    if kind == "array":
        items = node.get("items")
        if not isinstance(items, Mapping):
            raise ConfigError(f"array field '{path}' needs one 'items' schema for its column type")
        return pa.list_(arrow_type(items, root, f"{path}[]"))
    if kind == "object":
        properties = node.get("properties")
        if properties:
            return pa.struct(
                [
                    pa.field(name, arrow_type(sub, root, f"{path}.{name}" if path else name))
                    for name, sub in properties.items()
                ]
            )
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            return pa.map_(pa.string(), arrow_type(extra, root, f"{path}{{value}}"))
        raise ConfigError(
            f"object field '{path or 'the payload'}' has no 'properties' (nor an "
            "'additionalProperties' schema), so it has no column type"
        )
    raise ConfigError(f"field '{path or 'the payload'}' has no JSON Schema 'type' Sluice knows")


def _converter(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns a JSON value into the Python value Arrow takes for ``t`` (None: as is)."""
    if t == _UTC:
        return lambda v: datetime.fromisoformat(v) if isinstance(v, str) else v
    if t == pa.date32():
        return lambda v: date.fromisoformat(v) if isinstance(v, str) else v
    if pa.types.is_struct(t):
        parts = [(f.name, _converter(f.type)) for f in t]
        if all(c is None for _, c in parts):
            return None
        return lambda v: (
            {n: (c(v.get(n)) if c and v.get(n) is not None else v.get(n)) for n, c in parts}
            if isinstance(v, dict)
            else v
        )
    if pa.types.is_list(t):
        item = _converter(t.value_type)
        if item is None:
            return None
        return lambda v: [item(x) if x is not None else x for x in v] if isinstance(v, list) else v
    if pa.types.is_map(t):
        value = _converter(t.item_type)
        return lambda v: (
            [(k, value(x) if value and x is not None else x) for k, x in v.items()]
            if isinstance(v, dict)
            else v
        )
    return None


class JsonSchemaCodec:
    """Validates documents against one JSON Schema (text) and gives their Arrow values."""

    def __init__(self, schema: str | Mapping[str, Any], where: str = "the JSON Schema") -> None:
        import fastjsonschema

        self.text = schema if isinstance(schema, str) else json.dumps(schema)
        self.where = where
        try:
            self.schema = json.loads(self.text)
            self._validate = fastjsonschema.compile(self.schema)
        except (ValueError, fastjsonschema.JsonSchemaDefinitionException) as exc:
            raise ConfigError(f"{where} is not a valid JSON Schema: {exc}") from None
        self.type = arrow_type(self.schema)
        if not pa.types.is_struct(self.type):
            raise ConfigError(f"{where} must describe an object (a payload with properties)")
        self._convert = _converter(self.type)

    def check(self, document: Any) -> Any:
        import fastjsonschema

        try:
            return self._validate(document)
        except fastjsonschema.JsonSchemaValueException as exc:
            field = ".".join(str(p) for p in exc.path[1:]) if exc.path else ""
            where = f"field '{field}'" if field else "the document"
            message = str(exc.message).replace("data.", "").replace("data ", "the document ")
            raise DecodeError(f"does not match {self.where}: {where}: {message}"[:300]) from None

    def decode(self, data: bytes) -> Any:
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"invalid JSON ({self.where}): {exc}"[:300]) from None
        document = self.check(document)
        return self._convert(document) if self._convert else document

    def encode(self, document: Mapping[str, Any]) -> bytes:
        try:
            self.check(dict(document))
        except DecodeError as exc:
            raise ValueError(str(exc)) from None
        return json.dumps(document, separators=(",", ":")).encode()
