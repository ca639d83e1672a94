"""MqttConnection against mosquitto: authentication, refused connections, restarts and TLS."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import pytest

from sluice.queues import MessageEnvelope
from sluice.testing import BrokerProcess, make_certificates, start_mosquitto, wait_until

from .conftest import QueueFactory, receive_all


def test_wrong_password_is_refused_with_a_clear_error_that_hides_the_password(
    make_queue: QueueFactory, mosquitto_auth_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectionError) as refused:
        make_queue(
            mosquitto_auth_broker,
            **{"credential.username": "sluice", "credential.password": "wrong-Pa55word"},
        )
    message = str(refused.value)
    assert "refused the connection of user 'sluice'" in message
    assert "credential.password" in message, "the error should say what to fix"
    assert "wrong-Pa55word" not in message and "wrong-Pa55word" not in caplog.text


def test_anonymous_is_refused_and_the_right_password_admitted(
    make_queue: QueueFactory, mosquitto_auth_broker: BrokerProcess
) -> None:
    with pytest.raises(ConnectionError, match="refused"):
        make_queue(mosquitto_auth_broker)
    password = mosquitto_auth_broker.users["sluice"]
    queue = make_queue(
        mosquitto_auth_broker,
        **{
            "credential.username": "sluice",
            "credential.password": password,
            "options.autosubscribe": True,
        },
    )
    queue.send(None, MessageEnvelope(None, "t", "authenticated"))
    assert receive_all(queue, 1)[0].message == b"authenticated"


def test_nothing_listening_names_the_address(make_queue: QueueFactory) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = BrokerProcess("none", "mqtt", port, [], Path("."), Path("none.log"))
    with pytest.raises(ConnectionError, match=rf"127\.0\.0\.1:{port}.*connection\.host"):
        make_queue(closed)


def test_no_qos1_message_is_lost_across_a_broker_restart(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str
) -> None:
    reader = make_queue(
        private_mosquitto,
        client_id=f"{unique_name}-r",
        **{"options.autosubscribe": True, "options.reconnect_timeout": 200},
    )
    writer = make_queue(
        private_mosquitto, client_id=f"{unique_name}-w", **{"options.reconnect_timeout": 200}
    )
    sent = [MessageEnvelope(None, "t", str(i)) for i in range(60)]
    received: set[str] = set()
    halfway = threading.Event()

    def read() -> None:
        while len(received) < len(sent):
            message = reader.receive(None, 30_000)
            if message is None:
                return
            received.add(message.message_id)
            if len(received) >= 20:
                halfway.set()

    reading = threading.Thread(target=read)
    reading.start()
    for message in sent[:30]:
        writer.send(None, message)
    assert halfway.wait(10)
    private_mosquitto.restart()  # mid-stream: some sent, some received, some in flight
    for message in sent[30:]:
        writer.send(None, message)
    reading.join(60)
    assert received == {m.message_id for m in sent}, (
        f"lost {len(sent) - len(received)} QoS 1 messages"
    )


def test_tls_with_the_broker_ca(make_queue: QueueFactory, tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    broker = start_mosquitto(tls=certificates)
    try:
        queue = make_queue(
            broker,
            **{
                "connection.protocol": "mqtts",
                "options.ssl_cafile": str(certificates.ca),
                "options.autosubscribe": True,
            },
        )
        queue.send(None, MessageEnvelope(None, "t", "over TLS"))
        assert receive_all(queue, 1)[0].message == b"over TLS"
        with pytest.raises(Exception, match=r"(?i)certificate"):
            make_queue(broker, **{"connection.protocol": "mqtts"})  # system CAs do not trust it
    finally:
        broker.close()


def test_a_clean_session_subscribes_again_after_a_broker_restart(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess
) -> None:
    fast = {"options.reconnect_timeout": 200}
    reader = make_queue(private_mosquitto, **fast)  # no client id: the broker forgets it on restart
    writer = make_queue(private_mosquitto, **fast)
    private_mosquitto.restart()
    message = MessageEnvelope(None, "t", "after restart")

    def delivered() -> bool:
        writer.send(None, message)  # until the reader is back and subscribed again
        return reader.receive(None, 300) is not None

    wait_until(delivered, timeout=20, interval=0.1, message="a message after the restart")
