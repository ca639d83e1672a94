"""QueueHook.test_connection connects for real, and never shows the password."""

from __future__ import annotations

import pytest

from sluice.brokers import BrokerProcess
from sluice.testing import free_port
from sluice_airflow.hooks.queue import QueueHook
from tests.integration.airflow.conftest import SetConnection


def test_kafka_connection_lists_topics(
    noida_broker: BrokerProcess, set_connection: SetConnection
) -> None:
    conn_id = set_connection("k", "sluice_kafka", noida_broker.host, noida_broker.port)
    ok, message = QueueHook(conn_id).test_connection()
    assert ok, message
    assert f"Connected to Kafka at {noida_broker.bootstrap}" in message


@pytest.mark.parametrize("right", [True, False], ids=["right password", "wrong password"])
def test_kafka_connection_over_sasl_ssl_logs_in_or_says_who_was_refused(
    secure_kafka_broker: BrokerProcess, set_connection: SetConnection, right: bool
) -> None:
    broker = secure_kafka_broker
    assert broker.security is not None and broker.security.certificates is not None
    ((user, password),) = broker.users.items()
    given = password if right else f"{password}-wrong"
    host, port = broker.listeners["SASL_SSL"].rsplit(":", 1)
    extra = {
        "connection.protocol": "sasl_ssl",
        "credential.mechanism": "scram-sha-512",
        "options.ssl_cafile": str(broker.security.certificates.ca),
        "options.connect_timeout": 2000,
    }
    conn_id = set_connection(
        "k", "sluice_kafka", host, int(port), login=user, password=given, extra=extra
    )
    ok, message = QueueHook(conn_id).test_connection()
    assert password not in message and given not in message
    if right:
        assert ok, message
        assert f"Connected to Kafka at {host}:{port}" in message
    else:
        assert not ok
        assert f"The broker refused the SASL SCRAM-SHA-512 login of user '{user}'" in message


def test_unreachable_kafka_says_so(set_connection: SetConnection) -> None:
    conn_id = set_connection("k", "sluice_kafka", "127.0.0.1", free_port(), password="pw-k-1")
    ok, message = QueueHook(conn_id).test_connection()
    assert not ok
    assert "Cannot connect to Kafka" in message
    assert "pw-k-1" not in message


def test_mqtt_connection(mosquitto_broker: BrokerProcess, set_connection: SetConnection) -> None:
    conn_id = set_connection(
        "m", "sluice_mqtt", mosquitto_broker.host, mosquitto_broker.port, extra={"client_id": "s"}
    )
    ok, message = QueueHook(conn_id).test_connection()
    assert ok, message
    assert "Connected to the MQTT broker" in message


def test_wrong_mqtt_password_is_refused_without_showing_it(
    mosquitto_auth_broker: BrokerProcess, set_connection: SetConnection
) -> None:
    broker = mosquitto_auth_broker
    (user, password) = next(iter(broker.users.items()))
    wrong = password + "-wrong"
    trusted = {"extra": {"options.allow_plaintext_credentials": True}}  # loopback
    conn_id = set_connection(
        "m", "sluice_mqtt", broker.host, broker.port, login=user, password=wrong, **trusted
    )
    ok, message = QueueHook(conn_id).test_connection()
    assert not ok
    assert "refused" in message.lower()
    assert wrong not in message and password not in message
    conn_id = set_connection(
        "m2", "sluice_mqtt", broker.host, broker.port, login=user, password=password, **trusted
    )
    ok, message = QueueHook(conn_id).test_connection()
    assert ok, message


def test_a_bad_extra_key_fails_the_test_naming_it(set_connection: SetConnection) -> None:
    conn_id = set_connection("m", "sluice_mqtt", "127.0.0.1", 1883, extra={"client_ide": "x"})
    ok, message = QueueHook(conn_id).test_connection()
    assert not ok
    assert "'client_ide'" in message
