"""sluice publish against real brokers: Kafka (noida-db) and MQTT (mosquitto)."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

from sluice.queues import queue_from_uri
from sluice.testing import free_port
from tests.unit.cli.runner import assert_error, assert_ok, on_terminal, run

from .conftest import read_topic

SLUICE = str(Path(sys.executable).parent / "sluice")

SUMMARY = re.compile(
    r"^Published (\d+) messages(?: \((\d+) of them malformed on purpose\))? to (\S+) "
    r"in [\d.]+ s \([\d,]+ msg/s\)\.$",
    re.M,
)


def test_sample_readings_with_keys_and_malformed_ones(kafka: str, unique_name: str) -> None:
    out = assert_ok(
        run(
            "publish",
            f"{kafka}/{unique_name}",
            "--sample",
            "iot",
            "--count",
            "50",
            "--malformed",
            "2",
            "--key-field",
            "device",
            "--seed",
            "7",
            "--rate",
            "5000",
        )
    )
    summary = SUMMARY.search(out)
    assert summary and summary.groups() == ("50", "2", f"{kafka}/{unique_name}")
    records = read_topic(kafka.removeprefix("kafka://"), unique_name)
    assert len(records) == 50
    readings, malformed = [], 0
    for record in records:
        try:
            readings.append((json.loads(record.value), record.key))
        except ValueError:
            malformed += 1
    assert malformed == 2
    assert all(key == reading["device"].encode() for reading, key in readings)


def test_json_lines_from_a_file_and_from_stdin(
    kafka: str, unique_name: str, tmp_path: Path
) -> None:
    lines = tmp_path / "orders.jsonl"
    lines.write_text('{"id": 1}\n\n{"id": 2}\n{"id": 3}\n')
    uri = f"{kafka}/{unique_name}"
    assert "Published 3 messages" in assert_ok(run("publish", uri, "--file", str(lines)))
    assert "Published 2 messages" in assert_ok(
        run("publish", uri, "--stdin", "--key-field", "id", input='{"id": 4}\n{"id": 5}\n')
    )
    records = read_topic(kafka.removeprefix("kafka://"), unique_name)
    assert [json.loads(r.value)["id"] for r in records] == [1, 2, 3, 4, 5]
    assert [r.key for r in records[3:]] == [b"4", b"5"]


def test_mqtt_qos1_reaches_a_persistent_session(mqtt: str, unique_name: str) -> None:
    topic = f"cli/{unique_name}"
    subscriber = queue_from_uri(f"{mqtt}/{topic}?qos=1&client_id={unique_name}")
    subscriber.open(None)
    try:
        out = assert_ok(run("publish", f"{mqtt}/{topic}?qos=1", "--sample", "iot", "--count", "5"))
        assert "Published 5 messages" in out
        received = [subscriber.receive(None, 10_000) for _ in range(5)]
    finally:
        subscriber.close(None)
    assert all(m is not None and json.loads(m.message)["device"] for m in received)


def test_unreachable_brokers_fail_in_one_line_without_the_password(unique_name: str) -> None:
    port = free_port()  # nothing listens there
    kafka = run(
        "publish",
        f"kafka://svc:s3cret@127.0.0.1:{port}/{unique_name}?connection.protocol=sasl_plaintext",
        "--sample",
        "iot",
    )
    assert_error(kafka, 1, f"Cannot connect to Kafka at 127.0.0.1:{port}", "broker is running")
    assert "host and port in the URI" in kafka.output and "connection." not in kafka.output
    assert "s3cret" not in kafka.output
    mqtt = run(
        "publish",
        f"mqtt://svc:s3cret@127.0.0.1:{port}/{unique_name}?allow_plaintext_credentials=true",
        "--sample",
        "iot",
    )
    assert_error(mqtt, 1, f"Cannot connect to the MQTT broker at 127.0.0.1:{port}")
    assert "host and port in the URI" in mqtt.output and "connection." not in mqtt.output
    assert "s3cret" not in mqtt.output


def test_a_bad_line_publishes_nothing(kafka: str, unique_name: str, tmp_path: Path) -> None:
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"id": 1}\nnot json\n')
    assert_error(run("publish", f"{kafka}/{unique_name}", "--file", str(lines)), 2, "Line 2 of")
    assert read_topic(kafka.removeprefix("kafka://"), unique_name) == []


def test_a_broker_that_does_not_answer_is_named_while_the_command_waits(
    unique_name: str,
) -> None:
    """On a terminal, the wait for a broker that accepts connections but never answers (up
    to options.connect_timeout) shows whom it waits for, not a silent screen."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks Kafka
        port = silent.getsockname()[1]
        argv = [SLUICE, "publish", f"kafka://127.0.0.1:{port}/{unique_name}", "--sample", "iot"]
        code, text = on_terminal(argv)
    assert f"Connecting to 127.0.0.1:{port}" in text, text
    assert f"Cannot connect to Kafka at 127.0.0.1:{port}" in text, text
    assert code == 1
