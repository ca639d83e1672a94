"""connection.discovery_key and credential.store_key resolve through set_references."""

from __future__ import annotations

import pytest
from pip_services3_commons.config import ConfigParams
from pip_services3_commons.refer import Descriptor, References
from pip_services3_components.auth import MemoryCredentialStore
from pip_services3_components.connect import ConnectionParams, MemoryDiscovery
from pip_services3_messaging.queues import MessageEnvelope as PipEnvelope

from sluice.pipservices import KafkaConnection, MemoryMessageQueue, MqttMessageQueue
from sluice.queues import ConfigError
from sluice.testing.plugin import Broker

DISCOVERY = Descriptor("pip-services", "discovery", "memory", "default", "1.0")
CREDENTIALS = Descriptor("pip-services", "credential-store", "memory", "default", "1.0")


def test_mqtt_queue_resolves_connection_and_credential(
    mosquitto_auth_broker: Broker, unique_name: str
) -> None:
    """The broker refuses anonymous clients: the round trip proves both were resolved."""
    password = mosquitto_auth_broker.users["sluice"]
    discovery = MemoryDiscovery(
        ConfigParams.from_tuples(
            "connections.broker.host", mosquitto_auth_broker.host,
            "connections.broker.port", mosquitto_auth_broker.port,
        )
    )  # fmt: skip
    store = MemoryCredentialStore(
        ConfigParams.from_tuples("mqtt.username", "sluice", "mqtt.password", password)
    )
    queue = MqttMessageQueue("readings")
    queue.configure(
        ConfigParams.from_tuples(
            "topic", f"sluice/{unique_name}",
            "connection.discovery_key", "broker",
            "credential.store_key", "mqtt",
            "options.qos", 1,
            # the loopback mosquitto has no TLS: the password over plaintext is opted in
            "options.allow_plaintext_credentials", True,
        )
    )  # fmt: skip
    queue.set_references(References.from_tuples(DISCOVERY, discovery, CREDENTIALS, store))
    queue.open(None)
    try:
        queue.send(None, PipEnvelope("c", "Reading", "21.5"))
        received = queue.receive(None, 10_000)
        assert received is not None and received.get_message_as_string() == "21.5"
    finally:
        queue.close(None)


def test_kafka_connection_resolves_discovery_at_open(noida_broker: Broker) -> None:
    discovery = MemoryDiscovery()
    connection = KafkaConnection()
    connection.configure(ConfigParams.from_tuples("connection.discovery_key", "cluster"))
    connection.set_references(References.from_tuples(DISCOVERY, discovery))
    # registered after set_references: pip-services resolves at open, and so does Sluice
    discovery.register(None, "cluster", _connection(noida_broker))
    connection.open(None)
    try:
        assert isinstance(connection.read_queue_names(), list)
        assert connection.servers == [noida_broker.bootstrap]
    finally:
        connection.close(None)


def test_unresolvable_keys_say_what_to_register() -> None:
    queue = MemoryMessageQueue("q")
    queue.configure(ConfigParams.from_tuples("connection.discovery_key", "nowhere"))
    with pytest.raises(ConfigError, match=r"discovery_key 'nowhere' needs a discovery service"):
        queue.open(None)
    queue.set_references(References.from_tuples(DISCOVERY, MemoryDiscovery()))
    with pytest.raises(ConfigError, match=r"no discovery service knows .*'nowhere'"):
        queue.open(None)

    queue = MemoryMessageQueue("q")
    queue.configure(ConfigParams.from_tuples("credential.store_key", "secret"))
    with pytest.raises(ConfigError, match=r"store_key 'secret' needs a credential store"):
        queue.open(None)
    queue.set_references(References.from_tuples(CREDENTIALS, MemoryCredentialStore()))
    with pytest.raises(ConfigError, match=r"no credential store knows .*'secret'"):
        queue.open(None)
    assert not queue.is_open()


def _connection(broker: Broker) -> ConnectionParams:
    return ConnectionParams.from_tuples("host", broker.host, "port", broker.port)
