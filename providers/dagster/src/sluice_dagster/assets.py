"""``make_ingest_asset``: a Parquet dataset whose materializations ingest one batch each."""

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import AssetExecutionContext, AssetsDefinition, MaterializeResult, asset

from .ops import INGEST_TAG, IngestConfig, IngestSettings, run_ingest

__all__ = ["make_ingest_asset"]


def make_ingest_asset(
    name: str,
    resource_key: str,
    sink: str,
    *,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    **settings: Any,
) -> AssetsDefinition:
    """An asset, the dataset ``sink``; each materialization ingests the batch given in its
    run config (the queue sensor gives one) from the queue resource ``resource_key`` and
    records counts, ranges, lag and duration as materialization metadata. ``settings``: the
    other fields of :class:`~sluice_dagster.ops.IngestSettings` (``schema``, ``mode``,
    ``spark_resource_key``, ``dead_letter``...)."""
    ingest_settings = IngestSettings.of(resource_key, sink, **settings)

    @asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        description=description or f"Parquet dataset at {sink}, ingested from '{resource_key}'.",
        required_resource_keys=ingest_settings.resource_keys(),
        op_tags={INGEST_TAG: resource_key},
        metadata={"sink": sink, **(metadata or {})},
        kinds={"spark", "parquet"},
    )
    def _asset(context: AssetExecutionContext, config: IngestConfig) -> MaterializeResult[None]:
        _, result_metadata = run_ingest(context, config, ingest_settings)
        return MaterializeResult(metadata=result_metadata)

    return _asset
