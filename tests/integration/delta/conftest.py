"""Delta Lake sinks: tables in the test's directory, or in a bucket of one of the tests' S3
servers (SeaweedFS, and moto's as a second S3 implementation), on a real delta-rs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.testing.plugin import Broker, CloudBucket, S3Bucket

from ..spark.conftest import KafkaTopic, opened_topic

#: Where a test's tables can be: a local directory, SeaweedFS (the tests' S3 server), moto,
#: Azurite (Azure Blob Storage).
PLACES = ("local", "seaweedfs", "moto", "azurite")


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    """A 3-partition topic on Apache Kafka (the reference broker)."""
    yield from opened_topic(apache_kafka_broker, unique_name)


def storage_options(location: str | Path) -> dict[str, str] | None:
    """delta-rs's options for a table at ``location`` (a local path, or ``s3://...`` on the
    server the test's ``AWS_*`` variables name): the sink's own."""
    text = str(location)
    if text.startswith(("gs://", "az://")):
        from sluice.spark.sinks.cloud import azure_settings, gcs_settings

        return (gcs_settings() if text.startswith("gs://") else azure_settings()).storage_options()
    if not text.startswith("s3://"):
        return None
    from sluice.spark.sinks.tablestore import S3Store

    return S3Store(text.split("/")[2]).storage_options


def open_delta(location: str | Path) -> Any:
    """The Delta table at ``location`` (a local path, or an ``s3://`` URI)."""
    from deltalake import DeltaTable

    return DeltaTable(str(location), storage_options=storage_options(location))


@dataclass(frozen=True)
class DeltaPlace:
    """Where a test's tables are: a local directory, or a bucket on an S3 server."""

    kind: str  # one of PLACES
    root: str  # the directory, or s3://BUCKET (az://CONTAINER)
    bucket: S3Bucket | CloudBucket | None = None

    def uri(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def sink(self, *parts: str) -> str:
        return f"delta://{self.uri(*parts)}"

    def table(self, *parts: str) -> Any:
        return open_delta(self.uri(*parts))

    def files(self, *parts: str) -> list[str]:
        """Every file under ``parts``, relative to it."""
        if self.bucket is None:
            base = Path(self.uri(*parts))
            found = base.rglob("*") if base.is_dir() else []
            return sorted(p.relative_to(base).as_posix() for p in found if p.is_file())
        prefix = "/".join(parts) + "/"
        keys = self.bucket.keys(prefix)
        return sorted(k[len(prefix) :] for k in keys if not k.endswith("/"))


@pytest.fixture
def delta_place(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], DeltaPlace]:
    """``delta_place(kind)``: a fresh place of that kind (the S3 servers start only for the
    tests that ask for them)."""

    def place(kind: str) -> DeltaPlace:
        if kind == "local":
            return DeltaPlace(kind, str(tmp_path))
        if kind == "azurite":
            container: CloudBucket = request.getfixturevalue("azure_container")
            return DeltaPlace(kind, container.uri(), container)
        bucket: S3Bucket = request.getfixturevalue(
            "s3_bucket" if kind == "seaweedfs" else "moto_s3_bucket"
        )
        return DeltaPlace(kind, bucket.uri(), bucket)

    return place
