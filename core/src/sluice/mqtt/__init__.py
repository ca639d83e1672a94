"""MQTT transport on paho-mqtt 2.x: MqttConnection and MqttMessageQueue (seed 002)."""

from .connection import MqttConnection
from .queue import MqttMessageQueue

__all__ = ["MqttConnection", "MqttMessageQueue"]
