"""A real pyiceberg SQL catalog whose commits fail on demand: how the tests make an Iceberg
catalog fail the ways a real one does (refused, conflicting, or of unknown outcome), which a
healthy catalog never does when asked.

It is the SQL catalog itself (SQLite or PostgreSQL), configured by name like any pyiceberg
catalog, plus ``py-catalog-impl``::

    PYICEBERG_CATALOG__LAKE__PY_CATALOG_IMPL=sluice.testing.faulty_catalog.FaultyCatalog

A test plans the faults of the next commits (:func:`planned`, in-process; or the environment
variable :data:`PLAN_VARIABLE` for a child process, e.g. ``unknown-after:readings``). Each
commit of a table takes the first planned fault naming that table (its last name part), if
any:

``fail``
    the catalog refuses the commit (``CommitFailedException``); nothing is committed.
``conflict``
    another writer commits to the table first (an empty snapshot), so the commit meets a real
    conflict and is refused by the catalog as a concurrent commit would be.
``unknown-before``
    the answer is lost and the commit did not happen (``CommitStateUnknownException``).
``unknown-after``
    the commit happened, and then its answer was lost (``CommitStateUnknownException``): a
    REST catalog's 502/504, a database connection dropped after COMMIT.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

__all__ = ["FAULTS", "PLAN_VARIABLE", "FaultyCatalog", "injected", "plan_fault", "planned"]

FAULTS = ("fail", "conflict", "unknown-before", "unknown-after")
PLAN_VARIABLE = "SLUICE_FAULTY_CATALOG_PLAN"

_lock = threading.Lock()
_plan: list[tuple[str, str]] = []  # (fault, table name)
_injected: list[tuple[str, str]] = []


def _parse(text: str) -> list[tuple[str, str]]:
    plan = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fault, _, table = item.partition(":")
        if fault not in FAULTS or not table:
            raise ValueError(f"{PLAN_VARIABLE}: {item!r} is not FAULT:TABLE ({', '.join(FAULTS)})")
        plan.append((fault, table))
    return plan


_plan.extend(_parse(os.environ.get(PLAN_VARIABLE, "")))


def plan_fault(fault: str, table: str) -> None:
    """Plan ``fault`` for the next commit of ``table`` (its last name part) in this process."""
    with _lock:
        _plan.extend(_parse(f"{fault}:{table}"))


@contextmanager
def planned(*faults: tuple[str, str]) -> Iterator[None]:
    """Plan ``(fault, table name)`` faults for the next commits of this process, for the
    duration of the block (what no commit took is forgotten at its end)."""
    checked = _parse(",".join(f"{f}:{t}" for f, t in faults))
    with _lock:
        _plan.extend(checked)
    try:
        yield
    finally:
        with _lock:
            for fault in checked:
                if fault in _plan:
                    _plan.remove(fault)


def injected() -> list[tuple[str, str]]:
    """The faults injected so far in this process, in order."""
    with _lock:
        return list(_injected)


def _take(table: str) -> str | None:
    with _lock:
        for index, (fault, name) in enumerate(_plan):
            if name == table:
                del _plan[index]
                _injected.append((fault, name))
                return fault
    return None


class FaultyCatalog(SqlCatalog):
    """pyiceberg's SQL catalog, failing the commits :func:`planned` names."""

    def __init__(self, name: str, **properties: Any) -> None:
        properties.pop("py-catalog-impl", None)
        super().__init__(name, **properties)
        self._inside = threading.local()

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        fault = None if getattr(self._inside, "busy", False) else _take(table.name()[-1])
        if fault == "fail":
            raise CommitFailedException("injected: the catalog refused the commit")
        if fault == "unknown-before":
            raise CommitStateUnknownException("injected: the commit's answer was lost (504)")
        if fault == "conflict":
            self._commit_elsewhere(table.name())
        response = super().commit_table(table, requirements, updates)
        if fault == "unknown-after":
            raise CommitStateUnknownException(
                "injected: the commit happened, and its answer was lost (504)"
            )
        return response

    def _commit_elsewhere(self, identifier: tuple[str, ...]) -> None:
        """Another writer's commit: an empty snapshot on top of the table."""
        self._inside.busy = True
        try:
            other = self.load_table(identifier)
            with other.transaction() as transaction:
                properties = {"test.concurrent-writer": "1"}
                with transaction.update_snapshot(snapshot_properties=properties).fast_append():
                    pass
        finally:
            self._inside.busy = False
