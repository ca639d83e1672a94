"""pyiceberg's transaction, its table metadata computed once per change.

pyiceberg 0.12's ``Transaction.table_metadata`` applies the transaction's updates to a deep
copy of the whole table metadata each time it is read, and one append reads it about thirty
times: about 1 ms a read for a table of a dozen snapshots (measured: a batch's publish 140 ms
-> 105 ms), more as the table's snapshots grow (each summary holds a Sluice batch's record).
The metadata is immutable (frozen pydantic models), so one copy serves every read until the
transaction's updates or its table's metadata change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.table import Transaction as _PyicebergTransaction

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata


class Transaction(_PyicebergTransaction):
    """A :class:`pyiceberg.table.Transaction` whose ``table_metadata`` is computed once for
    each state of its updates and of its table's metadata."""

    _seen: tuple[Any, Any, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        seen = self._seen
        # (a change replaces the updates' tuple, and a commit the table's metadata object)
        if seen is None or seen[0] is not self._table.metadata or seen[1] is not self._updates:
            seen = self._seen = (self._table.metadata, self._updates, super().table_metadata)
        return seen[2]


def transaction(table: Table) -> Transaction:
    """A transaction on ``table``, as ``table.transaction()`` makes it."""
    return Transaction(table)
