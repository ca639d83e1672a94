"""MQTT transport on paho-mqtt 2.x: MqttConnection and MqttMessageQueue, as pip-services' MQTT
components."""

from .connection import MqttConnection
from .queue import MqttMessageQueue

__all__ = ["MqttConnection", "MqttMessageQueue"]
