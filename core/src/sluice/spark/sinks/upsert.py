"""Change data capture into current-state tables (``ingest(..., write_mode="upsert")``):
what the sinks that support it share (docs/guides/cdc.md).

The batch's messages are staged as they came (the write job keeps the raw value); before the
batch is published, :meth:`UpsertSink.reduce_staged` reads them back, reduces them to the last
change per key (:mod:`sluice.cdc`) and adds the malformed ones to the staged quarantine with
their reason. The publish then applies the changes in the batch's one commit: the Iceberg sink
by copy-on-write (:func:`apply_iceberg`), the Delta sink by a merge. A change whose source
position is older than the position of the row the table holds is ignored, and counted
(``stale``).

A deleted key leaves no row to compare with, so an applied delete that carries a source
position leaves a *delete marker* (key -> the delete's position) in the stream's state, which
the sinks commit with the batch (``BatchRecord.cdc_markers`` folded into
``StreamState.cdc_deleted``; never in the commit's own metadata, which keeps their count):
readers of the table never see it, and a later change older than the marker is stale too. A
change that creates the key again drops its marker. An applied truncate is one marker for
every key, its position (``StreamState.cdc_truncated``), and drops the markers older than
it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa
import pyarrow.compute as pc

from ...cdc import (
    JSON_ENVELOPES,
    POSITION_COLUMN,
    Change,
    Decoders,
    OnTruncate,
    Reduced,
    TableShape,
    Truncate,
    reduce_messages,
)
from ...cdc.columns import check_name, quote
from ...queues.config import ConfigError
from .base import Staging

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

__all__ = [
    "CDC_PROPERTY",
    "UPSERT_SINKS",
    "Held",
    "Plan",
    "UpsertMode",
    "UpsertSink",
    "apply_iceberg",
    "check_key_columns",
    "conform",
    "current_rows",
    "marker_key",
    "merge_predicate",
    "plan",
    "plan_iceberg",
    "positions_of",
    "quarantine_rows",
    "truncated_rows_filter",
    "truncated_rows_predicate",
    "unsent_columns",
    "upsert_sink",
]

#: The sinks that apply changes, as an error message names them.
UPSERT_SINKS = (
    "an Iceberg table (iceberg://CATALOG/NAMESPACE.TABLE) or a Delta table (delta://PATH)"
)
#: The Iceberg table property that marks a current-state table, holding its key columns as
#: JSON (a Delta table keeps them in ``_sluice/cdc.json``).
CDC_PROPERTY = "sluice.cdc.key-columns"
_REASON = "reason"


@runtime_checkable
class UpsertSink(Protocol):
    """A sink that keeps a current-state table."""

    def upsert(
        self,
        key_columns: Sequence[str] | None,
        decoders: Decoders = JSON_ENVELOPES,
        on_truncate: OnTruncate = "quarantine",
    ) -> None:
        """Apply every batch as changes by key (None: the message keys' fields), its
        envelopes read by ``decoders``; truncates applied or set aside (``on_truncate``)."""

    def reduce_staged(self, staging: Staging) -> Reduced:
        """Reduce the staged messages to the last change per key and add the malformed ones
        to the staged quarantine (kept for :meth:`publish`)."""


class UpsertMode:
    """The write mode of a sink that can keep a current-state table: appending (the
    default) until :meth:`upsert` asks it to apply changes by key."""

    upserting: bool = False  # write_mode="upsert": batches applied as changes by key
    key_columns: list[str] | None = None
    decoders: Decoders = JSON_ENVELOPES  # how the envelopes are read
    on_truncate: OnTruncate = "quarantine"

    def upsert(
        self,
        key_columns: Sequence[str] | None,
        decoders: Decoders = JSON_ENVELOPES,
        on_truncate: OnTruncate = "quarantine",
    ) -> None:
        """Apply every batch as changes by key (None: the message keys' fields), its
        envelopes read by ``decoders``; truncates applied or set aside (``on_truncate``)."""
        self.upserting = True
        self.key_columns = list(key_columns) if key_columns is not None else None
        self.decoders = decoders
        self.on_truncate = on_truncate

    def reduce(self, messages: pa.Table, table: TableShape) -> tuple[Reduced, pa.Table]:
        """(the staged ``messages`` reduced against ``table``, the quarantine rows of the
        ones set aside)."""
        reduced = reduce_messages(
            messages, self.key_columns, self.decoders, table, self.on_truncate
        )
        return reduced, quarantine_rows(messages, reduced.malformed)


def upsert_sink(
    sink: object,
    key_columns: Sequence[str] | None,
    decoders: Decoders = JSON_ENVELOPES,
    on_truncate: OnTruncate = "quarantine",
) -> UpsertSink:
    """``sink`` set to apply changes, or a :class:`ConfigError` naming the sinks that can."""
    if not isinstance(sink, UpsertSink):
        where = getattr(sink, "location", sink)
        raise ConfigError(
            f"write_mode='upsert' (change data capture into a current-state table) needs "
            f"{UPSERT_SINKS}; the sink {where} is a Parquet dataset, which only appends. "
            "Ingest into one of those, or leave write_mode at 'append'."
        )
    check_key_columns(key_columns)
    if on_truncate not in ("quarantine", "apply"):
        raise ConfigError(
            f"on_truncate must be 'quarantine' (the default: a truncate is set aside) or "
            f"'apply' (a truncate deletes every row older than it), not {on_truncate!r}"
        )
    sink.upsert(list(key_columns) if key_columns is not None else None, decoders, on_truncate)
    return sink


def check_key_columns(key_columns: Sequence[str] | None) -> None:
    """The one rule for ``key_columns``, wherever it is given (an in-process ingest, the
    Airflow operator before it submits, the submitted script): None means the message keys'
    fields; anything else must name columns, and an empty list is a :class:`ConfigError`."""
    if key_columns is not None and (
        isinstance(key_columns, str) or not key_columns or not all(key_columns)
    ):
        raise ConfigError(
            f"key_columns must be a list of column names, e.g. ['id'], not {key_columns!r} "
            "(or None: the message keys' fields)"
        )
    for name in key_columns or ():
        problem = check_name(name, "key column")
        if problem:
            raise ConfigError(f"key_columns: {problem}")


def quarantine_rows(messages: pa.Table, malformed: dict[tuple[int, int], str]) -> pa.Table:
    """The staged rows of the ``malformed`` messages in the quarantine's layout: the message
    columns, ``reason``, then the sink's constant columns (Iceberg's ``batch_id``)."""
    coordinates = zip(
        messages.column("partition").to_pylist(), messages.column("offset").to_pylist(), strict=True
    )
    reasons = [malformed.get(c) for c in coordinates]
    keep = pa.array([r is not None for r in reasons])
    rows = messages.filter(keep)
    reason = pa.array([r for r in reasons if r is not None], pa.string())
    index = rows.schema.get_field_index("message_id") + 1
    return rows.add_column(index, _REASON, reason)


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with the columns of ``schema``, in its order and types (nulls where a row
    has no value for a column)."""
    arrays = [
        rows.column(f.name).cast(f.type)
        if f.name in rows.column_names
        else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _match(keys: pa.Table, key_columns: list[str]) -> Any:
    from pyiceberg.table.upsert_util import create_match_filter

    return create_match_filter(keys, key_columns)


def current_rows(
    table: Table, keys: pa.Table, key_columns: list[str], columns: Sequence[str] = ()
) -> pa.Table:
    """The table's rows of the keys in ``keys``: the key columns, the source position and
    ``columns`` (a scan pruned by the key columns' statistics). With one key column the scan's
    filter is the keys' range, and the rows are matched to the keys after it: pyiceberg binds
    a filter of every key value anew for each step of a scan, which cost more than the scan
    itself (bench/cdc.py)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    have = set(table.schema().column_names)
    fields = tuple(dict.fromkeys(c for c in (*key_columns, POSITION_COLUMN, *columns) if c in have))
    if table.current_snapshot() is None or keys.num_rows == 0 or POSITION_COLUMN not in have:
        return pa.table({c: pa.array([], pa.null()) for c in (*key_columns, POSITION_COLUMN)})
    if len(key_columns) > 1:
        found = table.scan(row_filter=_match(keys, key_columns), selected_fields=fields)
        return found.to_arrow()
    [name] = key_columns
    bounds = pc.min_max(keys.column(name))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    at_least = GreaterThanOrEqual(name, low)  # type: ignore[call-arg, arg-type]
    at_most = LessThanOrEqual(name, high)  # type: ignore[call-arg, arg-type]
    scan = table.scan(row_filter=And(at_least, at_most), selected_fields=fields)
    rows = scan.to_arrow()
    wanted = keys.column(name).cast(rows.schema.field(name).type)
    return rows.filter(pc.is_in(rows.column(name), value_set=wanted))


def unsent_columns(reduced: Reduced) -> list[str]:
    """The columns some of the batch's changes did not send (TOAST), to be read from the
    table's rows."""
    return sorted({name for c in reduced.changes.values() for name in c.unavailable})


@dataclass(frozen=True)
class Held:
    """The table's rows of a batch's keys: each key's source position, and the values of the
    columns the batch's changes did not send."""

    positions: dict[tuple[Any, ...], int | None]
    values: dict[tuple[Any, ...], dict[str, Any]]

    @classmethod
    def of(cls, found: pa.Table, key_columns: list[str]) -> Held:
        """From rows ``found`` (key columns, the position and any others)."""
        rows = found.to_pylist()
        positions: dict[tuple[Any, ...], int | None] = {}
        values: dict[tuple[Any, ...], dict[str, Any]] = {}
        others = [c for c in found.column_names if c not in (*key_columns, POSITION_COLUMN)]
        for row in rows:
            key = tuple(row[c] for c in key_columns)
            positions[key] = row.get(POSITION_COLUMN)
            if others:
                values[key] = {c: row[c] for c in others}
        return cls(positions, values)


def positions_of(found: pa.Table, key_columns: list[str]) -> dict[tuple[Any, ...], int | None]:
    """key -> source position of the rows ``found`` (key columns and the position)."""
    return Held.of(found, key_columns).positions


def marker_key(key: tuple[Any, ...]) -> str:
    """A key as the stream state's delete markers hold it (JSON, for the state's JSON)."""
    return json.dumps(list(key), default=str, separators=(",", ":"))


def stale(
    change: Change,
    current: Mapping[tuple[Any, ...], int | None],
    deleted: Mapping[str, int] | None = None,
    truncated: int | None = None,
) -> bool:
    """Whether ``change`` is older than the row the table holds for its key, than the delete
    marker ``deleted`` holds for it (a key deleted at that position), or than the stream's
    last applied truncate (``truncated``, its position)."""
    if change.position is None:
        return False
    if truncated is not None and change.position < truncated:
        return True
    held = current.get(change.key)
    if held is None and deleted:
        held = deleted.get(marker_key(change.key))
    return held is not None and change.position < held


@dataclass
class Plan:
    """What a batch's changes do to a table, read before its commit."""

    reduced: Reduced
    applied: list[Change]  # not stale; the columns they did not send filled from the table
    held: list[Change]  # of those, the ones whose key has a row in the table
    counts: dict[str, int]
    # the delete markers the applied changes set (key -> position) or drop (None)
    markers: dict[str, int | None]
    truncate: Truncate | None = None  # applied: every row older than it is deleted

    @property
    def truncated_at(self) -> int | None:
        """The position the stream's truncate marker moves to (None: it stays)."""
        return self.truncate.position if self.truncate is not None else None

    @property
    def changes_anything(self) -> bool:
        return bool(self.applied) or self.truncate is not None


def plan_iceberg(
    table: Table,
    reduced: Reduced,
    deleted: Mapping[str, int],
    truncated: int | None = None,
) -> Plan:
    """:func:`plan` against an Iceberg table."""
    changes = list(reduced.changes.values())
    found = current_rows(table, reduced.keys(changes), reduced.key_columns, unsent_columns(reduced))
    held = Held.of(found, reduced.key_columns)
    return plan(reduced, held.positions, deleted, held.values, truncated)


def plan(
    reduced: Reduced,
    current: Mapping[tuple[Any, ...], int | None],
    deleted: Mapping[str, int] | None = None,
    values: Mapping[tuple[Any, ...], Mapping[str, Any]] | None = None,
    truncated: int | None = None,
) -> Plan:
    """Which of ``reduced``'s changes apply to a table whose rows' positions by key are
    ``current`` (and the values of the columns the changes did not send, ``values``), whose
    stream's delete markers are ``deleted`` and last truncate ``truncated`` (a change older
    than the row of its key, its key's delete or the truncate is stale), the counts (upserted,
    deleted, stale, truncated, unsent) and the markers the applied changes set or drop."""
    deleted = deleted or {}
    values = values or {}
    truncate = reduced.truncate
    if (
        truncate is not None
        and truncate.position is not None
        and truncated is not None
        and truncate.position < truncated
    ):
        truncate = None  # older than the truncate already applied: nothing left to do
    changes = list(reduced.changes.values())
    applied: list[Change] = []
    unsent = 0
    for change in changes:
        if stale(change, current, deleted, truncated):
            continue
        if change.unavailable and change.row is not None:
            found = values.get(change.key, {})
            row = {**{c: found.get(c) for c in change.unavailable}, **change.row}
            unsent += sum(1 for c in change.unavailable if c not in found)
            change = dataclasses.replace(change, row=row, unavailable=frozenset())
        applied.append(change)
    held = [c for c in applied if c.key in current]
    counts = {
        "upserted": sum(1 for c in applied if not c.deleted),
        "deleted": sum(1 for c in held if c.deleted),
        "stale": len(changes) - len(applied),
    }
    if truncate is not None:
        counts["truncates"] = 1
        counts["truncated"] = reduced.truncated
    if unsent:
        counts["unsent"] = unsent  # TOASTed values the table had no row for: left null
    markers: dict[str, int | None] = {}
    if truncate is not None:  # the truncate's position covers every older marker
        at = truncate.position
        for key, position in deleted.items():
            if at is None or position < at:
                markers[key] = None
    for change in applied:
        key = marker_key(change.key)
        if change.deleted and change.position is not None:
            markers[key] = change.position
        elif key in deleted or key in markers:
            markers[key] = None
    return Plan(reduced, applied, held, counts, markers, truncate)


def apply_to_rows(rows: dict[tuple[Any, ...], Change], plan: Plan) -> None:
    """Apply ``plan`` to ``rows`` (key -> the change that made its row), in memory: what the
    sinks do to a table, for the audit's expected state."""
    if plan.truncate is not None:
        at = plan.truncate.position
        older = [k for k, c in rows.items() if at is None or c.position is None or c.position < at]
        for key in older:
            del rows[key]
    for change in plan.applied:
        if change.deleted:
            rows.pop(change.key, None)
        else:
            rows[change.key] = change


def truncated_rows_filter(truncate: Truncate) -> Any:
    """An Iceberg filter of the rows a truncate deletes: every row older than it (rows of no
    position: every row)."""
    from pyiceberg.expressions import AlwaysTrue, IsNull, LessThan, Or

    if truncate.position is None:
        return AlwaysTrue()
    older = LessThan(POSITION_COLUMN, truncate.position)  # type: ignore[call-arg, arg-type]
    return Or(older, IsNull(POSITION_COLUMN))  # type: ignore[call-arg, arg-type]


def truncated_rows_predicate(truncate: Truncate, alias: str) -> str:
    """The same as a delta-rs merge predicate on the target's rows (``alias``)."""
    column = f"{alias}.{quote(POSITION_COLUMN)}"
    if truncate.position is None:
        return "true"
    return f"{column} < {int(truncate.position)} OR {column} IS NULL"


def apply_iceberg(transaction: Transaction, plan: Plan, summary: dict[str, str]) -> None:
    """Apply ``plan`` in ``transaction`` by copy-on-write: the rows of every changed key that
    the table holds deleted (their files rewritten without them), the rows a truncate removes
    deleted, then the new rows appended in a snapshot whose summary is ``summary`` (one
    commit: the transaction's)."""
    import warnings

    key_columns = plan.reduced.key_columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Delete operation did not match any records"
        if plan.held:
            transaction.delete(_match(plan.reduced.keys(plan.held), key_columns))
        if plan.truncate is not None:
            transaction.delete(truncated_rows_filter(plan.truncate))
    upserts = [c for c in plan.applied if not c.deleted]
    schema = transaction.table_metadata.schema().as_arrow()
    rows = conform(plan.reduced.rows(schema, upserts), schema)
    transaction.append(rows, snapshot_properties=summary)


def merge_predicate(key_columns: Sequence[str], target: str = "t", source: str = "s") -> str:
    """The delta-rs merge's match of a target row to a source row by the key columns, every
    name quoted (they come from messages: data, never code). No key columns yet (a first
    batch with nothing but a truncate): nothing matches."""
    if not key_columns:
        return "false"
    return " AND ".join(f"{target}.{quote(c)} = {source}.{quote(c)}" for c in key_columns)
