"""Helpers for the Dagster tests: sensor ticks, publishing, and reading the Parquet sink."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, Definitions, RunRequest, SensorDefinition, build_sensor_context
from dagster._core.definitions.sensor_definition import SensorExecutionData

from sluice.kafka import KafkaConnection
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    """A Dagster instance of the test's own (in memory): the sensor looks its runs up in it."""
    with DagsterInstance.ephemeral() as inst:
        yield inst


class SensorTicker:
    """Evaluates a sensor as the daemon does (``evaluate_tick``), keeping its cursor."""

    def __init__(
        self,
        sensor: SensorDefinition,
        resources: Mapping[str, Any],
        instance: DagsterInstance,
        definitions: Definitions | None = None,
    ) -> None:
        self.sensor, self.resources, self.instance = sensor, dict(resources), instance
        self.definitions = definitions  # an asset sensor needs them to resolve its selection
        self.cursor: str | None = None

    def tick(self) -> SensorExecutionData:
        with build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources=self.resources,
            sensor_name=self.sensor.name,
            definitions=self.definitions,
        ) as context:
            data = self.sensor.evaluate_tick(context)
        self.cursor = data.cursor
        return data

    def request(self) -> RunRequest:
        """The one run request of the next tick (failing with the skip message if it skips)."""
        data = self.tick()
        assert data.skip_message is None, f"the tick skipped: {data.skip_message}"
        assert len(data.run_requests or []) == 1, data.run_requests
        request: RunRequest = data.run_requests[0]  # type: ignore[index]
        return request

    def skip(self) -> str:
        """The skip message of the next tick (failing if it requests a run)."""
        data = self.tick()
        assert not data.run_requests, f"the tick requested {data.run_requests}"
        assert data.skip_message, "the tick neither skipped nor requested a run"
        return data.skip_message


def spec_of(request: RunRequest, op_name: str) -> dict[str, Any]:
    spec: dict[str, Any] = request.run_config["ops"][op_name]["config"]["spec"]
    return spec


def publish_kafka(bootstrap: str, topic: str, ids: range, partition: int) -> None:
    connection = KafkaConnection()
    connection.configure({"connection.uri": bootstrap})
    connection.open(None)
    try:
        values = [{"value": json.dumps({"id": i, "name": f"n{i}"}).encode()} for i in ids]
        connection.publish(topic, values, {"partition": partition})
    finally:
        connection.close(None)


def publish_mqtt(config: Mapping[str, Any], topic: str, ids: range) -> None:
    queue = MqttMessageQueue()
    queue.configure({**config, "topic": topic, "options.qos": 1})
    queue.open(None)
    try:
        for i in ids:
            queue.send(None, MessageEnvelope(None, "reading", {"id": i, "name": f"n{i}"}))
    finally:
        queue.close(None)


def sink_ids(sink: Path) -> list[int]:
    """The ``id`` column of every published batch in ``sink``, sorted."""
    if not any(sink.glob("batch_id=*/*.parquet")):
        return []
    table = pq.read_table(str(sink))
    return sorted(table.column("id").to_pylist())
