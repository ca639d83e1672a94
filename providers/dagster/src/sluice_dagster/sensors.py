"""``make_queue_sensor``: one run per batch of waiting messages, never two for the same batch.

Each tick plans a batch without committing anything (:meth:`QueueResource.plan_batch`) and
asks for one run of the ingest job or asset, with the batch's ``BatchSpec`` in the ingest
op's run config and its ``batch_id`` as run key. The ingest run commits after writing.

The cursor (JSON, a :class:`sluice.cursor.BatchCursor`) holds the end offset requested in each
partition and the last batch requested. One batch is in flight at a time: while its run is
queued or running, ticks skip without touching the broker. Why, and what happens when a run
fails:

- The cursor alone must not decide what comes next, or a failed run's messages would be
  skipped: the committed offsets are the truth of what was ingested, and the cursor is only
  what was *asked for*. When the committed offsets are behind the cursor's positions and
  the last run failed (or was cancelled), the tick asks for the *same* batch again: the same
  ranges give the same ``batch_id``, so the rerun replaces that batch's output instead of
  writing its messages a second time under another id, as a wider re-planned batch would.
- Dagster drops a run request whose run key it has seen, so a retry gets the run key
  ``<batch_id>.<attempt>`` (the first attempt's is the plain ``batch_id``). A request whose
  run does not exist yet keeps its key, so asking again is harmless.
- Runs are found by the ``sluice/sensor`` and ``sluice/run_key`` tags this sensor gives them.
  A run that hangs in STARTED blocks the sensor: enable Dagster's run monitoring.

MQTT batches drain the persistent session; a failed run leaves its messages unacknowledged,
so the next batch takes them again. When the broker cannot be reached, the tick skips with a
message naming it.

These are the rules of the one sensing model (:mod:`sluice.sensing`), which Airflow's
trigger follows too; this sensor sees its runs' states, the trigger reads them from the
committed offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetKey,
    AssetsDefinition,
    DagsterInvariantViolationError,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from sluice.cursor import BatchCursor, BatchRequest, RunState

from .ops import INGEST_TAG, ingest_run_config
from .resources import KafkaQueueResource, QueueResource, QueueUnavailableError

__all__ = ["BATCH_TAG", "RUN_KEY_TAG", "SENSOR_TAG", "make_queue_sensor"]

SENSOR_TAG = "sluice/sensor"
RUN_KEY_TAG = "sluice/run_key"
BATCH_TAG = "sluice/batch_id"

_FINISHED = {
    DagsterRunStatus.SUCCESS: RunState.SUCCEEDED,
    DagsterRunStatus.FAILURE: RunState.FAILED,
    DagsterRunStatus.CANCELED: RunState.FAILED,
}

AssetTargets = Sequence[AssetsDefinition | AssetKey | str]


def make_queue_sensor(
    name: str,
    resource_key: str,
    *,
    job: JobDefinition | None = None,
    asset_selection: AssetTargets | None = None,
    ingest_op: str | None = None,
    min_messages: int = 1,
    max_messages: int | None = None,
    minimum_interval_seconds: int = 30,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    description: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> SensorDefinition:
    """A sensor that requests a run of ``job`` (or of ``asset_selection``) for each batch
    waiting on the queue resource ``resource_key`` (see the module docstring).

    ``ingest_op`` names the op (node) whose config gets the batch; by default the op of
    :func:`~sluice_dagster.jobs.make_ingest_job` or
    :func:`~sluice_dagster.assets.make_ingest_asset` reading ``resource_key``. A batch has at
    least ``min_messages`` and at most ``max_messages`` messages (Kafka; for MQTT the most a
    run drains).
    """
    if (job is None) == (asset_selection is None):
        raise ValueError(f"make_queue_sensor('{name}'): give either job or asset_selection.")
    if min_messages < 1 or (max_messages is not None and max_messages < min_messages):
        raise ValueError(
            f"make_queue_sensor('{name}'): need 1 <= min_messages <= max_messages, "
            f"got min_messages={min_messages}, max_messages={max_messages}."
        )
    op_name = ingest_op or _ingest_op_name(name, resource_key, job, asset_selection)

    @sensor(
        name=name,
        job=job,
        asset_selection=_selection(asset_selection),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={resource_key},
        description=description
        or f"Requests one run per batch of messages waiting on resource '{resource_key}'.",
    )
    def _sensor(context: SensorEvaluationContext, **_: Any) -> SensorResult | SkipReason:
        # the daemon passes resources only through the context; a direct call also as kwargs
        resource = getattr(context.resources, resource_key)
        if not isinstance(resource, QueueResource):
            raise TypeError(
                f"Sensor '{name}': resource '{resource_key}' is a {type(resource).__name__}, "
                "not a Sluice queue resource (KafkaQueueResource or MqttQueueResource)."
            )
        cursor = BatchCursor.from_json(context.cursor)
        state = _last_run_state(context, name, cursor)
        where = f"{resource.KIND} topic '{resource.topic}' at {resource.address}"
        if state is RunState.ACTIVE:
            return SkipReason(f"{where}: batch {cursor.last_run_key} is still being ingested.")
        try:
            if isinstance(resource, KafkaQueueResource):
                waiting = resource.plan_batch()  # all of it: the cursor cuts it to size
            else:
                waiting = resource.plan_batch(max_messages, min_messages)
        except QueueUnavailableError as exc:
            return SkipReason(str(exc))
        decision = cursor.next_request(waiting, state, max_messages, min_messages)
        if isinstance(decision, str):
            return SkipReason(f"{where}: {decision}.")
        context.log.info(
            f"{where}: requesting {'again ' if decision.retry else ''}batch "
            f"{decision.spec.batch_id} (run key {decision.run_key})"
        )
        return SensorResult(
            run_requests=[_run_request(name, op_name, decision, tags)],
            cursor=cursor.advance(decision).to_json(),
        )

    return _sensor


def _selection(assets: AssetTargets | None) -> list[AssetKey] | None:
    if assets is None:
        return None
    keys: list[AssetKey] = []
    for target in assets:
        if isinstance(target, AssetsDefinition):
            keys.extend(target.keys)
        else:
            keys.append(
                target if isinstance(target, AssetKey) else AssetKey.from_user_string(target)
            )
    return keys


def _run_request(
    sensor_name: str, op_name: str, request: BatchRequest, tags: Mapping[str, str] | None
) -> RunRequest:
    spec = request.spec
    run_tags = {
        **(tags or {}),
        SENSOR_TAG: sensor_name,
        RUN_KEY_TAG: request.run_key,
        BATCH_TAG: spec.batch_id,
        "sluice/topic": spec.topic,
        "sluice/attempt": str(request.attempt),
    }
    if spec.kind == "kafka":
        run_tags["sluice/messages"] = str(spec.message_count)
    return RunRequest(
        run_key=request.run_key,
        run_config=ingest_run_config(spec, op_name),
        tags=run_tags,
    )


def _last_run_state(
    context: SensorEvaluationContext, sensor_name: str, cursor: BatchCursor
) -> RunState:
    key = cursor.last_run_key
    if key is None:
        return RunState.NONE
    try:
        instance = context.instance
    except DagsterInvariantViolationError:  # a test context without an instance
        return RunState.MISSING
    runs = instance.get_runs(
        filters=RunsFilter(tags={SENSOR_TAG: sensor_name, RUN_KEY_TAG: key}), limit=1
    )
    if not runs:
        return RunState.MISSING
    return _FINISHED.get(runs[0].status, RunState.ACTIVE)


def _ingest_op_name(
    sensor_name: str,
    resource_key: str,
    job: JobDefinition | None,
    assets: AssetTargets | None,
) -> str:
    """The node that takes the batch: the ingest op reading ``resource_key``."""
    found: list[str] = []
    if isinstance(job, JobDefinition):
        found = [
            node.name
            for node in job.graph.nodes
            if node.definition.tags.get(INGEST_TAG) == resource_key
        ]
    elif assets is not None:
        for target in assets:
            if isinstance(target, AssetsDefinition):
                if target.op.tags.get(INGEST_TAG) == resource_key:
                    found.append(target.op.name)
            elif len(assets) == 1:
                key = target if isinstance(target, AssetKey) else AssetKey.from_user_string(target)
                found.append(key.to_python_identifier())
    if len(found) != 1:
        what = "ops" if job is not None else "assets"
        raise ValueError(
            f"make_queue_sensor('{sensor_name}'): found {len(found)} ingest {what} reading "
            f"resource '{resource_key}' ({', '.join(found) or 'none'}); name the one that takes "
            "the batch with ingest_op=..."
        )
    return found[0]
