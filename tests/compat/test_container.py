"""A pip-services container started from YAML creates, opens and closes Sluice's components."""

from __future__ import annotations

from pathlib import Path

from pip_services3_commons.config import ConfigParams
from pip_services3_commons.refer import Descriptor
from pip_services3_container import Container
from pip_services3_messaging.queues import MessageEnvelope as PipEnvelope

from sluice.pipservices import DefaultSluiceFactory
from sluice.testing.plugin import Broker
from sluice.testing.topics import create_kafka_topic

CONFIG = """
- descriptor: pip-services:discovery:memory:default:1.0
  connections:
    kafka:
      host: {{KAFKA_HOST}}
      port: {{KAFKA_PORT}}
    mqtt:
      host: {{MQTT_HOST}}
      port: {{MQTT_PORT}}
- descriptor: pip-services:credential-store:memory:default:1.0
  mqtt_user:
    username: sluice
    password: {{MQTT_PASSWORD}}
- descriptor: pip-services:connection:kafka:default:1.0
  connection:
    discovery_key: kafka
- descriptor: pip-services:message-queue:kafka:{{KAFKA_TOPIC}}:1.0
  options:
    autosubscribe: true
- descriptor: pip-services:message-queue:mqtt:readings:1.0
  topic: sluice/{{MQTT_TOPIC}}
  connection:
    discovery_key: mqtt
  credential:
    store_key: mqtt_user
  options:
    qos: 1
    allow_plaintext_credentials: true
- descriptor: pip-services:message-queue:memory:audit:1.0
"""


def test_container_runs_every_transport(
    tmp_path: Path, noida_broker: Broker, mosquitto_auth_broker: Broker, unique_name: str
) -> None:
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    container = Container("sluice-compat")
    container.add_factory(DefaultSluiceFactory())
    container.read_config_from_file(
        None,
        str(path),
        ConfigParams.from_tuples(
            "KAFKA_HOST", noida_broker.host,
            "KAFKA_PORT", noida_broker.port,
            "KAFKA_TOPIC", unique_name,
            "MQTT_HOST", mosquitto_auth_broker.host,
            "MQTT_PORT", mosquitto_auth_broker.port,
            "MQTT_PASSWORD", mosquitto_auth_broker.users["sluice"],
            "MQTT_TOPIC", unique_name,
        ),
    )  # fmt: skip

    container.open(None)
    references = container._references  # what the container built, as pip-services tests read it
    try:
        queues = {
            kind: references.get_one_required(
                Descriptor("pip-services", "message-queue", kind, "*", "1.0")
            )
            for kind in ("kafka", "mqtt", "memory")
        }
        connection = references.get_one_required(
            Descriptor("pip-services", "connection", "kafka", "*", "1.0")
        )
        assert connection.get_connection() is not None
        for kind, queue in queues.items():
            assert queue.is_open(), kind
            queue.send(None, PipEnvelope("c-1", "Event", f"via {kind}"))
            received = queue.receive(None, 10_000)
            assert received is not None, kind
            assert received.get_message_as_string() == f"via {kind}"
            queue.complete(received)
    finally:
        container.close(None)

    assert not any(queue.is_open() for queue in queues.values())
    assert connection.get_connection() is None
