"""One commit over several Iceberg tables: the REST catalog's multi-table commit.

The Iceberg REST specification's ``POST /v1/{prefix}/transactions/commit`` takes a
``CommitTransactionRequest`` (``table-changes``: each table's identifier, requirements and
updates) and applies the changes to every table or to none. pyiceberg 0.12 has no client for
it (``Catalog.commit_transactions`` is proposed in apache/iceberg-python#4123), so
:func:`commit_together` builds the request from pyiceberg's own per-table transactions (the
updates and requirements their operations staged, plus the table's uuid, as
``Transaction.commit_transaction`` adds it) and sends it through the catalog's HTTP session
(its authentication, headers and TLS settings).

:func:`can_commit_together`: the catalog is a REST catalog whose server lists the endpoint in
its ``GET /v1/config`` answer (a server that lists no endpoints is not assumed to have it).

Errors, as pyiceberg maps a single table's commit: 409 is a refusal
(``CommitFailedException``), 404 a missing table, 500, 502, 503 and 504 an unknown outcome
(``CommitStateUnknownException``); a dropped connection is requests' ``ConnectionError``
(unknown too). The specification makes the endpoint atomic, but a server may not be: Apache
Iceberg's own REST fixture (``RESTCatalogAdapter``) checks every table's requirements, then
commits the tables one after the other, in the request's order, each in its own catalog
commit, and answers 409 if a later one meets a conflict after an earlier one went in. So a
refusal is not proof that nothing was committed: :func:`landed` reads the catalog to tell,
and only the transactions known not to have landed give up their manifests
(:func:`discard_unlanded`, invariant I8).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .catalogs import CatalogTimeoutError, commit_timed_out

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Transaction

__all__ = [
    "ENDPOINT",
    "can_commit_together",
    "commit_together",
    "discard",
    "discard_unlanded",
    "landed",
]

#: The endpoint as a REST server lists it in ``GET /v1/config``'s ``endpoints``.
ENDPOINT = "POST /v1/{prefix}/transactions/commit"


def can_commit_together(catalog: Catalog) -> bool:
    """Whether ``catalog`` is a REST catalog whose server offers the multi-table commit (a
    pyiceberg older than 0.12 that keeps no list of the server's endpoints: no)."""
    try:
        from pyiceberg.catalog.rest import Endpoint, RestCatalog
    except ImportError:
        return False
    if not isinstance(catalog, RestCatalog):
        return False
    supported = getattr(catalog, "_supported_endpoints", None) or ()
    return Endpoint.from_string(ENDPOINT) in supported


def commit_together(catalog: Catalog, transactions: Sequence[Transaction]) -> None:
    """Commit ``transactions`` (each of another table of ``catalog``, none committed yet) in
    one request, in their order. On success each is spent (its table object is stale: load
    the table again); on an error nothing is deleted (see the module docstring)."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.rest.response import _handle_non_200_response
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        NoSuchTableError,
    )
    from pyiceberg.table import CommitTableRequest, Namespace, TableIdentifier
    from pyiceberg.table.update import AssertTableUUID
    from requests import HTTPError

    if not isinstance(catalog, RestCatalog):
        raise TypeError(f"{type(catalog).__name__} has no multi-table commit")
    changes: list[Any] = []
    for transaction in transactions:
        name = transaction._table.name()
        uuid = AssertTableUUID(uuid=transaction.table_metadata.table_uuid)
        request = CommitTableRequest(
            identifier=TableIdentifier(namespace=Namespace(list(name[:-1])), name=name[-1]),
            requirements=(*transaction._requirements, uuid),
            updates=transaction._updates,
        )
        changes.append(json.loads(request.model_dump_json()))
    body = json.dumps({"table-changes": changes}).encode()
    try:
        response = catalog._session.post(catalog.url("transactions/commit"), data=body)
    except CatalogTimeoutError as exc:
        raise commit_timed_out(exc) from None
    try:
        response.raise_for_status()
    except HTTPError as exc:
        errors: dict[int, type[Exception]] = {409: CommitFailedException, 404: NoSuchTableError}
        errors.update(dict.fromkeys((500, 502, 503, 504), CommitStateUnknownException))
        _handle_non_200_response(exc, errors)
    for transaction in transactions:
        transaction._updates = ()
        transaction._requirements = ()
        transaction._snapshot_producers = []


def landed(transaction: Transaction) -> bool | None:
    """Whether the snapshots ``transaction`` made are on its table now (read from the
    catalog); None if it made none (nothing to tell it by)."""
    producers = _producers(transaction)
    if not producers:
        return None
    table = transaction._table.catalog.load_table(transaction._table.name())
    return all(table.metadata.snapshot_by_id(p._snapshot_id) is not None for p in producers)


def discard(transactions: Sequence[Transaction]) -> None:
    """Delete the manifests and manifest lists ``transactions`` wrote, which no commit took
    (as ``Transaction.commit_transaction`` does when its commit is refused)."""
    for transaction in transactions:
        for producer in _producers(transaction):
            producer._clean_all_uncommitted()


def discard_unlanded(transactions: Sequence[Transaction]) -> list[bool | None]:
    """After a refused :func:`commit_together`: which of ``transactions`` landed anyway
    (:func:`landed`); those that did not are :func:`discard`-ed."""
    found = [landed(transaction) for transaction in transactions]
    discard([t for t, done in zip(transactions, found, strict=True) if done is False])
    return found


def _producers(transaction: Transaction) -> list[Any]:
    """The snapshot producers of ``transaction`` (pyiceberg 0.12 keeps them for its retries)."""
    return list(getattr(transaction, "_snapshot_producers", None) or [])
