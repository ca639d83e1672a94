"""Payload formats: how message values (and keys) become columns.

``json`` (parsed by Spark with a schema), ``string`` and ``bytes`` (``raw``, its old name,
still works with a ``DeprecationWarning``) need nothing more; ``avro``, ``protobuf``,
``json_schema`` and ``sparkplug_b`` are decoded in Python inside the Spark tasks
(:mod:`sluice.spark.formats`) by the codecs of this package, which need no Spark:
:mod:`.wire` (the Confluent wire format), :mod:`.registry` (a Schema Registry client),
:mod:`.avro`, :mod:`.protobuf`, :mod:`.json_schema`, :mod:`.sparkplug`; :mod:`.plan` says
where each batch's schemas come from, and :mod:`.encode` writes payloads (``sluice publish``,
``QueuePublishOperator``).
"""

from __future__ import annotations

import warnings
from typing import Literal, get_args

from ..queues.config import ConfigError

__all__ = [
    "DECODED",
    "KEY_FORMATS",
    "VALUE_FORMATS",
    "KeyFormat",
    "ValueFormat",
    "canonical_format",
]

ValueFormat = Literal[
    "json", "avro", "protobuf", "json_schema", "string", "bytes", "sparkplug_b", "raw"
]
KeyFormat = Literal["json", "avro", "protobuf", "json_schema", "string", "bytes"]
VALUE_FORMATS: tuple[str, ...] = tuple(f for f in get_args(ValueFormat) if f != "raw")
KEY_FORMATS: tuple[str, ...] = get_args(KeyFormat)
#: Formats decoded in Python inside the Spark tasks (the others are Spark expressions).
DECODED = frozenset({"avro", "protobuf", "json_schema", "sparkplug_b"})
#: Formats whose schema comes from a registry or a schema file.
SCHEMA_FORMATS = frozenset({"avro", "protobuf", "json_schema"})


def canonical_format(name: str, what: str = "value_format") -> str:
    """The format's name, ``raw`` becoming ``bytes`` with a DeprecationWarning; a ConfigError
    naming the allowed ones for anything else."""
    if name == "raw":
        warnings.warn(
            f"{what}='raw' is deprecated: write {what}='bytes' (the same: values kept as bytes)",
            DeprecationWarning,
            stacklevel=3,
        )
        return "bytes"
    allowed = VALUE_FORMATS if what.startswith("value") else KEY_FORMATS
    if name not in allowed:
        listed = ", ".join(repr(f) for f in allowed)
        raise ConfigError(f"{what} must be one of {listed}, not {name!r}")
    return name
