"""sluice dlq replay: dead letters go back to their topic, once, without the dead-letter headers."""

from __future__ import annotations

import json

from sluice.brokers import BrokerProcess
from sluice.kafka import KafkaMessageQueue
from sluice.queues import MessageEnvelope
from tests.unit.cli.runner import assert_ok, run, table_rows

from .conftest import read_topic


def _dead_letters(noida: BrokerProcess, topic: str, count: int) -> list[str]:
    """Send ``count`` orders to ``topic`` and dead-letter the even ones; their message ids."""
    queue = KafkaMessageQueue(topic)
    queue.configure(
        {
            "connection.uri": noida.bootstrap,
            "topic": topic,
            "group_id": f"{topic}-app",
            "from_beginning": True,
            "autocommit": False,
            "options.session_timeout": 6000,
        }
    )
    queue.open(None)
    dead = []
    try:
        for i in range(count):
            queue.send(
                None,
                MessageEnvelope(None, "order", {"id": i}, key=f"k{i}", headers={"trace": f"t{i}"}),
            )
        for i in range(count):
            message = queue.receive(None, 20_000)
            assert message is not None
            if i % 2 == 0:
                queue.move_to_dead_letter(message, f"bad order {i}")
                dead.append(message.message_id)
            else:
                queue.complete(message)
    finally:
        queue.close(None)
    return dead


def test_dry_run_lists_then_replay_republishes_once(
    noida_broker: BrokerProcess, kafka: str, unique_name: str
) -> None:
    dead = _dead_letters(noida_broker, unique_name, 4)
    uri = f"{kafka}/{unique_name}"
    listed = assert_ok(run("dlq", "replay", uri, "--dry-run"))
    rows = table_rows(listed)
    assert [row[2] for row in rows] == [f"{unique_name}[0]@0", f"{unique_name}[0]@2"]
    assert [row[3] for row in rows] == ["bad order 0", "bad order 2"]
    # The dry run committed nothing: the replay group has not moved.
    lag = assert_ok(run("lag", f"{kafka}/{unique_name}.dlq?group_id=sluice-dlq-replay"))
    # Partition, committed, end, lag; the last column is the oldest waiting message's age.
    assert [row[:4] for row in table_rows(lag)] == [["0", "-", "2", "2"]]

    replayed = assert_ok(run("dlq", "replay", uri))
    assert table_rows(replayed) == [[unique_name, "2"]]
    records = read_topic(noida_broker.bootstrap, unique_name)
    back = records[4:]
    assert [json.loads(r.value)["id"] for r in back] == [0, 2]
    assert [r.key for r in back] == [b"k0", b"k2"]
    for record, message_id in zip(back, dead, strict=True):
        headers = dict(record.headers)
        assert not any(name.startswith("sluice.") for name in headers)
        assert headers["message_id"].decode() == message_id
        assert headers["trace"] in (b"t0", b"t2")
    again = assert_ok(run("dlq", "replay", uri))
    assert "No dead letters to replay" in again
    assert len(read_topic(noida_broker.bootstrap, unique_name)) == 6


def test_replay_to_another_topic_at_most_max(
    noida_broker: BrokerProcess, kafka: str, unique_name: str
) -> None:
    _dead_letters(noida_broker, unique_name, 4)
    uri = f"{kafka}/{unique_name}?group_id=fixers"
    target = f"{unique_name}-retry"
    assert table_rows(assert_ok(run("dlq", "replay", uri, "--to", target, "--max", "1"))) == [
        [target, "1"]
    ]
    assert table_rows(assert_ok(run("dlq", "replay", uri, "--to", target))) == [[target, "1"]]
    retried = read_topic(noida_broker.bootstrap, target)
    assert [json.loads(r.value)["id"] for r in retried] == [0, 2]
    assert len(read_topic(noida_broker.bootstrap, unique_name)) == 4  # the original untouched
