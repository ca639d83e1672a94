"""Which of a message's own columns a table's rows carry (``keep_message``), and how the
writers encode the columns every row has.

A good row holds the fields parsed from its value and Kafka's coordinates: ``partition``,
``offset`` and ``timestamp`` (for MQTT the partition and offset are null). That is what
Iceberg's Kafka Connect sink and kafka-delta-ingest write too. The message itself (the raw
``key`` and ``value``, the ``topic``, the ``headers`` and the ``message_id``) is a bronze
copy a user asks for: ``keep_message=True`` keeps all of it, a list keeps those columns
(``["key", "headers"]``), ``False`` none. The batch's positions and the fingerprint of each
partition's last message are in its record, not in every row (:mod:`.sinks.base`), so the
audit, reruns and recreated-topic detection need no raw value in the table.

Some columns stay whatever is asked: a payload not parsed into fields (``value_format=
"bytes"``, or JSON without a schema) keeps ``value``, its payload; MQTT rows keep ``topic`` and
``message_id`` (the message's coordinate and the key of its de-duplication). The quarantine
keeps the whole message always (dead letters and ``sluice dlq replay`` send it again).

A table keeps its choice: a sink records it when it makes the table (:func:`resolve` reads
it back), and an ingest that gives no ``keep_message`` follows it. Asking for another choice
on an existing table is a :class:`~sluice.queues.config.ConfigError`: readers of a table
need its columns to stay. A table Sluice wrote before the choice existed kept the whole
message; one made outside Sluice and not yet written by it takes the choice of its first batch.

Encodings. Offsets and timestamps grow by small steps within a file: delta encoding
(``DELTA_BINARY_PACKED``) stores them in about one byte a row, where plain encoding takes
eight (bench/ingest.py prints the bytes on disk per message). The writers use it for both
(:data:`DELTA_COLUMNS`); the partition (and a sink's constant ``batch_id``) are dictionary
encoded, a few bits a row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..queues.config import ConfigError

__all__ = [
    "COORDINATES",
    "DELTA_COLUMNS",
    "FULL",
    "ID_COLUMN",
    "KEEPABLE",
    "MESSAGE_COLUMNS",
    "KeepMessage",
    "arrow_writer_options",
    "describe",
    "keep_of_text",
    "keep_text",
    "message_columns",
    "normalize",
    "resolve",
]

KeepMessage = bool | Sequence[str] | None

#: A raw message's columns (:data:`.records.RAW_SCHEMA`, without its id), in their order.
MESSAGE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
ID_COLUMN = "message_id"

#: The columns every row has.
COORDINATES = ("partition", "offset", "timestamp")
#: The columns of the message a table keeps only when asked (``keep_message``).
KEEPABLE = ("key", "value", "topic", "headers", ID_COLUMN)
#: A table that keeps the whole message (``keep_message=True``), and every table made
#: before the choice existed.
FULL = tuple(sorted(KEEPABLE))
#: Written with ``DELTA_BINARY_PACKED`` instead of plain or dictionary encoding.
DELTA_COLUMNS = ("offset", "timestamp")
_ORDER = (*MESSAGE_COLUMNS, ID_COLUMN)
_HOW = (
    "keep_message=True (the whole message), a list of columns such as ['key', 'headers'], "
    "or False (none)"
)


def normalize(keep: KeepMessage, what: str = "keep_message") -> tuple[str, ...] | None:
    """The message columns ``keep`` asks for, sorted (None: not asked). A ConfigError names
    an unknown column."""
    if keep is None:
        return None
    if keep is True:
        return FULL
    if keep is False:
        return ()
    if isinstance(keep, str):
        keep = [c.strip() for c in keep.split(",") if c.strip()]
    if not isinstance(keep, Iterable):
        raise ConfigError(f"{what} must be True, False or a list of columns: {_HOW}.")
    names = list(keep)
    unknown = [n for n in names if n not in (*KEEPABLE, *COORDINATES)]
    if unknown:
        raise ConfigError(
            f"{what} names {', '.join(map(repr, unknown))}, which is not a column of a message. "
            f"Name some of {', '.join(KEEPABLE)} (partition, offset and timestamp are in every "
            f"row), or give {_HOW}."
        )
    return tuple(sorted({n for n in names if n in KEEPABLE}))


def keep_of_text(text: str | None) -> bool | list[str] | None:
    """``--keep-message``'s value: ``all``, ``none`` or a comma-separated list of columns."""
    if text is None:
        return None
    value = text.strip().lower()
    if value in ("all", "true", "yes"):
        return True
    if value in ("none", "false", "no", ""):
        return False
    return [c.strip() for c in text.split(",") if c.strip()]


def keep_text(keep: KeepMessage) -> str | None:
    """``keep`` as :func:`keep_of_text` reads it (None: not asked)."""
    chosen = normalize(keep)
    if chosen is None:
        return None
    if chosen == FULL:
        return "all"
    return ",".join(chosen) or "none"


def describe(kept: Sequence[str]) -> str:
    """``keep_message=...`` as a user writes it for the columns ``kept``."""
    if tuple(kept) == FULL:
        return "keep_message=True"
    return f"keep_message={list(kept)}" if kept else "keep_message=False"


def resolve(keep: KeepMessage, recorded: Sequence[str] | None, where: str) -> tuple[str, ...]:
    """The message columns an ingest keeps: those ``keep`` asks for, or, not asked, the ones
    the table ``where`` recorded (None: a new table, which keeps none by default). Another
    choice than the table's is a ConfigError saying how to go on."""
    asked = normalize(keep)
    if recorded is None:
        return asked if asked is not None else ()
    stored = tuple(sorted(recorded))
    if asked is not None and asked != stored:
        raise ConfigError(
            f"{where} was made with {describe(stored)}, and {describe(asked)} was given. A "
            f"table keeps its columns, so that its readers keep working: leave keep_message "
            f"out (the table's own choice is used) or give {describe(stored)}, or ingest into "
            "a new table."
        )
    return stored


def message_columns(kept: Sequence[str], kind: str, parsed: bool = True) -> tuple[str, ...]:
    """The columns of the message a good row carries, in the order of the raw message: the
    coordinates, the columns ``kept``, and those the ``kind`` of source needs and, for a
    payload not ``parsed`` into columns, ``value`` (module docstring)."""
    wanted = {*COORDINATES, *kept}
    if kind == "mqtt":
        wanted |= {"topic", ID_COLUMN}
    if not parsed:
        wanted.add("value")
    return tuple(c for c in _ORDER if c in wanted)


def record_json(kept: Sequence[str]) -> str:
    """How a sink records the choice (a table property, a file's content)."""
    return json.dumps(sorted(kept))


def record_of_json(text: str) -> tuple[str, ...]:
    value: Any = json.loads(text)
    return tuple(sorted(str(v) for v in value))


def arrow_writer_options(schema: pa.Schema) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` options for a file of ``schema``: delta encoding for
    :data:`DELTA_COLUMNS`, dictionary encoding (pyarrow's default) for every other column."""
    delta = [n for n in schema.names if n in DELTA_COLUMNS]
    if not delta:
        return {}
    dictionary = [
        path for f in schema if f.name not in DELTA_COLUMNS for path in _leaf_paths(f.name, f.type)
    ]
    return {
        "use_dictionary": dictionary,
        "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
    }


def _leaf_paths(path: str, kind: pa.DataType) -> list[str]:
    """The Parquet column paths of a field (pyarrow names a list's leaves ``list.element``)."""
    if pa.types.is_struct(kind):
        return [p for i in range(kind.num_fields) for p in _child(path, kind.field(i))]
    if pa.types.is_map(kind):
        return [
            *_leaf_paths(f"{path}.key_value.key", kind.key_type),
            *_leaf_paths(f"{path}.key_value.value", kind.item_type),
        ]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _leaf_paths(f"{path}.list.element", kind.value_type)
    return [path]


def _child(path: str, child: pa.Field) -> list[str]:
    return _leaf_paths(f"{path}.{child.name}", child.type)


def spark_writer_options() -> Mapping[str, str]:
    """Options of Spark's Parquet writer (parquet-java) for the same encodings: its version 2
    writer encodes integers without a dictionary in deltas."""
    return {
        "parquet.writer.version": "v2",
        **{f"parquet.enable.dictionary#{name}": "false" for name in DELTA_COLUMNS},
    }
