"""``make_ingest_schedule``: on a cron schedule, one run for whatever waits, or a skip.

The schedule counterpart of :func:`~sluice_dagster.sensors.make_queue_sensor`, for "every hour
(or at 02:00) ingest what has arrived": the batch-ingest habit of Spark's
``Trigger.AvailableNow``. Each tick plans the waiting batch without committing anything and
requests one run of the ingest job or asset for it, with the same run config and tags as the
sensor's (:func:`~sluice_dagster.requests.batch_run_request`), keyed by its ``batch_id``; or
it skips with a reason (``SkipReason``): nothing waits, fewer than ``min_messages`` do, the
broker cannot be reached (for :data:`PLAN_PATIENCE` seconds: a skipped tick of an hourly
schedule costs an hour), or a run of this schedule is still queued or running.

Each tick plans from the committed offsets (Kafka) or drains the persistent session (MQTT)
*at that tick*, so a failed run's messages are taken by the next tick's run together with
whatever arrived since, and the ingest skips what the failed run may already have written:
every message lands once. A tick keeps no cursor; it looks at the runs this schedule
launched (tag ``sluice/schedule``):

- while one of them is queued or running, it asks for nothing (two runs of one group or one
  MQTT session would race each other's commits);
- a batch planned again unchanged (its run failed and nothing arrived since) gets the run key
  ``<batch_id>.<n>``, n the earlier runs of that batch, and the tag ``sluice/attempt``.

Choose the schedule when a batch per interval is what you want (cost: one run per tick with
messages, none without); the sensor when latency matters (a run per batch within its
``minimum_interval_seconds``). Turn on one of them per job or asset, not both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    DagsterInvariantViolationError,
    DagsterRun,
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from sluice.cursor import BatchCursor, BatchRequest, RunState

from .requests import (
    BATCH_TAG,
    AssetTargets,
    asset_keys,
    batch_run_request,
    check_targets,
    ingest_op_name,
    plan_waiting,
    queue_resource,
    where,
)
from .resources import QueueUnavailableError

__all__ = ["PLAN_PATIENCE", "SCHEDULE_TAG", "make_ingest_schedule"]

SCHEDULE_TAG = "sluice/schedule"

#: Seconds a tick keeps trying to reach the broker before it skips: a skipped tick of an
#: hourly schedule leaves the messages waiting for an hour.
PLAN_PATIENCE = 10.0

#: Run states in which a run may still read or commit the schedule's messages.
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.MANAGED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.SUSPENDED,
    DagsterRunStatus.CANCELING,
]


def make_ingest_schedule(
    name: str,
    resource_key: str,
    cron_schedule: str,
    *,
    job: JobDefinition | None = None,
    asset_selection: AssetTargets | None = None,
    ingest_op: str | None = None,
    min_messages: int = 1,
    max_messages: int | None = None,
    execution_timezone: str | None = None,
    default_status: DefaultScheduleStatus = DefaultScheduleStatus.STOPPED,
    description: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> ScheduleDefinition:
    """A schedule on ``cron_schedule`` (e.g. ``"0 * * * *"``, ``"@daily"``) whose every tick
    requests one run of ``job`` (or of ``asset_selection``) for what waits on the queue
    resource ``resource_key``, or skips (see the module docstring).

    The arguments are those of :func:`~sluice_dagster.sensors.make_queue_sensor`: the batch
    goes to the config of the op ``ingest_op`` (by default the ingest op reading
    ``resource_key``) and holds at least ``min_messages`` and at most ``max_messages``
    messages (Kafka; for MQTT the most a run drains). ``execution_timezone`` is the cron's
    time zone (default UTC).
    """
    factory = f"make_ingest_schedule('{name}')"
    check_targets(factory, job, asset_selection, min_messages, max_messages)
    op_name = ingest_op or ingest_op_name(factory, resource_key, job, asset_selection)

    @schedule(
        cron_schedule=cron_schedule,
        name=name,
        target=job if job is not None else asset_keys(asset_selection),
        execution_timezone=execution_timezone,
        default_status=default_status,
        required_resource_keys={resource_key},
        description=description
        or f"Requests a run for the messages waiting on resource '{resource_key}' at each tick.",
    )
    def _schedule(context: ScheduleEvaluationContext, **_: Any) -> RunRequest | SkipReason:
        resource = queue_resource(context.resources, resource_key, f"Schedule '{name}'")
        queue = where(resource)
        active = _run_in_flight(context, name)
        if active is not None:
            return SkipReason(
                f"{queue}: run {active.run_id} of batch {active.tags.get(BATCH_TAG)} is still "
                "being ingested; the next tick plans from what it committed."
            )
        try:
            waiting = plan_waiting(resource, max_messages, min_messages, PLAN_PATIENCE)
        except QueueUnavailableError as exc:
            return SkipReason(str(exc))
        planned = BatchCursor().next_request(waiting, RunState.NONE, max_messages, min_messages)
        if isinstance(planned, str):
            return SkipReason(f"{queue}: {planned}.")
        attempt = _earlier_runs(context, name, planned.spec.batch_id)
        request = BatchRequest(planned.spec, attempt, retry=attempt > 0)
        context.log.info(
            f"{queue}: requesting {'again ' if request.retry else ''}batch "
            f"{request.spec.batch_id} (run key {request.run_key})"
        )
        return batch_run_request(SCHEDULE_TAG, name, op_name, request, tags)

    return _schedule


def _runs(
    context: ScheduleEvaluationContext, tags: Mapping[str, str], **filters: Any
) -> list[DagsterRun]:
    try:
        instance = context.instance
    except DagsterInvariantViolationError:  # a test context without an instance
        return []
    return list(instance.get_runs(filters=RunsFilter(tags=dict(tags), **filters)))


def _run_in_flight(context: ScheduleEvaluationContext, schedule_name: str) -> DagsterRun | None:
    """A run of this schedule that is queued or running, if any."""
    runs = _runs(context, {SCHEDULE_TAG: schedule_name}, statuses=IN_FLIGHT)
    return runs[0] if runs else None


def _earlier_runs(context: ScheduleEvaluationContext, schedule_name: str, batch_id: str) -> int:
    """How many runs this schedule launched for ``batch_id`` already (failed ones: a batch
    whose run succeeded is committed, and so never planned again)."""
    return len(_runs(context, {SCHEDULE_TAG: schedule_name, BATCH_TAG: batch_id}))
