"""What Dagster shows of a Sluice ingest: the topic as an asset, checks and lag observations.

- :func:`topic_asset`: an external asset (an ``AssetSpec``) for a queue resource's topic, named
  the OpenLineage way (:mod:`sluice.lineage`); give it as ``deps`` of
  :func:`~sluice_dagster.assets.make_ingest_asset` and the lineage graph shows topic → table.
- :func:`make_audit_check`: the asset check ``audit``: ``sluice audit`` of the ingest asset's
  sink for its stream (topic and group, or MQTT session); it fails naming what is missing or
  doubled. It reads the sink's whole history: run it now and then, not after every batch.
- :func:`make_routed_audit_checks`: the check ``audit`` of each asset of a routed ingest, from
  one ``sluice audit --routes``: each table against the messages its routes send there.
- :func:`make_lag_check`: the asset check ``lag``: fails when more than ``max_lag`` messages
  wait or the oldest waiting message has waited more than ``max_age`` seconds (Kafka; MQTT
  brokers do not tell, and a check of either limit on an MQTT stream fails saying so).
- :func:`lag_observation`: the ``AssetObservation`` the queue sensor records for its assets at
  each tick that asks the broker: lag per partition and the age of the oldest waiting message.

The measurements are :mod:`sluice.metrics`' (one home for lag and freshness).
"""

from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    FloatMetadataValue,
    MetadataValue,
    asset_check,
    multi_asset_check,
)

from sluice.lineage import source_dataset, topic_asset_key
from sluice.metrics import StreamLag, measure
from sluice.route_index import HOME

from .ops import INGEST_TAG
from .resources import UNREACHABLE, QueueResource

__all__ = [
    "lag_metadata",
    "lag_observation",
    "make_audit_check",
    "make_lag_check",
    "make_routed_audit_checks",
    "topic_asset",
]


def topic_asset(
    queue: QueueResource,
    key: AssetKey | str | list[str] | None = None,
    group_name: str | None = None,
) -> AssetSpec:
    """The topic (MQTT: topic filter) of ``queue`` as an external asset. Its key is
    ``[kind, topic]`` (``["kafka", "iot.readings"]``) unless given; its metadata holds the
    OpenLineage namespace and name (``kafka://host:port`` and the topic) and the URI."""
    dataset = source_dataset(queue.KIND, queue.config())
    return AssetSpec(
        key=AssetKey.from_coercible(key)
        if key is not None
        else topic_asset_key(queue.KIND, queue.topic),
        description=f"{queue.KIND} topic '{queue.topic}' at {queue.address} (external).",
        metadata={
            "dagster/uri": dataset.uri,
            "openlineage/namespace": dataset.namespace,
            "openlineage/name": dataset.name,
        },
        kinds={queue.KIND},
        group_name=group_name,
    )


def _ingest_of(
    asset: AssetsDefinition, resource_key: str | None, sink: str | None
) -> tuple[AssetKey, str, str]:
    """(key, queue resource key, sink) of an ingest asset of
    :func:`~sluice_dagster.assets.make_ingest_asset` (or those given)."""
    keys = list(asset.keys)
    if len(keys) != 1:
        raise ValueError(f"An ingest asset has one key; {asset.node_def.name} has {len(keys)}.")
    key = keys[0]
    resource = resource_key or asset.op.tags.get(INGEST_TAG)
    found = asset.metadata_by_key.get(key, {}).get("sink")
    where = sink or (getattr(found, "value", found) if found is not None else None)
    if not resource or not where:
        raise ValueError(
            f"{key.to_user_string()} is not an ingest asset of make_ingest_asset: give "
            "resource_key=... and sink=..."
        )
    return key, str(resource), str(where)


def _resource(context: AssetCheckExecutionContext, key: str) -> QueueResource:
    resource = getattr(context.resources, key)
    if not isinstance(resource, QueueResource):
        raise TypeError(
            f"Resource '{key}' is a {type(resource).__name__}, not a Sluice queue resource."
        )
    return resource


def _group(resource: QueueResource) -> str | None:
    value = resource.config().get("group_id" if resource.KIND == "kafka" else "client_id")
    return None if value is None else str(value)


def make_audit_check(
    asset: AssetsDefinition,
    *,
    name: str = "audit",
    resource_key: str | None = None,
    sink: str | None = None,
    blocking: bool = False,
) -> AssetChecksDefinition:
    """The check ``name`` of ``asset``: ``sluice audit`` of its sink for its stream, failing
    with what is missing or doubled (see the module docstring)."""
    key, queue_key, where = _ingest_of(asset, resource_key, sink)

    @asset_check(
        asset=key,
        name=name,
        blocking=blocking,
        required_resource_keys={queue_key},
        description=f"Every message of the stream in {where} once (sluice audit).",
    )
    def _audit(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from sluice.audit import audit

        resource = _resource(context, queue_key)
        source = resource.source if resource.KIND == "kafka" else None
        try:
            report = audit(where, source)
        except UNREACHABLE as exc:
            raise resource.unavailable(exc) from None
        stream = report.stream(resource.KIND, resource.topic, _group(resource))
        if stream is None:
            return AssetCheckResult(
                passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"{where} holds no batch of {resource.KIND} topic "
                f"'{resource.topic}' ({_group(resource)}) yet: nothing to audit.",
            )
        problems = report.problems(stream)
        missing = sum(p.missing_count for p in stream.partitions)
        doubled = stream.doubled + sum(p.doubled for p in stream.partitions)
        written = sum(p.written for p in stream.partitions) or stream.messages
        return AssetCheckResult(
            passed=not problems,
            description="; ".join(problems) or "Every message is in the sink once.",
            metadata={
                "batches": MetadataValue.int(stream.batches),
                "written": MetadataValue.int(written),
                "missing": MetadataValue.int(missing),
                "doubled": MetadataValue.int(doubled),
            },
        )

    return _audit


def make_routed_audit_checks(
    assets: AssetsDefinition, *, name: str = "audit", blocking: bool = False
) -> AssetChecksDefinition:
    """The check ``name`` of every asset of a routed ingest
    (:func:`~sluice_dagster.routed.make_routed_assets`), from one ``sluice audit --routes``:
    each table's messages against the broker's that its routes send there, failing with
    what is missing, doubled or in another table's place (the ingest's own asset: the
    messages no route takes). It reads the whole history, as ``make_audit_check``."""
    from .routed import routed_assets

    routed = routed_assets(assets)
    if routed is None:
        raise ValueError(
            f"{assets.node_def.name} is not a routed ingest of make_routed_assets; audit an "
            "ingest asset with make_audit_check."
        )
    home_sink = _sink_of(assets, routed.home)
    queue_key = str(assets.op.tags.get(INGEST_TAG))
    by_table = {HOME: routed.home, **routed.keys}

    @multi_asset_check(
        specs=[
            AssetCheckSpec(name, asset=key, blocking=blocking, description=_audit_text(table))
            for table, key in by_table.items()
        ],
        name=f"{assets.node_def.name}_{name}",
        required_resource_keys={queue_key},
    )
    def _audit(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        from sluice.route_audit import audit_routes

        resource = _resource(context, queue_key)
        source = resource.source if resource.KIND == "kafka" else None
        try:
            report = audit_routes(home_sink, source, routed.routes)
        except UNREACHABLE as exc:
            raise resource.unavailable(exc) from None
        others = report.other_routes
        for table, key in by_table.items():
            found = report.table(table)
            if found is None:  # a table no message of the stream was routed to yet
                yield AssetCheckResult(
                    asset_key=key, check_name=name, passed=True, description="Nothing yet."
                )
                continue
            problems = report.table_problems(found)
            if others:
                problems.append(f"{len(others)} batch(es) ingested under other routes")
            yield AssetCheckResult(
                asset_key=key,
                check_name=name,
                passed=found.ok and not others,
                description="; ".join(problems) or "Every message of its routes is here once.",
                metadata={
                    "expected": MetadataValue.int(found.expected),
                    "written": MetadataValue.int(found.written),
                    "quarantined": MetadataValue.int(found.quarantined),
                    "missing": MetadataValue.int(found.missing_count),
                    "wrong": MetadataValue.int(found.wrong),
                    "doubled": MetadataValue.int(found.doubled),
                },
            )

    return _audit


def _audit_text(table: str) -> str:
    what = "the messages no route takes" if table == HOME else f"the messages routed to {table}"
    return f"Every one of {what}, once, and nothing else (sluice audit --routes)."


def _sink_of(assets: AssetsDefinition, key: AssetKey) -> str:
    found = assets.metadata_by_key.get(key, {}).get("sink")
    return str(getattr(found, "value", found))


def _seconds(value: float | timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


def make_lag_check(
    asset: AssetsDefinition,
    *,
    max_lag: int | None = None,
    max_age: float | timedelta | None = None,
    name: str = "lag",
    resource_key: str | None = None,
    sink: str | None = None,
) -> AssetChecksDefinition:
    """The check ``name`` of ``asset``: fails when more than ``max_lag`` messages wait for its
    group, or its oldest waiting message has waited more than ``max_age`` (seconds or a
    ``timedelta``). Records the lag, the age and the last batch as the check's metadata."""
    if max_lag is None and max_age is None:
        raise ValueError("make_lag_check: give max_lag, max_age or both.")
    if max_lag is not None and max_lag < 0:
        raise ValueError(f"make_lag_check: max_lag must be 0 or more, not {max_lag}.")
    age_limit = _seconds(max_age)
    key, queue_key, where = _ingest_of(asset, resource_key, sink)
    limits = " and ".join(
        part
        for part in (
            f"at most {max_lag} messages waiting" if max_lag is not None else "",
            f"none waiting longer than {age_limit:.0f} s" if age_limit is not None else "",
        )
        if part
    )

    @asset_check(
        asset=key,
        name=name,
        required_resource_keys={queue_key},
        description=f"The table keeps up with its topic: {limits}.",
    )
    def _lag(context: AssetCheckExecutionContext) -> AssetCheckResult:
        resource = _resource(context, queue_key)
        try:
            lag = measure(resource.KIND, resource.config(), where)
        except UNREACHABLE as exc:
            raise resource.unavailable(exc) from None
        reasons = lag.behind(max_lag, age_limit)
        return AssetCheckResult(
            passed=not reasons,
            description="; ".join(reasons) or f"Within limits: {limits}.",
            metadata=lag_metadata(lag),
        )

    return _lag


def _age(value: float | None) -> FloatMetadataValue:
    # A float even when whole: Dagster's float metadata refuses an int such as 0.
    return MetadataValue.float(round(float(value or 0), 3))


def lag_metadata(lag: StreamLag) -> dict[str, Any]:
    """Dagster metadata of a measurement (what cannot be known is left out)."""
    metadata: dict[str, Any] = {"group": lag.group or ""}
    if lag.lag is not None:
        metadata["lag"] = MetadataValue.int(lag.lag)
        metadata["oldest_waiting_age_seconds"] = _age(lag.oldest_age)
        metadata["lag_by_partition"] = MetadataValue.json(
            {str(p.partition): p.lag for p in lag.partitions or ()}
        )
    else:
        metadata["lag_unknown"] = MetadataValue.text(str(lag.unknown))
    if lag.last_batch_id is not None:
        metadata["last_batch_id"] = lag.last_batch_id
        metadata["last_batch_age_seconds"] = _age(lag.last_batch_age)
    return metadata


def lag_observation(
    key: AssetKey, lag: StreamLag, tags: Mapping[str, str] | None = None
) -> AssetObservation:
    """The observation of ``key``'s stream: lag per partition, the oldest message's age."""
    return AssetObservation(
        asset_key=key,
        description=f"Lag of {lag.kind} topic '{lag.topic}' for '{lag.group}'",
        metadata=lag_metadata(lag),
        tags=dict(tags or {}),
    )
