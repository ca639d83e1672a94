"""What the queue sensor and the ingest schedule share: planning the waiting batch and the one
run request that has an ingest job or asset ingest it.

Both ask :func:`plan_waiting` what waits (committing nothing) and build their requests with
:func:`batch_run_request`: the batch's ``BatchSpec`` in the ingest op's run config
(:func:`~sluice_dagster.ops.ingest_run_config`), the run key ``<batch_id>`` (``<batch_id>.<n>``
for the n-th retry of a batch), and tags naming the sensor or schedule, the batch and the
attempt. So any job of :func:`~sluice_dagster.jobs.make_ingest_job` or asset of
:func:`~sluice_dagster.assets.make_ingest_asset` runs from either.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import AssetKey, AssetsDefinition, JobDefinition, RunRequest

from sluice.batch import BatchSpec
from sluice.cursor import BatchRequest

from .ops import INGEST_TAG, ingest_run_config
from .resources import KafkaQueueResource, QueueResource, QueueUnavailableError

__all__ = [
    "BATCH_TAG",
    "RUN_KEY_TAG",
    "AssetTargets",
    "asset_keys",
    "batch_run_request",
    "check_targets",
    "ingest_op_name",
    "plan_waiting",
    "queue_resource",
    "where",
]

RUN_KEY_TAG = "sluice/run_key"
BATCH_TAG = "sluice/batch_id"

AssetTargets = Sequence[AssetsDefinition | AssetKey | str]


def queue_resource(resources: Any, resource_key: str, owner: str) -> QueueResource:
    """The queue resource ``resource_key`` of a tick's context (TypeError if it is none)."""
    resource = getattr(resources, resource_key)
    if not isinstance(resource, QueueResource):
        raise TypeError(
            f"{owner}: resource '{resource_key}' is a {type(resource).__name__}, "
            "not a Sluice queue resource (KafkaQueueResource or MqttQueueResource)."
        )
    return resource


def where(resource: QueueResource) -> str:
    """The queue, for the messages of a tick: ``kafka topic 'orders' at host:9092``."""
    return f"{resource.KIND} topic '{resource.topic}' at {resource.address}"


def plan_waiting(
    resource: QueueResource,
    max_messages: int | None,
    min_messages: int,
    patience: float = 0.0,
) -> BatchSpec | None:
    """What waits on the queue, committing nothing. Kafka: the group's whole backlog, from
    its committed offsets (:meth:`~sluice.cursor.BatchCursor.next_request` cuts it to
    ``max_messages``); MQTT: the session's batch once ``min_messages`` arrived.

    Raises :class:`~sluice_dagster.resources.QueueUnavailableError` when the broker cannot be
    reached, after trying again for ``patience`` seconds (a Kafka watch that failed one read
    answers again at its next one, a fraction of a second later)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            if isinstance(resource, KafkaQueueResource):
                return resource.plan_batch()
            return resource.plan_batch(max_messages, min_messages)
        except QueueUnavailableError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def batch_run_request(
    origin_tag: str,
    origin: str,
    op_name: str,
    request: BatchRequest,
    tags: Mapping[str, str] | None = None,
    asset_selection: Sequence[AssetKey] | None = None,
) -> RunRequest:
    """The run request that ingests ``request``'s batch in the op (or asset) ``op_name``; its
    tags name the sensor or schedule (``origin_tag: origin``) that asked for it.
    ``asset_selection``: the assets the run materializes (a routed batch's), else the
    sensor's own."""
    spec = request.spec
    run_tags = {
        **(tags or {}),
        origin_tag: origin,
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
        asset_selection=list(asset_selection) if asset_selection is not None else None,
    )


def asset_keys(assets: AssetTargets | None) -> list[AssetKey] | None:
    """The keys of an ``asset_selection`` argument (None stays None)."""
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


def ingest_op_name(
    factory: str,
    resource_key: str,
    job: JobDefinition | None,
    assets: AssetTargets | None,
) -> str:
    """The node that takes the batch: the ingest op reading ``resource_key``. ``factory``
    (``make_queue_sensor('name')``) is for the error message."""
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
            f"{factory}: found {len(found)} ingest {what} reading resource '{resource_key}' "
            f"({', '.join(found) or 'none'}); name the one that takes the batch with "
            "ingest_op=..."
        )
    return found[0]


def check_targets(
    factory: str,
    job: JobDefinition | None,
    assets: AssetTargets | None,
    min_messages: int,
    max_messages: int | None,
) -> None:
    """ValueError unless exactly one of ``job`` and ``assets`` is given and the sizes fit."""
    if (job is None) == (assets is None):
        raise ValueError(f"{factory}: give either job or asset_selection.")
    if min_messages < 1 or (max_messages is not None and max_messages < min_messages):
        raise ValueError(
            f"{factory}: need 1 <= min_messages <= max_messages, "
            f"got min_messages={min_messages}, max_messages={max_messages}."
        )
