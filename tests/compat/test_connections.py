"""The connection classes answer pip-services' calls as pip-services3-kafka/-mqtt's do."""

from __future__ import annotations

import threading
from typing import Any

from pip_services3_commons.config import ConfigParams

from sluice.pipservices import KafkaConnection, MqttConnection
from sluice.testing import wait_until
from sluice.testing.plugin import Broker


class Collector:
    """A listener with only ``on_message``, as pip-services code writes them."""

    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def on_message(self, *args: Any) -> None:
        with self._lock:
            self.messages.append(args)


def test_kafka_connection_lifecycle_and_calls(noida_broker: Broker, unique_name: str) -> None:
    connection = KafkaConnection()
    connection.configure(
        ConfigParams.from_tuples(
            "connection.protocol", "tcp",
            "connection.host", noida_broker.host,
            "connection.port", noida_broker.port,
            "options.num_partitions", 1,
        )
    )  # fmt: skip
    assert connection.get_connection() is None and connection.get_producer() is None
    assert connection.is_open() is False

    connection.open(None)
    try:
        assert connection.is_open() is True
        assert connection.get_connection() is not None
        assert connection.get_producer() is connection.get_connection()
        connection.create_queue(unique_name)
        assert unique_name in connection.read_queue_names()

        # pip-services3-kafka publishes bare values; seed 001 dicts: both work
        connection.publish(unique_name, [b"first", "second"], {})
        connection.publish(unique_name, [{"value": b"third", "key": b"k"}], {})
        listener = Collector()
        connection.subscribe(unique_name, None, {"from_beginning": True}, listener)
        wait_until(lambda: len(listener.messages) == 3, timeout=15)
        values = [record.value for _topic, _partition, record in listener.messages]
        assert values == [b"first", b"second", b"third"]
        assert {(topic, partition) for topic, partition, _ in listener.messages} == {
            (unique_name, 0)
        }
        connection.unsubscribe(unique_name, None, listener)
        connection.delete_queue(unique_name)
    finally:
        connection.close(None)
    assert connection.is_open() is False
    assert connection.get_connection() is None and connection.get_producer() is None
    connection.close(None)  # closing twice is harmless, as in pip-services


def test_mqtt_connection_lifecycle_and_calls(mosquitto_broker: Broker, unique_name: str) -> None:
    connection = MqttConnection()
    connection.configure(
        ConfigParams.from_tuples(
            "connection.protocol", "mqtt",
            "connection.host", mosquitto_broker.host,
            "connection.port", mosquitto_broker.port,
        )
    )  # fmt: skip
    assert connection.get_connection() is None and connection.is_open() is False

    connection.open(None)
    try:
        assert connection.is_open() is True and connection.get_connection() is not None
        assert connection.read_queue_names() == []
        connection.create_queue(unique_name)  # nothing to do in MQTT, and no error
        topic = f"sluice/{unique_name}"
        listener = Collector()
        connection.subscribe(topic, {"qos": 1}, listener)  # pip-services' options dict
        connection.publish(topic, "hello", {"qos": 1, "retain": False})
        wait_until(lambda: len(listener.messages) == 1, timeout=10)
        (received_topic, data, packet) = listener.messages[0]
        assert (received_topic, data, packet.qos) == (topic, b"hello", 1)
        connection.unsubscribe(topic, listener)  # pip-services' two-argument form
        connection.delete_queue(unique_name)
    finally:
        connection.close(None)
    assert connection.is_open() is False and connection.get_connection() is None


def test_a_plain_listener_on_the_connection_is_acknowledged_for(
    stock_mosquitto: Broker, unique_name: str
) -> None:
    """pip-services3-mqtt acknowledges for a listener subscribed on the connection; so does
    Sluice. mosquitto sends a client at most 20 unacknowledged QoS 1 messages: without the
    acknowledgements the listener would stop at 20."""
    connection = MqttConnection()
    connection.configure(
        ConfigParams.from_tuples(
            "connection.host", stock_mosquitto.host, "connection.port", stock_mosquitto.port
        )
    )
    connection.open(None)
    try:
        topic = f"sluice/{unique_name}"
        listener = Collector()
        connection.subscribe(topic, {"qos": 1}, listener)
        for i in range(50):
            connection.publish(topic, f"m{i}", {"qos": 1})
        wait_until(lambda: len(listener.messages) == 50, timeout=20, message="all 50 messages")
        assert [data for _, data, _ in listener.messages] == [f"m{i}".encode() for i in range(50)]
    finally:
        connection.close(None)
