"""A routed topic in Dagster: one sensor asks, per batch, for the assets whose tables get its
messages (run key: the batch's); one run writes the whole batch; each table's asset check
audits it against the broker. On noida-db and the session's Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, AssetSelection, DagsterInstance, Definitions, materialize

from sluice.batch import BatchSpec
from sluice.kafka import KafkaConnection
from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice_dagster import (
    KafkaQueueResource,
    SparkResource,
    make_queue_sensor,
    make_routed_assets,
    make_routed_audit_checks,
)
from sluice_dagster.testing import SensorTicker

from .conftest import spec_of

pytestmark = pytest.mark.kafka

SCHEMA = "kind STRING, n INT"


def publish(bootstrap: str, topic: str, kinds: list[str]) -> None:
    connection = KafkaConnection()
    connection.configure({"connection.uri": bootstrap})
    connection.open(None)
    try:
        values = [{"value": json.dumps({"kind": k, "n": n}).encode()} for n, k in enumerate(kinds)]
        connection.publish(topic, values, {"partition": 0})
    finally:
        connection.close(None)


def rows(location: str) -> list[str]:
    from deltalake import DeltaTable

    path = location.removeprefix("delta://")
    if not (Path(path) / "_delta_log").exists():
        return []
    return sorted(DeltaTable(path).to_pyarrow_table().column("kind").to_pylist())


def materialized(result: Any) -> dict[str, dict[str, Any]]:
    found = {}
    for m in result.asset_materializations_for_node("events"):
        found[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    return found


def test_one_sensor_asks_for_the_assets_whose_tables_get_the_batch(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    tables = {k: f"delta://{tmp_path / k}" for k in ("orders", "payments")}
    tables["refunds"] = str(tmp_path / "refunds")  # a Parquet dataset
    routes = {"by": "field:kind", "tables": tables}
    events = make_routed_assets(
        "events", "queue", f"delta://{tmp_path / 'other'}", routes, schema=SCHEMA
    )
    checks = make_routed_audit_checks(events)
    sensor = make_queue_sensor("events_sensor", "queue", asset_selection=[events])
    queue = KafkaQueueResource(
        bootstrap=noida_broker.bootstrap, topic=unique_name, group_id=f"{unique_name}-lake"
    )
    resources = {"queue": queue, "spark": SparkResource()}
    defs = Definitions(
        assets=[events], asset_checks=[checks], sensors=[sensor], resources=resources
    )
    assert sorted(k.to_user_string() for k in events.keys) == [
        "events",
        "events_orders",
        "events_payments",
        "events_refunds",
    ]
    ticker = SensorTicker.from_definitions(defs, "events_sensor", instance)

    # Orders and refunds wait: the run asks for their two assets only, keyed by the batch.
    publish(noida_broker.bootstrap, unique_name, ["orders", "refunds", "orders"])
    request = ticker.request()
    spec = BatchSpec.from_dict(spec_of(request, "events"))
    assert request.run_key == spec.batch_id
    assert request.asset_selection == [AssetKey("events_orders"), AssetKey("events_refunds")]
    assert ticker.request().run_key == request.run_key, "asked again before its run exists"

    first = materialize(
        [events],
        selection=request.asset_selection,
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=resources,
    )
    assert first.success
    done = materialized(first)
    assert sorted(done) == ["events_orders", "events_refunds"]
    assert done["events_orders"]["written"] == 2 and done["events_refunds"]["written"] == 1
    assert done["events_orders"]["batch_id"] == spec.batch_id
    assert rows(tables["orders"]) == ["orders", "orders"] and rows(tables["payments"]) == []
    assert "no messages waiting" in ticker.skip()

    # A payment and a message no route takes: the payments asset and the ingest's own.
    publish(noida_broker.bootstrap, unique_name, ["payments", "gifts"])
    following = ticker.request()
    assert following.asset_selection == [AssetKey("events"), AssetKey("events_payments")]
    second = materialize(
        [events],
        selection=following.asset_selection,
        run_config=following.run_config,
        tags=following.tags,
        instance=instance,
        resources=resources,
    )
    assert sorted(materialized(second)) == ["events", "events_payments"]
    assert rows(tables["payments"]) == ["payments"]

    # Each table's audit check, from one audit of the routed stream.
    audited = materialize(
        [events, checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(checks),
    )
    results = {e.asset_key.to_user_string(): e for e in audited.get_asset_check_evaluations()}
    assert sorted(results) == sorted(k.to_user_string() for k in events.keys)
    assert all(e.passed for e in results.values()), {k: e.description for k, e in results.items()}
    assert results["events_orders"].metadata["written"].value == 2
    assert results["events"].metadata["quarantined"].value == 1  # "gifts": no route

    # A table that loses its rows fails its own check, and only its own.
    for part in (tmp_path / "refunds").glob("batch_id=*/*.parquet"):
        part.unlink()
    broken = materialize(
        [events, checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(checks),
        raise_on_error=False,
    )
    failed = {
        e.asset_key.to_user_string() for e in broken.get_asset_check_evaluations() if not e.passed
    }
    assert failed == {"events_refunds"}
