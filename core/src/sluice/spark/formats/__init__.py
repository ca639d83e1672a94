"""Payload formats in an ingest's Spark job: the schemas planned on the driver
(:func:`plan_formats`), and the decoding stage that runs in the tasks (:meth:`Formats.stage`).

Formats decoded in Python (avro, protobuf, json_schema, sparkplug_b, and such keys) get one
``mapInArrow`` stage before the classification, in the same job as the writing
(:mod:`sluice.spark.writing`): each task decodes its Arrow batches with the codecs of
:mod:`sluice.formats` and hands on the raw columns with the decoded payload
(``__sluice_parsed``), the decoded key (``__sluice_key``) and the reason a record did not
decode (``__sluice_error``), which :mod:`sluice.spark.classify` turns into quarantine rows.
Schemas travel to the tasks inside the pickled plan; an id the plan lacks is asked of the
registry by the task, once per worker process. The registry's password travels with it, as
the Kafka reader's does, and is registered with :mod:`sluice.secrets` in the task.

Sparkplug B gives one row per metric; its messages are decoded in arrival order in one task
(births name the aliases of the data after them), with the stream's alias book
(:class:`sluice.formats.sparkplug.AliasBook`) from the sink's state.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...batch import BatchSpec
from ...formats import DECODED, SCHEMA_FORMATS, canonical_format
from ...formats.plan import OnIncompatible, PayloadPlan, plan_payload
from ...formats.registry import RegistrySettings
from ...queues.config import ConfigError
from ..records import RAW_SCHEMA

__all__ = [
    "ERROR_COLUMN",
    "KEY_COLUMN",
    "PARSED_COLUMN",
    "Formats",
    "format_task_errors",
    "plan_formats",
    "staged_message_ids",
]

PARSED_COLUMN = "__sluice_parsed"
KEY_COLUMN = "__sluice_key"
ERROR_COLUMN = "__sluice_error"
#: The stream-state key of the Sparkplug B alias book.
SPARKPLUG_STATE = "sparkplug_b"


@dataclass
class Formats:
    """The payload formats of one ingest, planned on the driver."""

    value_format: str = "json"
    key_format: str = "bytes"
    value: PayloadPlan | None = None  # values decoded in Python
    key: PayloadPlan | None = None  # keys decoded in Python
    payload_schema: Any = None  # Spark StructType of the payload (None: no payload columns)
    key_type: Any = None  # Spark type of the decoded key (None: the key stays bytes)
    max_value_bytes: int = 1_000_000

    @property
    def decodes(self) -> bool:
        return self.value is not None or self.key is not None

    @property
    def multi_row(self) -> bool:
        """One message may give several rows (Sparkplug B: one per metric)."""
        return self.value_format == "sparkplug_b"

    def stage(self, raw: Any, aliases: Mapping[str, Any] | None = None) -> Any:
        """``raw`` with the decoded columns (see the module docstring); ``raw`` itself when
        nothing is decoded in Python."""
        if not self.decodes:
            return raw
        from pyspark.sql.pandas.types import from_arrow_schema

        fields = list(RAW_SCHEMA)
        if self.value is not None:
            fields.append(pa.field(PARSED_COLUMN, _table(self.value)))
        if self.key is not None:
            fields.append(pa.field(KEY_COLUMN, _table(self.key)))
        fields.append(pa.field(ERROR_COLUMN, pa.string()))
        schema = from_arrow_schema(pa.schema(fields))
        task = _decode_task(self.value, self.key, self.max_value_bytes, dict(aliases or {}))
        return raw.mapInArrow(task, schema)


def _table(plan: PayloadPlan) -> pa.DataType:
    from ...formats.plan import spark_compatible

    return spark_compatible(plan.table)


def _decode_task(
    value: PayloadPlan | None,
    key: PayloadPlan | None,
    max_bytes: int,
    aliases: dict[str, Any],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function every decoding task runs."""

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from sluice.formats.sparkplug import AliasBook, SparkplugDecoder
        from sluice.secrets import remember

        for plan in (value, key):
            if plan is not None and plan.registry is not None:
                remember(plan.registry.password)
        sparkplug = value is not None and value.format == "sparkplug_b"
        values = value.decoder() if value is not None and not sparkplug else None
        keys = key.decoder() if key is not None else None
        messages = SparkplugDecoder(AliasBook.from_json(aliases)) if sparkplug else None
        for batch in batches:
            extra: list[pa.Array] = []
            errors: list[str | None] = [None] * batch.num_rows
            if messages is not None:
                batch, parsed, errors = _sparkplug(messages, batch, max_bytes)
                extra.append(parsed)
            elif values is not None:
                parsed, errors = values.decode(batch.column("value").to_pylist(), max_bytes)
                extra.append(parsed)
            if keys is not None:
                decoded, key_errors = keys.decode(batch.column("key").to_pylist())
                extra.append(decoded)
                errors = [
                    e or (f"key: {k}" if k else None)
                    for e, k in zip(errors, key_errors, strict=True)
                ]
            extra.append(pa.array(errors, pa.string()))
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *extra], names=[*batch.schema.names, *_names(value, key)]
            )

    return decode


def _names(value: PayloadPlan | None, key: PayloadPlan | None) -> list[str]:
    names = [PARSED_COLUMN] if value is not None else []
    return names + ([KEY_COLUMN] if key is not None else []) + [ERROR_COLUMN]


def _sparkplug(
    decoder: Any, batch: pa.RecordBatch, max_bytes: int
) -> tuple[pa.RecordBatch, pa.Array, list[str | None]]:
    """Rows per metric of a batch of Sparkplug B messages: the raw rows repeated, the decoded
    metrics, and a reason for each message that did not decode (one row)."""
    from sluice.formats.plan import spark_compatible
    from sluice.formats.sparkplug import ROW_TYPE
    from sluice.formats.wire import DecodeError

    topics = batch.column("topic").to_pylist()
    index: list[int] = []
    rows: list[Any] = []
    errors: list[str | None] = []
    for at, data in enumerate(batch.column("value").to_pylist()):
        if not data or len(data) > max_bytes:
            index.append(at)
            rows.append(None)
            errors.append(None)
            continue
        try:
            decoded = decoder.decode(topics[at], data)
        except DecodeError as exc:
            index.append(at)
            rows.append(None)
            errors.append(str(exc))
            continue
        index += [at] * len(decoded)
        rows += decoded
        errors += [None] * len(decoded)
    parsed = pa.array(rows, ROW_TYPE).cast(spark_compatible(ROW_TYPE))
    return batch.take(pa.array(index, pa.int64())), parsed, errors


def _spark_type(t: pa.DataType) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    from ...formats.plan import spark_compatible

    return from_arrow_type(spark_compatible(t))


def _arrow_of(spark_type: Any) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(spark_type, timezone="UTC")


def plan_formats(
    spec: BatchSpec,
    *,
    value_format: str = "json",
    key_format: str = "bytes",
    schema: Any = None,
    value_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    key_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    schema_registry: RegistrySettings | str | Mapping[str, Any] | None = None,
    on_incompatible: OnIncompatible = "quarantine",
    max_value_bytes: int = 1_000_000,
) -> Formats:
    """The formats of an ingest of ``spec``, their schemas read (a registry's now: an
    unreachable one fails here, before anything is read). ``schema``: the user's parsed
    StructType of the payload, or None."""
    value_format = canonical_format(value_format)
    key_format = canonical_format(key_format, "key_format")
    if on_incompatible not in ("quarantine", "fail"):
        raise ConfigError(
            f"on_incompatible must be 'quarantine' or 'fail', not {on_incompatible!r}"
        )
    if value_format == "sparkplug_b" and spec.kind != "mqtt":
        raise ConfigError("value_format 'sparkplug_b' is for MQTT topics (spBv1.0/...), not Kafka")
    if value_format == "sparkplug_b" and schema is not None:
        raise ConfigError("sparkplug_b payloads have fixed columns: leave schema out")
    for side, fmt, given in (
        ("value", value_format, value_schema),
        ("key", key_format, key_schema),
    ):
        if (
            given is not None
            and fmt not in SCHEMA_FORMATS
            and not (side == "key" and fmt == "json")
        ):
            raise ConfigError(f"{side}_schema goes with avro, protobuf or json_schema, not {fmt}")
    formats = Formats(value_format, key_format, max_value_bytes=max_value_bytes)
    if value_format in DECODED:
        table = None if schema is None else _arrow_of(schema)
        formats.value = plan_payload(
            value_format,
            "value",
            spec.topic,
            schema_source=value_schema,
            registry=schema_registry if value_format != "sparkplug_b" else None,
            table=table,
            on_incompatible=on_incompatible,
        )
        formats.payload_schema = schema if schema is not None else _spark_type(formats.value.table)
    elif value_format == "json":
        formats.payload_schema = schema
    elif schema is not None:
        raise ConfigError(f"schema goes with json and the schema formats, not {value_format}")
    if key_format in DECODED:
        formats.key = plan_payload(
            key_format,
            "key",
            spec.topic,
            schema_source=key_schema,
            registry=schema_registry if key_schema is None else None,
            on_incompatible=on_incompatible,
        )
        formats.key_type = _spark_type(formats.key.table)
    elif key_format == "json":
        if key_schema is None:
            raise ConfigError("key_format 'json' needs key_schema: the Spark DDL of the keys")
        from ..classify import parse_schema

        formats.key_type = parse_schema(str(key_schema), "key")
    elif key_format == "string":
        from pyspark.sql.types import StringType

        formats.key_type = StringType()
    return formats


_TASK_ERROR = re.compile(
    r"(RegistryUnavailableError|IncompatibleSchemaError|RegistryError): ([^\n]*)"
)


@contextmanager
def format_task_errors() -> Iterator[None]:
    """A decoding task's registry or incompatibility failure raised on the driver as itself
    (its message, not Spark's wrapping)."""
    from ...formats.plan import IncompatibleSchemaError
    from ...formats.registry import RegistryError, RegistryUnavailableError

    kinds: dict[str, type[Exception]] = {
        "RegistryUnavailableError": RegistryUnavailableError,
        "IncompatibleSchemaError": IncompatibleSchemaError,
        "RegistryError": RegistryError,
    }
    try:
        yield
    except (RegistryUnavailableError, IncompatibleSchemaError, RegistryError):
        raise
    except Exception as exc:
        found = _TASK_ERROR.search(str(exc))
        if found is None:
            raise
        raise kinds[found.group(1)](found.group(2)) from None


def staged_message_ids(directories: list[str]) -> set[str]:
    """The message ids of the rows in the Parquet files under ``directories`` (URIs)."""
    import pyarrow.dataset as ds
    from pyarrow import fs

    ids: set[str] = set()
    for directory in directories:
        filesystem, path = fs.FileSystem.from_uri(directory)
        try:
            info = filesystem.get_file_info(path)
        except OSError:
            continue
        if info.type != fs.FileType.Directory:
            continue
        selector = fs.FileSelector(path, recursive=False)
        files = [
            f.path
            for f in filesystem.get_file_info(selector)
            if f.is_file
            and f.path.endswith(".parquet")
            and not Path(f.path).name.startswith(("_", "."))
        ]
        if files:
            table = ds.dataset(files, format="parquet", filesystem=filesystem).to_table(
                columns=["message_id"]
            )
            ids |= {i for i in table.column("message_id").to_pylist() if i is not None}
    return ids
