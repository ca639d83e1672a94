"""The Kafka config keys and the kafka-python client settings built from them."""

from __future__ import annotations

import pytest

from sluice.kafka import KafkaConnection, KafkaMessageQueue
from sluice.kafka.config import CONNECTION_KEYS, client_config, unretried_consumer_config
from sluice.queues import ConfigError, UnknownConfigKeyWarning
from sluice.queues.config import read_config, to_config_params


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
        ({"connection.uri": "kafka+ssl://u:pw@e:4,f:5/topic"}, ["e:4", "f:5"]),
    ],
)
def test_bootstrap_servers(config: dict[str, object], servers: list[str]) -> None:
    assert built(config)["bootstrap_servers"] == servers


def test_default_bootstrap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_KAFKA_BOOTSTRAP", "e:9")
    assert built({})["bootstrap_servers"] == ["e:9"]
    monkeypatch.delenv("SLUICE_KAFKA_BOOTSTRAP")
    assert built({})["bootstrap_servers"] == ["localhost:9092"]


def test_sasl_plain_over_plaintext_when_chosen_explicitly() -> None:
    kwargs = built(
        {
            "connection.protocol": "sasl_plaintext",
            "credential.username": "u",
            "credential.password": "p",
        }
    )
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert (
        kwargs["sasl_mechanism"],
        kwargs["sasl_plain_username"],
        kwargs["sasl_plain_password"],
    ) == ("PLAIN", "u", "p")


PLAIN_PASSWORD = "clear-text-pw-77"


@pytest.mark.parametrize(
    "config",
    [
        {"connection.uri": f"kafka://svc:{PLAIN_PASSWORD}@h:9092"},
        {"connection.uri": f"svc:{PLAIN_PASSWORD}@h1:9092,h2:9092"},
        {"connection.host": "h", "connection.port": 9092},
        {"connection.uri": "kafka://h:9092"},
        {"connection.protocol": "tcp"},
        {"connection.protocol": "plaintext", "credential.mechanism": "plain"},
    ],
    ids=["kafka-uri", "schemeless-uri", "host-port", "kafka-uri-and-keys", "tcp", "plaintext"],
)
def test_plain_credentials_over_a_plaintext_connection_are_refused(
    config: dict[str, object],
) -> None:
    """SASL/PLAIN sends the password as it is: over a plaintext connection that the user did
    not choose as such (kafka://, no scheme, host and port, tcp), configuring fails."""
    if "connection.uri" not in config or "@" not in str(config["connection.uri"]):
        config = {**config, "credential.username": "svc", "credential.password": PLAIN_PASSWORD}
    with pytest.raises(ConfigError) as refused:
        KafkaConnection().configure(config)
    message = str(refused.value)
    assert "password unencrypted" in message
    assert "kafka+ssl://" in message and "'connection.protocol' sasl_ssl" in message
    assert "'connection.protocol' sasl_plaintext" in message
    assert PLAIN_PASSWORD not in message
    with pytest.raises(ConfigError, match="password unencrypted"):
        KafkaMessageQueue("q").configure(config)


def test_scram_over_plaintext_is_allowed_because_it_never_sends_the_password() -> None:
    kwargs = built(
        {
            "connection.uri": "kafka://svc:pw@h:9092",
            "credential.mechanism": "scram-sha-256",
        }
    )
    assert (kwargs["security_protocol"], kwargs["sasl_mechanism"]) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
    )


@pytest.mark.parametrize(
    ("uri", "protocol"),
    [
        ("kafka+ssl://h:9093", "tcp"),
        ("kafka+ssl://svc:pw@h:9093", "sasl_plaintext"),
        ("kafka+ssl://svc:pw@h1:9093,h2:9093", "plaintext"),
        ("sasl_ssl://svc:pw@h:9093", "tcp"),
    ],
)
def test_a_protocol_that_undoes_the_tls_of_the_uri_scheme_is_an_error_naming_both(
    uri: str, protocol: str
) -> None:
    """kafka+ssl:// with connection.protocol tcp used to connect in plaintext."""
    with pytest.raises(ConfigError) as conflict:
        KafkaConnection().configure({"connection.uri": uri, "connection.protocol": protocol})
    message = str(conflict.value)
    assert f"'connection.protocol' is '{protocol}'" in message
    assert f"'connection.uri' is '{uri.partition('://')[0]}://'" in message
    assert "pw" not in message


@pytest.mark.parametrize(
    ("uri", "protocol", "expected"),
    [
        ("kafka+ssl://h:9093", "ssl", "SSL"),
        ("kafka+ssl://svc:pw@h:9093", "sasl_ssl", "SASL_SSL"),
        ("kafka+ssl://svc:pw@h:9093", "ssl", "SASL_SSL"),
        ("kafka://svc:pw@h:9092", "sasl_plaintext", "SASL_PLAINTEXT"),
        ("kafka://h:9092", "tcp", "PLAINTEXT"),
        ("h1:9092,h2:9092", "sasl_ssl", "SASL_SSL"),
        # kafka:// is any Kafka URI: a protocol may choose TLS (the Airflow form's example)
        ("kafka://h:9092", "ssl", "SSL"),
        ("kafka://svc:pw@h1:9092,h2:9092", "sasl_ssl", "SASL_SSL"),
    ],
)
def test_a_protocol_that_agrees_with_the_uri_scheme_passes(
    uri: str, protocol: str, expected: str
) -> None:
    kwargs = built({"connection.uri": uri, "connection.protocol": protocol})
    assert kwargs["security_protocol"] == expected


def test_queue_uris_and_connection_fields_refuse_plain_credentials_over_plaintext() -> None:
    """The CLI's queue URIs and the connection fields of Airflow and Dagster reach the same
    check (sluice.kafka.config.security_protocol) through queue_from_uri/queue_from_config."""
    from sluice.connection_fields import config_from_fields
    from sluice.queues import queue_from_config, queue_from_uri

    with pytest.raises(ConfigError, match="password unencrypted"):
        queue_from_uri("kafka://svc:pw-uri-1@h:9092/orders")
    fields = config_from_fields("kafka", host="h", port=9092, username="svc", password="pw-2")
    with pytest.raises(ConfigError, match="password unencrypted"):
        queue_from_config("kafka", fields)
    explicit = {**fields, "connection.protocol": "sasl_plaintext"}
    assert client_config(queue_from_config("kafka", explicit).config)["security_protocol"] == (
        "SASL_PLAINTEXT"
    )
    tls = queue_from_uri("kafka+ssl://svc:pw@h:9093/orders").config
    assert client_config(tls)["security_protocol"] == "SASL_SSL"


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


def test_a_client_outside_the_retry_loop_may_bootstrap_for_all_attempts() -> None:
    """open() retries its bootstrap of one connect_timeout; a batch's readers are built once,
    so theirs spans all of options.max_retries (a 1 s bootstrap failed a loaded CI run)."""
    config = read_config(
        to_config_params({"options.connect_timeout": 250, "options.max_retries": 4}),
        CONNECTION_KEYS,
        "KafkaConnection",
    )
    assert client_config(config)["bootstrap_timeout_ms"] == 250
    unretried = unretried_consumer_config(config)
    assert unretried["bootstrap_timeout_ms"] == 1000
    assert unretried["isolation_level"] == "read_committed"
