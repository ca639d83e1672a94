"""A batch of messages reduced to one change per key, checked against the table it goes to.

Each message is read (:mod:`sluice.cdc.envelopes`); then, before anything is applied:

1. **Keys.** The table's key columns are fixed: ``key_columns`` if given, else the ones the
   table was created with, else (a new table) the key fields most of the batch's messages
   have. A change whose key has other fields is set aside, naming both.
2. **Types.** Each column's type is the table's, else the one the envelope's schema declares,
   else the one its first value has. A value the type cannot hold as it is (a text in an
   integer column, a boolean for a number, a float in an integer column) sets its change
   aside, naming the column and both types. Booleans and integers are different keys.
3. **Order.** Of a key's changes the one latest in the source wins: by source position
   (:func:`~sluice.cdc.envelopes.source_position`) where every change of the key has one,
   else by offset (one partition). A column Debezium did not send (TOAST) keeps the value of
   the key's change before it in the batch, else the table's.
4. **Truncates** (``on_truncate="apply"``): the last one deletes every row older than it;
   the batch's changes before it are dropped. Otherwise a truncate is set aside.

What is set aside is ``malformed`` (``(partition, offset)`` -> reason), the quarantine's
reason; the rest of the batch is applied.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from .columns import infer_type, misfit, type_name
from .envelopes import JSON_ENVELOPES, Change, Decoders, EnvelopeError, Truncate, parse_change

__all__ = [
    "POSITION_COLUMN",
    "OnTruncate",
    "Reduced",
    "TableShape",
    "in_source_order",
    "reduce_changes",
    "reduce_messages",
]

#: The table column that holds the source position of the change a row comes from.
POSITION_COLUMN = "_sluice_source_position"
OnTruncate = Literal["quarantine", "apply"]
_TRUNCATE_REFUSED = (
    "cdc: a truncate of the source table (op 't'), not applied: it would delete every row "
    "of the table; ingest with on_truncate='apply' to apply truncates"
)


@dataclass(frozen=True)
class TableShape:
    """What a current-state table already fixes for the batches applied to it."""

    key_columns: Sequence[str] | None = None  # None: the table has none yet
    schema: pa.Schema | None = None  # None: no table yet


def in_source_order(changes: Sequence[Change | Truncate]) -> list[Change | Truncate]:
    """``changes`` (of one key, or a key's and the truncates) in the order they happened at
    the source: by source position if every one has one, else by (partition, offset)."""
    ordered = sorted(changes, key=lambda c: (c.partition, c.offset))
    if all(c.position is not None for c in ordered):
        ordered.sort(key=lambda c: c.position)  # type: ignore[arg-type, return-value]
    return ordered


def reduce_changes(changes: Sequence[Change]) -> dict[tuple[Any, ...], Change]:
    """The last change of each key in source order (:func:`in_source_order`), its unsent
    columns filled from the key's changes before it."""
    by_key: dict[tuple[Any, ...], list[Change]] = {}
    for change in sorted(changes, key=lambda c: (c.partition, c.offset)):
        by_key.setdefault(change.key, []).append(change)
    last: dict[tuple[Any, ...], Change] = {}
    for key, of_key in by_key.items():
        ordered: list[Any] = in_source_order(of_key)
        last[key] = _filled(ordered)
    return dict(sorted(last.items(), key=lambda item: (item[1].partition, item[1].offset)))


def _filled(ordered: list[Change]) -> Change:
    """The last of a key's ``ordered`` changes, with the columns it did not send taken from
    the ones before it (back to a delete, after which the key's row began anew)."""
    winner = ordered[-1]
    missing = set(winner.unavailable)
    if not missing or winner.row is None:
        return winner
    row = dict(winner.row)
    for earlier in reversed(ordered[:-1]):
        if earlier.row is None or not missing:
            break
        for name in [n for n in missing if n in earlier.row]:
            row[name] = earlier.row[name]
            missing.discard(name)
    return dataclasses.replace(winner, row=row, unavailable=frozenset(missing))


@dataclass
class Reduced:
    """A batch of messages as changes: the last per key; the malformed messages
    (``(partition, offset)`` -> reason); the messages that carry no change, by kind; the
    truncate to apply, if any; and the columns' types."""

    key_columns: list[str]
    changes: dict[tuple[Any, ...], Change] = field(default_factory=dict)
    malformed: dict[tuple[int, int], str] = field(default_factory=dict)
    notes: Counter[str] = field(default_factory=Counter)
    truncate: Truncate | None = None
    truncated: int = 0  # changes of the batch before its truncate, dropped
    types: dict[str, pa.DataType] = field(default_factory=dict)

    @property
    def tombstones(self) -> int:
        return self.notes["tombstone"]

    @property
    def upserts(self) -> list[Change]:
        return [c for c in self.changes.values() if not c.deleted]

    @property
    def deletes(self) -> list[Change]:
        return [c for c in self.changes.values() if c.deleted]

    def rows(
        self, schema: pa.Schema | None = None, changes: Sequence[Change] | None = None
    ) -> pa.Table:
        """The rows after ``changes`` (default: the batch's upserts), with
        :data:`POSITION_COLUMN`; a column takes ``schema``'s type where it names it, else the
        batch's (a column null in every row and of no known type is left out)."""
        upserts = [c for c in (self.upserts if changes is None else changes) if c.row is not None]
        names = list(dict.fromkeys(n for c in upserts for n in c.row or {}))
        fields, arrays = [], []
        for name in [*names, POSITION_COLUMN]:
            values: list[Any]
            if name == POSITION_COLUMN:
                kind: pa.DataType | None = pa.int64()
                values = [c.position for c in upserts]
            else:
                values = [(c.row or {}).get(name) for c in upserts]
                kind = _type_of(name, schema, self.types) or infer_type(values)
            if kind is None:
                continue
            if pa.types.is_floating(kind):  # (Arrow takes no integer past int64 for a double)
                values = [float(v) if type(v) is int else v for v in values]
            fields.append(pa.field(name, kind))
            arrays.append(pa.array(values, type=kind))
        if not upserts and schema is not None:
            fields = [f for f in schema if f.name != POSITION_COLUMN]
            fields.append(pa.field(POSITION_COLUMN, pa.int64()))
            arrays = [pa.array([], f.type) for f in fields]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def keys(self, changes: Sequence[Change]) -> pa.Table:
        """The key columns of ``changes``, as a table (typed as the batch's columns)."""
        columns = {}
        for i, name in enumerate(self.key_columns):
            kind = self.types.get(name)
            columns[name] = pa.array([c.key[i] for c in changes], type=kind)
        return pa.table(columns)


def _type_of(
    name: str, schema: pa.Schema | None, types: Mapping[str, pa.DataType]
) -> pa.DataType | None:
    if schema is not None and schema.get_field_index(name) >= 0:
        return schema.field(name).type
    return types.get(name)


def _key_columns(
    changes: list[Change], given: Sequence[str] | None, table: TableShape
) -> tuple[list[str], str]:
    """(the key columns the batch's changes must have, how a reason names them)."""
    if given:
        return list(given), "key_columns names"
    if table.key_columns:
        return list(table.key_columns), "the table is keyed by"
    counts = Counter(c.key_names for c in changes)
    if not counts:
        return [], ""
    most = max(counts.values())
    first = next(names for names in (c.key_names for c in changes) if counts[names] == most)
    return list(first), "the new table is keyed by the fields most of the batch's keys have,"


def _check_types(
    changes: list[Change], table: TableShape, malformed: dict[tuple[int, int], str]
) -> tuple[list[Change], dict[str, pa.DataType]]:
    """The changes whose every value fits its column's type, and the columns' types; the
    others into ``malformed`` with the column and both types."""
    schema = table.schema
    types: dict[str, pa.DataType] = {}
    if schema is not None:
        types = {f.name: f.type for f in schema if f.name != POSITION_COLUMN}
    columns: dict[str, list[int]] = {}  # column -> indexes of the changes that have it
    for index, change in enumerate(changes):
        for name in change.row if change.row is not None else change.key_names:
            columns.setdefault(name, []).append(index)
    bad: dict[int, str] = {}

    def value(change: Change, name: str) -> Any:
        if change.row is not None:
            return change.row.get(name)
        return change.key[change.key_names.index(name)]

    for name, indexes in columns.items():
        values = [value(changes[i], name) for i in indexes]
        kind = types.get(name)
        where = "in the table"
        if kind is None:
            declared = next(
                (changes[i].types[name] for i in indexes if name in changes[i].types), None
            )
            kind = declared.arrow if declared is not None else infer_type(values)
            where = "by the envelope's schema" if declared is not None else "by its first value"
            if kind is None:
                continue
            types[name] = kind
        for position, found in misfit(values, kind).items():
            index = indexes[position]
            bad.setdefault(
                index,
                f"cdc: column {name!r} is {type_name(kind)} ({where}), the change has {found}",
            )
    for index, reason in bad.items():
        malformed[(changes[index].partition, changes[index].offset)] = reason
    return [c for i, c in enumerate(changes) if i not in bad], types


def reduce_messages(
    messages: pa.Table,
    key_columns: Sequence[str] | None = None,
    decoders: Decoders = JSON_ENVELOPES,
    table: TableShape | None = None,
    on_truncate: OnTruncate = "quarantine",
) -> Reduced:
    """The changes of ``messages`` (columns ``key``, ``value``, ``partition``, ``offset``)
    checked against ``table`` and reduced to the last per key (see the module docstring); a
    message that cannot be applied is set aside with its reason. ``decoders`` read the values
    and keys (JSON by default)."""
    table = table or TableShape()
    reduced = Reduced([])
    changes: list[Change] = []
    truncates: list[Truncate] = []
    keys, values = messages.column("key").to_pylist(), messages.column("value").to_pylist()
    partitions = messages.column("partition").to_pylist()
    offsets = messages.column("offset").to_pylist()
    for key, value, partition, offset in zip(keys, values, partitions, offsets, strict=True):
        try:
            parsed = parse_change(value, key, partition, offset, key_columns, decoders)
        except EnvelopeError as exc:
            reduced.malformed[(partition, offset)] = f"cdc: {exc}"
            continue
        if isinstance(parsed, str):
            reduced.notes[parsed] += 1
        elif isinstance(parsed, Truncate):
            if on_truncate == "apply":
                truncates.append(parsed)
            else:
                reduced.malformed[(partition, offset)] = _TRUNCATE_REFUSED
        else:
            changes.append(parsed)
    names, named = _key_columns(changes, key_columns, table)
    reduced.key_columns = names
    keyed = []
    for change in changes:
        if list(change.key_names) != names:
            reduced.malformed[(change.partition, change.offset)] = (
                f"cdc: the message key has fields {', '.join(map(repr, change.key_names))}; "
                f"{named} {', '.join(map(repr, names))}"
            )
        else:
            keyed.append(change)
    typed, reduced.types = _check_types(keyed, table, reduced.malformed)
    if truncates:
        reduced.truncate = in_source_order(truncates)[-1]  # type: ignore[assignment]
        after = [c for c in typed if not _before(c, reduced.truncate)]
        reduced.truncated = len(typed) - len(after)
        typed = after
    reduced.changes = reduce_changes(typed)
    return reduced


def _before(change: Change, truncate: Truncate | None) -> bool:
    """Whether ``change`` happened before ``truncate`` (by position if both have one, else by
    offset in one partition; across partitions without positions: not known, kept)."""
    if truncate is None:
        return False
    if change.position is not None and truncate.position is not None:
        return change.position < truncate.position or (
            change.position == truncate.position
            and change.partition == truncate.partition
            and change.offset < truncate.offset
        )
    return change.partition == truncate.partition and change.offset < truncate.offset
