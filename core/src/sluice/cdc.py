"""Change data capture: Debezium envelopes read and a batch of them reduced to one change per
key (``ingest(..., write_mode="upsert")``; the sinks apply the result, docs/guides/cdc.md).

A message's value is a Debezium envelope, JSON (with or without the ``schema``/``payload``
wrapper) or, with :class:`Decoders`, anything they decode to the same fields (Avro from a
schema registry): ``op`` (``c`` create, ``u`` update, ``d`` delete, ``r`` snapshot read),
``before``, ``after`` and ``source``. A null value is a tombstone (Debezium sends one after a
delete, for log compaction): there is nothing to apply beyond the delete before it, so it is
counted, not an error. The row's key is the message key's fields (Debezium's key is
``{"id": 1}``, wrapped or not) unless ``key_columns`` names columns of ``after`` (``before``
for a delete).

Within a batch the last change per key wins, in (partition, offset) order: Debezium sends
every change of one key to one partition. Where the envelope's ``source`` has a position
(``lsn`` for PostgreSQL; ``file`` and ``pos`` of the binlog for MySQL) it is kept in
:data:`POSITION_COLUMN`, and a sink ignores (and counts) a change older than the row it holds.
An envelope that cannot be applied is :class:`EnvelopeError`, whose message is the quarantine
reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = [
    "JSON_ENVELOPES",
    "OPS",
    "POSITION_COLUMN",
    "Change",
    "Decoders",
    "EnvelopeError",
    "Reduced",
    "parse_change",
    "reduce_changes",
    "reduce_messages",
]

#: The table column that holds the source position of the change a row comes from.
POSITION_COLUMN = "_sluice_source_position"
#: Debezium's operations: create, update, delete, read (a snapshot's row).
OPS = ("c", "u", "d", "r")
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


@dataclass(frozen=True)
class Change:
    """One change of a row: ``row`` is the row after it (None: deleted)."""

    key: tuple[Any, ...]
    op: str
    row: dict[str, Any] | None
    position: int | None
    partition: int
    offset: int
    key_names: tuple[str, ...] = ()  # the key columns' names

    @property
    def deleted(self) -> bool:
        return self.row is None


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


def _unwrap(document: Any) -> Any:
    """The payload of a ``{"schema": ..., "payload": ...}`` document, else the document."""
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


def source_position(source: Any) -> int | None:
    """A change's position in its source's log, comparable between changes of one source:
    PostgreSQL's ``lsn``; MySQL's binlog file number and ``pos`` (the number in the high
    bits); None when the source says neither (no out-of-order check then)."""
    if not isinstance(source, dict):
        return None
    lsn = source.get("lsn")
    if isinstance(lsn, int) and not isinstance(lsn, bool):
        return lsn
    file, pos = source.get("file"), source.get("pos")
    if isinstance(file, str) and isinstance(pos, int) and not isinstance(pos, bool):
        number = _BINLOG_NUMBER.search(file)
        if number is None:
            raise EnvelopeError(f"source.file {file!r} does not end in a binlog number")
        return (int(number.group(1)) << 32) + pos
    return None


def _key_of(
    key: bytes | None,
    image: Mapping[str, Any],
    key_columns: Sequence[str] | None,
    decoders: Decoders,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(the key's values, the key as columns) of a change whose row image is ``image``."""
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
        document = _unwrap(_document(key, "key", decoders.key, decoders.key_format))
        if not isinstance(document, dict) or not document:
            raise EnvelopeError(
                f"the message key is not a {decoders.key_format} object of key columns "
                "(Debezium's {\"id\": 1}): give key_columns naming the row's key columns"
            )
        values = dict(document)
    if any(v is None for v in values.values()):
        raise EnvelopeError(f"a key column is null ({values})")
    return tuple(values.values()), values


def parse_change(
    value: bytes | None,
    key: bytes | None,
    partition: int,
    offset: int,
    key_columns: Sequence[str] | None = None,
    decoders: Decoders = JSON_ENVELOPES,
) -> Change | None:
    """The change a message carries; None for a tombstone (a null value). Raises
    :class:`EnvelopeError` naming what is wrong."""
    if value is None:
        return None
    envelope = _unwrap(_document(value, "value", decoders.value, decoders.value_format))
    if not isinstance(envelope, dict):
        raise EnvelopeError(
            f"the message value is not a {decoders.value_format} object (a Debezium envelope)"
        )
    op = envelope.get("op")
    if op not in OPS:
        raise EnvelopeError(
            f"op is {op!r}, not one of {', '.join(OPS)} (create, update, delete, read): "
            "not a Debezium change envelope"
            + (" (truncate events are not applied)" if op == "t" else "")
        )
    before, after = envelope.get("before"), envelope.get("after")
    position = source_position(envelope.get("source"))
    if op == "d":
        image = before if isinstance(before, dict) else {}
        if key_columns and not before:
            raise EnvelopeError(
                "a delete without 'before' (the deleted row's key) and key_columns given: "
                "set REPLICA IDENTITY to at least the key, or leave key_columns out to "
                "take the key from the message key"
            )
        values, columns = _key_of(key, image, key_columns, decoders)
        return Change(values, op, None, position, partition, offset, tuple(columns))
    if not isinstance(after, dict):
        raise EnvelopeError(f"op {op!r} has no 'after' object (the row after the change)")
    values, columns = _key_of(key, after, key_columns, decoders)
    row = {**after, **columns}
    return Change(values, op, row, position, partition, offset, tuple(columns))


def reduce_changes(changes: Iterable[Change]) -> dict[tuple[Any, ...], Change]:
    """The last change of each key, in (partition, offset) order."""
    last: dict[tuple[Any, ...], Change] = {}
    for change in sorted(changes, key=lambda c: (c.partition, c.offset)):
        last.pop(change.key, None)  # keep the dict in order of each key's last change
        last[change.key] = change
    return last


@dataclass
class Reduced:
    """A batch of messages as changes: the last per key; the malformed messages
    (``(partition, offset)`` -> reason) and how many were tombstones."""

    key_columns: list[str]
    changes: dict[tuple[Any, ...], Change] = field(default_factory=dict)
    malformed: dict[tuple[int, int], str] = field(default_factory=dict)
    tombstones: int = 0

    @property
    def upserts(self) -> list[Change]:
        return [c for c in self.changes.values() if not c.deleted]

    @property
    def deletes(self) -> list[Change]:
        return [c for c in self.changes.values() if c.deleted]

    def rows(self, schema: pa.Schema | None = None) -> pa.Table:
        """The rows after the batch's upserts, with :data:`POSITION_COLUMN`; typed by
        ``schema`` where it names a column (a column null in every row and unknown to it
        is left out: its type is not known yet)."""
        records = [{**c.row, POSITION_COLUMN: c.position} for c in self.upserts if c.row]
        if not records:
            fields = list(schema) if schema is not None else []
            return pa.Table.from_pylist([], pa.schema(fields))
        # every column any row has (from_pylist would take the first row's only)
        names = list(dict.fromkeys(name for record in records for name in record))
        rows = pa.table({name: [record.get(name) for record in records] for name in names})
        return _typed(rows, schema)

    def keys(self, changes: Sequence[Change]) -> pa.Table:
        """The key columns of ``changes``, as a table."""
        columns = {name: [c.key[i] for c in changes] for i, name in enumerate(self.key_columns)}
        return pa.table(columns) if changes else pa.table({n: [] for n in self.key_columns})


def _typed(rows: pa.Table, schema: pa.Schema | None) -> pa.Table:
    fields, arrays = [], []
    for name in rows.column_names:
        column = rows.column(name)
        if name == POSITION_COLUMN:
            column = column.cast(pa.int64())
        elif schema is not None and schema.get_field_index(name) >= 0:
            wanted = schema.field(name).type
            if column.type != wanted:
                column = column.cast(wanted)
        elif pa.types.is_null(column.type):
            continue
        fields.append(pa.field(name, column.type))
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def reduce_messages(
    messages: pa.Table,
    key_columns: Sequence[str] | None = None,
    decoders: Decoders = JSON_ENVELOPES,
) -> Reduced:
    """The changes of ``messages`` (columns ``key``, ``value``, ``partition``, ``offset``)
    reduced to the last per key; a malformed message is set aside with its reason. The key
    columns are ``key_columns`` or the message keys' fields, which must be the same in every
    message; ``decoders`` read the values and keys (JSON by default)."""
    reduced = Reduced(list(key_columns or []))
    changes = []
    keys, values = messages.column("key").to_pylist(), messages.column("value").to_pylist()
    partitions = messages.column("partition").to_pylist()
    offsets = messages.column("offset").to_pylist()
    for key, value, partition, offset in zip(keys, values, partitions, offsets, strict=True):
        try:
            change = parse_change(value, key, partition, offset, key_columns, decoders)
            if change is None:
                reduced.tombstones += 1
                continue
            if not key_columns:
                names = list(change.key_names)
                if not reduced.key_columns:
                    reduced.key_columns = names
                elif names != reduced.key_columns:
                    raise EnvelopeError(
                        f"the message key has fields {', '.join(names)}, the batch's keys "
                        f"{', '.join(reduced.key_columns)}: give key_columns"
                    )
        except EnvelopeError as exc:
            reduced.malformed[(partition, offset)] = f"cdc: {exc}"
            continue
        changes.append(change)
    reduced.changes = reduce_changes(changes)
    return reduced
