"""One message read as a Debezium change: an insert, update, delete or snapshot read of one row
(:class:`Change`), a truncate of the source table (:class:`Truncate`), or a message that
carries no change (:data:`NOTES`: a tombstone, a heartbeat, a transaction's boundary).

A message's value is a Debezium envelope, JSON (with or without the ``schema``/``payload``
wrapper) or, with :class:`Decoders`, anything they decode to the same fields (Avro from a
schema registry): ``op``, ``before``, ``after`` and ``source``. The row's key is the message
key's fields (Debezium's key is ``{"id": 1}``, wrapped or not) unless ``key_columns`` names
columns of ``after`` (``before`` for a delete). An envelope that cannot be applied is an
:class:`EnvelopeError`, whose message is the quarantine reason.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .columns import check_name, kind_of
from .types import ColumnType, row_types, struct_types

__all__ = [
    "JSON_ENVELOPES",
    "NOTES",
    "OPS",
    "UNAVAILABLE",
    "Change",
    "Decoders",
    "EnvelopeError",
    "Truncate",
    "parse_change",
    "source_position",
]

#: Debezium's operations on a row: create, update, delete, read (a snapshot's row).
OPS = ("c", "u", "d", "r")
#: Messages that carry no change, counted by kind: a null value after a delete (log
#: compaction's tombstone), a heartbeat (``{"ts_ms": ...}``), a transaction's BEGIN or END.
NOTES = ("tombstone", "heartbeat", "transaction")
#: What Debezium sends for a column whose value it does not have (PostgreSQL's unchanged TOASTed
#: values): ``unavailable.value.placeholder``'s default.
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_VALUES = (
    UNAVAILABLE,
    base64.b64encode(UNAVAILABLE.encode()).decode(),  # a bytes column's, in JSON
    UNAVAILABLE.encode(),
    [UNAVAILABLE],  # an array column's
)
_BINLOG_NUMBER = re.compile(r"(\d+)$")


class EnvelopeError(ValueError):
    """A message that is no Debezium change Sluice can apply; the message says why."""


@dataclass(frozen=True)
class Decoders:
    """How a message's value and key become documents: None is JSON; else a function of the
    bytes (e.g. :meth:`sluice.formats.plan.PayloadDecoder.decode_one`, Avro from a schema
    registry) that raises :class:`ValueError` naming what is wrong."""

    value: Callable[[bytes], Any] | None = None
    value_format: str = "JSON"  # as a message names it
    key: Callable[[bytes], Any] | None = None
    key_format: str = "JSON"


#: Debezium's JsonConverter: values and keys JSON.
JSON_ENVELOPES = Decoders()


@dataclass(frozen=True, eq=False)
class Change:
    """One change of a row: ``row`` is the row after it (None: deleted), without the columns
    Debezium did not send (``unavailable``: they keep the value the row had)."""

    key: tuple[Any, ...]
    op: str
    row: dict[str, Any] | None
    position: int | None
    partition: int
    offset: int
    key_names: tuple[str, ...] = ()  # the key columns' names
    unavailable: frozenset[str] = frozenset()
    types: Mapping[str, ColumnType] = field(default_factory=dict)  # from the envelope's schema

    @property
    def deleted(self) -> bool:
        return self.row is None


@dataclass(frozen=True)
class Truncate:
    """A truncate of the source table (``op`` ``t``): every row older than it goes."""

    position: int | None
    partition: int
    offset: int


def _json(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise EnvelopeError(f"the message {what} is not JSON ({exc})") from None


def _document(data: bytes, what: str, decode: Callable[[bytes], Any] | None, fmt: str) -> Any:
    if decode is None:
        return _json(data, what)
    try:
        return decode(data)
    except ValueError as exc:
        raise EnvelopeError(f"the message {what} is not {fmt} ({exc})") from None


def _split(document: Any) -> tuple[Any, Any]:
    """(schema, payload) of a ``{"schema": ..., "payload": ...}`` document, else (None, it)."""
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["schema"], document["payload"]
    return None, document


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def source_position(source: Any) -> int | None:
    """A change's position in its source's log, comparable between changes of one source:
    PostgreSQL's ``lsn``; MySQL's binlog file number and ``pos`` (the number in the high bits);
    else the source's commit time ``ts_ms`` (milliseconds: changes in one millisecond tie, and
    a source clock set back misorders them); None when the source says none of these."""
    if not isinstance(source, dict):
        return None
    lsn = _integer(source.get("lsn"))
    if lsn is not None:
        return lsn
    file, pos = source.get("file"), _integer(source.get("pos"))
    if isinstance(file, str) and pos is not None:
        number = _BINLOG_NUMBER.search(file)
        if number is None:
            raise EnvelopeError(f"source.file {file!r} does not end in a binlog number")
        return (int(number.group(1)) << 32) + pos
    return _integer(source.get("ts_ms"))


def _typed(values: dict[str, Any], types: Mapping[str, ColumnType], what: str) -> dict[str, Any]:
    """``values`` as the schema's ``types`` say (Decimal bytes as decimals...)."""
    if not types:
        return values
    typed = dict(values)
    for name, kind in types.items():
        if name in typed:
            try:
                typed[name] = kind.value(typed[name])
            except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
                raise EnvelopeError(
                    f"{what} column {name!r} holds {kind_of(values[name])} that is no "
                    f"{kind.arrow} ({exc})"
                ) from None
    return typed


def _key_of(
    key: bytes | None,
    image: Mapping[str, Any],
    key_columns: Sequence[str] | None,
    decoders: Decoders,
    types: Mapping[str, ColumnType],
) -> dict[str, Any]:
    """The key's columns and values of a change whose (typed) row image is ``image``."""
    if key_columns:
        missing = [c for c in key_columns if c not in image]
        if missing:
            raise EnvelopeError(
                f"the row has no key column {', '.join(map(repr, missing))} (key_columns: "
                f"{', '.join(key_columns)})"
            )
        values = {c: image[c] for c in key_columns}
    else:
        if key is None:
            raise EnvelopeError(
                "the message has no key: give key_columns naming the row's key columns"
            )
        schema, document = _split(_document(key, "key", decoders.key, decoders.key_format))
        if not isinstance(document, dict) or not document:
            raise EnvelopeError(
                f"the message key is not a {decoders.key_format} object of key columns "
                "(Debezium's {\"id\": 1}): give key_columns naming the row's key columns"
            )
        for name in document:
            problem = check_name(name, "key column")
            if problem:
                raise EnvelopeError(problem)
        values = _typed(document, {**types, **struct_types(schema)}, "the key's")
    for name, value in values.items():
        if value is None:
            raise EnvelopeError(f"the key column {name!r} is null")
        if isinstance(value, (dict, list)):
            raise EnvelopeError(
                f"the key column {name!r} holds {kind_of(value)}, which cannot be a key "
                "(a key column holds a single value)"
            )
    return values


def _unavailable(row: dict[str, Any]) -> frozenset[str]:
    return frozenset(
        name
        for name, value in row.items()
        if isinstance(value, (str, bytes, list)) and value in _UNAVAILABLE_VALUES
    )


def _notes(envelope: dict[str, Any]) -> str | None:
    """The kind of a message that carries no change, by its fields (None: it should)."""
    if set(envelope) <= {"ts_ms"} and "ts_ms" in envelope:
        return "heartbeat"
    if envelope.get("status") in ("BEGIN", "END") and "id" in envelope:
        return "transaction"
    return None


def parse_change(
    value: bytes | None,
    key: bytes | None,
    partition: int,
    offset: int,
    key_columns: Sequence[str] | None = None,
    decoders: Decoders = JSON_ENVELOPES,
) -> Change | Truncate | str:
    """What a message carries: a :class:`Change`, a :class:`Truncate`, or one of
    :data:`NOTES` (a tombstone's null value, a heartbeat, a transaction's boundary). Raises
    :class:`EnvelopeError` naming what is wrong."""
    if value is None:
        return "tombstone"
    document = _document(value, "value", decoders.value, decoders.value_format)
    schema, envelope = _split(document)
    if not isinstance(envelope, dict):
        raise EnvelopeError(
            f"the message value is not a {decoders.value_format} object (a Debezium envelope)"
        )
    op = envelope.get("op")
    if op is None:
        note = _notes(envelope)
        if note is not None:
            return note
    position = source_position(envelope.get("source"))
    if op == "t":
        return Truncate(position, partition, offset)
    if op not in OPS:
        raise EnvelopeError(
            f"op is {op!r}, not one of {', '.join(OPS)} (create, update, delete, read) or t "
            "(truncate): not a Debezium change envelope"
        )
    types = row_types(schema)
    before, after = envelope.get("before"), envelope.get("after")
    if op == "d":
        if key_columns and not before:
            raise EnvelopeError(
                "a delete without 'before' (the deleted row's key) and key_columns given: "
                "set REPLICA IDENTITY to at least the key, or leave key_columns out to "
                "take the key from the message key"
            )
        image = _typed(before, types, "the row's") if isinstance(before, dict) else {}
        columns = _key_of(key, image, key_columns, decoders, types)
        return Change(
            tuple(columns.values()), op, None, position, partition, offset, tuple(columns)
        )
    if not isinstance(after, dict):
        raise EnvelopeError(f"op {op!r} has no 'after' object (the row after the change)")
    for name in after:
        problem = check_name(name)
        if problem:
            raise EnvelopeError(problem)
    unavailable = _unavailable(after)
    present = {k: v for k, v in after.items() if k not in unavailable}
    row = _typed(present, types, "the row's")
    columns = _key_of(key, row, key_columns, decoders, types)
    unavailable -= set(columns)
    row.update(columns)
    return Change(
        tuple(columns.values()),
        op,
        row,
        position,
        partition,
        offset,
        tuple(columns),
        frozenset(unavailable),
        types,
    )
