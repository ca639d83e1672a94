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

A routed topic: when ``asset_selection`` is the assets of
:func:`~sluice_dagster.routed.make_routed_assets`, each batch asked for is read once and
routed (:func:`sluice.route_index.batch_places`, committing nothing), and its run selects
only the assets whose tables get messages of it (the ingest's own asset for the messages no
route takes); the run key is the batch's, as always. MQTT batches cannot be read at sensing:
their runs select every asset.

With ``observe`` (the default) a sensor of assets records, at each tick that asks a Kafka
broker, an ``AssetObservation`` of each asset: the group's lag per partition and the age of
the oldest waiting message (:func:`~sluice_dagster.observability.lag_observation`), so the
asset's page plots how far behind it is between materializations.

These are the rules of the one sensing model (:mod:`sluice.sensing`), which Airflow's
trigger follows too; this sensor sees its runs' states, the trigger reads them from the
committed offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    AssetKey,
    AssetObservation,
    DagsterInvariantViolationError,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from sluice.cursor import BatchCursor, RunState
from sluice.metrics import kafka_lag
from sluice.route_index import batch_places

from .observability import lag_observation
from .requests import (
    BATCH_TAG,
    RUN_KEY_TAG,
    AssetTargets,
    asset_keys,
    batch_run_request,
    check_targets,
    ingest_op_name,
    plan_waiting,
    queue_resource,
    where,
)
from .resources import UNREACHABLE, QueueResource, QueueUnavailableError
from .routed import RoutedAssets, routed_assets

__all__ = ["BATCH_TAG", "RUN_KEY_TAG", "SENSOR_TAG", "make_queue_sensor"]

SENSOR_TAG = "sluice/sensor"

_FINISHED = {
    DagsterRunStatus.SUCCESS: RunState.SUCCEEDED,
    DagsterRunStatus.FAILURE: RunState.FAILED,
    DagsterRunStatus.CANCELED: RunState.FAILED,
}


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
    observe: bool = True,
) -> SensorDefinition:
    """A sensor that requests a run of ``job`` (or of ``asset_selection``) for each batch
    waiting on the queue resource ``resource_key`` (see the module docstring).

    ``ingest_op`` names the op (node) whose config gets the batch; by default the op of
    :func:`~sluice_dagster.jobs.make_ingest_job` or
    :func:`~sluice_dagster.assets.make_ingest_asset` reading ``resource_key``. A batch has at
    least ``min_messages`` and at most ``max_messages`` messages (Kafka; for MQTT the most a
    run drains). ``observe``: record the lag of ``asset_selection``'s assets at each tick
    (Kafka; see the module docstring). ``asset_selection=[make_routed_assets(...)]``: each
    run selects only the assets whose tables get messages of its batch.
    """
    factory = f"make_queue_sensor('{name}')"
    check_targets(factory, job, asset_selection, min_messages, max_messages)
    routed = _routed(factory, asset_selection)
    op_name = ingest_op or ingest_op_name(factory, resource_key, job, asset_selection)
    observed = (asset_keys(asset_selection) or []) if observe else []
    if routed is not None and observe:
        observed = [routed.home]  # one stream, one lag: the ingest's own asset shows it

    @sensor(
        name=name,
        job=job,
        asset_selection=asset_keys(asset_selection),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={resource_key},
        description=description
        or f"Requests one run per batch of messages waiting on resource '{resource_key}'.",
    )
    def _sensor(context: SensorEvaluationContext, **_: Any) -> SensorResult | SkipReason:
        # the daemon passes resources only through the context; a direct call also as kwargs
        resource = queue_resource(context.resources, resource_key, f"Sensor '{name}'")
        cursor = BatchCursor.from_json(context.cursor)
        state = _last_run_state(context, name, cursor)
        queue = where(resource)
        if state is RunState.ACTIVE:
            return SkipReason(f"{queue}: batch {cursor.last_run_key} is still being ingested.")
        try:
            waiting = plan_waiting(resource, max_messages, min_messages)
        except QueueUnavailableError as exc:
            return SkipReason(str(exc))
        events = _observations(context, resource, observed)
        decision = cursor.next_request(waiting, state, max_messages, min_messages)
        if isinstance(decision, str):
            skip = SkipReason(f"{queue}: {decision}.")
            return SensorResult(skip_reason=skip, asset_events=events) if events else skip
        selection = None
        if routed is not None:
            try:
                selection = _routed_selection(routed, resource, decision.spec)
            except QueueUnavailableError as exc:
                return SkipReason(str(exc))
        context.log.info(
            f"{queue}: requesting {'again ' if decision.retry else ''}batch "
            f"{decision.spec.batch_id} (run key {decision.run_key})"
            + (
                f" for {', '.join(k.to_user_string() for k in selection)}"
                if selection is not None
                else ""
            )
        )
        request = batch_run_request(SENSOR_TAG, name, op_name, decision, tags, selection)
        return SensorResult(
            run_requests=[request],
            cursor=cursor.advance(decision).to_json(),
            asset_events=events,
        )

    return _sensor


def _routed(factory: str, assets: AssetTargets | None) -> RoutedAssets | None:
    """The routed assets the sensor asks runs of, if ``assets`` are those."""
    found = [r for r in map(routed_assets, assets or []) if r is not None]
    if not found:
        return None
    if len(found) > 1 or len(list(assets or [])) > 1:
        raise ValueError(
            f"{factory}: a routed ingest's assets are asked for by a sensor of their own; give "
            "asset_selection=[the assets of make_routed_assets] alone."
        )
    return found[0]


def _routed_selection(routed: RoutedAssets, resource: QueueResource, spec: Any) -> list[AssetKey]:
    """The assets whose tables get messages of the batch ``spec`` (every one for MQTT)."""
    if spec.kind != "kafka":
        return [routed.home, *routed.keys.values()]
    try:
        places = batch_places(resource.config(), spec, routed.routes)
    except UNREACHABLE as exc:
        raise resource.unavailable(exc) from None
    return routed.selection(places)


def _observations(
    context: SensorEvaluationContext, resource: QueueResource, keys: list[AssetKey]
) -> list[AssetObservation]:
    """The lag observation of each of ``keys`` (Kafka; none when it cannot be measured)."""
    if not keys or resource.KIND != "kafka":
        return []
    try:
        lag = kafka_lag(resource.config())
    except Exception as exc:  # an observation: the tick goes on without it
        context.log.warning(f"Could not measure the lag: {resource.scrub(str(exc))}")
        return []
    return [lag_observation(key, lag) for key in keys]


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
