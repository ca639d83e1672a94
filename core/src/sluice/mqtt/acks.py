"""AckLedger: which connection a message arrived on, and whether its PUBACK may still be sent.

A packet id names a message only on the connection it arrived on: after a reconnection the
broker may give the same id to another message. So a PUBACK is sent only while the
connection a message arrived on is still up. The ledger makes "is it still up?" and "send
the PUBACK" one step under one lock, and the paho callbacks mark the connection down
(``disconnected``) and up again (``connected``) under the same lock.

Why ``disconnected`` matters: paho's network thread calls ``on_disconnect`` before
``reconnect()`` empties its outgoing queue and sends CONNECT. A PUBACK queued before
``disconnected`` returns is either sent on the old socket or dropped with that queue; one
requested after it is refused. Checking only the generation bumped at CONNACK would let a
PUBACK queued between the new CONNECT and its CONNACK reach the new connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["AckLedger"]


class AckLedger:
    """Generation and acknowledgement state of one MQTT client, under one lock.

    The *generation* counts the broker's accepted CONNACKs: 1 for the first connection.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._live = False  # between a CONNACK and the next disconnection
        self._fresh = 0  # the first generation of the broker's current session
        # (generation, packet id) -> acknowledgements still awaited, for a message handed to
        # several listeners: the broker gets its one PUBACK when the last listener acks
        self._holds: dict[tuple[int, int], int] = {}

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    @property
    def live(self) -> bool:
        """Whether the connection of the current generation is up."""
        with self._lock:
            return self._live

    def connected(self, session_present: bool) -> int:
        """A CONNACK accepted the connection: start and return a new generation."""
        with self._lock:
            self._generation += 1
            self._live = True
            if not session_present:
                self._fresh = self._generation
            self._holds.clear()  # the packet ids of the previous connection are stale
            return self._generation

    def disconnected(self, session_kept: bool) -> None:
        """The connection is down (or closing): refuse every acknowledgement from now on.

        ``session_kept``: whether the broker may keep the session (a persistent one) and so
        send the messages of this connection again to the next one."""
        with self._lock:
            self._live = False
            if not session_kept:
                self._fresh = self._generation + 1
            self._holds.clear()

    def share(self, mid: int, generation: int, listeners: int) -> None:
        """Message ``mid`` of ``generation`` went to ``listeners`` listeners: send its PUBACK
        when the last of them acknowledges it."""
        if listeners > 1:
            with self._lock:
                if generation == self._generation and self._live:
                    self._holds[generation, mid] = listeners

    def ack(self, mid: int, qos: int, generation: int, send: Callable[[int, int], Any]) -> bool:
        """Call ``send(mid, qos)`` (paho's ``client.ack``) if message ``mid`` arrived on the
        connection that is up now and no other listener still holds it; else do nothing.

        Returns whether ``send`` was called. The check and the send are atomic with respect
        to ``connected`` and ``disconnected``."""
        if qos == 0:
            return False
        with self._lock:
            if not self._live or generation != self._generation:
                return False
            awaited = self._holds.pop((generation, mid), 1) - 1
            if awaited > 0:
                self._holds[generation, mid] = awaited
                return False
            send(mid, qos)  # paho only queues the packet: quick, and takes none of our locks
            return True

    def redelivers(self, generation: int) -> bool:
        """Whether the broker sends the QoS 1 messages left unacknowledged on connection
        ``generation`` again: to the current connection, when the session has survived every
        reconnection since; while disconnected, to the next one, if the session is kept."""
        with self._lock:
            if self._live:
                return self._fresh <= generation < self._generation
            return self._fresh <= generation <= self._generation
