"""MqttMessageQueue (seed 002) on paho-mqtt 2.x, doing better than the seed where MQTT allows.

- ``complete`` and ``abandon`` work, through manual acknowledgements: with ``autocommit``
  false a message is acknowledged only by ``complete``; an abandoned one is handed out again,
  and one never acknowledged is redelivered by the broker to the next connection of the same
  persistent session (stable ``client_id``, QoS >= 1).
- ``peek_batch`` and ``move_to_dead_letter`` work (local buffer; republish with the reason).
- The queue subscribes when it opens (``options.autosubscribe`` defaults to true, unlike the
  seed), so a message published after ``open()`` is never missed.
- ``read_message_count`` counts the local buffer: MQTT cannot see the broker's backlog, so
  ``can_message_count`` is false.
- With ``serialize_envelope`` true the envelope travels as JSON, so ``message_id`` is stable
  across redeliveries; raw payloads get a new id each time they are received.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pip_services3_commons.refer import Descriptor

from ..batch import BatchSpec
from ..queues.base import LISTEN_INTERVAL_KEY
from ..queues.broker import BrokerQueue
from ..queues.capabilities import MessagingCapabilities
from ..queues.envelope import MessageEnvelope
from .config import CONNECTION_KEYS, QUEUE_KEYS, persistent
from .connection import MqttConnection

__all__ = ["MqttMessageQueue"]


class MqttMessageQueue(BrokerQueue[MqttConnection]):
    """A message queue on an MQTT topic or topic filter (see the module docstring)."""

    CONFIG_KEYS = (*QUEUE_KEYS, *CONNECTION_KEYS, LISTEN_INTERVAL_KEY)
    CONNECTION_CLASS = MqttConnection
    CONNECTION_DESCRIPTOR = Descriptor("*", "connection", "mqtt", "*", "1.0")

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name, self._capabilities_for(self._defaults()))

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {k.name: k.default for k in cls.CONFIG_KEYS}

    @staticmethod
    def _capabilities_for(config: dict[str, Any]) -> MessagingCapabilities:
        durable = persistent(config) and int(config["options.qos"]) > 0
        return MessagingCapabilities(
            can_message_count=False,
            can_send=True,
            can_receive=True,
            can_peek=True,
            can_peek_batch=True,
            can_renew_lock=False,
            can_abandon=True,
            can_dead_letter=True,
            can_clear=True,
            can_persist=durable,
            can_order=True,
        )

    # ---- configuration and references ----------------------------------------------------

    def configure(self, config: Any) -> None:
        super().configure(config)
        self._capabilities = self._capabilities_for(self._config)

    @property
    def qos(self) -> int:
        return int(self._config["options.qos"])

    @property
    def dead_letter_topic(self) -> str:
        return str(self._config["options.dead_letter_topic"] or f"{self.topic.rstrip('/#+')}/dlq")

    def _before_open(self, connection: MqttConnection) -> None:
        # Listen before connecting: a persistent session redelivers right after CONNACK.
        connection.add_listener(self.topic, self)

    def _detach(self, connection: MqttConnection) -> None:
        """Stop delivering here; messages not acknowledged stay with the broker's session."""
        connection.unsubscribe(self.topic, self)

    def subscribe(self, correlation_id: str | None = None) -> None:
        """Subscribe to the topic (filter) at the configured QoS (else done at the first read)."""
        self._subscribe()

    def _subscribe(self) -> None:
        if not self._subscribed:
            self._conn().subscribe(self.topic, self.qos, self)
            self._subscribed = True

    # ---- the listener side: paho's network thread ----------------------------------------

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None:
        envelope = self._to_envelope(topic, data)
        envelope.set_reference((packet.mid, packet.qos))
        self._buffer_message(envelope)

    def _to_envelope(self, topic: str, data: bytes) -> MessageEnvelope:
        envelope = (
            MessageEnvelope.from_json(data) if self._config["options.serialize_envelope"] else None
        )
        if envelope is None:  # a raw payload, or serialize_envelope false
            envelope = MessageEnvelope(None, None, data)
        envelope.topic = topic
        envelope.timestamp = int(time.time() * 1000)
        return envelope

    # ---- sending -------------------------------------------------------------------------

    def send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        self._check_open(correlation_id)
        message.sent_time = message.sent_time or datetime.datetime.now(datetime.UTC)
        self._publish(self.topic, message, self._config["options.serialize_envelope"])

    def _publish(
        self, topic: str, message: MessageEnvelope, as_envelope: bool, properties: Any = None
    ) -> None:
        payload = _json_bytes(message) if as_envelope else message.message
        self._conn().publish(
            topic, payload, self.qos, bool(self._config["options.retain"]), properties
        )

    # ---- reading -------------------------------------------------------------------------

    def read_message_count(self) -> int:
        """Messages in the local buffer (MQTT cannot see the broker's backlog)."""
        with self._cond:
            return len(self._buffer)

    def receive(self, correlation_id: str | None, wait_timeout: int = 0) -> MessageEnvelope | None:
        message = self._take(correlation_id, wait_timeout)
        if message is not None and self._config["autocommit"]:
            self.complete(message)
        return message

    def plan_batch(self, max_messages: int | None = None) -> BatchSpec:
        """This queue's topic filter and persistent session as a BatchSpec (see sluice.batch)."""
        client_id = self._config.get("client_id")
        if not client_id or not persistent(self._config):
            raise ValueError(
                "An MQTT batch needs a persistent session: configure client_id "
                "(and leave options.clean_session false)."
            )
        return BatchSpec("mqtt", self.topic, client_id=str(client_id), max_messages=max_messages)

    # ---- acknowledging -------------------------------------------------------------------

    def complete(self, message: MessageEnvelope) -> None:
        """Acknowledge the message to the broker (once)."""
        reference = message.get_reference()
        message.set_reference(None)
        if reference is not None and self._connection is not None:
            mid, qos = reference
            self._connection.ack(mid, qos)

    def abandon(self, message: MessageEnvelope) -> None:
        """Hand the message out again first; it stays unacknowledged with the broker."""
        if message.get_reference() is None:
            return
        with self._cond:
            self._buffer.appendleft(message)
            self._cond.notify_all()

    def move_to_dead_letter(self, message: MessageEnvelope, reason: str | None = None) -> None:
        """Republish to the dead-letter topic (envelope JSON with origin and reason headers; MQTT 5
        user properties as well), then acknowledge the original."""
        dead = MessageEnvelope(
            message.correlation_id,
            message.message_type,
            message.message,
            headers=list(message.headers),
        )
        dead.message_id, dead.sent_time = message.message_id, message.sent_time
        origin = [
            ("sluice.original_topic", message.topic or self.topic),
            ("sluice.reason", reason or "moved to dead letter"),
        ]
        dead.headers += [(name, value.encode()) for name, value in origin]
        properties = None
        if str(self._config["options.protocol_version"]).startswith("5"):
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.UserProperty = origin
        self._publish(self.dead_letter_topic, dead, True, properties)
        self.complete(message)

    def clear(self, correlation_id: str | None = None) -> None:
        """Acknowledge and drop every message received and not handed out."""
        with self._cond:
            dropped = list(self._buffer)
            self._buffer.clear()
        for message in dropped:
            self.complete(message)


def _json_bytes(message: MessageEnvelope) -> bytes:
    return json.dumps(message.to_json()).encode("utf-8")
