"""Helpers for the Dagster tests: sensor ticks, publishing, and reading the Parquet sink."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, RunRequest, instance_for_test

from sluice.kafka import KafkaConnection
from sluice.mqtt import MqttMessageQueue
from sluice.queues import MessageEnvelope


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    """A Dagster instance of the test's own (in memory): the sensor looks its runs up in it."""
    with DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.fixture
def persistent_instance() -> Iterator[DagsterInstance]:
    """A Dagster instance on disk, of the test's own: a schedule's context takes no in-memory
    instance (it looks the schedule's runs up in it)."""
    with instance_for_test() as inst:
        yield inst


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
