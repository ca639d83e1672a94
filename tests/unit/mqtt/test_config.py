"""MQTT addresses, sessions, topic filters and capabilities derived from the configuration."""

from __future__ import annotations

import paho.mqtt.client as paho
import pytest

from sluice.mqtt import MqttMessageQueue
from sluice.mqtt.config import (
    Endpoint,
    broker_address,
    credentials,
    persistent,
    protocol_version,
    whole_seconds,
)
from sluice.queues import ConfigError, UnknownConfigKeyWarning


def configured(**config: object) -> MqttMessageQueue:
    queue = MqttMessageQueue("q")
    queue.configure(config)
    return queue


@pytest.mark.parametrize(
    ("config", "address"),
    [
        ({}, ("localhost", 1883, False, "tcp")),
        ({"connection.uri": "mqtt://h:1884"}, ("h", 1884, False, "tcp")),
        ({"connection.uri": "h:1884"}, ("h", 1884, False, "tcp")),
        ({"connection.uri": "mqtts://h"}, ("h", 8883, True, "tcp")),
        ({"connection.host": "h", "connection.protocol": "ssl"}, ("h", 8883, True, "tcp")),
        ({"connection.host": "h", "connection.protocol": "tcp"}, ("h", 1883, False, "tcp")),
        (
            {"connection.host": "h", "options.ssl_cafile": "/ca.pem"},
            ("h", 8883, True, "tcp", ("options.ssl_cafile",)),
        ),
        ({"connection.uri": "ws://h:9001"}, ("h", 9001, False, "websockets")),
        ({"connection.uri": "wss://h"}, ("h", 443, True, "websockets")),
    ],
)
def test_broker_address(config: dict[str, object], address: tuple[object, ...]) -> None:
    assert broker_address(configured(**config).config) == Endpoint(*address)


@pytest.mark.parametrize(
    ("uri", "protocol"),
    [
        ("mqtts://h:8883", "mqtt"),
        ("mqtts://u:pw-x@h", "tcp"),
        ("wss://h", "ws"),
        ("mqtt://h:1883", "mqtts"),
        ("ws://h", "ssl"),
        ("wss://h", "mqtts"),
    ],
)
def test_a_protocol_that_contradicts_the_uri_scheme_is_an_error_naming_both(
    uri: str, protocol: str
) -> None:
    """mqtts:// with connection.protocol mqtt used to connect without TLS."""
    config = {"connection.uri": uri, "connection.protocol": protocol}
    with pytest.raises(ConfigError) as conflict:
        configured(**config)
    message = str(conflict.value)
    assert f"'connection.protocol' is '{protocol}'" in message
    assert f"'connection.uri' is '{uri.partition('://')[0]}://'" in message
    assert "pw-x" not in message
    with pytest.raises(ConfigError, match="must agree"):
        broker_address(config)  # unchecked configs too (a Dagster resource's address)


@pytest.mark.parametrize(
    ("uri", "protocol", "tls"),
    [
        ("mqtts://h", "mqtts", True),
        ("mqtts://h", "ssl", True),
        ("mqtts://h", "TLS", True),
        ("mqtt://h", "tcp", False),
        ("h:1884", "ssl", True),  # no scheme: the protocol decides
    ],
)
def test_a_protocol_that_agrees_with_the_uri_scheme_passes(
    uri: str, protocol: str, tls: bool
) -> None:
    config = configured(**{"connection.uri": uri, "connection.protocol": protocol}).config
    assert broker_address(config).tls is tls


def test_an_unknown_protocol_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"connection.protocol 'amqp'.*mqtts"):
        configured(**{"connection.protocol": "amqp"})


def test_credentials_come_from_the_credential_keys_or_the_uri() -> None:
    assert credentials(configured(**{"connection.uri": "mqtts://u:p%40ss@h"}).config) == (
        "u",
        "p@ss",
    )
    keys = {"connection.uri": "mqtts://u:p@h", "credential.username": "v"}
    assert credentials(configured(**keys, **{"credential.password": "q"}).config) == ("v", "q")


def test_a_client_id_makes_the_session_persistent_unless_clean_session_is_asked() -> None:
    assert not persistent(configured().config)
    assert persistent(configured(client_id="c").config)
    assert not persistent(configured(client_id="c", **{"options.clean_session": True}).config)


def test_mqtt5_sessions_follow_clean_start_and_need_an_expiry() -> None:
    v5 = {"client_id": "c", "options.protocol_version": "5"}
    assert persistent(configured(**v5).config)
    assert not persistent(configured(**v5, **{"options.clean_start": True}).config)
    assert persistent(
        configured(**v5, **{"options.clean_start": False, "options.clean_session": True}).config
    )
    assert not persistent(configured(**v5, **{"options.session_expiry": 0}).config)


def test_can_persist_needs_a_persistent_session_and_qos_1() -> None:
    assert configured(client_id="c", **{"options.qos": 1}).get_capabilities().can_persist
    assert not configured(client_id="c", **{"options.qos": 0}).get_capabilities().can_persist
    # paho answers a QoS 2 PUBLISH with PUBREC itself: an uncompleted one never comes back
    assert not configured(client_id="c", **{"options.qos": 2}).get_capabilities().can_persist
    assert not configured(**{"options.qos": 1}).get_capabilities().can_persist
    assert not configured().get_capabilities().can_message_count


def test_dead_letter_topic_never_matches_the_queue_filter() -> None:
    assert configured(topic="a/b").dead_letter_topic == "a/b/dlq"
    assert configured(topic="plant/+/temp/#").dead_letter_topic == "plant/dlq"
    assert (
        configured(topic="t", **{"options.dead_letter_topic": "dead"}).dead_letter_topic == "dead"
    )
    with pytest.raises(ConfigError, match=r"matches the queue's own filter 'plant/#'"):
        _ = configured(topic="plant/#").dead_letter_topic
    with pytest.raises(ConfigError, match=r"'options.dead_letter_topic'.*wildcard"):
        _ = configured(topic="t", **{"options.dead_letter_topic": "d/+"}).dead_letter_topic


@pytest.mark.parametrize("topic", ["a/#/b", "a/b+", "a/#x", "a/\x00"])
def test_invalid_topic_filters_are_config_errors(topic: str) -> None:
    with pytest.raises(ConfigError, match=r"'topic'"):
        configured(topic=topic)


def test_wrong_types_and_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'options.qos'.*one of 0, 1, 2"):
        configured(**{"options.qos": 3})
    with pytest.raises(ConfigError, match=r"'options.retain' expects bool"):
        configured(**{"options.retain": "sometimes"})
    with pytest.raises(ConfigError, match=r"'options.protocol_version' must be one of"):
        configured(**{"options.protocol_version": "4"})
    with pytest.raises(ConfigError, match=r"'options.keepalive_timeout' expects int"):
        configured(**{"options.keepalive_timeout": "soon"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, paho.MQTTv311),
        ("3.1", paho.MQTTv31),
        ("3.1.1", paho.MQTTv311),
        ("5", paho.MQTTv5),
        ("5.0", paho.MQTTv5),
        (5, paho.MQTTv5),
    ],
)
def test_protocol_versions(value: object, expected: int) -> None:
    assert protocol_version({"options.protocol_version": value}) == expected
    if value is not None:
        assert protocol_version(configured(**{"options.protocol_version": value}).config) == (
            expected
        )


@pytest.mark.parametrize("value", ["4", "3", "v5", "mqttv5", "3.1.2"])
def test_an_unknown_protocol_version_is_an_error_not_a_silent_311(value: str) -> None:
    """A config that skipped configure() (a resource's, a hand-made dict) used to get 3.1.1."""
    with pytest.raises(ConfigError) as unknown:
        protocol_version({"options.protocol_version": value})
    message = str(unknown.value)
    assert "'options.protocol_version'" in message and repr(value) in message
    assert "'3.1', '3.1.1', '5', '5.0'" in message
    with pytest.raises(ConfigError, match=r"'options.protocol_version' must be one of"):
        configured(**{"options.protocol_version": value})


def test_unknown_keys_warn_with_a_suggestion() -> None:
    with pytest.warns(
        UnknownConfigKeyWarning, match=r"'options.keepalive'.*'options.keepalive_timeout'"
    ):
        configured(**{"options.keepalive": 5})


def test_queue_is_an_alias_of_topic() -> None:
    assert configured(queue="pip/alias").topic == "pip/alias"
    with pytest.raises(ConfigError, match=r"'queue'"):
        configured(queue="pip/#/alias")


def test_every_seed_key_is_declared() -> None:
    declared = {key.name for key in MqttMessageQueue.CONFIG_KEYS}
    seed = {
        "topic",
        "options.serialize_envelope",
        "options.autosubscribe",
        "options.qos",
        "options.retain",
        "options.retry_connect",
        "options.connect_timeout",
        "options.reconnect_timeout",
        "options.keepalive_timeout",
    }
    assert seed <= declared


@pytest.mark.parametrize(("ms", "seconds"), [(3000, 3), (2500, 3), (1, 1), (0, 1), (1000, 1)])
def test_keepalive_and_reconnect_delays_round_up_to_whole_seconds(ms: int, seconds: int) -> None:
    assert whole_seconds(ms) == seconds
