"""The one rule of TLS and credentials (sluice.queues.tls), the same for Kafka and MQTT: TLS
settings switch TLS on or fail; a password over plaintext needs
``options.allow_plaintext_credentials``. (Against the brokers: tests/integration/kafka/
test_security.py on Apache Kafka, tests/integration/mqtt/test_mqtt_connection.py on mosquitto.)"""

from __future__ import annotations

from typing import Any

import pytest

from sluice.kafka.config import client_config
from sluice.mqtt.config import broker_address
from sluice.queues import ConfigError, queue_from_uri
from sluice.reference import render

SECRET = "pw-not-in-any-message"
#: The documented opt-in, spelled out (not imported): the spelling is the contract.
ALLOW_PLAINTEXT_CREDENTIALS = "options.allow_plaintext_credentials"


def tls_of(uri: str) -> bool:
    """Whether the queue of ``uri`` connects with TLS."""
    queue: Any = queue_from_uri(uri)
    if uri.startswith("kafka"):
        return str(client_config(queue.config)["security_protocol"]).endswith("SSL")
    return broker_address(queue.config).tls


@pytest.mark.parametrize("scheme", ["kafka", "mqtt"])
def test_a_password_over_plaintext_is_refused_naming_the_opt_in_key(scheme: str) -> None:
    with pytest.raises(ConfigError) as refused:
        queue_from_uri(f"{scheme}://user:{SECRET}@h:1234/t")
    message = str(refused.value)
    assert f"'{ALLOW_PLAINTEXT_CREDENTIALS}' true" in message
    assert "?allow_plaintext_credentials=true" in message and "Use TLS" in message
    assert SECRET not in message


@pytest.mark.parametrize("scheme", ["kafka", "mqtt"])
def test_the_opt_in_key_is_spelled_the_same_for_both_transports(scheme: str) -> None:
    queue: Any = queue_from_uri(f"{scheme}://user:{SECRET}@h:1234/t?allow_plaintext_credentials=1")
    assert queue.config[ALLOW_PLAINTEXT_CREDENTIALS] is True
    assert not tls_of(f"{scheme}://user:{SECRET}@h:1234/t?allow_plaintext_credentials=true")
    if scheme == "kafka":
        assert client_config(queue.config)["security_protocol"] == "SASL_PLAINTEXT"


@pytest.mark.parametrize("scheme", ["kafka", "mqtt"])
@pytest.mark.parametrize(
    "settings",
    ["ssl_cafile=/ca.pem", "ssl_certfile=/c.pem&ssl_keyfile=/k.pem", "ssl_certfile=/both.pem"],
)
def test_tls_settings_switch_tls_on(scheme: str, settings: str) -> None:
    """``kafka://h/t?ssl_cafile=...`` connected in plaintext; an MQTT client certificate
    without a CA file was ignored."""
    assert tls_of(f"{scheme}://h:1234/t?{settings}")


@pytest.mark.parametrize("scheme", ["kafka", "mqtt"])
def test_a_password_with_a_tls_setting_goes_over_tls(scheme: str) -> None:
    uri = f"{scheme}://user:{SECRET}@h:1234/t?ssl_cafile=/ca.pem"
    assert tls_of(uri)
    queue: Any = queue_from_uri(uri)
    if scheme == "kafka":
        assert client_config(queue.config)["security_protocol"] == "SASL_SSL"


@pytest.mark.parametrize(
    ("scheme", "protocol"),
    [("kafka", "tcp"), ("kafka", "plaintext"), ("kafka", "sasl_plaintext"), ("mqtt", "tcp"),
     ("mqtt", "mqtt"), ("mqtt", "ws")],
)  # fmt: skip
def test_a_tls_setting_with_an_explicit_plaintext_protocol_is_an_error_naming_both(
    scheme: str, protocol: str
) -> None:
    with pytest.raises(ConfigError) as conflict:
        queue_from_uri(f"{scheme}://h:1234/t?connection.protocol={protocol}&ssl_certfile=/c.pem")
    message = str(conflict.value)
    assert "'options.ssl_certfile'" in message
    assert f"config key 'connection.protocol' is '{protocol}'" in message
    assert "never ignored" in message


def test_the_opt_in_key_is_in_the_reference_of_both_connections() -> None:
    reference = render()
    kafka = reference.split("# KafkaMessageQueue", 1)[1].split("\n#", 1)[0]
    mqtt = reference.split("# MqttMessageQueue", 1)[1].split("\n#", 1)[0]
    for section in (kafka, mqtt):
        assert f"| `{ALLOW_PLAINTEXT_CREDENTIALS}` | bool | `false` |" in section
