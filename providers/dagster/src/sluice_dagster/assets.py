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
    schema: str | None = None,
    value_format: str = "json",
    mode: str = "auto",
    spark_resource_key: str = "spark",
    dead_letter: bool = False,
    fail_on_data_loss: bool = True,
    payload_column: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> AssetsDefinition:
    """An asset, the Parquet dataset ``sink``; each materialization ingests the batch given
    in its run config (the queue sensor gives one) from the queue resource ``resource_key``
    and records counts, ranges, lag and duration as materialization metadata."""
    settings = IngestSettings(
        resource_key=resource_key,
        sink=sink,
        schema=schema,
        value_format=value_format,
        mode=mode,
        spark_resource_key=spark_resource_key,
        dead_letter=dead_letter,
        fail_on_data_loss=fail_on_data_loss,
        payload_column=payload_column,
    )

    @asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        description=description or f"Parquet dataset at {sink}, ingested from '{resource_key}'.",
        required_resource_keys={resource_key, spark_resource_key},
        op_tags={INGEST_TAG: resource_key},
        metadata={"sink": sink, **(metadata or {})},
        kinds={"spark", "parquet"},
    )
    def _asset(context: AssetExecutionContext, config: IngestConfig) -> MaterializeResult[None]:
        _, result_metadata = run_ingest(context, config, settings)
        return MaterializeResult(metadata=result_metadata)

    return _asset
