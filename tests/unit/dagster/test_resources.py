"""The queue resources' fields as Sluice config keys, and their errors."""

from __future__ import annotations

import pytest
from dagster import EnvVar, build_init_resource_context, build_resources

from sluice.queues.config import ConfigError
from sluice_dagster import KafkaQueueResource, MqttQueueResource, QueueResource


def test_kafka_fields_become_config_keys() -> None:
    resource = KafkaQueueResource(
        bootstrap="h1:9092,h2:9092",
        topic="orders",
        group_id="lake",
        username="svc",
        password="pw",
        mechanism="scram-sha-256",
        options={"session_timeout": "6000", "read_partitions": "2"},
    )
    config = resource.config()
    assert config["connection.uri"] == "h1:9092,h2:9092"
    assert (config["topic"], config["group_id"], config["from_beginning"]) == (
        "orders",
        "lake",
        True,
    )
    assert config["autocommit"] is False
    assert (config["credential.username"], config["credential.password"]) == ("svc", "pw")
    assert config["credential.mechanism"] == "scram-sha-256"
    assert config["options.session_timeout"] == "6000"
    assert config["read_partitions"] == "2", "a top-level key keeps its name"
    assert (config["options.connect_timeout"], config["options.request_timeout"]) == (2000, 5000)
    assert resource.address == "h1:9092,h2:9092"
    assert resource.redacted_config()["credential.password"] == "***"
    source = resource.source
    assert "topic" not in source and "group_id" not in source
    assert source["credential.password"] == "pw"


def test_mqtt_fields_become_config_keys() -> None:
    resource = MqttQueueResource(uri="mqtts://broker:8883", topic="plant/#", client_id="lake")
    config = resource.config()
    assert (config["connection.uri"], config["client_id"], config["options.qos"]) == (
        "mqtts://broker:8883",
        "lake",
        1,
    )
    assert resource.address == "broker:8883"
    assert MqttQueueResource(host="b", topic="t", client_id="c").address == "b:1883"


def test_typed_options_become_config_keys() -> None:
    kafka = KafkaQueueResource(
        bootstrap="h:9092",
        topic="t",
        session_timeout_ms=6000,
        dead_letter_topic="t.bad",
        ssl_cafile="/etc/ca.pem",
    ).config()
    assert (kafka["options.session_timeout"], kafka["options.dead_letter_topic"]) == (6000, "t.bad")
    assert kafka["options.ssl_cafile"] == "/etc/ca.pem"
    mqtt = MqttQueueResource(
        uri="mqtts://b:8883", topic="t", client_id="c", ssl_certfile="/c.pem", ssl_keyfile="/k.pem"
    ).config()
    assert (mqtt["options.ssl_certfile"], mqtt["options.ssl_keyfile"]) == ("/c.pem", "/k.pem")
    assert "options.dead_letter_topic" not in mqtt, "unset typed options leave the default"


def test_more_typed_options_and_the_free_form_rest() -> None:
    kafka = KafkaQueueResource(
        bootstrap="h:9092", topic="t", ssl_check_hostname=False, max_buffer=500
    ).config()
    assert (kafka["options.ssl_check_hostname"], kafka["options.max_buffer"]) == (False, 500)
    assert "options.ssl_check_hostname" not in KafkaQueueResource(bootstrap="h", topic="t").config()
    mqtt = MqttQueueResource(
        uri="ws://b:80",
        topic="t",
        client_id="c",
        keepalive_ms=10_000,
        session_expiry_seconds=3600,
        ssl_insecure=True,
        ws_path="/ws",
        options={"reconnect_timeout": "2000"},
    ).config()
    assert (mqtt["options.keepalive_timeout"], mqtt["options.session_expiry"]) == (10_000, 3600)
    assert (mqtt["options.ssl_insecure"], mqtt["options.ws_path"]) == (True, "/ws")
    assert mqtt["options.reconnect_timeout"] == "2000", "the options dict still works"


def test_an_unknown_option_is_an_error_naming_it() -> None:
    resource = KafkaQueueResource(bootstrap="h:9092", topic="t", options={"sesion_timeout": "1"})
    with pytest.raises(ConfigError, match=r"'options\.sesion_timeout'.*session_timeout"):
        resource.config()


def test_a_wrong_value_fails_at_setup_naming_the_key() -> None:
    resource = MqttQueueResource(host="b", topic="t", client_id="c", options={"qos": "7"})
    with pytest.raises(ConfigError, match=r"options\.qos"):
        resource.setup_for_execution(build_init_resource_context())


def test_a_login_on_a_plaintext_bootstrap_fails_at_setup_saying_how_to_fix_it() -> None:
    """SASL/PLAIN over plaintext would send the password unencrypted: TLS, or the explicit
    protocol='sasl_plaintext'."""
    plain = KafkaQueueResource(bootstrap="h:9092", topic="t", username="u", password="pw-dg-41")
    with pytest.raises(ConfigError, match="password unencrypted") as refused:
        plain.setup_for_execution(build_init_resource_context())
    assert "sasl_plaintext" in str(refused.value) and "pw-dg-41" not in str(refused.value)
    explicit = KafkaQueueResource(
        bootstrap="h:9092", topic="t", username="u", password="pw", protocol="sasl_plaintext"
    )
    explicit.setup_for_execution(build_init_resource_context())


def test_an_mqtt_protocol_that_contradicts_the_uri_scheme_is_an_error() -> None:
    resource = MqttQueueResource(
        uri="mqtts://b:8883", topic="t", client_id="c", options={"connection.protocol": "mqtt"}
    )
    with pytest.raises(ConfigError, match=r"'connection.protocol' is 'mqtt'.*'mqtts://'"):
        _ = resource.address


def test_the_password_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_UNIT_PASSWORD", "s3cret")
    resource = KafkaQueueResource(
        bootstrap="kafka+ssl://h:9093",
        topic="t",
        username="u",
        password=EnvVar("SLUICE_UNIT_PASSWORD"),
    )
    with build_resources({"queue": resource}) as resources:
        configured = resources.queue
        assert configured.config()["credential.password"] == "s3cret"
        assert "s3cret" not in repr(configured.redacted_config())


def test_a_password_in_the_bootstrap_uri_is_hidden_from_metadata_and_errors() -> None:
    resource = KafkaQueueResource(bootstrap="kafka://svc:boot-pw-9@h1:9092,h2:9092", topic="t")
    assert resource.redacted_config()["connection.uri"] == "kafka://svc:***@h1:9092,h2:9092"
    assert resource.address == "h1:9092,h2:9092"
    assert resource.scrub("refused boot-pw-9") == "refused ***"
    try:
        try:
            raise KeyError("boot-pw-9")
        except KeyError as inner:
            raise ValueError("ingest failed") from inner
    except ValueError as exc:
        clean = resource.scrubbed(exc)  # the cause holds it: raise this one from None
    assert clean is not None and "boot-pw-9" not in str(clean)
    assert resource.scrubbed(ValueError("nothing secret")) is None
    unreachable = resource.unavailable(ConnectionError("kafka://svc:boot-pw-9@h1:9092 down"))
    assert "boot-pw-9" not in str(unreachable) and "svc:***@h1" in str(unreachable)


def test_the_shared_base_is_abstract() -> None:
    from sluice_dagster.resources import QueueResource

    with pytest.raises(TypeError, match="abstract"):
        QueueResource(topic="t")  # type: ignore[abstract]


def test_the_queue_resource_base_class_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        QueueResource(topic="t")  # type: ignore[abstract]
