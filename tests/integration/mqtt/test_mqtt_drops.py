"""The broker's dropped-message count, read from a real mosquitto (see sluice.mqtt.drops)."""

from __future__ import annotations

import pytest

from sluice.mqtt import MqttMessageQueue
from sluice.mqtt.drops import read_dropped_count
from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess, start_mosquitto

from .conftest import QueueFactory, receive_all

QUEUED = 1000  # mosquitto's default max_queued_messages
SENT = 1500


def test_messages_dropped_for_an_offline_session_show_in_the_count(
    make_queue: QueueFactory, stock_mosquitto: BrokerProcess, unique_name: str
) -> None:
    """With mosquitto's default limits, a persistent session that is offline keeps 1,000 QoS 1
    messages: of 1,500 published, 500 are dropped, and only the count says so."""
    session = {"client_id": f"{unique_name}-r"}
    reader = make_queue(stock_mosquitto, **session)
    config = reader.config
    reader.close(None)  # offline: the broker queues for the session, up to its limit
    before = read_dropped_count(config, timeout_s=5, next_update=True)
    assert before is not None

    writer = make_queue(stock_mosquitto, **{"options.autosubscribe": False})
    for i in range(SENT):
        writer.send(None, MessageEnvelope(None, "t", str(i)))
    after = read_dropped_count(config, timeout_s=5, next_update=True)

    assert after is not None and after - before == SENT - QUEUED
    again = make_queue(stock_mosquitto, **session)
    kept = receive_all(again, QUEUED)
    assert again.receive(None, 500) is None, "the broker kept more than max_queued_messages"
    assert [m.get_message_as_string() for m in kept] == [str(i) for i in range(QUEUED)]


def test_the_last_published_count_comes_at_once(
    make_queue: QueueFactory, stock_mosquitto: BrokerProcess
) -> None:
    config = make_queue(stock_mosquitto).config
    count = read_dropped_count(config, timeout_s=5)
    assert isinstance(count, int) and count >= 0


def test_credentials_and_tls_come_from_the_queue_config() -> None:
    # A broker of its own: the session's auth broker may be older than the 60 s for which
    # mosquitto keeps a $SYS value it has not changed.
    broker = start_mosquitto(users={"sluice": "drops-secret"}, sys_interval=1)
    try:
        queue = MqttMessageQueue()
        credentials = {
            "credential.username": "sluice",
            "credential.password": "drops-secret",
            "options.allow_plaintext_credentials": True,  # loopback: a network we trust
        }
        queue.configure(
            {"connection.uri": broker.url, "topic": "t", "client_id": "c", **credentials}
        )
        assert isinstance(read_dropped_count(queue.config, timeout_s=5), int)
        wrong = {**queue.config, "credential.password": "wrong"}
        with pytest.raises(ConnectionError, match="refused the credentials"):
            read_dropped_count(wrong)
    finally:
        broker.close()


def test_a_broker_without_the_count_gives_none() -> None:
    broker = start_mosquitto(sys_interval=0)  # no $SYS topics at all
    try:
        config = {"connection.host": broker.host, "connection.port": broker.port}
        assert read_dropped_count(config, timeout_s=0.5) is None
    finally:
        broker.close()
