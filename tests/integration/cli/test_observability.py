"""Metrics for any orchestrator: ``sluice lag --json`` and ``sluice audit --json`` (versioned
layouts) and ``sluice watch --prometheus`` scraped over HTTP on loopback, after a real ingest
with messages left waiting behind it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from sluice.brokers import BrokerProcess
from sluice.testing.topics import create_kafka_topic
from tests.unit.cli.runner import assert_ok, run

SLUICE = str(Path(sys.executable).parent / "sluice")
SCHEMA = "device STRING, temperature DOUBLE"
SAMPLE = re.compile(r"^(?P<name>\w+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a Prometheus text exposition."""
    found = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match["labels"]))
        found.append((match["name"], labels, float(match["value"])))
    return found


def value(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    (only,) = [v for n, ls, v in found if n == name and labels.items() <= ls.items()]
    return only


def test_lag_audit_and_prometheus_after_an_ingest_with_messages_waiting(
    spark: Any,
    noida_broker: BrokerProcess,
    mosquitto_broker: BrokerProcess,
    kafka: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    topic = f"{kafka}/{unique_name}"
    uri = f"{topic}?group_id={unique_name}"
    sink = tmp_path / "lake"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "20", "--key-field", "device"))
    assert_ok(run("ingest", uri, "--sink", str(sink), "--schema", SCHEMA))
    ingested = time.time()
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "6", "--key-field", "device"))
    published = time.time()

    # sluice lag --json: version 1; the 6 new messages wait; the oldest of them, not of the 20
    lag = json.loads(assert_ok(run("lag", uri, "--json", "--sink", str(sink))))
    assert lag["version"] == 1
    assert (lag["kind"], lag["topic"], lag["group"], lag["lag"]) == (
        "kafka",
        unique_name,
        unique_name,
        6,
    )
    assert sum(p["lag"] for p in lag["partitions"]) == 6
    assert all(p["committed"] is not None for p in lag["partitions"])
    assert ingested - 0.5 <= lag["oldest_waiting_timestamp"] <= published + 0.5
    assert lag["oldest_waiting_age_seconds"] >= 0
    assert lag["last_batch_id"] and lag["last_batch_at"] <= ingested
    assert lag["last_batch_age_seconds"] >= 0 and lag["error"] is None

    # sluice audit --json: version 1, the stream's verdict with it
    audit = json.loads(assert_ok(run("audit", str(sink), "--source", kafka, "--json")))
    assert audit["version"] == 1 and audit["ok"] is True
    assert [(s["topic"], s["group"], s["ok"]) for s in audit["streams"]] == [
        (unique_name, unique_name, True)
    ]

    # sluice watch --prometheus: a Kafka stream, an MQTT one (no lag to see) and a missing topic
    password = "pw-watch-secret"
    authenticated = (
        f"kafka://ingest:{password}@{noida_broker.host}:{noida_broker.port}/{unique_name}"
        f"?group_id={unique_name}&connection.protocol=sasl_plaintext"
    )
    mqtt = f"{mosquitto_broker.url}/plant/{unique_name}?client_id={unique_name}"
    missing = f"{kafka}/{unique_name}-nothing?group_id=g"
    server = subprocess.Popen(
        [SLUICE, "watch", authenticated, mqtt, missing, "--sink", str(sink), "--prometheus", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # blocks until the server listens (or the process ends)
        assert "Serving the metrics of 3 stream(s) at http://127.0.0.1:" in line, (
            line + server.communicate(timeout=10)[1]
        )
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url, timeout=60) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = response.read().decode()
    finally:
        server.terminate()
        server.wait(10)
    found = samples(text)
    kafka_stream = {"kind": "kafka", "topic": unique_name, "group": unique_name}
    assert value(found, "sluice_up", **kafka_stream) == 1
    assert value(found, "sluice_stream_lag_messages", **kafka_stream) == 6
    assert (
        sum(value(found, "sluice_lag_messages", **kafka_stream, partition=str(p)) for p in (0, 1))
        == 6
    )
    age = value(found, "sluice_oldest_waiting_message_age_seconds", **kafka_stream)
    assert 0 <= age <= time.time() - ingested + 0.5
    last = value(found, "sluice_last_batch_timestamp_seconds", **kafka_stream, sink=str(sink))
    assert abs(last - lag["last_batch_at"]) < 0.01
    mqtt_stream = {"kind": "mqtt", "topic": f"plant/{unique_name}", "group": unique_name}
    assert value(found, "sluice_up", **mqtt_stream) == 1
    assert not [n for n, ls, _ in found if ls.get("kind") == "mqtt" and "lag" in n]
    assert value(found, "sluice_up", topic=f"{unique_name}-nothing") == 0
    assert "# TYPE sluice_oldest_waiting_message_age_seconds gauge" in text
    assert password not in text
