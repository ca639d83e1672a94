"""KafkaConnection (seed 001) against real brokers: publish, subscribe, commit, seek, admin."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from pip_services3_commons.refer import Descriptor, References

from sluice.kafka import KafkaConnection, KafkaMessageQueue
from sluice.queues import MessageEnvelope
from sluice.testing import wait_until
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic


class Collector:
    """A listener (seed 001's IKafkaMessageListener) that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.lock = threading.Lock()

    def on_message(self, topic: str, partition: int, message: Any) -> None:
        with self.lock:
            self.records.append(message)

    def values(self) -> list[bytes]:
        with self.lock:
            return [r.value for r in self.records]


@pytest.fixture
def connection(kafka_broker: Broker) -> Any:
    conn = KafkaConnection()
    conn.configure({"connection.uri": kafka_broker.bootstrap, "options.num_partitions": 2})
    conn.open(None)
    yield conn
    conn.close(None)


def test_admin_creates_lists_and_deletes_topics(
    connection: KafkaConnection, unique_name: str
) -> None:
    connection.create_queue(unique_name)
    connection.create_queue(unique_name)  # exists already: no error
    assert unique_name in connection.read_queue_names()
    assert not any(name.startswith("__") for name in connection.read_queue_names())
    connection.delete_queue(unique_name)
    wait_until(
        lambda: unique_name not in connection.read_queue_names(), timeout=10, message="deletion"
    )


def test_publish_subscribe_commit_and_seek(connection: KafkaConnection, unique_name: str) -> None:
    connection.create_queue(unique_name)
    # Recent timestamps: a broker's retention deletes records stamped older than 7 days.
    stamp = int(time.time() * 1000) - 60_000
    connection.publish(
        unique_name,
        [
            {
                "value": f"v{i}",
                "key": "k",
                "timestamp": stamp + i,
                "headers": {"h": "x"},
            }
            for i in range(3)
        ],
        {},
    )
    listener = Collector()
    group = f"{unique_name}-g"
    connection.subscribe(
        unique_name, group, {"from_beginning": True, "session_timeout": 6000}, listener
    )
    wait_until(lambda: len(listener.records) >= 3, timeout=20, message="three records")
    assert len(listener.records) == 3
    record = listener.records[0]
    assert (record.value, record.key, record.headers) == (b"v0", b"k", [("h", b"x")])
    assert record.timestamp == stamp

    partition = record.partition
    connection.commit(unique_name, group, partition, 2, listener)
    connection.seek(unique_name, group, partition, 1, listener)
    wait_until(lambda: len(listener.records) == 5, timeout=20, message="records after the seek")
    assert listener.values()[3:] == [b"v1", b"v2"]
    connection.unsubscribe(unique_name, group, listener)

    probe = KafkaConsumer(
        bootstrap_servers=connection.servers, group_id=group, enable_auto_commit=False
    )
    try:
        assert probe.committed(TopicPartition(unique_name, partition)) == 2
    finally:
        probe.close()


def test_two_queues_share_one_connection_through_references(
    connection: KafkaConnection, unique_name: str, kafka_broker: Broker
) -> None:
    create_kafka_topic(kafka_broker.bootstrap, unique_name, 1)
    references = References.from_tuples(
        Descriptor("sluice", "connection", "kafka", "default", "1.0"), connection
    )
    queues = []
    for role in ("writer", "reader"):
        queue = KafkaMessageQueue(role)
        queue.configure(
            {
                "topic": unique_name,
                "group_id": f"{unique_name}-{role}",
                "from_beginning": True,
                "options.session_timeout": 6000,
            }
        )
        queue.set_references(references)
        queue.open(None)
        queues.append(queue)
    writer, reader = queues
    writer.send(None, MessageEnvelope(None, "t", "shared"))
    got = reader.receive(None, 15000)
    assert got is not None and got.message == b"shared"
    assert writer._conn() is connection and reader._conn() is connection
    for queue in queues:
        queue.close(None)
    assert connection.is_open(), "closing a queue must not close the shared connection"


def test_open_fails_fast_and_clearly_when_nothing_listens(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conn = KafkaConnection()
    conn.configure(
        {
            "connection.host": "127.0.0.1",
            "connection.port": port,
            "connection.protocol": "sasl_plaintext",
            "credential.username": "svc",
            "credential.password": "s3cr3t-pw",
            "options.connect_timeout": 300,
            "options.max_retries": 2,
            "options.retry_timeout": 100,
        }
    )
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectionError) as error:
        conn.open(None)
    elapsed = time.monotonic() - started
    assert f"127.0.0.1:{port}" in str(error.value)
    assert "after 2 attempt(s)" in str(error.value)
    assert "s3cr3t-pw" not in str(error.value) and "s3cr3t-pw" not in caplog.text
    assert "s3cr3t-pw" not in repr(conn)
    # Two attempts of connect_timeout (300 ms) with retry_timeout (100 ms) between them.
    assert 0.6 <= elapsed < 0.7 + 1.5, f"two 300 ms attempts took {elapsed:.2f} s"


class Breaking:
    """A listener that fails on the first message it is given."""

    def on_message(self, topic: str, partition: int, message: Any) -> None:
        raise ValueError(f"listener broke on offset {message.offset}")


def test_a_consumer_thread_that_stopped_on_an_error_says_which(
    connection: KafkaConnection, unique_name: str
) -> None:
    connection.create_queue(unique_name)
    connection.publish(unique_name, [{"value": "v"}], {})
    listener = Breaking()
    connection.subscribe(unique_name, f"{unique_name}-g", {"from_beginning": True}, listener)
    [subscription] = connection.subscriptions(unique_name, f"{unique_name}-g", listener)
    try:
        wait_until(lambda: not subscription.is_alive(), timeout=30, message="the thread stops")
        with pytest.raises(RuntimeError, match=r"stopped on ValueError\('listener broke on offset"):
            subscription.call(lambda consumer: None)
    finally:
        connection.unsubscribe(unique_name, f"{unique_name}-g", listener)
