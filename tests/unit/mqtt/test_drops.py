"""read_dropped_count connects with the queue's address and credentials, never its session."""

from __future__ import annotations

from sluice.mqtt import MqttMessageQueue
from sluice.mqtt.config import persistent
from sluice.mqtt.drops import _reader_config


def test_the_reader_keeps_the_address_and_credentials_but_not_the_session() -> None:
    queue = MqttMessageQueue()
    queue.configure(
        {
            "connection.uri": "mqtts://broker.example:8883",
            "credential.username": "u",
            "credential.password": "p",
            "options.ssl_cafile": "/ca.pem",
            "client_id": "ingest-session",
            "topic": "plant/#",
            "options.protocol_version": "5",
        }
    )
    config = _reader_config(queue.config)
    assert config["connection.uri"] == "mqtts://broker.example:8883"
    assert (config["credential.username"], config["credential.password"]) == ("u", "p")
    assert config["options.ssl_cafile"] == "/ca.pem"
    assert config["options.protocol_version"] == "5"
    assert config["client_id"] != "ingest-session" and not persistent(config)
    assert "topic" not in config and config["options.retry_connect"] is False
