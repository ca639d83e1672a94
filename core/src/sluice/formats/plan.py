"""Where a batch's schemas come from, and the decoding of its payloads.

:func:`plan_payload` runs on the driver before anything is read: with a schema registry it
reads every version of the topic's subject (``<topic>-value``, ``<topic>-key``), so an
unreachable registry fails the ingest before anything is read or committed, and the table's
schema is the union of the versions (a version that adds a field adds a nullable column; a
field keeps the type it first had). With a schema file or inline schema (unframed payloads)
the table's schema is that schema's; a schema the user gives (Spark DDL) wins over both.

The :class:`PayloadPlan` is pickled into the Spark tasks, with the schemas it read; its
:class:`PayloadDecoder` decodes each value with the schema its wire header names (one codec
per schema id, built once per task; an id the plan did not read, such as a version
registered after the batch was planned, is asked of the registry once per worker process).
An id the registry does not know (its 404 with error code 40403) quarantines the records that
name it; it is asked once per batch in a worker process, not once per record (the answer is
kept under the plan's ``token``, which is new for every batch: an id registered later is
found by the next batch). Any other answer of the registry fails the batch
(:class:`~sluice.formats.registry.RegistryError`, :mod:`.registry`).
A schema that does not fit the table's (a field whose type changed, a field the table lacks)
quarantines its records with a reason naming the fields, or fails the batch
(``on_incompatible="fail"``: :class:`IncompatibleSchemaError`).
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from ..queues.config import ConfigError
from . import SCHEMA_FORMATS
from .arrow import merge, misfits, to_arrow
from .registry import RegistrySettings, SchemaNotFoundError, SchemaRegistry
from .wire import DecodeError, unframe

__all__ = [
    "IncompatibleSchemaError",
    "OnIncompatible",
    "PayloadDecoder",
    "PayloadPlan",
    "SchemaSource",
    "load_schema",
    "plan_payload",
    "spark_compatible",
]

OnIncompatible = Literal["quarantine", "fail"]
#: The schema id after an Avro payload's magic byte (the wire format's frame).
_ID = struct.Struct(">I")
_REGISTRY_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
#: Process-wide: (plan token, schema id) -> why the registry has no such schema (the reason of
#: the records naming it), so a batch's tasks in one worker process ask once; the last
#: :data:`_UNKNOWN_KEPT` are kept.
_UNKNOWN: dict[tuple[str, int], str] = {}
_UNKNOWN_KEPT = 1024


class IncompatibleSchemaError(RuntimeError):
    """A record's schema does not fit the table's and the user asked to fail the batch."""


@dataclass(frozen=True)
class SchemaSource:
    """One writer schema: Avro or JSON Schema text, or a Protobuf descriptor set (and the
    message to use, None: the first, or the one framed payloads name)."""

    format: str
    text: str | None = None
    descriptors: bytes | None = None
    message: str | None = None
    where: str = ""

    def codec(self) -> Any:
        if self.format == "avro":
            from .avro import AvroCodec

            return AvroCodec(str(self.text), self.where)
        if self.format == "json_schema":
            from .json_schema import JsonSchemaCodec

            return JsonSchemaCodec(str(self.text), self.where)
        from .protobuf import ProtobufCodec

        assert self.descriptors is not None
        return ProtobufCodec(self.descriptors, self.message, self.where)


def load_schema(
    fmt: str, value: str | os.PathLike[str] | Mapping[str, Any], side: str = "value"
) -> SchemaSource:
    """A schema given inline (JSON text or a parsed mapping) or as a file: ``.avsc``/``.json``
    (Avro, JSON Schema), ``.proto`` or a descriptor set (``.desc``, ``.pb``, ``.binpb``) for
    Protobuf, optionally with ``#Message`` naming the message."""
    if fmt not in SCHEMA_FORMATS:
        raise ConfigError(f"{side}_schema goes with avro, protobuf or json_schema, not {fmt}")
    if isinstance(value, Mapping):
        return SchemaSource(fmt, text=json.dumps(value), where=f"the {side} schema given")
    text = str(value)
    if fmt == "protobuf":
        from .protobuf import descriptor_set_of

        path_text, _, message = text.partition("#")
        path = Path(path_text).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"{side}_schema {path} does not exist: give a .proto file or a descriptor set "
                "(protoc --include_imports --descriptor_set_out=FILE), optionally with "
                "#MessageName"
            )
        return SchemaSource(
            fmt, descriptors=descriptor_set_of(path), message=message or None, where=path.name
        )
    if text.lstrip().startswith(("{", "[", '"')):
        return SchemaSource(fmt, text=text, where=f"the {side} schema given")
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigError(f"{side}_schema {text!r} is neither a schema (JSON) nor an existing file")
    return SchemaSource(fmt, text=path.read_text(), where=path.name)


def spark_compatible(t: pa.DataType) -> pa.DataType:
    """``t`` with the units Spark's Arrow exchange takes: timestamps in microseconds."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_compatible(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(spark_compatible(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(spark_compatible(t.key_type), spark_compatible(t.item_type))
    return t


@dataclass
class PayloadPlan:
    """How one side (value or key) of a batch's records is decoded; picklable."""

    format: str
    side: str  # value or key
    table: pa.DataType  # the type decoded payloads become (a struct for values)
    framed: bool = False
    registry: RegistrySettings | None = None
    subject: str | None = None
    sources: dict[int, SchemaSource] = field(default_factory=dict)  # by schema id
    inline: SchemaSource | None = None
    on_incompatible: OnIncompatible = "quarantine"
    projected: bool = False  # the table's schema is the user's: writers' other fields dropped
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # one batch's plan

    def decoder(self) -> PayloadDecoder:
        return PayloadDecoder(self)


def _where(schema: Any, subject: str | None) -> str:
    where = f"schema id {schema.id}"
    if schema.subject or subject:
        where += f" ({schema.subject or subject}"
        where += f" version {schema.version})" if schema.version else ")"
    return where


def registry_source(
    registry: SchemaRegistry, fmt: str, schema: Any, subject: str | None
) -> SchemaSource:
    """The source of a schema read from the registry (``schema``: a RegisteredSchema)."""
    expected = _REGISTRY_TYPES[fmt]
    where = _where(schema, subject)
    if schema.schema_type != expected:
        raise DecodeError(
            f"{where} is a {schema.schema_type} schema, but the topic is ingested as {fmt}"
        )
    if fmt == "protobuf":
        from google.protobuf.message import DecodeError as ProtobufDecodeError

        from .protobuf import file_set, registry_files

        try:
            return SchemaSource(
                fmt, descriptors=file_set(registry_files(registry, schema)), where=where
            )
        except (ValueError, TypeError, ProtobufDecodeError) as exc:
            raise DecodeError(f"{where} is not a serialized Protobuf descriptor: {exc}") from None
    return SchemaSource(fmt, text=schema.schema, where=where)


def plan_payload(
    fmt: str,
    side: str,
    topic: str,
    *,
    schema_source: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    registry: RegistrySettings | str | Mapping[str, Any] | None = None,
    table: pa.DataType | None = None,
    on_incompatible: OnIncompatible = "quarantine",
) -> PayloadPlan:
    """The plan of one side of a batch (see the module docstring). ``table``: the user's
    schema for the decoded values, as an Arrow type (None: from the writer schemas)."""
    if fmt == "sparkplug_b":
        from .sparkplug import ROW_TYPE

        return PayloadPlan(fmt, side, spark_compatible(ROW_TYPE))
    if registry is not None and schema_source is not None:
        raise ConfigError(
            f"Give either schema_registry (payloads in the Confluent wire format) or "
            f"{side}_schema (unframed payloads) for the {side}s, not both."
        )
    if registry is None and schema_source is None:
        raise ConfigError(
            f"{side}_format {fmt!r} needs the writer's schema: give schema_registry (a URL) for "
            f"payloads in the Confluent wire format, or {side}_schema (a schema file or inline "
            "schema) for unframed ones."
        )
    plan = PayloadPlan(fmt, side, table or pa.struct([]), on_incompatible=on_incompatible)
    plan.projected = table is not None
    if schema_source is not None:
        plan.inline = load_schema(fmt, schema_source, side)
        if table is None:
            plan.table = plan.inline.codec().type
        return plan
    settings = RegistrySettings.of(registry)  # type: ignore[arg-type]
    client = SchemaRegistry(settings)
    subject = (
        settings.value_subject if side == "value" else settings.key_subject
    ) or f"{topic}-{side}"
    plan.framed, plan.registry, plan.subject = True, settings, subject
    merged: pa.DataType | None = None
    for version in client.versions(subject):
        schema = client.version(subject, version, serialized=fmt == "protobuf")
        try:
            source = registry_source(client, fmt, schema, subject)
            written = source.codec().type
        except (DecodeError, ConfigError) as exc:
            raise ConfigError(f"The registry's {subject} version {version}: {exc}") from None
        plan.sources[schema.id] = source
        merged = written if merged is None else merge(merged, written)
    if table is None:
        if merged is None:
            raise ConfigError(
                f"The schema registry at {settings.shown} has no schema under subject "
                f"'{subject}', so the table's schema is unknown: register the writer's schema "
                "(sluice publish --format ... --schema FILE --registry URL does), or give "
                "schema= (Spark DDL)."
            )
        plan.table = merged
    return plan


class PayloadDecoder:
    """Decodes the values of one side of a batch (runs in the Spark tasks)."""

    def __init__(self, plan: PayloadPlan) -> None:
        self.plan = plan
        self.table = spark_compatible(plan.table)
        self._codecs: dict[Any, tuple[Any, Any, list[str]]] = {}
        self._registry: SchemaRegistry | None = None

    def _source(self, schema_id: int) -> SchemaSource:
        plan = self.plan
        found = plan.sources.get(schema_id)
        if found is not None:
            return found
        assert plan.registry is not None
        unknown = _UNKNOWN.get((plan.token, schema_id))
        if unknown is not None:
            raise DecodeError(unknown)
        if self._registry is None:
            self._registry = SchemaRegistry(plan.registry)
        try:
            schema = self._registry.schema(schema_id, serialized=plan.format == "protobuf")
        except SchemaNotFoundError as exc:  # only the registry's 40403: others fail the batch
            if len(_UNKNOWN) >= _UNKNOWN_KEPT:
                del _UNKNOWN[next(iter(_UNKNOWN))]
            _UNKNOWN[(plan.token, schema_id)] = str(exc)
            raise DecodeError(str(exc)) from None
        return registry_source(self._registry, plan.format, schema, None)

    def _codec(self, schema_id: int | None, indexes: tuple[int, ...]) -> tuple[Any, Any, list[str]]:
        key = (schema_id, indexes)
        found = self._codecs.get(key)
        if found is not None:
            return found
        source = self.plan.inline if schema_id is None else self._source(schema_id)
        assert source is not None
        try:
            codec = source.codec()
        except ConfigError as exc:
            raise DecodeError(f"{source.where} cannot be used: {exc}") from None
        descriptor, written = None, codec.type
        if self.plan.format == "protobuf" and indexes:
            from .protobuf import message_arrow_type, message_by_indexes

            descriptor = message_by_indexes(codec.main, indexes)
            written = message_arrow_type(descriptor)
        problems = misfits(written, self.plan.table)
        if self.plan.projected:
            problems = [p for p in problems if not p.endswith("is not in the table's schema")]
        found = (codec, descriptor, problems)
        self._codecs[key] = found
        return found

    def _refuse(self, codec: Any, problems: list[str]) -> DecodeError:
        text = f"{codec.where} does not fit the table's schema: {'; '.join(problems)}"
        if self.plan.on_incompatible == "fail":
            raise IncompatibleSchemaError(
                f"{text}. The batch fails (on_incompatible='fail'): ingest into another table, "
                "give a schema (Spark DDL) the records fit, or on_incompatible='quarantine'."
            )
        return DecodeError(text)

    def decode_one(self, data: bytes) -> Any:
        """One payload's Python value, or :class:`DecodeError` with the reason."""
        plan = self.plan
        if plan.framed:
            if plan.format == "avro" and len(data) > 4 and data[0] == 0:
                # Avro's frame is the magic byte and the id: read in place, no copy
                codec, _, problems = self._codec(_ID.unpack_from(data, 1)[0], ())
                if problems:
                    raise self._refuse(codec, problems)
                return codec.decode(data, 5)
            frame = unframe(data, protobuf=plan.format == "protobuf")
            codec, descriptor, problems = self._codec(frame.schema_id, frame.indexes)
            data = data[frame.offset :]
        else:
            codec, descriptor, problems = self._codec(None, ())
        if problems:
            raise self._refuse(codec, problems)
        if descriptor is not None:
            return codec.decode(data, descriptor)
        return codec.decode(data)

    def decode(
        self, values: list[bytes | None], max_bytes: int | None = None
    ) -> tuple[pa.Array, list[str | None]]:
        """The values as one Arrow array of the table's type, and a reason per value that did
        not decode (None: decoded, or left to the classification: null, empty, too large)."""
        rows: list[Any] = []
        errors: list[str | None] = [None] * len(values)
        for index, data in enumerate(values):
            if not data or (max_bytes is not None and len(data) > max_bytes):
                rows.append(None)
                continue
            try:
                rows.append(self.decode_one(data))
            except DecodeError as exc:
                errors[index] = str(exc)
                rows.append(None)
        return to_arrow(rows, self.table, errors), errors
