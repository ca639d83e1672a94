from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from sluice.testing.plugin import KAFKA_ENV, MQTT_ENV, external_broker


def test_plugin_is_opt_in_not_an_entry_point() -> None:
    """Installing sluice-core must not give every project fixtures named ``spark``: a project
    asks for them with ``-p sluice.testing.plugin`` (as this one does in pyproject.toml)."""
    plugins = {ep.value for ep in entry_points(group="pytest11")}
    assert "sluice.testing.plugin" not in plugins


def test_external_brokers_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KAFKA_ENV, "kafka.internal:9093")
    monkeypatch.setenv(MQTT_ENV, "mqtt://mqtt.internal")
    kafka = external_broker(KAFKA_ENV, "kafka", 9092)
    mqtt = external_broker(MQTT_ENV, "mqtt", 1883)
    assert kafka is not None and kafka.bootstrap == "kafka.internal:9093"
    assert mqtt is not None and (mqtt.host, mqtt.port, mqtt.url) == (
        "mqtt.internal",
        1883,
        "mqtt://mqtt.internal:1883",
    )


def test_no_environment_means_embedded_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KAFKA_ENV, raising=False)
    assert external_broker(KAFKA_ENV, "kafka", 9092) is None
