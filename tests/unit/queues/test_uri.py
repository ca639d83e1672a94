from __future__ import annotations

import pytest

from sluice.queues import ConfigError, MemoryMessageQueue, queue_from_uri, uri_to_config
from sluice.queues.uri import Transport, queue_from_config, register_transport, transports


def test_kafka_uri_maps_onto_the_config_keys() -> None:
    config = uri_to_config(
        "kafka://u:p%40ss@broker:9093/orders?group_id=g&acks=1", known_keys={"group_id"}
    )
    assert config == {
        "connection.host": "broker",
        "connection.port": 9093,
        "credential.username": "u",
        "credential.password": "p@ss",
        "topic": "orders",
        "group_id": "g",
        "options.acks": "1",
    }


def test_mqtt_topic_filter_is_percent_decoded() -> None:
    config = uri_to_config("mqtts://h:8883/sensors/%23?qos=1")
    assert config["topic"] == "sensors/#"
    assert config["options.qos"] == "1"
    assert config["connection.protocol"] == "mqtts"


def test_memory_uri_builds_a_memory_queue() -> None:
    queue = queue_from_uri("memory:///jobs?lock_timeout=50")
    assert isinstance(queue, MemoryMessageQueue)
    assert queue.config["topic"] == "jobs"
    assert queue.config["options.lock_timeout"] == 50


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"Unknown queue URI scheme 'amqp://'.*kafka://.*memory://"
    ):
        queue_from_uri("amqp://h/q")


def test_missing_client_library_names_the_extra_to_install() -> None:
    register_transport("fake", "nowhere:Nothing", requires="no_such_client_lib", extra="fake")
    try:
        with pytest.raises(ImportError, match=r"pip install 'sluice-core\[fake\]'"):
            queue_from_uri("fake://h/t")
    finally:
        from sluice.queues import uri

        uri._REGISTRY.pop("fake")


def test_transports_are_not_imported_until_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys, sluice.queues; sluice.queues.queue_from_uri('memory:///x'); "
        "print('kafka' in sys.modules, 'paho' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_registry_lists_the_builtin_schemes() -> None:
    assert {"memory", "kafka", "mqtt", "mqtts", "kafka+ssl"} <= set(transports())
    assert isinstance(transports()["kafka"], Transport)


@pytest.mark.parametrize(
    "uri",
    [
        "mqtts://broker/readings?connection.protocol=mqtt",
        "kafka+ssl://broker:9093/orders?connection.protocol=tcp",
        "kafka+ssl://broker:9093/orders?connection.protocol=sasl_plaintext",
    ],
)
def test_a_tls_scheme_is_never_undone_by_a_protocol_in_the_query(uri: str) -> None:
    """A single-host URI loses its scheme on the way to config keys; the downgrade used to
    pass silently there."""
    with pytest.raises(ConfigError, match=r"asks for TLS, but connection.protocol is"):
        queue_from_uri(uri)


def test_a_tls_scheme_is_never_undone_by_a_protocol_in_the_config() -> None:
    with pytest.raises(ConfigError, match="asks for TLS"):
        queue_from_config("kafka+ssl", {"topic": "t", "connection.protocol": "plaintext"})
    kept = queue_from_uri("kafka+ssl://broker:9093/orders?connection.protocol=sasl_ssl")
    assert kept.config["connection.protocol"] == "sasl_ssl"
