"""Routed ingests: one topic into many tables (Iceberg on a SQLite catalog, Delta and
Parquet in the test's directory), on Apache Kafka."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.routes import Routes
from sluice.testing.plugin import Broker

from ..iceberg.conftest import Lake, sqlite_lake  # noqa: F401  (a fixture of this directory)
from ..spark.conftest import KafkaTopic, opened_topic

SCHEMA = "event_type STRING, n INT"
#: Ten routes: five Iceberg tables, four Delta tables and one Parquet dataset.
KINDS = [f"k{i}" for i in range(10)]


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on Apache Kafka (the reference broker)."""
    yield from opened_topic(apache_kafka_broker, unique_name)


def event(kind: str | None, n: int, **more: Any) -> bytes:
    body: dict[str, Any] = {"n": n, **more}
    if kind is not None:
        body["event_type"] = kind
    return json.dumps(body).encode()


@dataclass
class RoutedLake:
    """Ten route tables of mixed kinds, and the ingest's own sink (a Delta table)."""

    lake: Lake
    root: Path

    @property
    def routes(self) -> Routes:
        return Routes(by="field:event_type", tables={k: self.table(k) for k in KINDS})

    @property
    def home(self) -> str:
        return f"delta://{self.root / 'events_other'}"

    def table(self, kind: str) -> str:
        number = int(kind[1:])
        if number < 5:
            return self.lake.sink(f"events_{kind}")
        if number < 9:
            return f"delta://{self.root / 'delta' / kind}"
        return str(self.root / "parquet" / kind)

    def rows(self, kind: str) -> list[dict[str, Any]]:
        """The good rows of a route's table."""
        return table_rows(self.table(kind))

    def quarantined(self, location: str) -> list[dict[str, Any]]:
        return quarantined_rows(location)


def table_rows(location: str) -> list[dict[str, Any]]:
    """Every good row of a sink (Iceberg, Delta or a Parquet directory), by its own reader."""
    if location.startswith("iceberg://"):
        from sluice.spark.sinks import open_sink

        sink: Any = open_sink(location)
        table = sink._load(sink.target.table)
        return [] if table is None else table.scan().to_arrow().to_pylist()
    if location.startswith("delta://"):
        from deltalake import DeltaTable

        path = location.removeprefix("delta://")
        if not (Path(path) / "_delta_log").exists():
            return []
        return DeltaTable(path).to_pyarrow_table().to_pylist()
    root = Path(location)
    if not any(root.glob("batch_id=*/*.parquet")):
        return []
    return pq.read_table(root).to_pylist()


def quarantined_rows(location: str) -> list[dict[str, Any]]:
    """Every quarantined row of a sink."""
    if location.startswith("iceberg://"):
        from sluice.spark.sinks import open_sink

        sink: Any = open_sink(location)
        table = sink._load(sink.target.quarantine)
        return [] if table is None else table.scan().to_arrow().to_pylist()
    if location.startswith("delta://"):
        from deltalake import DeltaTable

        path = Path(location.removeprefix("delta://")) / "_quarantine"
        if not (path / "_delta_log").exists():
            return []
        return DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    rows = []
    for directory in sorted(Path(location).glob("batch_id=*/_quarantine")):
        rows += pq.read_table(directory).to_pylist()
    return rows


@pytest.fixture
def routed_lake(sqlite_lake: Lake, tmp_path: Path) -> RoutedLake:  # noqa: F811
    return RoutedLake(sqlite_lake, tmp_path)
