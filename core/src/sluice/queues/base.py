"""MessageQueue: the base every Sluice transport (memory, Kafka, MQTT) builds on."""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeAlias

from pip_services3_commons.config import ConfigParams, NameResolver
from pip_services3_commons.refer import IReferences
from pip_services3_commons.run import ICleanable
from pip_services3_messaging.queues import MessageQueue as _PipMessageQueue

from .capabilities import MessagingCapabilities
from .config import ConfigKey, read_config, to_config_params
from .envelope import MessageEnvelope, as_envelope
from .references import resolve_references

__all__ = ["MessageQueue", "MessageReceiver"]

log = logging.getLogger("sluice.queues")


class SupportsReceiveMessage(Protocol):
    """pip-services' ``IMessageReceiver``: an object with ``receive_message(message, queue)``."""

    def receive_message(self, message: MessageEnvelope, queue: Any) -> Any: ...


#: A receiver is a pip-services ``IMessageReceiver`` or a plain ``callable(message, queue)``.
MessageReceiver: TypeAlias = (
    SupportsReceiveMessage | Callable[[MessageEnvelope, "MessageQueue"], Any]
)

LISTEN_INTERVAL_KEY = ConfigKey(
    "options.listen_interval",
    int,
    1000,
    "Milliseconds listen() waits in one receive before checking whether end_listen() was called.",
)


class MessageQueue(_PipMessageQueue, ICleanable):  # type: ignore[misc]
    """Base class of Sluice's queues, on pip-services' ``MessageQueue`` abstraction.

    What it adds to pip-services:

    - ``configure`` validates every key against :attr:`CONFIG_KEYS` (wrong type: ``ConfigError``;
      unknown key: ``UnknownConfigKeyWarning``) and accepts a plain dict as well as ConfigParams;
    - ``receive`` has a default wait of 0 ms;
    - ``listen`` works on top of ``receive`` (no busy loop) and accepts a plain callable;
    - ``send_as_object`` builds Sluice's ``MessageEnvelope`` (which handles bytes payloads);
    - ``send`` also takes pip-services' own ``MessageEnvelope`` (or a look-alike, see
      :func:`~sluice.queues.envelope.as_envelope`); subclasses implement :meth:`_send`;
    - ``open`` resolves ``connection.discovery_key`` and ``credential.store_key`` through the
      references (see :mod:`sluice.queues.references`) and fails clearly when it cannot.
    """

    #: The configuration keys this queue understands, beyond the common connection/credential ones.
    CONFIG_KEYS: ClassVar[tuple[ConfigKey, ...]] = (LISTEN_INTERVAL_KEY,)

    def __init__(self, name: str | None = None, capabilities: MessagingCapabilities | None = None):
        super().__init__(name, capabilities)
        self._name: str | None = name
        self._config: dict[str, Any] = read_config({}, self.CONFIG_KEYS, self._component())
        self._listen_stop = threading.Event()
        self._opened = False
        self._references: IReferences | None = None
        #: The configuration ``open`` used: discovery and store keys resolved.
        self._open_config: dict[str, Any] = dict(self._config)

    def is_open(self) -> bool:
        return self._opened

    # ---- configuration -------------------------------------------------------------------

    def _component(self) -> str:
        return f"{type(self).__name__}({self._name or ''})"

    def configure(self, config: ConfigParams | Mapping[str, Any]) -> None:
        params = to_config_params(config)
        self._config = read_config(params, self.CONFIG_KEYS, self._component())
        name = self._name
        super().configure(params)
        self._name = NameResolver.resolve(params, name)

    def set_references(self, references: IReferences) -> None:
        self._references = references
        super().set_references(references)

    def unset_references(self) -> None:
        self._references = None

    def open(self, correlation_id: str | None = None) -> None:
        """Open the queue with its connection and credential resolved (see the class doc)."""
        self._open_config = resolve_references(
            self._config,
            self._references,
            correlation_id,
            self._component(),
            join_servers=self.JOIN_SERVERS,
        )
        self._open_with_params(correlation_id, [], None)

    #: Whether several discovered connections make one server list (Kafka) or not (MQTT).
    JOIN_SERVERS: ClassVar[bool] = False

    @property
    def config(self) -> dict[str, Any]:
        """The effective configuration (validated, defaults applied). Secrets are included."""
        return dict(self._config)

    # ---- pip-services API with Sluice's fixes ----------------------------------------------

    def send_as_object(self, correlation_id: str | None, message_type: str, message: Any) -> None:
        self.send(correlation_id, MessageEnvelope(correlation_id, message_type, message))

    def send(self, correlation_id: str | None, message: Any) -> None:
        """Send ``message``: Sluice's or pip-services' ``MessageEnvelope``, or any object with
        ``message_id``, ``message_type``, ``correlation_id`` and ``message``."""
        envelope = as_envelope(message)
        self._send(correlation_id, envelope)
        if envelope is not message and getattr(message, "sent_time", False) is None:
            with contextlib.suppress(AttributeError):
                message.sent_time = envelope.sent_time  # as pip-services' queues set it

    @abstractmethod
    def _send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        """Send Sluice's envelope (``send`` has converted what the caller gave)."""

    def peek(self, correlation_id: str | None = None) -> MessageEnvelope | None:
        """The first message :meth:`peek_batch` would return, or None; nothing is acknowledged."""
        batch: list[MessageEnvelope] = self.peek_batch(correlation_id, 1)
        return batch[0] if batch else None

    def renew_lock(self, message: MessageEnvelope, lock_timeout: int) -> None:
        """Renew a message lock. A no-op on queues that do not lock (see ``can_renew_lock``)."""

    def listen(self, correlation_id: str | None, receiver: MessageReceiver) -> None:
        """Hand every incoming message to ``receiver`` until :meth:`end_listen` or :meth:`close`.

        The receiver is responsible for ``complete``/``abandon``; an exception it raises is logged
        and the message is abandoned so it is delivered again (where the queue can abandon).
        """
        self._check_open(correlation_id)
        self._listen_stop.clear()
        deliver = receiver.receive_message if hasattr(receiver, "receive_message") else receiver
        interval = int(self._config[LISTEN_INTERVAL_KEY.name])
        while not self._listen_stop.is_set() and self.is_open():
            message = self.receive(correlation_id, interval)
            if message is None:
                continue
            try:
                deliver(message, self)
            except Exception:
                log.exception("%s: receiver failed on message %s", self, message.message_id)
                if self.get_capabilities().can_abandon:
                    self.abandon(message)

    def end_listen(self, correlation_id: str | None) -> None:
        self._listen_stop.set()

    def _stop_listening(self) -> None:
        self._listen_stop.set()

    def _unsupported(self, operation: str) -> NotImplementedError:
        return NotImplementedError(
            f"{type(self).__name__} does not support {operation}; "
            f"check queue.get_capabilities() before calling it."
        )
