"""The tests' Apache Iceberg REST catalog server: :mod:`sluice.rest_catalog_server` (the
``sluice`` command starts it too, and production code never imports :mod:`sluice.testing`)."""

from __future__ import annotations

from ..rest_catalog_server import (
    ICEBERG_VERSION,
    LAUNCHER_SOURCE,
    REST_CATALOG_COORDINATES,
    RestCatalogServer,
    rest_catalog_classpath,
    start_rest_catalog,
)

__all__ = [
    "ICEBERG_VERSION",
    "LAUNCHER_SOURCE",
    "REST_CATALOG_COORDINATES",
    "RestCatalogServer",
    "rest_catalog_classpath",
    "start_rest_catalog",
]
