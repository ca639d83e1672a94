"""``make_routed_assets``: one topic, many tables, one asset per table, one ingest per batch.

A routed ingest (:mod:`sluice.spark.routed`, :mod:`sluice.routes`) reads a batch once and
writes each message to the table its route names. As Dagster assets that is one
``multi_asset`` of one op: an asset per route table, and the ingest's own sink (the messages
no route takes, and the group's batch records) as the asset ``name``. It can run for a
subset of them: :func:`~sluice_dagster.sensors.make_queue_sensor` over it reads each batch
it asks for once (:func:`sluice.route_index.batch_places`, committing nothing) and asks for
a run of the assets whose tables get messages of that batch only, with the batch's run key.
The run still writes the whole batch (one read, every table's slice, then the commit); each
asset it materializes records its own table's counts. A table that got rows in a run that
did not select it (a run launched by hand for a subset) is logged, never lost.

MQTT messages cannot be read at sensing (they wait in the ingest's session): a routed MQTT
sensor asks for every asset.
"""

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from sluice.lineage import path_dataset
from sluice.route_index import HOME
from sluice.routes import Routes
from sluice.spark.sinks import is_delta, is_iceberg

from .ops import INGEST_TAG, IngestConfig, IngestSettings, run_ingest

__all__ = ["HOME_METADATA", "ROUTES_TAG", "RoutedAssets", "make_routed_assets", "routed_assets"]

#: Op tag of a routed ingest: its routes as JSON (the sensor routes each batch with them).
ROUTES_TAG = "sluice/routes"
#: Metadata of the asset that stands for the ingest's own sink.
HOME_METADATA = "sluice/home"
_NAME = re.compile(r"[A-Za-z0-9_]+")


def make_routed_assets(
    name: str,
    resource_key: str,
    sink: str,
    routes: Routes | Mapping[str, Any] | str,
    *,
    asset_names: Mapping[str, str] | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    deps: Sequence[AssetSpec | AssetsDefinition | AssetKey | AssetDep | str] | None = None,
    **settings: Any,
) -> AssetsDefinition:
    """The assets of a routed ingest from the queue resource ``resource_key`` (see the module
    docstring): ``name`` is the ingest's own sink ``sink``, and each table the ``routes``
    name is an asset called ``<name>_<route value>`` unless ``asset_names`` (route value to
    asset name) says otherwise. Every table must be known without a message: a mapping's
    tables, or a template's for its ``values``. ``settings``: the other fields of
    :class:`~sluice_dagster.ops.IngestSettings` (``schema``, ``spark_resource_key``...)."""
    parsed = Routes.parse(routes)
    tables = parsed.known_tables()
    factory = f"make_routed_assets('{name}')"
    if not tables:
        raise ValueError(
            f"{factory}: the routes name no table before a message arrives (a template without "
            "values): give values=[...] or tables={...}, so that each table is an asset."
        )
    names = _asset_names(factory, name, parsed, tables, asset_names or {})
    ingest_settings = IngestSettings.of(resource_key, sink, routes=parsed.to_dict(), **settings)
    prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix or [])
    specs = [
        AssetSpec(
            AssetKey([*prefix, name]),
            description=f"The batches of '{resource_key}' and the messages no route takes, "
            f"in {sink}.",
            metadata={"sink": sink, "dagster/uri": _uri(sink), HOME_METADATA: True},
            kinds={"spark", _kind(sink)},
            group_name=group_name,
            deps=deps,
            skippable=True,
        )
    ]
    for table in tables:
        values = sorted(v for v in _values(parsed, table))
        specs.append(
            AssetSpec(
                AssetKey([*prefix, names[table]]),
                description=f"The messages routed to {table} ({', '.join(values)}).",
                metadata={"sink": table, "dagster/uri": _uri(table), "sluice/route": values},
                kinds={"spark", _kind(table)},
                group_name=group_name,
                deps=deps,
                skippable=True,
            )
        )

    @multi_asset(
        name=name,
        specs=specs,
        can_subset=True,
        required_resource_keys=ingest_settings.resource_keys(),
        op_tags={INGEST_TAG: resource_key, ROUTES_TAG: parsed.to_json()},
    )
    def _assets(
        context: AssetExecutionContext, config: IngestConfig
    ) -> Iterator[MaterializeResult[None]]:
        result, batch_metadata = run_ingest(context, config, ingest_settings)
        found = routed_assets(_assets)
        assert found is not None
        selected = context.selected_asset_keys
        if found.home in selected:
            yield MaterializeResult(asset_key=found.home, metadata=batch_metadata)
        for table, counts in sorted(result.tables.items()):
            key = found.keys.get(table)
            if key is None or key not in selected:
                context.log.warning(
                    f"Batch {result.batch_id}: {counts['written']} row(s) and "
                    f"{counts['quarantined']} quarantined went to {table}, whose asset this run "
                    "did not select: it is written, and its next materialization shows it."
                )
                continue
            yield MaterializeResult(
                asset_key=key,
                metadata={
                    "batch_id": result.batch_id,
                    "written": MetadataValue.int(counts["written"]),
                    "quarantined": MetadataValue.int(counts["quarantined"]),
                    "held": MetadataValue.int(counts["held"]),
                    "committed": MetadataValue.bool(result.committed),
                },
            )

    return _assets


@dataclass(frozen=True)
class RoutedAssets:
    """What a sensor needs of :func:`make_routed_assets`' assets."""

    routes: Routes
    home: AssetKey
    keys: Mapping[str, AssetKey]  # route table -> its asset

    def selection(self, places: Mapping[str, int]) -> list[AssetKey]:
        """The assets of the places a batch's messages go to (:func:`batch_places`)."""
        wanted = {self.home if place == HOME else self.keys.get(place) for place in places}
        # a place no asset stands for (not possible with known tables) goes to the home's run
        return sorted({k or self.home for k in wanted}, key=lambda k: k.to_user_string())


def routed_assets(target: Any) -> RoutedAssets | None:
    """The routes and assets of ``target`` when it is :func:`make_routed_assets`' (else
    None)."""
    if not isinstance(target, AssetsDefinition):
        return None
    text = target.op.tags.get(ROUTES_TAG)
    if text is None:
        return None
    home: AssetKey | None = None
    keys: dict[str, AssetKey] = {}
    for key, spec in target.specs_by_key.items():
        sink = spec.metadata.get("sink")
        sink = getattr(sink, "value", sink)
        if spec.metadata.get(HOME_METADATA):
            home = key
        elif sink is not None:
            keys[str(sink)] = key
    assert home is not None
    return RoutedAssets(Routes.parse(text), home, keys)


def _values(routes: Routes, table: str) -> set[str]:
    found = {value for value, target in routes.tables.items() if target == table}
    for value in routes.values or ():
        if routes.resolve(value) == table:
            found.add(value)
    return found


def _asset_names(
    factory: str,
    name: str,
    routes: Routes,
    tables: list[str],
    given: Mapping[str, str],
) -> dict[str, str]:
    """Each table's asset name: ``asset_names``' for one of its route values, else
    ``<name>_<its first route value>``."""
    names: dict[str, str] = {}
    for table in tables:
        values = sorted(_values(routes, table))
        chosen = next((given[v] for v in values if v in given), f"{name}_{values[0]}")
        if not _NAME.fullmatch(chosen):
            raise ValueError(
                f"{factory}: {chosen!r} (the asset of {table}) is no Dagster asset name (letters, "
                f"digits and _): name it with asset_names={{{values[0]!r}: '...'}}."
            )
        names[table] = chosen
    unknown = sorted(set(given) - {v for t in tables for v in _values(routes, t)})
    if unknown:
        raise ValueError(f"{factory}: asset_names names route value(s) no table takes: {unknown}")
    doubled = sorted(
        {n for n in names.values() if list(names.values()).count(n) > 1}
        | {n for n in names.values() if n == name}
    )
    if doubled:
        raise ValueError(f"{factory}: asset name(s) {doubled} stand for more than one table.")
    return names


def _kind(sink: str) -> str:
    return "iceberg" if is_iceberg(sink) else "delta" if is_delta(sink) else "parquet"


def _uri(sink: str) -> str:
    return sink if is_iceberg(sink) else path_dataset(sink).uri
