"""Keeping a sink fast from Dagster: ``make_maintenance_job`` (a compact op, then an expire
op) and ``make_maintenance_schedule`` (that job on a cron), with the options of ``sluice
compact`` and ``sluice expire``::

    maintenance = make_maintenance_job("readings_maintenance", sink="/lake/readings",
                                       target_file_size="128MB", older_than="7d")
    defs = Definitions(jobs=[maintenance],
                       schedules=[make_maintenance_schedule(maintenance, "0 3 * * *")])

Each op's metadata holds the result's counts; a compaction that another compaction overtook
fails its op (nothing was changed; the next run compacts). Run config can override each
option per run (``ops: {<name>_compact: {config: {min_files: 2}}}``).
"""

from typing import Any

from dagster import (
    Config,
    DefaultScheduleStatus,
    Failure,
    In,
    JobDefinition,
    Nothing,
    OpDefinition,
    OpExecutionContext,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from sluice.maintenance import DEFAULT_MIN_FILES, compact, expire, parse_age, parse_size
from sluice.queues.config import ConfigError

from .fields import StrictFields

__all__ = [
    "CompactConfig",
    "ExpireConfig",
    "make_compact_op",
    "make_expire_op",
    "make_maintenance_job",
    "make_maintenance_schedule",
]


class CompactConfig(StrictFields, Config):
    """Run config of a compact op: overrides what the op was defined with."""

    target_file_size: str | None = Field(default=None, description="e.g. 128MB")
    min_files: int | None = Field(default=None, description="smallest group rewritten")


class ExpireConfig(StrictFields, Config):
    """Run config of an expire op: overrides what the op was defined with."""

    older_than: str | None = Field(default=None, description="e.g. 7d")
    min_age: str | None = Field(default=None, description="Iceberg orphans: e.g. 1h")
    dry_run: bool | None = Field(default=None, description="only say what would go")


def _numbers(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if isinstance(v, (int, float, str)) and k != "sink"}


def make_compact_op(
    name: str, sink: str, target_file_size: str | int = "128MB", min_files: int = DEFAULT_MIN_FILES
) -> OpDefinition:
    """An op that compacts ``sink`` (see :func:`sluice.maintenance.compact`)."""
    parse_size(target_file_size)

    @op(name=name, description=f"Compact the small files of {sink}.")
    def _compact(context: OpExecutionContext, config: CompactConfig) -> dict[str, Any]:
        try:
            result = compact(
                sink,
                config.target_file_size or target_file_size,
                config.min_files or min_files,
                context.log.info,
            )
        except ConfigError as exc:
            raise Failure(str(exc), allow_retries=False) from None
        context.add_output_metadata(_numbers(result.to_dict()))
        if result.gave_up:
            raise Failure(f"The compaction of {sink} gave up: {result.gave_up}")
        return result.to_dict()

    return _compact


def make_expire_op(
    name: str,
    sink: str,
    older_than: str | float = "7d",
    min_age: str | float = "1h",
    dry_run: bool = False,
) -> OpDefinition:
    """An op that expires what ``sink`` no longer needs (see :func:`sluice.maintenance.expire`)."""
    parse_age(older_than)
    parse_age(min_age)

    @op(
        name=name,
        description=f"Expire old snapshots and files of {sink}.",
        ins={"start_after": In(Nothing)},
    )
    def _expire(context: OpExecutionContext, config: ExpireConfig) -> dict[str, Any]:
        try:
            result = expire(
                sink,
                config.older_than or older_than,
                dry_run if config.dry_run is None else config.dry_run,
                config.min_age or min_age,
                context.log.info,
            )
        except ConfigError as exc:
            raise Failure(str(exc), allow_retries=False) from None
        context.add_output_metadata(_numbers(result.to_dict()))
        return result.to_dict()

    return _expire


def make_maintenance_job(
    name: str,
    sink: str,
    *,
    target_file_size: str | int = "128MB",
    min_files: int = DEFAULT_MIN_FILES,
    older_than: str | float = "7d",
    min_age: str | float = "1h",
    dry_run: bool = False,
) -> JobDefinition:
    """A job ``name``: ``<name>_compact``, then ``<name>_expire``, on ``sink``."""
    compact_op = make_compact_op(f"{name}_compact", sink, target_file_size, min_files)
    expire_op = make_expire_op(f"{name}_expire", sink, older_than, min_age, dry_run)

    @job(name=name, description=f"Compact and expire {sink}.", executor_def=in_process_executor)
    def _job() -> None:
        expire_op(start_after=compact_op())

    return _job


def make_maintenance_schedule(
    job_def: JobDefinition,
    cron_schedule: str = "0 3 * * *",
    *,
    name: str | None = None,
    execution_timezone: str | None = None,
    default_status: DefaultScheduleStatus = DefaultScheduleStatus.STOPPED,
) -> ScheduleDefinition:
    """``job_def`` (a :func:`make_maintenance_job`) on ``cron_schedule`` (default daily 03:00)."""
    return ScheduleDefinition(
        name=name or f"{job_def.name}_schedule",
        job=job_def,
        cron_schedule=cron_schedule,
        execution_timezone=execution_timezone,
        default_status=default_status,
    )
