"""Where Dagster users look, on a real instance with noida-db and the session's Spark: the topic
as an external asset upstream of the table, the sensor's lag observations, the table's columns
in the materialization, and the ``lag`` and ``audit`` asset checks, passing and failing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetSelection,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    materialize,
)

from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice_dagster import (
    KafkaQueueResource,
    SparkResource,
    make_audit_check,
    make_ingest_asset,
    make_lag_check,
    make_queue_sensor,
    topic_asset,
)
from sluice_dagster.testing import SensorTicker

from .conftest import publish_kafka, sink_ids

pytestmark = pytest.mark.kafka

SCHEMA = "id INT, name STRING"


def evaluation(result: ExecuteInProcessResult, check: str) -> AssetCheckEvaluation:
    (found,) = [e for e in result.get_asset_check_evaluations() if e.check_name == check]
    return found


def test_topic_lineage_lag_observations_and_checks(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    sink = tmp_path / "events"
    queue = KafkaQueueResource(
        bootstrap=noida_broker.bootstrap, topic=unique_name, group_id=f"{unique_name}-lake"
    )
    topic = topic_asset(queue)
    events = make_ingest_asset("events", "queue", str(sink), schema=SCHEMA, deps=[topic])
    audit_check = make_audit_check(events)
    lag_check = make_lag_check(events, max_lag=2, max_age=3600)
    sensor = make_queue_sensor("events_sensor", "queue", asset_selection=[events], max_messages=3)
    resources = {"queue": queue, "spark": SparkResource()}
    defs = Definitions(
        assets=[topic, events],
        asset_checks=[audit_check, lag_check],
        sensors=[sensor],
        resources=resources,
    )

    # The lineage graph: the topic, named the OpenLineage way, upstream of the table.
    graph = defs.resolve_asset_graph()
    assert topic.key.path == ["kafka", unique_name]
    assert graph.get(events.key).parent_keys == {topic.key}
    kafka = f"kafka://{noida_broker.host}:{noida_broker.port}"
    assert topic.metadata["openlineage/namespace"] == kafka
    assert topic.metadata["dagster/uri"] == f"{kafka}/{unique_name}"

    # A tick that asks the broker records the lag, which the daemon stores in the instance.
    publish_kafka(noida_broker.bootstrap, unique_name, range(5), partition=0)
    ticker = SensorTicker.from_definitions(defs, "events_sensor", instance)
    tick = ticker.tick()
    (request,) = tick.run_requests or []
    (observation,) = tick.asset_events
    for event in tick.asset_events:
        instance.report_runless_asset_event(event)  # what the sensor daemon does with them
    stored = instance.fetch_observations(events.key, limit=1).records[0].asset_observation
    assert stored is not None and stored.metadata == observation.metadata
    assert stored.metadata["lag"].value == 5
    assert stored.metadata["lag_by_partition"].value == {"0": 5}
    assert 0 <= stored.metadata["oldest_waiting_age_seconds"].value < 600

    # The sensor's batch of 3: the checks run after the materialization and pass (2 wait).
    result = materialize(
        [topic, events, audit_check, lag_check],
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=resources,
        selection=[events],
    )
    assert result.success and sink_ids(sink) == [0, 1, 2]
    (materialization,) = result.asset_materializations_for_node("events")
    columns = [c.name for c in materialization.metadata["dagster/column_schema"].value.columns]
    assert columns == ["id", "name", "partition", "offset", "timestamp", "batch_id"]
    lag = evaluation(result, "lag")
    assert lag.passed, lag.description
    assert lag.metadata["lag"].value == 2 and lag.metadata["last_batch_id"].value
    audit = evaluation(result, "audit")
    assert audit.passed and audit.metadata["written"].value == 3

    # Four more arrive: six wait, more than max_lag; the lag check alone fails, saying so.
    publish_kafka(noida_broker.bootstrap, unique_name, range(5, 9), partition=0)
    checked = materialize(
        [topic, events, lag_check],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(lag_check),
    )
    behind = evaluation(checked, "lag")
    assert not behind.passed
    assert f"6 messages wait for group '{unique_name}-lake', more than 2" in str(behind.description)

    # The sink loses the batch's rows: the audit check fails, naming the offsets.
    for part in next(sink.glob("batch_id=*")).glob("*.parquet"):
        part.unlink()
    audited = materialize(
        [topic, events, audit_check],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(audit_check),
    )
    failed = evaluation(audited, "audit")
    assert not failed.passed and failed.metadata["missing"].value == 3
    assert "partition 0: 3 offset(s) committed but in no batch (0-2)" in str(failed.description)
