"""sluice peek and sluice lag: they show what waits and change nothing."""

from __future__ import annotations

import json

from sluice.brokers import BrokerProcess
from sluice.kafka import KafkaMessageQueue
from sluice.queues import queue_from_uri
from sluice.testing.topics import create_kafka_topic
from tests.unit.cli.runner import assert_error, assert_ok, run, table_rows


def _publish(uri: str, count: int) -> None:
    assert_ok(
        run("publish", uri, "--sample", "iot", "--count", str(count), "--key-field", "device")
    )


def _consume(noida: BrokerProcess, topic: str, group: str, count: int) -> None:
    """Let ``group`` read and commit the first ``count`` messages of ``topic``."""
    queue = KafkaMessageQueue(topic)
    queue.configure(
        {
            "connection.uri": noida.bootstrap,
            "topic": topic,
            "group_id": group,
            "from_beginning": True,
            "autocommit": False,
            "options.session_timeout": 6000,
        }
    )
    queue.open(None)
    try:
        for _ in range(count):
            message = queue.receive(None, 20_000)
            assert message is not None
            queue.complete(message)
    finally:
        queue.close(None)


def test_peek_shows_the_last_messages_of_every_partition(
    noida_broker: BrokerProcess, kafka: str, unique_name: str
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    _publish(f"{kafka}/{unique_name}", 20)
    out = assert_ok(run("peek", f"{kafka}/{unique_name}", "-n", "4"))
    assert f"Last 4 message(s) on '{unique_name}'" in out
    rows = table_rows(out)
    assert len(rows) == 4
    by_partition: dict[str, list[int]] = {}
    for partition, offset, key, value in rows:
        by_partition.setdefault(partition, []).append(int(offset))
        assert value.startswith('{"device": ') and key.startswith("sensor-")
    assert set(by_partition) == {"0", "1"}  # the last two of each partition


def test_peek_and_lag_of_a_group_commit_nothing(
    noida_broker: BrokerProcess, kafka: str, unique_name: str
) -> None:
    _publish(f"{kafka}/{unique_name}", 10)
    group = f"{unique_name}-g"
    _consume(noida_broker, unique_name, group, 4)
    uri = f"{kafka}/{unique_name}?group_id={group}"
    for _ in range(2):  # the same every time: peeking commits nothing
        out = assert_ok(run("peek", uri, "-n", "3"))
        assert f"Next 3 message(s) waiting for group '{group}'" in out
        assert [row[1] for row in table_rows(out)] == ["4", "5", "6"]
    lag = assert_ok(run("lag", uri))
    ((partition, committed, end, waiting, oldest),) = table_rows(lag)
    assert (partition, committed, end, waiting) == ("0", "4", "10", "6")
    assert oldest.endswith((" s", " min"))  # how long offset 4 has waited
    assert "Total lag: 6" in lag


def test_lag_counts_a_partition_without_commits_from_its_beginning(
    noida_broker: BrokerProcess, kafka: str, unique_name: str
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 2)
    _publish(f"{kafka}/{unique_name}", 12)
    out = assert_ok(run("lag", f"{kafka}/{unique_name}?group_id=nobody"))
    rows = table_rows(out)
    assert [row[1] for row in rows] == ["-", "-"]
    assert sum(int(row[3]) for row in rows) == 12
    assert "Total lag: 12" in out and "no committed offset yet" in out


def test_peek_mqtt_leaves_the_session_s_messages_unacknowledged(
    mqtt: str, unique_name: str
) -> None:
    topic = f"cli/{unique_name}"
    session = f"{mqtt}/{topic}?qos=1&client_id={unique_name}&autocommit=false"
    creator = queue_from_uri(session)
    creator.open(None)  # the session exists from now on: the broker queues messages for it
    creator.close(None)
    _publish(f"{mqtt}/{topic}?qos=1", 5)
    uri = f"{mqtt}/{topic}?client_id={unique_name}&qos=1"
    first = table_rows(assert_ok(run("peek", uri, "-n", "3")))
    second = table_rows(assert_ok(run("peek", uri, "-n", "3")))
    assert len(first) == 3 and first == second  # the same messages: none was consumed
    consumer = queue_from_uri(session)
    consumer.open(None)
    try:
        received = [consumer.receive(None, 10_000) for _ in range(5)]
    finally:
        consumer.close(None)
    assert all(m is not None for m in received)
    for row, message in zip(first, received, strict=False):
        assert message is not None and message.message_id.startswith(row[1].rstrip("…"))
        assert json.loads(message.message)["device"] in row[3]


def test_peek_mqtt_says_which_messages_were_sluice_envelopes_and_which_raw_payloads(
    mqtt: str, unique_name: str
) -> None:
    from sluice.queues import MessageEnvelope

    topic = f"cli/{unique_name}"
    creator = queue_from_uri(f"{mqtt}/{topic}?qos=1&client_id={unique_name}&autocommit=false")
    creator.open(None)
    creator.close(None)
    _publish(f"{mqtt}/{topic}?qos=1", 2)  # sluice publish: Sluice envelopes
    device = queue_from_uri(f"{mqtt}/{topic}?qos=1&serialize_envelope=false")
    device.open(None)  # a device: its JSON as it is
    try:
        for number in range(3):
            device.send(None, MessageEnvelope(None, None, json.dumps({"raw": number})))
    finally:
        device.close(None)

    out = assert_ok(run("peek", f"{mqtt}/{topic}?client_id={unique_name}&qos=1", "-n", "5"))
    assert "2 Sluice envelope(s), 3 raw payload(s)" in out, out
    rows = table_rows(out)
    assert [row[-1] for row in rows] == ["envelope"] * 2 + ["raw payload"] * 3, out
    assert all('"raw"' in row[3] for row in rows[2:]) and '"device"' in rows[0][3], out

    raw = f"{mqtt}/{topic}?client_id={unique_name}&qos=1&serialize_envelope=false"
    out = assert_ok(run("peek", raw, "-n", "5"))
    assert "serialize_envelope=false: every payload read raw" in out, out
    assert [row[-1] for row in table_rows(out)] == ["raw payload"] * 5, out


def test_errors_on_topics_and_brokers(kafka: str, unique_name: str) -> None:
    assert_error(run("peek", f"{kafka}/{unique_name}"), 1, f"Topic '{unique_name}' does not exist")
    assert_error(run("lag", f"{kafka}/{unique_name}?group_id=g"), 1, "does not exist")
