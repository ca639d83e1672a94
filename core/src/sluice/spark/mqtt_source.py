"""Draining an MQTT persistent session for a batch, with manual acknowledgements.

The session's QoS 1 messages are received with ``autocommit`` off, so none is acknowledged
until :func:`sluice.spark.ingest` has written the batch; a crash before that makes the broker
send them again to the session's next connection (at-least-once). With envelopes
(``serialize_envelope``, the default) every message keeps its ``message_id`` across
redeliveries, which is what de-duplication works on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..mqtt.queue import MqttMessageQueue
from ..queues.envelope import MessageEnvelope
from .records import RecordColumns

__all__ = ["FIRST_MESSAGE_WAIT_S", "IDLE_WAIT_S", "drain", "open_session", "to_columns"]

#: How long to wait for the session's first message, and for each next one.
FIRST_MESSAGE_WAIT_S = 5.0
IDLE_WAIT_S = 1.0


def open_session(config: Mapping[str, Any]) -> MqttMessageQueue:
    """The opened queue of the batch's persistent session, acknowledging only on complete()."""
    queue = MqttMessageQueue()
    queue.configure({**{k: v for k, v in config.items() if v is not None}, "autocommit": False})
    queue.open(None)
    return queue


def drain(
    queue: MqttMessageQueue,
    max_messages: int | None,
    first_wait_s: float = FIRST_MESSAGE_WAIT_S,
) -> list[MessageEnvelope]:
    """Receive until ``max_messages`` arrived or none came for :data:`IDLE_WAIT_S` (for the
    first one, ``first_wait_s``)."""
    received: list[MessageEnvelope] = []
    wait_s = first_wait_s
    deadline = time.monotonic() + wait_s
    while max_messages is None or len(received) < max_messages:
        message = queue.receive(None, max(0, int((deadline - time.monotonic()) * 1000)))
        if message is None:
            break
        received.append(message)
        deadline = time.monotonic() + IDLE_WAIT_S
    return received


def to_columns(messages: list[MessageEnvelope]) -> RecordColumns:
    columns = RecordColumns()
    for m in messages:
        sent = m.sent_time
        columns.append(
            m.key,
            m.message,
            m.topic or "",
            int(sent.timestamp() * 1000) if sent is not None else m.timestamp,
            [(name, value) for name, value in m.headers],
            m.message_id,
        )
    return columns
