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

import collections
import datetime
import json
import threading
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pip_services3_commons.refer import Descriptor, IReferences
from pip_services3_components.auth import CredentialParams
from pip_services3_components.connect import ConnectionParams

from ..queues.base import LISTEN_INTERVAL_KEY, MessageQueue
from ..queues.capabilities import MessagingCapabilities
from ..queues.envelope import MessageEnvelope
from .config import CONNECTION_KEYS, QUEUE_KEYS, persistent
from .connection import MqttConnection

__all__ = ["MqttMessageQueue"]

CONNECTION_DESCRIPTOR = Descriptor("*", "connection", "mqtt", "*", "1.0")


class MqttMessageQueue(MessageQueue):
    """A message queue on an MQTT topic or topic filter (see the module docstring)."""

    CONFIG_KEYS = (*QUEUE_KEYS, *CONNECTION_KEYS, LISTEN_INTERVAL_KEY)

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name, self._capabilities_for(self._defaults()))
        self._connection: MqttConnection | None = None
        self._shared_connection: MqttConnection | None = None
        self._subscribed = False
        self._cond = threading.Condition()
        self._buffer: collections.deque[MessageEnvelope] = collections.deque()

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {k.name: k.default for k in cls.CONFIG_KEYS}

    @staticmethod
    def _capabilities_for(config: dict[str, Any]) -> MessagingCapabilities:
        durable = persistent(config) and int(config["options.qos"]) > 0
        return MessagingCapabilities(
            False,
            True,
            True,
            True,
            True,
            False,
            True,
            True,
            True,
            can_persist=durable,
            can_order=True,
        )

    # ---- configuration and references ----------------------------------------------------

    def configure(self, config: Any) -> None:
        super().configure(config)
        self._capabilities = self._capabilities_for(self._config)

    @property
    def topic(self) -> str:
        return str(self._config["topic"] or self._config["queue"] or self.get_name())

    @property
    def qos(self) -> int:
        return int(self._config["options.qos"])

    @property
    def dead_letter_topic(self) -> str:
        return str(self._config["options.dead_letter_topic"] or f"{self.topic.rstrip('/#+')}/dlq")

    def set_references(self, references: IReferences) -> None:
        super().set_references(references)
        shared = references.get_one_optional(CONNECTION_DESCRIPTOR)
        if isinstance(shared, MqttConnection):
            self._shared_connection = shared

    def unset_references(self) -> None:
        self._shared_connection = None

    # ---- lifecycle -----------------------------------------------------------------------

    def _open_with_params(
        self,
        correlation_id: str | None,
        connections: list[ConnectionParams],
        credential: CredentialParams | None,
    ) -> None:
        connection = self._shared_connection
        if connection is None:
            connection = MqttConnection()
            connection.use_config(self._config)
        connection.add_listener(self.topic, self)
        connection.open(correlation_id)
        self._connection = connection
        self._opened = True
        if self._config["options.autosubscribe"]:
            self.subscribe(correlation_id)

    def close(self, correlation_id: str | None = None) -> None:
        """Disconnect; messages not acknowledged stay with the broker's session."""
        self._stop_listening()
        connection, self._connection = self._connection, None
        self._opened = False
        if connection is not None:
            connection.unsubscribe(self.topic, self)
            if connection is not self._shared_connection:
                connection.close(correlation_id)
        with self._cond:
            self._subscribed = False
            self._buffer.clear()
            self._cond.notify_all()

    def _conn(self) -> MqttConnection:
        if self._connection is None:
            raise ConnectionError(f"{self} is not opened; call open() first.")
        return self._connection

    def subscribe(self, correlation_id: str | None = None) -> None:
        """Subscribe to the topic (filter) at the configured QoS (else done at the first read)."""
        if not self._subscribed:
            self._conn().subscribe(self.topic, self.qos, self)
            self._subscribed = True

    # ---- the listener side: paho's network thread ----------------------------------------

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None:
        envelope = self._to_envelope(topic, data)
        envelope.set_reference((packet.mid, packet.qos))
        with self._cond:
            self._buffer.append(envelope)
            self._cond.notify_all()

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

    def peek(self, correlation_id: str | None = None) -> MessageEnvelope | None:
        batch = self.peek_batch(correlation_id, 1)
        return batch[0] if batch else None

    def peek_batch(self, correlation_id: str | None, message_count: int) -> list[MessageEnvelope]:
        """Up to ``message_count`` messages received but not yet handed out (the local buffer)."""
        self._check_open(correlation_id)
        self.subscribe(correlation_id)
        with self._cond:
            return list(self._buffer)[: max(0, message_count)]

    def read_message_count(self) -> int:
        """Messages in the local buffer (MQTT cannot see the broker's backlog)."""
        with self._cond:
            return len(self._buffer)

    def receive(self, correlation_id: str | None, wait_timeout: int = 0) -> MessageEnvelope | None:
        self._check_open(correlation_id)
        self.subscribe(correlation_id)
        deadline = time.monotonic() + max(0, wait_timeout) / 1000
        with self._cond:
            while not self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._opened:
                    return None
                self._cond.wait(remaining)
            message = self._buffer.popleft()
        if self._config["autocommit"]:
            self.complete(message)
        return message

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
