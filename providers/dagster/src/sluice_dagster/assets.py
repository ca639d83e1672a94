"""``make_ingest_asset``: a Parquet dataset whose materializations ingest one batch each."""

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    TableColumn,
    TableSchema,
    asset,
)

from sluice.lineage import path_dataset, written_schema
from sluice.spark.sinks import is_delta, is_iceberg

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
    deps: Sequence[AssetSpec | AssetsDefinition | AssetKey | AssetDep | str] | None = None,
    **settings: Any,
) -> AssetsDefinition:
    """An asset, the dataset ``sink``; each materialization ingests the batch given in its
    run config (the queue sensor gives one) from the queue resource ``resource_key`` and
    records counts, ranges, lag, duration and the table's columns as materialization
    metadata. ``deps``: what it is made from, usually the topic's
    :func:`~sluice_dagster.observability.topic_asset` (the lineage graph then shows topic →
    table). ``settings``: the other fields of :class:`~sluice_dagster.ops.IngestSettings`
    (``schema``, ``mode``, ``spark_resource_key``, ``dead_letter``...)."""
    ingest_settings = IngestSettings.of(resource_key, sink, **settings)
    iceberg = is_iceberg(sink)
    uri = sink if iceberg else path_dataset(sink).uri

    @asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        description=description or f"Parquet dataset at {sink}, ingested from '{resource_key}'.",
        required_resource_keys=ingest_settings.resource_keys(),
        op_tags={INGEST_TAG: resource_key},
        metadata={"sink": sink, "dagster/uri": uri, **(metadata or {})},
        kinds={"spark", "iceberg" if iceberg else "delta" if is_delta(sink) else "parquet"},
        deps=deps,
    )
    def _asset(context: AssetExecutionContext, config: IngestConfig) -> MaterializeResult[None]:
        result, result_metadata = run_ingest(context, config, ingest_settings)
        try:
            columns = written_schema(config.sink or sink, result.output)
        except Exception as exc:  # metadata: the batch is written and committed already
            context.log.warning(f"Could not read the table's columns: {exc}")
            columns = []
        if columns:
            result_metadata["dagster/column_schema"] = TableSchema(
                columns=[TableColumn(name, kind) for name, kind in columns]
            )
        return MaterializeResult(metadata=result_metadata)

    return _asset
