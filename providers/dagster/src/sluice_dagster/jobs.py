"""``make_ingest_job``: a one-op job that ingests the batch its run config names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import ExecutorDefinition, JobDefinition, in_process_executor, job

from .ops import IngestSettings, make_ingest_op

__all__ = ["make_ingest_job"]


def make_ingest_job(
    name: str,
    resource_key: str,
    sink: str,
    *,
    description: str | None = None,
    tags: Mapping[str, Any] | None = None,
    executor_def: ExecutorDefinition = in_process_executor,
    **settings: Any,
) -> JobDefinition:
    """A job of one op, ``<name>_ingest``, that ingests a batch from the queue resource
    ``resource_key`` into the Parquet dataset ``sink`` on the SparkSession of
    ``spark_resource_key`` (see :mod:`sluice_dagster.ops`). Trigger it with
    :func:`sluice_dagster.sensors.make_queue_sensor`. It runs in process by default: its one
    op needs no subprocess of its own (Spark does the parallel work). ``settings``: the other
    fields of :class:`~sluice_dagster.ops.IngestSettings` (``schema``, ``mode``,
    ``spark_resource_key``, ``dead_letter``...)."""
    ingest_settings = IngestSettings.of(resource_key, sink, **settings)
    ingest_op = make_ingest_op(f"{name}_ingest", ingest_settings)

    @job(
        name=name,
        description=description or f"Ingest batches from '{resource_key}' into {sink}.",
        tags=tags,
        executor_def=executor_def,
    )
    def _job() -> None:
        ingest_op()

    return _job
