"""BrokerQueue: what the Kafka and MQTT queues share.

A connection of the queue's own or one shared through a pip-services reference, a local
buffer that the client library's thread fills, and ``receive``/``peek`` that wait on it.
"""

from __future__ import annotations

import collections
import threading
import time
from abc import abstractmethod
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pip_services3_commons.refer import Descriptor, IReferences
from pip_services3_components.auth import CredentialParams
from pip_services3_components.connect import ConnectionParams

from .base import MessageQueue
from .envelope import MessageEnvelope

__all__ = ["BrokerConnection", "BrokerQueue"]


class BrokerConnection(Protocol):
    def use_config(self, values: Any) -> None: ...
    def open(self, correlation_id: str | None = None) -> None: ...
    def close(self, correlation_id: str | None = None) -> None: ...


C = TypeVar("C", bound=BrokerConnection)


class BrokerQueue(MessageQueue, Generic[C]):
    """Base of queues on a network broker (see the module docstring).

    Subclasses name their connection class and descriptor, and say how to subscribe
    (:meth:`_subscribe`) and how to let go of a connection (:meth:`_detach`).
    """

    CONNECTION_CLASS: ClassVar[type]
    CONNECTION_DESCRIPTOR: ClassVar[Descriptor]

    def __init__(self, name: str | None = None, capabilities: Any = None) -> None:
        super().__init__(name, capabilities)
        self._connection: C | None = None
        self._shared_connection: C | None = None
        self._subscribed = False
        self._cond = threading.Condition()
        self._buffer: collections.deque[MessageEnvelope] = collections.deque()

    @property
    def topic(self) -> str:
        return str(self._config["topic"] or self._config["queue"] or self.get_name())

    # ---- references and lifecycle --------------------------------------------------------

    def set_references(self, references: IReferences) -> None:
        super().set_references(references)
        shared = references.get_one_optional(self.CONNECTION_DESCRIPTOR)
        if isinstance(shared, self.CONNECTION_CLASS):
            self._shared_connection = shared  # type: ignore[assignment]

    def unset_references(self) -> None:
        super().unset_references()
        self._shared_connection = None

    def open(self, correlation_id: str | None = None) -> None:
        if self._shared_connection is None:
            super().open(correlation_id)
        else:  # the shared connection has resolved its own connection and credential
            self._open_with_params(correlation_id, [], None)

    def _open_with_params(
        self,
        correlation_id: str | None,
        connections: list[ConnectionParams],
        credential: CredentialParams | None,
    ) -> None:
        connection: C | None = self._shared_connection
        if connection is None:
            connection = self.CONNECTION_CLASS()
            assert connection is not None
            connection.use_config(self._open_config)  # discovery and store keys resolved
        self._before_open(connection)
        connection.open(correlation_id)
        self._connection = connection
        self._after_open(connection)
        self._opened = True
        if self._config["options.autosubscribe"]:
            self._subscribe()

    def _before_open(self, connection: C) -> None:
        """Called before the connection opens (e.g. to register as a listener)."""

    def _after_open(self, connection: C) -> None:
        """Called once the connection is open, before any subscription."""

    def close(self, correlation_id: str | None = None) -> None:
        """Stop reading and let go of the connection (closing it if it is the queue's own)."""
        self._stop_listening()
        connection, self._connection = self._connection, None
        self._opened = False
        if connection is not None:
            self._detach(connection)
            if connection is not self._shared_connection:
                connection.close(correlation_id)
        with self._cond:
            self._subscribed = False
            self._buffer.clear()
            self._forget()
            self._cond.notify_all()

    @abstractmethod
    def _detach(self, connection: C) -> None:
        """Stop the connection delivering to this queue."""

    def _forget(self) -> None:
        """Drop per-connection state on close (called with ``self._cond`` held)."""

    def _conn(self) -> C:
        if self._connection is None:
            raise ConnectionError(f"{self} is not opened; call open() first.")
        return self._connection

    @abstractmethod
    def _subscribe(self) -> None:
        """Start receiving into the buffer (once; later calls do nothing)."""

    # ---- the buffer ----------------------------------------------------------------------

    def _buffer_message(self, envelope: MessageEnvelope) -> None:
        """Called on the client library's thread for every message that arrives."""
        with self._cond:
            self._buffer.append(envelope)
            self._cond.notify_all()

    def peek_batch(self, correlation_id: str | None, message_count: int) -> list[MessageEnvelope]:
        """Up to ``message_count`` messages received and not handed out; nothing is acknowledged."""
        self._check_open(correlation_id)
        self._subscribe()
        with self._cond:
            return list(self._buffer)[: max(0, message_count)]

    def _take(self, correlation_id: str | None, wait_timeout: int) -> MessageEnvelope | None:
        """The next buffered message, waiting up to ``wait_timeout`` ms for one."""
        self._check_open(correlation_id)
        self._subscribe()
        deadline = time.monotonic() + max(0, wait_timeout) / 1000
        with self._cond:
            while not self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._opened:
                    return None
                self._cond.wait(remaining)
            return self._buffer.popleft()
