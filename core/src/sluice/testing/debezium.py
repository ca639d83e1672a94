"""Debezium-shaped change messages for tests, the CDC guide and ``bench/cdc.py``: a source
table simulated in memory (:class:`SourceTable`) whose inserts, updates and deletes come out
as (key, value) pairs the way Debezium's PostgreSQL connector writes them with the JSON
converter (``schemas.enable`` on: the ``schema``/``payload`` wrapper; off: the bare envelope),
a tombstone after each delete, and the ``lsn`` growing with every change; truncates (key-less,
as Debezium sends them), heartbeats, and stray messages shaped like the table's that change
nothing (for the nemesis' changes a sink must refuse)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Message", "SourceTable", "random_changes"]

#: (key, value): a None value is a tombstone; a None key is a message without one (a truncate)
Message = tuple[bytes | None, bytes | None]


def _document(payload: Any, wrapped: bool) -> bytes:
    if wrapped:
        payload = {"schema": {"type": "struct", "optional": False}, "payload": payload}
    return json.dumps(payload, sort_keys=True).encode()


@dataclass
class SourceTable:
    """A table of rows keyed by ``id``; each change returns its messages and updates
    :attr:`rows`, the state a current-state table must end up holding."""

    name: str = "inventory.customers"
    wrapped: bool = False
    tombstones: bool = True
    lsn: int = 1_000
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)

    def _envelope(self, op: str, before: Any, after: Any) -> dict[str, Any]:
        self.lsn += 8
        schema, table = self.name.split(".", 1)
        source = {"connector": "postgresql", "db": "shop", "schema": schema, "table": table}
        return {
            "op": op,
            "before": before,
            "after": after,
            "source": {**source, "lsn": self.lsn},
            "ts_ms": 1_700_000_000_000 + self.lsn,
        }

    def _key(self, key: int) -> bytes:
        return _document({"id": key}, self.wrapped)

    def upsert(self, key: int, **values: Any) -> list[Message]:
        """Insert the row ``key`` (op ``c``) or update it (``u``) with ``values``."""
        before = self.rows.get(key)
        after = {**(before or {}), "id": key, **values}
        self.rows[key] = after
        envelope = self._envelope("u" if before else "c", before, after)
        return [(self._key(key), _document(envelope, self.wrapped))]

    def delete(self, key: int) -> list[Message]:
        """Delete the row ``key`` (op ``d``, then a tombstone)."""
        before = self.rows.pop(key)
        messages: list[Message] = [
            (self._key(key), _document(self._envelope("d", before, None), self.wrapped))
        ]
        if self.tombstones:
            messages.append((self._key(key), None))
        return messages

    def truncate(self) -> list[Message]:
        """Truncate the table (op ``t``, without a key, as Debezium sends it)."""
        self.rows.clear()
        return [(None, _document(self._envelope("t", None, None), self.wrapped))]

    def heartbeat(self) -> Message:
        """A heartbeat (``heartbeat.interval.ms``): no change, keyed by the server's name."""
        return (
            _document({"serverName": "shop"}, self.wrapped),
            _document({"ts_ms": 1_700_000_000_000 + self.lsn}, self.wrapped),
        )

    def stray(self, key: Any, op: str, after: Any, **fields: Any) -> Message:
        """A message shaped like this table's changes (its next ``lsn``) that changes nothing
        in :attr:`rows`: ``key`` is the key's document (None: no key), ``fields`` join the
        envelope. For changes a sink must set aside."""
        envelope = {**self._envelope(op, None, after), **fields}
        encoded = None if key is None else _document(key, self.wrapped)
        return encoded, _document(envelope, self.wrapped)


def random_changes(
    source: SourceTable, count: int, keys: int, deletes: float = 0.2, seed: int = 0
) -> Iterator[Message]:
    """About ``count`` changes of ``source`` over keys ``0..keys-1``: a share ``deletes`` of
    them deletes of an existing row (each with its tombstone), the others upserts."""
    rng = random.Random(seed)
    for number in range(count):
        key = rng.randrange(keys)
        if key in source.rows and rng.random() < deletes:
            yield from source.delete(key)
        else:
            yield from source.upsert(key, name=f"customer-{key}", visits=number)
