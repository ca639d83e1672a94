"""MemoryMessageQueue: an in-process queue with real locking semantics, for tests and demos.

It fixes the defects of pip-services3-messaging's ``MemoryMessageQueue`` (docs/architecture.md,
"Known defects"): an empty ``receive`` waits its full timeout instead of returning at once after
the first send, an idle ``listen`` blocks instead of spinning, the lock a ``receive`` takes
lasts ``options.lock_timeout`` (not the receive's wait, so ``receive(cid, 0)`` then ``abandon``
no longer drops the message), and bytes payloads work.

Queues configured with the same ``topic`` share their messages within the process, like
consumers of one broker topic: a message received but not completed returns to the topic
when its lock expires or its queue closes.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import threading
import time
from dataclasses import dataclass, field

from pip_services3_components.auth import CredentialParams
from pip_services3_components.connect import ConnectionParams

from .base import LISTEN_INTERVAL_KEY, MessageQueue
from .capabilities import MessagingCapabilities
from .config import ConfigKey
from .envelope import MessageEnvelope

__all__ = ["MemoryMessageQueue"]

DEAD_LETTER_SUFFIX = ".dlq"


@dataclass
class _Lock:
    message: MessageEnvelope
    expires: float
    owner: int


@dataclass
class _Topic:
    """The shared state of one in-process topic."""

    name: str | None
    cond: threading.Condition = field(default_factory=threading.Condition)
    ready: list[MessageEnvelope] = field(default_factory=list)  # sorted by offset
    locked: dict[int, _Lock] = field(default_factory=dict)
    offsets: itertools.count[int] = field(default_factory=itertools.count)


_topics: dict[str, _Topic] = {}
_topics_lock = threading.Lock()
_tokens = itertools.count(1)


def _shared_topic(name: str) -> _Topic:
    with _topics_lock:
        return _topics.setdefault(name, _Topic(name))


def _offset(message: MessageEnvelope) -> int:
    return message.offset if message.offset is not None else -1


class MemoryMessageQueue(MessageQueue):
    """A correct in-memory message queue (see the module docstring)."""

    CONFIG_KEYS = (
        ConfigKey(
            "topic",
            str,
            None,
            "In-process topic shared by every memory queue that names it; "
            "without it the queue is private.",
        ),
        ConfigKey(
            "options.lock_timeout",
            int,
            30000,
            "Milliseconds a received message stays locked before it returns to the queue.",
        ),
        ConfigKey(
            "options.dead_letter_topic",
            str,
            None,
            "Topic that move_to_dead_letter sends to (default: '<topic>.dlq').",
        ),
        LISTEN_INTERVAL_KEY,
    )

    def __init__(self, name: str | None = None) -> None:
        super().__init__(
            name,
            MessagingCapabilities.full(),
        )
        self._topic: _Topic = _Topic(None)
        self._dead_letters: _Topic = _Topic(None)

    # ---- lifecycle -----------------------------------------------------------------------

    def _open_with_params(
        self,
        correlation_id: str | None,
        connections: list[ConnectionParams],
        credential: CredentialParams | None,
    ) -> None:
        name = self._config["topic"]
        dead_letter = self._config["options.dead_letter_topic"] or (
            f"{name}{DEAD_LETTER_SUFFIX}" if name else None
        )
        self._topic = _shared_topic(name) if name else _Topic(None)
        self._dead_letters = _shared_topic(dead_letter) if dead_letter else _Topic(None)
        self._opened = True

    def close(self, correlation_id: str | None = None) -> None:
        """Close the queue; messages it received but did not complete return to the topic."""
        self._stop_listening()
        topic = self._topic
        with topic.cond:
            mine = [t for t, lock in topic.locked.items() if lock.owner == id(self)]
            for token in mine:
                self._requeue(topic, topic.locked.pop(token).message)
            self._opened = False
            topic.cond.notify_all()

    def clear(self, correlation_id: str | None = None) -> None:
        with self._topic.cond:
            self._topic.ready.clear()
            self._topic.locked.clear()

    # ---- sending and reading -------------------------------------------------------------

    def _send(self, correlation_id: str | None, message: MessageEnvelope) -> None:
        self._check_open(correlation_id)
        topic = self._topic
        with topic.cond:
            message.sent_time = datetime.datetime.now(datetime.UTC)
            message.topic = topic.name
            message.partition = 0
            message.offset = next(topic.offsets)
            message.timestamp = int(time.time() * 1000)
            topic.ready.append(message)
            topic.cond.notify_all()

    def read_message_count(self) -> int:
        with self._topic.cond:
            self._expire_locks()
            return len(self._topic.ready)

    def peek_batch(self, correlation_id: str | None, message_count: int) -> list[MessageEnvelope]:
        self._check_open(correlation_id)
        with self._topic.cond:
            self._expire_locks()
            return list(self._topic.ready[: max(0, message_count)])

    def receive(self, correlation_id: str | None, wait_timeout: int = 0) -> MessageEnvelope | None:
        self._check_open(correlation_id)
        topic = self._topic
        deadline = time.monotonic() + max(0, wait_timeout) / 1000
        with topic.cond:
            while True:
                self._expire_locks()
                if topic.ready:
                    message = topic.ready.pop(0)
                    token = next(_tokens)
                    expires = time.monotonic() + self._config["options.lock_timeout"] / 1000
                    topic.locked[token] = _Lock(message, expires, id(self))
                    message.set_reference(token)
                    return message
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._opened:
                    return None
                topic.cond.wait(min(remaining, self._next_expiry_in()))

    # ---- acknowledging -------------------------------------------------------------------

    def renew_lock(self, message: MessageEnvelope, lock_timeout: int) -> None:
        with self._topic.cond:
            lock = self._topic.locked.get(message.get_reference())
            if lock is not None:
                lock.expires = time.monotonic() + lock_timeout / 1000

    def complete(self, message: MessageEnvelope) -> None:
        with self._topic.cond:
            self._topic.locked.pop(message.get_reference(), None)
            message.set_reference(None)

    def abandon(self, message: MessageEnvelope) -> None:
        topic = self._topic
        with topic.cond:
            lock = topic.locked.pop(message.get_reference(), None)
            message.set_reference(None)
            if lock is not None:
                self._requeue(topic, lock.message)
                topic.cond.notify_all()

    def move_to_dead_letter(self, message: MessageEnvelope, reason: str | None = None) -> None:
        """Remove the message and put it on the dead-letter topic, with ``reason`` in a header."""
        with self._topic.cond:
            lock = self._topic.locked.pop(message.get_reference(), None)
            message.set_reference(None)
        if lock is None:
            return
        dead = self._dead_letters
        with dead.cond:
            copy = MessageEnvelope(
                message.correlation_id,
                message.message_type,
                message.message,
                key=message.key,
                headers=list(message.headers),
            )
            copy.message_id = message.message_id
            copy.headers += [
                ("sluice.original_topic", (message.topic or "").encode()),
                ("sluice.original_offset", str(_offset(message)).encode()),
                ("sluice.reason", (reason or "moved to dead letter").encode()),
            ]
            copy.topic, copy.partition, copy.offset = dead.name, 0, next(dead.offsets)
            dead.ready.append(copy)
            dead.cond.notify_all()

    # ---- internals (call with the topic's condition held) -------------------------------

    @staticmethod
    def _requeue(topic: _Topic, message: MessageEnvelope) -> None:
        bisect.insort(topic.ready, message, key=_offset)

    def _expire_locks(self) -> None:
        topic = self._topic
        now = time.monotonic()
        for token in [t for t, lock in topic.locked.items() if lock.expires <= now]:
            self._requeue(topic, topic.locked.pop(token).message)

    def _next_expiry_in(self) -> float:
        if not self._topic.locked:
            return 3600.0
        return max(
            0.001, min(lock.expires for lock in self._topic.locked.values()) - time.monotonic()
        )
