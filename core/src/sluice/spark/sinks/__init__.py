"""Sinks: where ingested batches go. One small interface (:class:`Sink`), one implementation
per kind of storage, chosen by the sink's location."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...queues.config import ConfigError
from .base import BatchRecord, ConcurrentIngestError, Sink, Staging, StreamKey, StreamState
from .coverage import Coverage
from .parquet import ParquetSink

__all__ = [
    "BatchRecord",
    "ConcurrentIngestError",
    "Coverage",
    "ParquetSink",
    "Sink",
    "Staging",
    "StreamKey",
    "StreamState",
    "is_delta",
    "is_iceberg",
    "open_sink",
]


def open_sink(
    location: str | os.PathLike[str] | Sink,
    partition_by: str | Sequence[str] | None = None,
) -> Sink:
    """The sink at ``location``: ``iceberg://CATALOG/NAMESPACE.TABLE`` is an Apache Iceberg
    table (:mod:`.iceberg`, needs ``sluice-core[iceberg]``); ``s3://BUCKET/PREFIX`` a Parquet
    dataset on S3 (:mod:`.parquet_s3`, needs ``sluice-core[s3]``); a directory (or ``file://``
    URI) a Parquet dataset; ``delta://PATH``, or a directory holding a ``_delta_log``, a Delta
    Lake table (:mod:`.delta`, needs ``sluice-core[delta]``). ``partition_by``: a partition spec
    (:mod:`..partitioning`, e.g. ``"day(timestamp),bucket(16,device)"``) for an Iceberg table (or
    its URI's ``?partition_by=``) or a Parquet dataset (hive-style directories in each
    batch)."""
    if is_delta(location):
        if partition_by:
            raise ConfigError(
                f"The sink {location} is a Delta Lake table, which Sluice does not partition "
                "yet: partition an Iceberg table (iceberg://...?partition_by=...) or a local "
                "Parquet dataset, or leave partition_by out."
            )
        try:
            import deltalake  # noqa: F401

            from .delta import DeltaSink
        except ImportError as exc:
            raise ConfigError(
                f"The sink {location} is a Delta Lake table, which needs deltalake ({exc}): "
                "pip install 'sluice-core[delta]'."
            ) from None
        assert isinstance(location, (str, os.PathLike))
        return DeltaSink(location)
    if isinstance(location, str) and location.lower().startswith(("s3://", "s3a://")):
        try:
            import botocore  # noqa: F401

            from .parquet_s3 import S3ParquetSink
        except ImportError as exc:
            raise ConfigError(
                f"The sink {location} is a Parquet dataset on S3, which needs botocore "
                f"({exc}): pip install 'sluice-core[s3]'."
            ) from None
        return S3ParquetSink(location, partition_by)
    if isinstance(location, str) and is_iceberg(location):
        try:
            import pyiceberg  # noqa: F401

            from .iceberg import IcebergSink
        except ImportError as exc:
            raise ConfigError(
                f"The sink {location} is an Iceberg table, which needs pyiceberg ({exc}): "
                "pip install 'sluice-core[iceberg]'."
            ) from None
        return IcebergSink(location, partition_by)
    if isinstance(location, (str, os.PathLike)):
        return ParquetSink(location, partition_by)
    if partition_by:
        raise ConfigError(
            f"partition_by is given with a sink object ({location!r}): give it to the sink."
        )
    return location


def is_iceberg(location: object) -> bool:
    """Whether ``location`` names an Iceberg table (``iceberg://...``)."""
    return isinstance(location, str) and location.lower().startswith("iceberg://")


def is_delta(location: object) -> bool:
    """Whether ``location`` names a Delta table (``delta://...``, or a local directory that
    holds a ``_delta_log``)."""
    from .delta import is_delta as named_delta

    return named_delta(location)
