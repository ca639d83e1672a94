"""Sparkplug B on a real mosquitto: one row per metric, births naming the aliases of later
data (in the same batch and in later ones), and a reason for every message that cannot be
decoded, on the Parquet sink and an Iceberg table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec
from sluice.formats.sparkplug import encode_payload
from sluice.mqtt import MqttMessageQueue
from sluice.spark import ingest
from sluice.testing.plugin import Broker

from .conftest import dataset_rows, quarantine_rows


class Edge:
    """Publishes raw Sparkplug B payloads (as edge nodes do: no envelope) at QoS 1."""

    def __init__(self, broker: Broker, group: str) -> None:
        self.group = group
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()

    def send(self, kind: str, node: str, payload: bytes, device: str | None = None) -> None:
        topic = f"spBv1.0/{self.group}/{kind}/{node}" + (f"/{device}" if device else "")
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def raw(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def plant(mosquitto_broker: Broker, unique_name: str) -> Iterator[tuple[Edge, BatchSpec]]:
    group = unique_name.replace("-", "")[:30]
    subscriber = MqttMessageQueue()
    subscriber.configure(
        {
            "connection.uri": mosquitto_broker.url,
            "options.qos": 1,
            "topic": f"spBv1.0/{group}/#",
            "client_id": unique_name,
        }
    )
    subscriber.open(None)
    subscriber.close(None)
    edge = Edge(mosquitto_broker, group)
    yield edge, BatchSpec("mqtt", f"spBv1.0/{group}/#", client_id=unique_name, max_messages=100)
    edge.close()


def metric(name: str | None, alias: int | None, datatype: str | None, value: Any) -> dict[str, Any]:
    return {
        "name": name,
        "alias": alias,
        "datatype": datatype,
        "value": value,
        "timestamp": 1700000000000,
    }


@pytest.mark.parametrize("sink_kind", ["parquet", "iceberg"])
def test_sparkplug_b_gives_a_row_per_metric_and_births_name_aliases_across_batches(
    spark: Any,
    mosquitto_broker: Broker,
    plant: tuple[Edge, BatchSpec],
    tmp_path: Path,
    sink_kind: str,
    request: pytest.FixtureRequest,
) -> None:
    edge, spec = plant
    if sink_kind == "iceberg":
        lake = request.getfixturevalue("sqlite_lake")
        sink: Any = lake.sink("plant")
    else:
        sink = tmp_path / "sink"
    source = {"connection.uri": mosquitto_broker.url}
    edge.send(
        "NBIRTH",
        "e1",
        encode_payload(
            {
                "timestamp": 1700000000000,
                "seq": 0,
                "metrics": [
                    metric("bdSeq", None, "Int64", 0),
                    metric("Node/Uptime", 1, "Int32", -5),
                ],
            }
        ),
    )
    edge.send(
        "DBIRTH",
        "e1",
        encode_payload(
            {
                "seq": 1,
                "metrics": [
                    metric("Temp", 10, "Double", 21.5),
                    metric("Door", 11, "Boolean", True),
                    metric("Serial", 12, "String", "X-1"),
                    metric("Since", 13, "DateTime", 1700000000123),
                ],
            }
        ),
        device="d1",
    )
    edge.send(
        "DDATA",
        "e1",
        encode_payload(
            {"seq": 2, "metrics": [metric(None, 10, None, 22.0), metric(None, 11, None, False)]}
        ),
        device="d1",
    )
    edge.send(
        "DDATA",
        "e1",
        encode_payload({"seq": 3, "metrics": [metric(None, 99, None, 1.0)]}),
        device="d1",
    )
    edge.send("NDATA", "e1", b"\x12\x05\xff\xff\xff")  # a metric cut short
    edge.send("DDEATH", "e1", encode_payload({"seq": 4}), device="d1")
    edge.raw("spBv1.0/STATE/host-1", b'{"online": true}')  # not this session's filter
    edge.raw(f"spBv1.0/{edge.group}/NOTATYPE/e1", b"\x08\x01")

    first = ingest(spark, spec, sink, source=source, value_format="sparkplug_b")

    assert (first.read, first.quarantined) == (7, 3)
    assert first.written == 2 + 4 + 2 + 1, "a row per metric, one for a death without metrics"
    rows, bad = _rows(sink, sink_kind, lake if sink_kind == "iceberg" else None)
    temp = [r for r in rows if r["metric_name"] == "Temp"]
    assert sorted(r["double_value"] for r in temp) == [21.5, 22.0]
    data = next(r for r in temp if r["message_type"] == "DDATA")
    assert (data["alias"], data["datatype"], data["device_id"], data["seq"]) == (
        10,
        "Double",
        "d1",
        2,
    )
    assert data["group_id"] == edge.group and data["edge_node_id"] == "e1"
    uptime = next(r for r in rows if r["metric_name"] == "Node/Uptime")
    assert uptime["int_value"] == -5, "Int32 is signed"
    since = next(r for r in rows if r["metric_name"] == "Since")
    assert since["datetime_value"].timestamp() == 1700000000.123
    death = next(r for r in rows if r["message_type"] == "DDEATH")
    assert death["metric_name"] is None and death["seq"] == 4
    reasons = sorted(r["reason"] for r in bad)
    assert any(
        "metric alias 99 of" in r and "has no birth certificate (DBIRTH)" in r for r in reasons
    )
    assert any("truncated or corrupt Sparkplug B payload" in r for r in reasons)
    assert any("is not in the Sparkplug B namespace" in r for r in reasons)

    edge.send(
        "DDATA",
        "e1",
        encode_payload({"seq": 5, "metrics": [metric(None, 12, None, "X-2")]}),
        device="d1",
    )
    later = dataclasses.replace(spec, sequence=2)  # the session's next batch
    second = ingest(spark, later, sink, source=source, value_format="sparkplug_b")

    assert (second.written, second.quarantined) == (1, 0), "the earlier batch's birth names it"
    rows, _ = _rows(sink, sink_kind, lake if sink_kind == "iceberg" else None)
    serial = [r for r in rows if r["metric_name"] == "Serial"]
    assert sorted(r["string_value"] for r in serial) == ["X-1", "X-2"]
    report = audit(sink)
    assert report.ok and report.streams[0].messages == 8 and report.streams[0].doubled == 0


def _rows(sink: Any, kind: str, lake: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if kind == "parquet":
        return dataset_rows(sink), quarantine_rows(sink)
    from tests.integration.iceberg.conftest import table_rows

    return table_rows(lake, "plant"), table_rows(lake, "plant__quarantine")
