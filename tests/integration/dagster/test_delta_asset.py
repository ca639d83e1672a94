"""A Dagster ingest asset whose sink is a Delta table (``delta://``): the sink factory is all it
takes; the materialization records the table's columns and the asset's kinds say Delta."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, Definitions, materialize

from sluice.testing import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from sluice_dagster import KafkaQueueResource, SparkResource, make_ingest_asset, make_queue_sensor
from sluice_dagster.testing import SensorTicker

from .conftest import publish_kafka

pytestmark = pytest.mark.kafka


def test_an_asset_materializes_into_a_delta_table(
    noida_broker: BrokerProcess,
    unique_name: str,
    spark: Any,
    instance: DagsterInstance,
    tmp_path: Path,
) -> None:
    from deltalake import DeltaTable

    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    table = tmp_path / "events"
    events = make_ingest_asset("events", "queue", f"delta://{table}", schema="id INT, name STRING")
    sensor = make_queue_sensor("events_sensor", "queue", asset_selection=[events])
    queue = KafkaQueueResource(
        bootstrap=noida_broker.bootstrap, topic=unique_name, group_id=f"{unique_name}-lake"
    )
    publish_kafka(noida_broker.bootstrap, unique_name, range(3), partition=0)
    resources = {"queue": queue, "spark": SparkResource()}
    definitions = Definitions(assets=[events], sensors=[sensor], resources=resources)
    request = SensorTicker.from_definitions(definitions, "events_sensor", instance).request()

    result = materialize(
        [events],
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=resources,
    )
    assert result.success
    rows = DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()
    assert sorted(rows) == [0, 1, 2]
    [materialization] = result.asset_materializations_for_node("events")
    columns = [c.name for c in materialization.metadata["dagster/column_schema"].value.columns]
    assert {"id", "name", "offset", "batch_id"} <= set(columns)
    assert "dagster/kind/delta" in events.specs_by_key[events.key].tags
