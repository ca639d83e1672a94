"""MQTT drops are never silent: a stock mosquitto (max_queued_messages 1000) drops what an
offline session cannot queue, and the next ingest says so (or fails, if asked to)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import BatchSpec
from sluice.mqtt import MqttMessageQueue
from sluice.mqtt.drops import read_dropped_count
from sluice.queues import MessageEnvelope
from sluice.spark import ingest
from sluice.spark.remaining import DataLossError
from sluice.testing import wait_until
from sluice.testing.plugin import Broker
from sluice_dagster.ops import ingest_metadata

from .conftest import SCHEMA, reading


def queue(broker: Broker, **config: Any) -> MqttMessageQueue:
    opened = MqttMessageQueue()
    opened.configure({"connection.uri": broker.url, "options.qos": 1, **config})
    opened.open(None)
    return opened


def test_an_ingest_after_the_broker_dropped_messages_reports_them(
    spark: Any,
    stock_mosquitto: Broker,
    unique_name: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue(stock_mosquitto, topic=unique_name, client_id=unique_name).close(None)  # the session
    source = {"connection.uri": stock_mosquitto.url}
    before = read_dropped_count(source, 5.0, next_update=True)  # the broker may have just started
    assert before is not None
    publisher = queue(stock_mosquitto, topic=unique_name, **{"options.autosubscribe": False})
    try:
        for i in range(1_500):  # the offline session can queue 1,000
            publisher.send(None, MessageEnvelope(None, "reading", json.loads(reading(i))))
    finally:
        publisher.close(None)
    wait_until(
        lambda: (read_dropped_count(source, 3.0, next_update=True) or 0) >= before + 500,
        timeout=20,
        message="mosquitto to count the drops",
    )
    spec = BatchSpec("mqtt", unique_name, client_id=unique_name, max_messages=100)

    with pytest.raises(DataLossError, match=r"dropped \d+ message.*max_queued_messages"):
        ingest(spark, spec, tmp_path, source=source, schema=SCHEMA, fail_on_broker_drops=True)
    with caplog.at_level(logging.WARNING, logger="sluice.spark"):
        result = ingest(spark, spec, tmp_path, source=source, schema=SCHEMA)
    following = BatchSpec("mqtt", unique_name, client_id=unique_name, max_messages=100, sequence=1)
    again = ingest(
        spark, following, tmp_path, source=source, schema=SCHEMA, fail_on_broker_drops=True
    )

    assert result.dropped is not None and result.dropped >= 500
    assert result.written > 0 and result.committed
    assert any("max_queued_messages" in r.getMessage() for r in caplog.records)
    assert ingest_metadata(result)["broker_dropped"].value == result.dropped
    assert again.dropped == 0, "the drops are reported once, against the last ingest"
