"""MQTT addresses, sessions and capabilities derived from the configuration."""

from __future__ import annotations

import pytest

from sluice.mqtt import MqttMessageQueue
from sluice.mqtt.config import broker_address, persistent


def configured(**config: object) -> MqttMessageQueue:
    queue = MqttMessageQueue("q")
    queue.configure(config)
    return queue


@pytest.mark.parametrize(
    ("config", "address"),
    [
        ({}, ("localhost", 1883, False)),
        ({"connection.uri": "mqtt://h:1884"}, ("h", 1884, False)),
        ({"connection.uri": "mqtts://h"}, ("h", 8883, True)),
        ({"connection.host": "h", "connection.protocol": "ssl"}, ("h", 8883, True)),
        ({"connection.host": "h", "options.ssl_cafile": "/ca.pem"}, ("h", 8883, True)),
    ],
)
def test_broker_address(config: dict[str, object], address: tuple[str, int, bool]) -> None:
    assert broker_address(configured(**config).config) == address


def test_a_client_id_makes_the_session_persistent_unless_clean_session_is_asked() -> None:
    assert not persistent(configured().config)
    assert persistent(configured(client_id="c").config)
    assert not persistent(configured(client_id="c", **{"options.clean_session": True}).config)


def test_can_persist_needs_a_persistent_session_and_qos_at_least_1() -> None:
    assert configured(client_id="c", **{"options.qos": 1}).get_capabilities().can_persist
    assert not configured(client_id="c", **{"options.qos": 0}).get_capabilities().can_persist
    assert not configured(**{"options.qos": 2}).get_capabilities().can_persist
    assert not configured().get_capabilities().can_message_count


def test_dead_letter_topic_default_strips_wildcards() -> None:
    assert configured(topic="plant/+/temp/#").dead_letter_topic == "plant/+/temp/dlq"
    assert (
        configured(topic="t", **{"options.dead_letter_topic": "dead"}).dead_letter_topic == "dead"
    )
