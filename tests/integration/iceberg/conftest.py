"""Iceberg sinks on real catalogs: SQLite in the test's directory, PostgreSQL (the session's
own server, ``postgres_server``: database ``test``, user postgres), and an Iceberg REST
catalog (the session's own server, ``rest_catalog``, its warehouse on the S3 server).

A catalog is configured the pyiceberg way, through ``PYICEBERG_CATALOG__<NAME>__*``
environment variables, which the crash tests' child processes inherit. Every test gets a
namespace of its own, dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.testing.plugin import Broker, S3Bucket
from sluice.testing.postgres import PostgresServer
from sluice.testing.rest_catalog import RestCatalogServer

from ..spark.conftest import KafkaTopic, opened_topic


@dataclass
class Lake:
    """A configured catalog and a namespace of the test's own."""

    catalog_name: str
    namespace: str
    catalog: Any

    def sink(self, table: str = "readings", query: str = "") -> str:
        return f"iceberg://{self.catalog_name}/{self.namespace}.{table}{query}"

    def table(self, name: str = "readings") -> Any:
        return self.catalog.load_table(f"{self.namespace}.{name}")


def _configure(monkeypatch: pytest.MonkeyPatch, name: str, uri: str, warehouse: Path) -> Any:
    from pyiceberg.catalog import load_catalog

    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    monkeypatch.setenv(f"{prefix}TYPE", "sql")
    monkeypatch.setenv(f"{prefix}URI", uri)
    monkeypatch.setenv(f"{prefix}WAREHOUSE", warehouse.as_uri())
    return load_catalog(name, type="sql", uri=uri, warehouse=warehouse.as_uri())


def _drop(catalog: Any, namespace: str) -> None:
    for identifier in catalog.list_tables(namespace):
        catalog.drop_table(identifier)
    catalog.drop_namespace(namespace)


@pytest.fixture
def topic(noida_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on noida-db (the Iceberg tests of the catalogs, not of Kafka)."""
    yield from opened_topic(noida_broker, unique_name)


@pytest.fixture
def sqlite_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    name = f"lite{uuid.uuid4().hex[:8]}"
    catalog = _configure(
        monkeypatch, name, f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse"
    )
    yield Lake(name, f"ns_{uuid.uuid4().hex[:8]}", catalog)


@pytest.fixture
def faulty_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    """A SQLite catalog whose commits fail when a test plans it
    (:mod:`sluice.testing.faulty_catalog`)."""
    from sluice.testing.faulty_catalog import FaultyCatalog

    name = f"faulty{uuid.uuid4().hex[:8]}"
    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", (tmp_path / "warehouse").as_uri()
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    monkeypatch.setenv(f"{prefix}URI", uri)
    monkeypatch.setenv(f"{prefix}WAREHOUSE", warehouse)
    monkeypatch.setenv(f"{prefix}PY_CATALOG_IMPL", "sluice.testing.faulty_catalog.FaultyCatalog")
    yield Lake(
        name, f"ns_{uuid.uuid4().hex[:8]}", FaultyCatalog(name, uri=uri, warehouse=warehouse)
    )


@pytest.fixture
def postgres_uri(postgres_server: PostgresServer) -> str:
    """The SQLAlchemy URL of the session server's ``test`` database."""
    return postgres_server.uri("test")


@pytest.fixture
def postgres_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_uri: str
) -> Iterator[Lake]:
    name = f"pg{uuid.uuid4().hex[:8]}"
    catalog = _configure(monkeypatch, name, postgres_uri, tmp_path / "warehouse")
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    yield Lake(name, namespace, catalog)
    if namespace in {n[0] for n in catalog.list_namespaces()}:
        _drop(catalog, namespace)
    catalog.engine.dispose()


def _configure_s3(
    monkeypatch: pytest.MonkeyPatch, name: str, uri: str, bucket: S3Bucket, how: str
) -> Any:
    """A SQL catalog whose warehouse is ``s3://<bucket>/warehouse``. ``how`` the S3 settings
    reach it: ``properties`` (the catalog's s3.* properties; no AWS_* variable is set) or
    ``environment`` (only the standard AWS_* variables, as the issue's user had them)."""
    from pyiceberg.catalog import load_catalog

    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    properties = {"type": "sql", "uri": uri, "warehouse": bucket.uri("warehouse")}
    if how == "properties":
        properties.update(bucket.catalog_properties())
        for variable in bucket.environment():
            monkeypatch.delenv(variable, raising=False)
    for key, value in properties.items():
        variable = key.upper().replace(".", "__").replace("-", "_")
        monkeypatch.setenv(f"{prefix}{variable}", value)
    return load_catalog(name, **{**properties, **bucket.catalog_properties()})


@pytest.fixture
def s3_sqlite_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_bucket: S3Bucket
) -> Iterator[Lake]:
    """SQLite catalog, warehouse on the S3 server, S3 settings in the catalog's properties."""
    name = f"lites3{uuid.uuid4().hex[:8]}"
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = _configure_s3(monkeypatch, name, uri, s3_bucket, "properties")
    yield Lake(name, f"ns_{uuid.uuid4().hex[:8]}", catalog)


@pytest.fixture
def s3_postgres_lake(
    monkeypatch: pytest.MonkeyPatch, s3_bucket: S3Bucket, postgres_uri: str
) -> Iterator[Lake]:
    """PostgreSQL catalog, warehouse on the S3 server, S3 settings from AWS_* variables only."""
    name = f"pgs3{uuid.uuid4().hex[:8]}"
    catalog = _configure_s3(monkeypatch, name, postgres_uri, s3_bucket, "environment")
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    yield Lake(name, namespace, catalog)
    if namespace in {n[0] for n in catalog.list_namespaces()}:
        _drop(catalog, namespace)
    catalog.engine.dispose()


def configure_rest(
    monkeypatch: pytest.MonkeyPatch,
    server: RestCatalogServer,
    uri: str | None = None,
    **extra: str,
) -> Lake:
    """A REST catalog configured the pyiceberg way (``PYICEBERG_CATALOG__<NAME>__TYPE=rest``,
    ``__URI``, ``__S3__ENDPOINT``, ...), reached at ``uri`` (default: the server's own), with a
    namespace of the test's own; ``extra``: more catalog properties (``connection.timeout``
    as ``connection__timeout``)."""
    from pyiceberg.catalog import load_catalog

    name = f"rest{uuid.uuid4().hex[:8]}"
    properties = server.client_properties(uri)
    properties.update({key.replace("__", "."): value for key, value in extra.items()})
    for key, value in properties.items():
        variable = key.upper().replace(".", "__").replace("-", "_")
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{variable}", value)
    return Lake(name, f"ns_{uuid.uuid4().hex[:8]}", load_catalog(name, **properties))


@pytest.fixture
def rest_lake(monkeypatch: pytest.MonkeyPatch, rest_catalog: RestCatalogServer) -> Iterator[Lake]:
    """The session's REST catalog, warehouse on the S3 server, S3 settings in the catalog's
    properties."""
    lake = configure_rest(monkeypatch, rest_catalog)
    yield lake
    if (lake.namespace,) in lake.catalog.list_namespaces():
        _drop(lake.catalog, lake.namespace)


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def lake(request: pytest.FixtureRequest) -> Lake:
    """Each catalog in turn: SQL on SQLite and on PostgreSQL, and REST."""
    found: Lake = request.getfixturevalue(f"{request.param}_lake")
    return found


def table_rows(lake: Lake, name: str = "readings") -> list[dict[str, Any]]:
    """Every row of the table, by a pyiceberg scan."""
    rows: list[dict[str, Any]] = lake.table(name).scan().to_arrow().to_pylist()
    return rows


def file_exists(lake: Lake, uri: str) -> bool:
    """Whether the file at ``uri`` (local or on the S3 server) exists, asked through the
    table's own FileIO."""
    return bool(lake.table().io.new_input(uri).exists())


def data_files(lake: Lake, name: str = "readings") -> list[str]:
    """The table's current data files."""
    return sorted(task.file.file_path for task in lake.table(name).scan().plan_files())


def sluice_summaries(lake: Lake, name: str = "readings") -> list[dict[str, str]]:
    """The summaries of the table's snapshots that name a batch, oldest first."""
    summaries = [dict(s.summary.additional_properties) for s in lake.table(name).snapshots()]
    return [s for s in summaries if "sluice.batch-id" in s]
