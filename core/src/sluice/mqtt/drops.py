"""How many messages the MQTT broker has dropped: a broker that cannot queue a QoS 1/2
message for a client (its queue is full) drops it without telling anyone.

mosquitto counts them in ``$SYS/broker/publish/messages/dropped`` (every client together, since
the broker started). It republishes its ``$SYS`` tree every ``sys_interval`` seconds (default
10; 0 disables it) as retained messages, so a new subscriber gets the last value at once: that
value can be up to ``sys_interval`` seconds old. With ``next_update`` this waits for the next
republication, then reads the value again, so it covers every drop until the call.

mosquitto republishes a ``$SYS`` value only when it changes, and its retained copy expires
60 s later: a count that has not changed for a minute cannot be read (None), until the next
drop. So a drop is seen by an ingest that starts within a minute of it; older drops show only
when a later drop changes the count (whose rise then includes them).

Other brokers publish no such topic, and :func:`read_dropped_count` returns None for them:

- EMQX counts drops in its metrics (``delivery.dropped.queue_full``, ``messages.dropped``),
  read through its HTTP API or Prometheus endpoint (its ``$SYS/brokers/<node>/`` topics are
  for localhost clients only by default).
- HiveMQ has no ``$SYS`` tree: ``com.hivemq.messages.dropped.count`` (and a count per reason)
  through JMX or its Prometheus extension.
- VerneMQ counts ``queue_message_drop``, shown by ``vmq-admin metrics show`` and its HTTP
  ``/metrics`` endpoint.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Mapping
from typing import Any

import paho.mqtt.client as paho

from ..queues.config import COMMON_KEYS, read_config
from .config import CONNECTION_KEYS
from .connection import MqttConnection

__all__ = ["DROPPED_TOPIC", "read_dropped_count"]

log = logging.getLogger("sluice.mqtt")

DROPPED_TOPIC = "$SYS/broker/publish/messages/dropped"
UPTIME_TOPIC = "$SYS/broker/uptime"  # mosquitto republishes it first, at every sys_interval


class _Inbox:
    """A listener that keeps (topic, payload, retained) of each message, for one reader."""

    def __init__(self) -> None:
        self.messages: queue.Queue[tuple[str, bytes, bool]] = queue.Queue()

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None:
        self.messages.put((topic, data, bool(packet.retain)))

    def next(self, topic: str, deadline: float, retained: bool | None = None) -> bytes | None:
        """The payload of the next message on ``topic`` (retained or not, if given)."""
        while (left := deadline - time.monotonic()) > 0:
            try:
                got, data, was_retained = self.messages.get(timeout=left)
            except queue.Empty:
                return None
            if got == topic and (retained is None or was_retained == retained):
                return data
        return None


def read_dropped_count(
    config: Mapping[str, Any], timeout_s: float = 2.0, *, next_update: bool = False
) -> int | None:
    """The broker's count of dropped messages, or None when it does not publish one.

    ``config`` is an MQTT queue's or connection's configuration (``MqttMessageQueue.config``,
    with references resolved): the same broker address, TLS and credentials, through a short
    clean session of its own (never the queue's client id, which would take its session over).
    ``timeout_s`` bounds the wait for the value once connected (the connection itself waits
    up to ``options.connect_timeout``). With ``next_update`` it first waits for the broker's
    next ``$SYS`` republication (up to ``sys_interval`` seconds: give a ``timeout_s`` above
    it; if none comes in time, it warns and returns the last published value).

    The count is the broker's total since it started, for every client: compare two readings.
    Raises ``ConnectionError`` if the broker cannot be reached.
    """
    connection = MqttConnection()
    connection.use_config(_reader_config(config))
    inbox = _Inbox()
    deadline = time.monotonic() + timeout_s
    connection.open(None)
    try:
        if next_update:
            connection.subscribe(UPTIME_TOPIC, 0, inbox)
            if inbox.next(UPTIME_TOPIC, deadline, retained=False) is None:
                log.warning(
                    "the MQTT broker at %s did not update its $SYS topics within %.1f s "
                    "(sys_interval); its dropped-message count may be that much older",
                    connection.address,
                    timeout_s,
                )
                deadline = max(deadline, time.monotonic() + min(timeout_s, 2.0))
        # The retained value; after the uptime above, the one of that update or a later one.
        connection.subscribe(DROPPED_TOPIC, 0, inbox)
        payload = inbox.next(DROPPED_TOPIC, deadline)
    except ConnectionError as exc:  # e.g. the broker's access rules refuse $SYS topics
        log.warning("cannot read the MQTT broker's dropped-message count: %s", exc)
        return None
    finally:
        connection.close(None)
    if payload is None:
        log.info(
            "the MQTT broker at %s publishes no %s (not mosquitto, or sys_interval 0)",
            connection.address,
            DROPPED_TOPIC,
        )
        return None
    try:
        return int(payload.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        log.warning("%s holds %r, not a count", DROPPED_TOPIC, payload[:40])
        return None


def _reader_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection keys of ``config``, for a clean session with a client id of its own."""
    names = {key.name for key in (*COMMON_KEYS, *CONNECTION_KEYS)}
    values = {k: v for k, v in config.items() if k in names and v is not None}
    values |= {
        "client_id": f"sluice-drops-{uuid.uuid4().hex[:12]}",
        "options.clean_session": True,
        "options.clean_start": True,
        "options.retry_connect": False,
    }
    return read_config(values, CONNECTION_KEYS, "read_dropped_count")
