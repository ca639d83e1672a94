"""The Kafka config keys and the kafka-python client settings built from them."""

from __future__ import annotations

import pytest

from sluice.kafka import KafkaConnection, KafkaMessageQueue
from sluice.kafka.config import client_config
from sluice.queues import ConfigError, UnknownConfigKeyWarning


def built(config: dict[str, object]) -> dict[str, object]:
    queue = KafkaMessageQueue("q")
    queue.configure(config)
    return client_config(queue.config)


def test_pip_services_keys_are_accepted() -> None:
    queue = KafkaMessageQueue()
    queue.configure(
        {
            "queue": "orders",
            "connection.protocol": "tcp",
            "connection.host": "h",
            "connection.port": "9093",
            "credential.mechanism": "plain",
            "options.num_partitions": "6",
            "options.write_partition": "1",
            "options.autosubscribe": "false",
            "options.log_level": "2",
        }
    )
    assert queue.topic == "orders"
    assert queue.config["options.num_partitions"] == 6
    assert queue.config["options.write_partition"] == 1


def test_wrong_type_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'read_partitions' expects int"):
        KafkaMessageQueue().configure({"read_partitions": "many"})
    with pytest.raises(ConfigError, match=r"'options.acks'.*one of -1, 0, 1"):
        KafkaMessageQueue().configure({"options.acks": 2})


def test_unknown_key_suggests_the_known_one() -> None:
    with pytest.warns(UnknownConfigKeyWarning, match=r"'group-id'.*Did you mean 'group_id'"):
        KafkaMessageQueue().configure({"group-id": "g"})


@pytest.mark.parametrize(
    ("config", "servers"),
    [
        ({"connection.uri": "a:1,b:2"}, ["a:1", "b:2"]),
        ({"connection.uri": "kafka://c:3/topic"}, ["c:3"]),
        ({"connection.host": "d"}, ["d:9092"]),
        ({"connection.uri": "kafka://u:pw@e:4,f:5/topic"}, ["e:4", "f:5"]),
    ],
)
def test_bootstrap_servers(config: dict[str, object], servers: list[str]) -> None:
    assert built(config)["bootstrap_servers"] == servers


def test_default_bootstrap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_KAFKA_BOOTSTRAP", "e:9")
    assert built({})["bootstrap_servers"] == ["e:9"]
    monkeypatch.delenv("SLUICE_KAFKA_BOOTSTRAP")
    assert built({})["bootstrap_servers"] == ["localhost:9092"]


def test_sasl_plain_from_credentials() -> None:
    kwargs = built({"credential.username": "u", "credential.password": "p"})
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert (
        kwargs["sasl_mechanism"],
        kwargs["sasl_plain_username"],
        kwargs["sasl_plain_password"],
    ) == ("PLAIN", "u", "p")


def test_credentials_and_tls_from_the_uri_never_show_the_password() -> None:
    connection = KafkaConnection()
    connection.configure({"connection.uri": "kafka+ssl://svc:p%40ss-w0rd@h:9093"})
    kwargs = connection.client_config()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("svc", "p@ss-w0rd")
    assert connection.servers == ["h:9093"]
    assert "w0rd" not in repr(connection)


def test_sasl_scram_over_tls() -> None:
    kwargs = built(
        {
            "connection.protocol": "sasl_ssl",
            "credential.username": "u",
            "credential.password": "p",
            "credential.mechanism": "scram-sha-512",
            "options.ssl_cafile": "/ca.pem",
            "options.ssl_check_hostname": "false",
        }
    )
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["ssl_cafile"] == "/ca.pem" and kwargs["ssl_check_hostname"] is False


def test_tls_with_client_certificate() -> None:
    kwargs = built(
        {
            "connection.protocol": "ssl",
            "options.ssl_certfile": "/c.pem",
            "options.ssl_keyfile": "/k.pem",
        }
    )
    assert kwargs["security_protocol"] == "SSL"
    assert (kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == ("/c.pem", "/k.pem")
    assert "sasl_mechanism" not in kwargs


def test_a_misspelt_protocol_is_an_error_naming_the_key_and_the_allowed_values() -> None:
    # Falling back to plaintext would send the credentials unencrypted.
    with pytest.raises(ConfigError, match=r"'connection.protocol'.*'sasl-ssl'.*sasl_ssl, ssl"):
        built({"connection.protocol": "sasl-ssl", "credential.username": "u"})
    with pytest.raises(ConfigError, match=r"'connection.protocol'.*'tls1'"):
        KafkaConnection().configure({"connection.protocol": "tls1"})
    with pytest.raises(ConfigError, match=r"scheme of config key 'connection.uri'.*'kafkas'"):
        KafkaConnection().configure({"connection.uri": "kafkas://u:secret-pw@h:9093"})


def test_timeouts_map_onto_kafka_python() -> None:
    connection = KafkaConnection()
    connection.configure(
        {
            "options.connect_timeout": 250,
            "options.request_timeout": 4000,
            "options.retry_timeout": 700,
        }
    )
    kwargs = connection.client_config()
    assert (
        kwargs["bootstrap_timeout_ms"],
        kwargs["request_timeout_ms"],
        kwargs["reconnect_backoff_max_ms"],
    ) == (250, 4000, 700)
