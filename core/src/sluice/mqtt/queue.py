"""MqttMessageQueue (as pip-services' MqttMessageQueue) on paho-mqtt 2.x, doing better where
MQTT allows.

- ``complete`` and ``abandon`` work, through manual acknowledgements (QoS 1): with
  ``autocommit`` false a message is acknowledged only by ``complete``; an abandoned one is
  handed out again first, and one never acknowledged is redelivered by the broker to the next
  connection of the same persistent session (stable ``client_id``). With ``autocommit`` true a
  message is acknowledged when ``receive`` hands it out; ``abandon`` still hands it out again
  from the local buffer, but the broker will not redeliver it.
- After a reconnection to a session that survived, the broker resends every QoS 1 message
  not yet acknowledged. The queue hands each out once: buffered old copies are dropped,
  ``abandon`` of a message from the earlier connection does not put it back (its new copy is
  coming), and ``complete`` of one acknowledges its new copy (found by envelope
  ``message_id``; a raw payload's copy is handed out again: at-least-once).
- The broker's in-flight window bounds how many messages can be received and not completed:
  mosquitto sends at most ``max_inflight_messages`` (default 20) unacknowledged QoS 1
  messages to a client, so with ``autocommit`` false ``receive`` finds nothing more until
  ``complete`` acknowledges some. Raise the broker's limit for larger batches.
- QoS 2: paho answers PUBREC by itself, so the broker counts a QoS 2 message as delivered
  the moment it arrives and never sends it again; the queue completes the exchange (PUBCOMP)
  at once. ``can_persist`` is therefore true only for QoS 1 on a persistent session.
- ``peek``, ``peek_batch``, ``clear`` and ``read_message_count`` work on the local buffer
  (messages received and not yet handed out): MQTT cannot see the broker's backlog, so
  ``can_message_count`` is false.
- ``move_to_dead_letter`` republishes to ``options.dead_letter_topic`` with the reason and the
  original topic: as MQTT 5 user properties, and as envelope headers (under MQTT 3.1.1 the
  dead letter is always an envelope, so they survive).
- The queue subscribes when it opens (``options.autosubscribe`` defaults to true, unlike the
  seed), so a message published after ``open()`` is never missed.
- With ``serialize_envelope`` true the envelope travels as JSON, so ``message_id`` is stable
  across redeliveries and consumers can de-duplicate by it. Raw payloads (serialize_envelope
  false, or another publisher) get a new ``message_id`` each time they are received, so
  de-duplication needs envelopes. Under MQTT 5 the headers of a raw payload travel as user
  properties.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pip_services3_commons.refer import Descriptor

from ..batch import BatchSpec
from ..queues.base import LISTEN_INTERVAL_KEY
from ..queues.broker import BrokerQueue
from ..queues.capabilities import MessagingCapabilities
from ..queues.envelope import Header, MessageEnvelope
from .config import (
    CONNECTION_KEYS,
    QUEUE_KEYS,
    check_topic_filter,
    checked_address,
    dead_letter_topic,
    is_filter,
    persistent,
    protocol_version,
)
from .connection import MqttConnection

__all__ = ["MqttMessageQueue"]

REASON_HEADER = "sluice.reason"
ORIGINAL_TOPIC_HEADER = "sluice.original_topic"


@dataclass
class _Delivery:
    """Where a received message came from, so it is acknowledged once, on its own connection."""

    connection: MqttConnection
    mid: int
    qos: int
    generation: int
    acked: bool = False
    handed_out: bool = False

    def ack(self) -> None:
        if not self.acked:
            self.acked = True
            self.connection.ack(self.mid, self.qos, self.generation)


class MqttMessageQueue(BrokerQueue[MqttConnection]):
    """A message queue on an MQTT topic or topic filter (see the module docstring)."""

    CONFIG_KEYS = (*QUEUE_KEYS, *CONNECTION_KEYS, LISTEN_INTERVAL_KEY)
    CONNECTION_CLASS = MqttConnection
    CONNECTION_DESCRIPTOR = Descriptor("*", "connection", "mqtt", "*", "1.0")
    #: It acknowledges each message itself, on complete() (see MqttMessageListener).
    manual_ack = True

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name, self._capabilities_for(self._defaults(), durable=False))
        self._listening_to: MqttConnection | None = None
        # message ids completed through a stale delivery: their redelivered copy is acknowledged
        self._settled: set[str] = set()

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {k.name: k.default for k in cls.CONFIG_KEYS}

    @staticmethod
    def _capabilities_for(config: dict[str, Any], durable: bool) -> MessagingCapabilities:
        return MessagingCapabilities.full(
            can_message_count=False,
            can_renew_lock=False,
            can_persist=durable and int(config["options.qos"]) == 1,
        )

    # ---- configuration and references ----------------------------------------------------

    def configure(self, config: Any) -> None:
        super().configure(config)
        if self._config["topic"] or self._config["queue"]:
            check_topic_filter(self.topic, "topic" if self._config["topic"] else "queue")
        checked_address(self._config)  # a wrong protocol or a password in clear: here, not at open
        self._capabilities = self._capabilities_for(self._config, persistent(self._config))

    @property
    def qos(self) -> int:
        return int(self._config["options.qos"])

    @property
    def dead_letter_topic(self) -> str:
        return dead_letter_topic(self._config, self.topic)

    @property
    def _v5(self) -> bool:
        return protocol_version(self._config) == paho.MQTTv5

    def _before_open(self, connection: MqttConnection) -> None:
        # Listen before connecting: a persistent session redelivers right after CONNACK.
        self._listening_to = connection
        connection.add_listener(self.topic, self)

    def _after_open(self, connection: MqttConnection) -> None:
        # A shared connection's session, not this queue's keys, decides what survives.
        self._capabilities = self._capabilities_for(self._config, connection.is_persistent)

    def _detach(self, connection: MqttConnection) -> None:
        """Stop delivering here; messages not acknowledged stay with the broker's session."""
        connection.unsubscribe(self.topic, self, at_broker=connection is self._shared_connection)

    def subscribe(self, correlation_id: str | None = None) -> None:
        """Subscribe to the topic (filter) at the configured QoS (else done at the first read)."""
        self._subscribe()

    def _subscribe(self) -> None:
        if not self._subscribed:
            self._conn().subscribe(self.topic, self.qos, self)
            self._subscribed = True

    # ---- the listener side: paho's network thread ----------------------------------------

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None:
        source = self._listening_to
        if source is None:
            return
        envelope = self._to_envelope(topic, data, packet)
        delivery = _Delivery(source, packet.mid, packet.qos, source.generation)
        if packet.qos == 2:
            delivery.ack()  # see the module docstring: the broker already counts it delivered
        envelope.set_reference(delivery)
        with self._cond:
            settled = envelope.message_id in self._settled
            self._settled.discard(envelope.message_id)
        if settled:
            delivery.ack()  # completed already, through the copy of an earlier connection
        else:
            self._buffer_message(envelope)

    def on_connected(self, session_present: bool) -> None:
        """After a reconnection to a session that survived, the broker sends again every
        QoS 1 message it has not had a PUBACK for: drop the old copies still buffered."""
        with self._cond:
            kept = [m for m in self._buffer if not _redelivered(m)]
            self._buffer.clear()
            self._buffer.extend(kept)

    def _to_envelope(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> MessageEnvelope:
        envelope = (
            MessageEnvelope.from_json(data) if self._config["options.serialize_envelope"] else None
        )
        if envelope is None:  # a raw payload, or serialize_envelope false
            envelope = MessageEnvelope(None, None, data)
            envelope.wire = "raw"
        else:
            envelope.wire = "envelope"
        for header in _user_properties(packet):
            if header not in envelope.headers:
                envelope.headers.append(header)
        envelope.topic = topic
        envelope.timestamp = int(time.time() * 1000)
        return envelope

    # ---- sending -------------------------------------------------------------------------

    def _send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        self._check_open(correlation_id)
        if is_filter(self.topic):
            raise ValueError(
                f"Cannot send to '{self.topic}': it is a topic filter (+ or #). "
                "Send through a queue configured with one concrete topic."
            )
        message.sent_time = message.sent_time or datetime.datetime.now(datetime.UTC)
        as_envelope = bool(self._config["options.serialize_envelope"])
        self._publish(self.topic, message, as_envelope, [] if as_envelope else message.headers)

    def _publish(
        self, topic: str, message: MessageEnvelope, as_envelope: bool, carried: list[Header]
    ) -> None:
        """Publish ``message`` (its JSON envelope, or only its payload) with the ``carried``
        headers as MQTT 5 user properties (ignored under MQTT 3.1.1)."""
        properties = None
        if self._v5 and carried:
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.UserProperty = [(name, _header_text(name, value)) for name, value in carried]
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
        delivery = _delivery(message)
        if delivery is not None:
            delivery.handed_out = True
            if self._config["autocommit"]:
                delivery.ack()
        return message

    def plan_batch(self, max_messages: int | None = None) -> BatchSpec:
        """This queue's topic filter and persistent session as a BatchSpec (see sluice.batch)."""
        client_id = self._config.get("client_id")
        if not client_id or not persistent(self._config):
            raise ValueError(
                "An MQTT batch needs a persistent session: configure client_id "
                "(and leave options.clean_session false)."
            )
        return BatchSpec(
            "mqtt",
            self.topic,
            client_id=str(client_id),
            max_messages=max_messages,
            sequence=time.time_ns() // 1_000_000,
        )

    # ---- acknowledging -------------------------------------------------------------------

    def complete(self, message: MessageEnvelope) -> None:
        """Acknowledge the message to the broker (once).

        A message received before a reconnection has a stale packet id; when the session
        survived, the broker sends it again, and that copy (found by its envelope's
        ``message_id``) is acknowledged instead of being handed out a second time."""
        delivery = _delivery(message)
        message.set_reference(None)
        if delivery is None:
            return
        if not _redelivered(message, delivery):
            delivery.ack()
            return
        delivery.acked = True
        with self._cond:
            copy = next((m for m in self._buffer if m.message_id == message.message_id), None)
            if copy is not None:
                self._buffer.remove(copy)
            elif self._config["options.serialize_envelope"]:
                self._settled.add(message.message_id)  # the copy is still on its way
        if copy is not None:
            self.complete(copy)

    def abandon(self, message: MessageEnvelope) -> None:
        """Hand the message out again, before anything else; it stays unacknowledged.

        A message received before a reconnection to a surviving session is not put back:
        the broker has sent it again already."""
        delivery = _delivery(message)
        if delivery is None or not delivery.handed_out:
            return
        delivery.handed_out = False
        if _redelivered(message, delivery):
            return
        with self._cond:
            self._buffer.appendleft(message)
            self._cond.notify_all()

    def move_to_dead_letter(self, message: MessageEnvelope, reason: str | None = None) -> None:
        """Republish to the dead-letter topic with the reason and the original topic, then
        acknowledge the original (see the module docstring)."""
        origin = [
            (ORIGINAL_TOPIC_HEADER, (message.topic or self.topic).encode()),
            (REASON_HEADER, (reason or "moved to dead letter").encode()),
        ]
        kept = [h for h in message.headers if h[0] not in (REASON_HEADER, ORIGINAL_TOPIC_HEADER)]
        dead = MessageEnvelope(
            message.correlation_id, message.message_type, message.message, headers=kept + origin
        )
        dead.message_id, dead.sent_time = message.message_id, message.sent_time
        as_envelope = self._config["options.serialize_envelope"] or not self._v5
        self._publish(
            self.dead_letter_topic, dead, as_envelope, origin if as_envelope else dead.headers
        )
        self.complete(message)

    def clear(self, correlation_id: str | None = None) -> None:
        """Acknowledge and drop every message received and not handed out."""
        with self._cond:
            dropped = list(self._buffer)
            self._buffer.clear()
        for message in dropped:
            self.complete(message)

    def _forget(self) -> None:
        self._listening_to = None
        self._settled.clear()


def _delivery(message: MessageEnvelope | None) -> _Delivery | None:
    reference = None if message is None else message.get_reference()
    return reference if isinstance(reference, _Delivery) else None


def _redelivered(message: MessageEnvelope, delivery: _Delivery | None = None) -> bool:
    """Whether the broker sends ``message`` again on the current connection: QoS 1, not
    acknowledged, received on an earlier connection of a session that survived since."""
    delivery = delivery or _delivery(message)
    return (
        delivery is not None
        and delivery.qos == 1
        and not delivery.acked
        and delivery.connection.redelivers(delivery.generation)
    )


def _user_properties(packet: paho.MQTTMessage) -> list[Header]:
    properties = getattr(packet, "properties", None)
    pairs = getattr(properties, "UserProperty", None) or []
    return [(str(name), str(value).encode()) for name, value in pairs]


def _header_text(name: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(
            f"Header '{name}' is not UTF-8 text, which MQTT 5 user properties need; "
            "set options.serialize_envelope true to send it inside the envelope."
        ) from None


def _json_bytes(message: MessageEnvelope) -> bytes:
    return json.dumps(message.to_json()).encode("utf-8")
