"""A current-state table in memory that applies batches of messages the way the sinks do
(reduce, plan against its rows and the stream's markers, apply), for the unit tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sluice.cdc import Change, OnTruncate, TableShape, reduce_messages
from sluice.spark.sinks.base import fold_markers
from sluice.spark.sinks.upsert import Plan, apply_to_rows, plan

Message = tuple[Any, Any]  # (key document, value document); a None value is a tombstone


def encode(document: Any) -> bytes | None:
    return None if document is None else json.dumps(document).encode()


def batch(messages: list[tuple[int, int, Message]]) -> pa.Table:
    """(partition, offset, (key, value)) as the staged columns."""
    return pa.table(
        {
            "key": pa.array([encode(m[0]) for _, _, m in messages], pa.binary()),
            "value": pa.array([encode(m[1]) for _, _, m in messages], pa.binary()),
            "partition": pa.array([p for p, _, _ in messages], pa.int32()),
            "offset": pa.array([o for _, o, _ in messages], pa.int64()),
        }
    )


@dataclass
class Lake:
    """The table's rows (key -> the change that made it), its key columns and types, and the
    stream state's markers."""

    rows: dict[tuple[Any, ...], Change] = field(default_factory=dict)
    key_columns: list[str] | None = None
    schema: pa.Schema | None = None
    markers: dict[str, int] = field(default_factory=dict)
    truncated: int | None = None
    quarantined: dict[tuple[int, int], str] = field(default_factory=dict)
    on_truncate: OnTruncate = "apply"

    def ingest(self, messages: list[tuple[int, int, Message]]) -> Plan:
        reduced = reduce_messages(
            batch(messages),
            table=TableShape(self.key_columns, self.schema),
            on_truncate=self.on_truncate,
        )
        self.quarantined.update(reduced.malformed)
        applying = plan(
            reduced,
            {k: c.position for k, c in self.rows.items()},
            self.markers,
            {k: c.row or {} for k, c in self.rows.items()},
            self.truncated,
        )
        apply_to_rows(self.rows, applying)
        fold_markers(self.markers, applying.markers)
        if applying.truncated_at is not None:
            self.truncated = max(applying.truncated_at, self.truncated or 0)
        if reduced.key_columns and not self.key_columns:
            self.key_columns = reduced.key_columns
        table_rows = reduced.rows(self.schema)
        merged = [
            f for f in table_rows.schema if self.schema is None or f.name not in self.schema.names
        ]
        if self.schema is None:
            self.schema = table_rows.schema
        elif merged:
            self.schema = pa.schema([*self.schema, *merged])
        return applying

    def state(self) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {k: dict(c.row or {}) for k, c in sorted(self.rows.items())}
