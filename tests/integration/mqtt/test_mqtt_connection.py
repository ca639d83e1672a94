"""MqttConnection against mosquitto: credentials, refusals, TLS, WebSocket, restarts, sessions
and a connection shared by queues."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from pip_services3_commons.refer import Descriptor, References

from sluice.mqtt import MqttConnection, MqttMessageQueue
from sluice.queues import ConfigError, MessageEnvelope
from sluice.testing import BrokerProcess, free_port, make_certificates, start_mosquitto, wait_until

from .conftest import QueueFactory, receive_all

SECRET = "wrong-Pa55word"
#: The session's mosquitto with a password file listens in plaintext on loopback: a network
#: the tests trust, so they opt in to sending the password over it.
PLAINTEXT_OK = {"options.allow_plaintext_credentials": True}


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_a_wrong_password_is_refused_with_a_clear_error_that_hides_the_password(
    make_queue: QueueFactory,
    mosquitto_auth_broker: BrokerProcess,
    caplog: pytest.LogCaptureFixture,
    version: str,
) -> None:
    credentials = {"credential.username": "sluice", "credential.password": SECRET, **PLAINTEXT_OK}
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectionError) as refused:
        make_queue(mosquitto_auth_broker, **credentials, **{"options.protocol_version": version})
    message = str(refused.value)
    assert f"at 127.0.0.1:{mosquitto_auth_broker.port} refused the credentials of user" in message
    assert "'sluice'" in message and "credential.password" in message, "say what to fix"
    assert SECRET not in message and SECRET not in caplog.text
    assert SECRET not in repr(refused.value.__cause__) and refused.value.__context__ is None


def test_anonymous_is_refused_and_the_right_password_admitted(
    make_queue: QueueFactory, mosquitto_auth_broker: BrokerProcess
) -> None:
    with pytest.raises(ConnectionError, match=r"refused an anonymous connection.*credential"):
        make_queue(mosquitto_auth_broker)
    password = mosquitto_auth_broker.users["sluice"]
    login = {"credential.username": "sluice", "credential.password": password, **PLAINTEXT_OK}
    queue = make_queue(mosquitto_auth_broker, **login)
    queue.send(None, MessageEnvelope(None, "t", "authenticated"))
    assert receive_all(queue, 1)[0].message == b"authenticated"


def test_credentials_in_the_connection_uri(
    make_queue: QueueFactory, mosquitto_auth_broker: BrokerProcess
) -> None:
    password = mosquitto_auth_broker.users["sluice"]
    uri = f"mqtt://sluice:{password}@{mosquitto_auth_broker.host}:{mosquitto_auth_broker.port}"
    queue = make_queue(mosquitto_auth_broker, **{"connection.uri": uri}, **PLAINTEXT_OK)
    queue.send(None, MessageEnvelope(None, "t", "uri"))
    assert receive_all(queue, 1)[0].message == b"uri"


def test_a_password_over_plaintext_needs_the_opt_in_and_the_error_says_how_to_fix_it(
    make_queue: QueueFactory, mosquitto_auth_broker: BrokerProcess
) -> None:
    """``mqtt://user:pass@host/t`` sent the password in clear with no guard; now it is the
    rule of every transport (sluice.queues.tls): TLS, or options.allow_plaintext_credentials."""
    password = mosquitto_auth_broker.users["sluice"]
    login = {"credential.username": "sluice", "credential.password": password}
    with pytest.raises(ConfigError) as refused:
        make_queue(mosquitto_auth_broker, **login)
    message = str(refused.value)
    assert "'options.allow_plaintext_credentials' true" in message and "mqtts://" in message
    assert password not in message

    queue = make_queue(mosquitto_auth_broker, **login, **PLAINTEXT_OK)
    queue.send(None, MessageEnvelope(None, "t", "opted in"))
    assert receive_all(queue, 1)[0].message == b"opted in"


def test_a_password_over_tls_needs_no_opt_in(make_queue: QueueFactory, tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    broker = start_mosquitto(users={"sluice": "tls-Pa55word"}, tls=certificates)
    try:
        uri = f"mqtts://sluice:tls-Pa55word@{broker.host}:{broker.port}"
        queue = make_queue(
            broker, **{"connection.uri": uri, "options.ssl_cafile": str(certificates.ca)}
        )
        queue.send(None, MessageEnvelope(None, "t", "login over TLS"))
        assert receive_all(queue, 1)[0].message == b"login over TLS"
    finally:
        broker.close()


def test_a_client_certificate_without_a_ca_file_switches_tls_on(
    make_queue: QueueFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client certificate given without options.ssl_cafile was ignored: the client spoke
    plaintext to a broker that requires a certificate. Now it switches TLS on, with the
    system's CAs (here OpenSSL's SSL_CERT_FILE names the test CA)."""
    certificates = make_certificates(tmp_path)
    broker = start_mosquitto(tls=certificates, client_certificates=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    try:
        # the server's certificate serves as the client's: the broker's CA signed it
        files = {"options.ssl_certfile": str(certificates.cert)}
        queue = make_queue(broker, **files, **{"options.ssl_keyfile": str(certificates.key)})
        assert not queue.config["connection.protocol"] and not queue.config["options.ssl_cafile"]
        queue.send(None, MessageEnvelope(None, "t", "with a client certificate"))
        assert receive_all(queue, 1)[0].message == b"with a client certificate"
    finally:
        broker.close()


def test_a_tls_file_against_a_plaintext_listener_says_that_it_answered_in_plaintext(
    make_queue: QueueFactory, mosquitto_broker: BrokerProcess, tmp_path: Path
) -> None:
    """options.ssl_cafile switches TLS on; mosquitto's plaintext listener resets the
    connection on the ClientHello, which read "Connection reset by peer. Check
    connection.host and connection.port ... and that the broker is running"."""
    certificates = make_certificates(tmp_path)
    with pytest.raises(ConnectionError) as failed:
        make_queue(mosquitto_broker, **{"options.ssl_cafile": str(certificates.ca)})
    message = str(failed.value)
    address = f"{mosquitto_broker.host}:{mosquitto_broker.port}"
    assert (
        f"TLS was turned on by options.ssl_cafile, and the broker at {address} answered in "
        "plaintext" in message
    )
    assert "broker is running" not in message


def test_nothing_listening_names_the_address_and_the_keys_to_fix(make_queue: QueueFactory) -> None:
    port = free_port()
    closed = BrokerProcess("none", "mqtt", port, [], Path("."), Path("none.log"))
    with pytest.raises(ConnectionError, match=rf"127\.0\.0\.1:{port}.*connection\.host"):
        make_queue(closed)


def test_no_qos1_message_is_lost_across_a_broker_restart(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str
) -> None:
    fast = {"options.reconnect_timeout": 200, "options.connect_timeout": 20_000}
    reader = make_queue(private_mosquitto, client_id=f"{unique_name}-r", **fast)
    writer = make_queue(private_mosquitto, client_id=f"{unique_name}-w", **fast)
    sent = [MessageEnvelope(None, "t", str(i)) for i in range(60)]
    received: set[str] = set()
    halfway = threading.Event()

    def read() -> None:
        while len(received) < len(sent):
            message = reader.receive(None, 30_000)
            if message is None:
                return
            received.add(message.message_id)  # duplicates allowed: a set
            if len(received) >= 20:
                halfway.set()

    reading = threading.Thread(target=read)
    reading.start()
    for message in sent[:30]:
        writer.send(None, message)
    assert halfway.wait(10)
    private_mosquitto.restart()  # mid-stream: some sent, some received, some in flight
    for message in sent[30:]:
        writer.send(None, message)  # QoS 1: waits for the broker to be back and acknowledge
    reading.join(60)
    missing = {m.message_id for m in sent} - received
    assert not missing, f"lost {len(missing)} QoS 1 messages"


def test_a_resumed_session_does_not_hand_out_buffered_messages_twice(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess, unique_name: str
) -> None:
    reader = make_queue(
        private_mosquitto,
        client_id=f"{unique_name}-r",
        autocommit=False,
        **{"options.reconnect_timeout": 200},
    )
    for i in range(3):
        reader.send(None, MessageEnvelope(None, "t", str(i)))
    wait_until(lambda: reader.read_message_count() == 3, timeout=5, message="three buffered")
    private_mosquitto.restart()  # the session survives: the broker sends the three again
    wait_until(lambda: reader._conn().generation == 2, timeout=20, message="the reconnection")

    got = receive_all(reader, 3)
    assert [m.get_message_as_string() for m in got] == ["0", "1", "2"]
    assert reader.receive(None, 1500) is None, "a buffered copy was handed out again"


def test_a_lost_session_is_reported_and_stale_acks_are_not_sent(
    make_queue: QueueFactory,
    private_mosquitto: BrokerProcess,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = {
        "client_id": f"{unique_name}-r",
        "autocommit": False,
        "options.reconnect_timeout": 200,
    }
    reader = make_queue(private_mosquitto, **session)
    writer = make_queue(private_mosquitto, **{"options.reconnect_timeout": 200})
    writer.send(None, MessageEnvelope(None, "t", "before"))
    before = receive_all(reader, 1, complete=False)[0]

    private_mosquitto.stop()
    os.remove(private_mosquitto.workdir / "mosquitto.db")  # the broker forgets every session
    with caplog.at_level(logging.WARNING, logger="sluice.mqtt"):
        private_mosquitto.start()
        wait_until(lambda: reader._conn().generation == 2, timeout=20, message="reconnection")
    assert "lost the persistent session" in caplog.text

    writer.send(None, MessageEnvelope(None, "t", "after"))
    after = wait_until(lambda: reader.peek(None), timeout=10, message="the message after")
    # a new session numbers its packets from 1 again: both messages carry the same packet id
    assert before.get_reference().mid == after.get_reference().mid
    reader.complete(before)  # must not acknowledge "after", which only shares its packet id
    reader.close(None)

    again = make_queue(private_mosquitto, **session)
    assert receive_all(again, 1)[0].get_message_as_string() == "after"


def test_a_clean_session_subscribes_again_after_a_broker_restart(
    make_queue: QueueFactory, private_mosquitto: BrokerProcess
) -> None:
    fast = {"options.reconnect_timeout": 200}
    reader = make_queue(private_mosquitto, **fast)  # no client id: the broker forgets it on restart
    writer = make_queue(private_mosquitto, **fast)
    private_mosquitto.restart()
    wait_until(lambda: reader._conn().generation == 2, timeout=20, message="the reconnection")
    writer.send(None, MessageEnvelope(None, "t", "after restart"))
    assert receive_all(reader, 1)[0].message == b"after restart"


def test_tls_with_the_broker_ca(make_queue: QueueFactory, tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    broker = start_mosquitto(tls=certificates)
    try:
        queue = make_queue(
            broker,
            **{"connection.protocol": "mqtts", "options.ssl_cafile": str(certificates.ca)},
        )
        queue.send(None, MessageEnvelope(None, "t", "over TLS"))
        assert receive_all(queue, 1)[0].message == b"over TLS"
        with pytest.raises(ConnectionError, match=r"TLS handshake.*certificate.*ssl_cafile"):
            make_queue(broker, **{"connection.protocol": "mqtts"})  # system CAs do not trust it
    finally:
        broker.close()


def test_queues_share_a_connection_through_references(
    mosquitto_broker: BrokerProcess, unique_name: str
) -> None:
    connection = MqttConnection()
    connection.configure({"connection.uri": mosquitto_broker.url, "client_id": unique_name})
    references = References.from_tuples(
        Descriptor("sluice", "connection", "mqtt", "default", "1.0"), connection
    )
    queues = []
    for name in ("a", "b"):
        queue = MqttMessageQueue(name)
        queue.configure({"topic": f"sluice/{unique_name}/{name}", "options.qos": 1})
        queue.set_references(references)
        queue.open(None)
        queues.append(queue)
    first, second = queues
    try:
        assert first._conn() is connection and second._conn() is connection
        assert first.get_capabilities().can_persist, "the shared connection's session counts"
        first.send(None, MessageEnvelope(None, "t", "to a"))
        second.send(None, MessageEnvelope(None, "t", "to b"))
        assert receive_all(first, 1)[0].message == b"to a"
        assert receive_all(second, 1)[0].message == b"to b"

        first.close(None)
        assert connection.is_open(), "closing a queue leaves a shared connection open"
        second.send(None, MessageEnvelope(None, "t", "still here"))
        assert receive_all(second, 1)[0].message == b"still here"
    finally:
        second.close(None)
        connection.close(None)


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_queues_with_overlapping_filters_on_a_shared_connection(
    mosquitto_broker: BrokerProcess, unique_name: str, version: str
) -> None:
    """Each queue gets a message once, and one queue's complete() does not acknowledge it
    for the other. (mosquitto sends an MQTT 5 client one copy per matching subscription; the
    connection tells them apart by subscription identifier.)"""
    base = f"sluice/{unique_name}"
    session = {
        "connection.uri": mosquitto_broker.url,
        "client_id": unique_name,
        "options.protocol_version": version,
    }

    def open_queues(*filters: str) -> tuple[MqttConnection, list[MqttMessageQueue]]:
        connection = MqttConnection()
        connection.configure(session)
        references = References.from_tuples(
            Descriptor("sluice", "connection", "mqtt", "default", "1.0"), connection
        )
        queues = []
        for topic in filters:
            queue = MqttMessageQueue(topic)
            queue.configure({"topic": topic, "options.qos": 1, "autocommit": False})
            queue.set_references(references)
            queue.open(None)
            queues.append(queue)
        return connection, queues

    connection, (everything, rooms) = open_queues(f"{base}/#", f"{base}/+")
    writer = MqttMessageQueue("w")
    writer.configure(
        {"connection.uri": mosquitto_broker.url, "topic": f"{base}/hall", "options.qos": 1}
    )
    writer.open(None)
    try:
        writer.send(None, MessageEnvelope(None, "t", "once each"))
        assert receive_all(everything, 1)[0].message == b"once each"  # completed
        assert receive_all(rooms, 1, complete=False)[0].message == b"once each"  # not completed
        assert everything.receive(None, 500) is None and rooms.receive(None, 0) is None
    finally:
        writer.close(None)
        connection.close(None)  # like a crash: the queues never let go

    connection, (rooms,) = open_queues(f"{base}/+")
    try:
        again = receive_all(rooms, 1)[0]
        assert again.message == b"once each", "acknowledged by the other queue's complete()"
    finally:
        rooms.close(None)
        connection.close(None)
