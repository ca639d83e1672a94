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
``StreamState.cdc_deleted``): readers of the table never see it, and a later change older
than the marker is stale too. A change that creates the key again drops its marker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa
import pyarrow.compute as pc

from ...cdc import JSON_ENVELOPES, POSITION_COLUMN, Change, Decoders, Reduced, reduce_messages
from ...queues.config import ConfigError
from .base import Staging

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

__all__ = [
    "CDC_PROPERTY",
    "UPSERT_SINKS",
    "Plan",
    "UpsertMode",
    "UpsertSink",
    "apply_iceberg",
    "check_key_columns",
    "conform",
    "marker_key",
    "plan",
    "plan_iceberg",
    "positions_of",
    "quarantine_rows",
    "reduce_rows",
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
        self, key_columns: Sequence[str] | None, decoders: Decoders = JSON_ENVELOPES
    ) -> None:
        """Apply every batch as changes by key (None: the message keys' fields), its
        envelopes read by ``decoders``."""

    def reduce_staged(self, staging: Staging) -> Reduced:
        """Reduce the staged messages to the last change per key and add the malformed ones
        to the staged quarantine (kept for :meth:`publish`)."""


class UpsertMode:
    """The write mode of a sink that can keep a current-state table: appending (the
    default) until :meth:`upsert` asks it to apply changes by key."""

    upserting: bool = False  # write_mode="upsert": batches applied as changes by key
    key_columns: list[str] | None = None
    decoders: Decoders = JSON_ENVELOPES  # how the envelopes are read

    def upsert(
        self, key_columns: Sequence[str] | None, decoders: Decoders = JSON_ENVELOPES
    ) -> None:
        """Apply every batch as changes by key (None: the message keys' fields), its
        envelopes read by ``decoders``."""
        self.upserting = True
        self.key_columns = list(key_columns) if key_columns is not None else None
        self.decoders = decoders


def upsert_sink(
    sink: object, key_columns: Sequence[str] | None, decoders: Decoders = JSON_ENVELOPES
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
    sink.upsert(list(key_columns) if key_columns is not None else None, decoders)
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


def reduce_rows(
    messages: pa.Table, key_columns: Sequence[str] | None, decoders: Decoders
) -> tuple[Reduced, pa.Table]:
    """(the staged ``messages`` reduced, the quarantine rows of the malformed ones)."""
    reduced = reduce_messages(messages, key_columns, decoders)
    return reduced, quarantine_rows(messages, reduced.malformed)


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


def _current_positions(
    table: Table, keys: pa.Table, key_columns: list[str]
) -> dict[tuple[Any, ...], int | None]:
    """The source position of the table's row of each key in ``keys`` (a scan pruned by the
    key columns' statistics). With one key column the scan's filter is the keys' range, and
    the rows are matched to the keys after it: pyiceberg binds a filter of every key value
    anew for each step of a scan, which cost more than the scan itself (bench/cdc.py)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    if table.current_snapshot() is None or keys.num_rows == 0:
        return {}
    fields = (*key_columns, POSITION_COLUMN)
    if len(key_columns) > 1:
        found = table.scan(row_filter=_match(keys, key_columns), selected_fields=fields)
        return positions_of(found.to_arrow(), key_columns)
    [name] = key_columns
    bounds = pc.min_max(keys.column(name))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    at_least = GreaterThanOrEqual(name, low)  # type: ignore[call-arg, arg-type]
    at_most = LessThanOrEqual(name, high)  # type: ignore[call-arg, arg-type]
    scan = table.scan(row_filter=And(at_least, at_most), selected_fields=fields)
    rows = scan.to_arrow()
    wanted = keys.column(name).cast(rows.schema.field(name).type)
    return positions_of(rows.filter(pc.is_in(rows.column(name), value_set=wanted)), key_columns)


def positions_of(found: pa.Table, key_columns: list[str]) -> dict[tuple[Any, ...], int | None]:
    """key -> source position of the rows ``found`` (key columns and the position)."""
    columns = [found.column(c).to_pylist() for c in key_columns]
    positions = found.column(POSITION_COLUMN).to_pylist()
    return {tuple(k): p for *k, p in zip(*columns, positions, strict=True)}


def marker_key(key: tuple[Any, ...]) -> str:
    """A key as the stream state's delete markers hold it (JSON, for the state's JSON)."""
    return json.dumps(list(key), default=str, separators=(",", ":"))


def stale(
    change: Change,
    current: dict[tuple[Any, ...], int | None],
    deleted: Mapping[str, int] | None = None,
) -> bool:
    """Whether ``change`` is older than the row the table holds for its key, or than the
    delete marker ``deleted`` holds for it (a key deleted at that position)."""
    if change.position is None:
        return False
    held = current.get(change.key)
    if held is None and deleted:
        held = deleted.get(marker_key(change.key))
    return held is not None and change.position < held


@dataclass
class Plan:
    """What a batch's changes do to a table, read before its commit."""

    reduced: Reduced
    applied: list[Change]  # not stale
    held: list[Change]  # of those, the ones whose key has a row in the table
    counts: dict[str, int]
    # the delete markers the applied changes set (key -> position) or drop (None)
    markers: dict[str, int | None]


def plan_iceberg(table: Table, reduced: Reduced, deleted: Mapping[str, int]) -> Plan:
    """:func:`plan` against an Iceberg table."""
    changes = list(reduced.changes.values())
    current = _current_positions(table, reduced.keys(changes), reduced.key_columns)
    return plan(reduced, current, deleted)


def plan(
    reduced: Reduced,
    current: dict[tuple[Any, ...], int | None],
    deleted: Mapping[str, int] | None = None,
) -> Plan:
    """Which of ``reduced``'s changes apply to a table whose rows' positions by key are
    ``current`` and whose stream's delete markers are ``deleted`` (a change older than the
    row of its key, or than its key's delete, is stale), the counts (upserted, deleted,
    stale) and the markers the applied changes set or drop."""
    deleted = deleted or {}
    changes = list(reduced.changes.values())
    applied = [c for c in changes if not stale(c, current, deleted)]
    held = [c for c in applied if c.key in current]
    counts = {
        "upserted": sum(1 for c in applied if not c.deleted),
        "deleted": sum(1 for c in held if c.deleted),
        "stale": len(changes) - len(applied),
    }
    markers: dict[str, int | None] = {}
    for change in applied:
        key = marker_key(change.key)
        if change.deleted and change.position is not None:
            markers[key] = change.position
        elif key in deleted:
            markers[key] = None
    return Plan(reduced, applied, held, counts, markers)


def apply_iceberg(transaction: Transaction, plan: Plan, summary: dict[str, str]) -> None:
    """Apply ``plan`` in ``transaction`` by copy-on-write: the rows of every changed key that
    the table holds deleted (their files rewritten without them), then the new rows appended
    in a snapshot whose summary is ``summary`` (one commit: the transaction's)."""
    import warnings

    key_columns = plan.reduced.key_columns
    if plan.held:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Delete operation did not match any records"
            transaction.delete(_match(plan.reduced.keys(plan.held), key_columns))
    upserts = {c.key: c for c in plan.applied if not c.deleted}
    schema = transaction.table_metadata.schema().as_arrow()
    rows = conform(Reduced(key_columns, upserts).rows(schema), schema)
    transaction.append(rows, snapshot_properties=summary)
