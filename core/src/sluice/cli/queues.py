"""Queues from the command line's URIs, with the checks and defaults a command-line tool wants.

Every failure here is a :class:`CliError` that says what to change in the URI. Config keys
given in the URI always win over the defaults a command passes.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from sluice.secrets import redact_text, redact_uri

from .errors import CliError

if TYPE_CHECKING:
    from sluice.batch import OffsetRange
    from sluice.kafka import KafkaConnection, KafkaMessageQueue
    from sluice.queues import MessageEnvelope, MessageQueue

__all__ = [
    "Kind",
    "QueueUri",
    "kafka_connection",
    "last_ranges",
    "opened",
    "parse",
    "read_kafka_ranges",
    "strict_config",
    "topic_offsets",
]

Kind = Literal["kafka", "mqtt"]

#: Defaults for every command: fail within seconds when a Kafka broker is not there (the
#: library's own default retries for minutes, right for a service, not for a command), but
#: give one that is there 5 s to answer, not the library's 1 s: a busy broker took longer
#: (noida-db spends about a second after an offset commit; a CI run's `sluice lag` right after
#: `sluice ingest` failed on it).
_KAFKA_DEFAULTS = {"options.max_retries": 1, "options.connect_timeout": 5000}


@dataclass(frozen=True)
class QueueUri:
    """A queue URI taken apart: its transport kind and the config keys it sets."""

    uri: str
    kind: Kind
    scheme: str
    config: dict[str, Any]

    @property
    def shown(self) -> str:
        """The URI without its password, for messages."""
        return redact_uri(self.uri)

    @property
    def topic(self) -> str:
        return str(self.config["topic"])

    def given(self, key: str) -> bool:
        """Whether the URI itself sets ``key``."""
        return key in self.config

    def settings(
        self, defaults: Mapping[str, Any] | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """The config keys of a command's queue: ``defaults`` < the URI's keys < ``overrides``."""
        kind_defaults = _KAFKA_DEFAULTS if self.kind == "kafka" else {}
        return {**kind_defaults, **(defaults or {}), **self.config, **overrides}

    def queue(self, defaults: Mapping[str, Any] | None = None, **overrides: Any) -> MessageQueue:
        """A configured, not yet opened queue with :meth:`settings`."""
        from sluice.queues import queue_from_config

        config = self.settings(defaults, **overrides)
        with strict_config():
            try:
                return queue_from_config(self.scheme, config)
            except ValueError as exc:  # ConfigError is one
                raise CliError(str(exc), usage=True) from exc


def parse(uri: str, *, kinds: tuple[Kind, ...] = ("kafka", "mqtt"), command: str = "") -> QueueUri:
    """Check ``uri`` and take it apart; a wrong URI is a usage error naming what to fix."""
    from sluice.queues import transports, uri_to_config

    scheme = urlsplit(uri).scheme.lower()
    known = transports()
    if not scheme or "://" not in uri:
        raise CliError(
            f"'{redact_uri(uri)}' is not a queue URI: write e.g. kafka://127.0.0.1:9092/TOPIC "
            "or mqtt://127.0.0.1:1883/TOPIC?qos=1.",
            usage=True,
        )
    transport = known.get(scheme)
    if transport is None:
        schemes = ", ".join(f"{s}://" for s in sorted(known) if s != "memory")
        raise CliError(
            f"Unknown URI scheme '{scheme}://' in '{redact_uri(uri)}': use one of {schemes}.",
            usage=True,
        )
    if scheme == "memory":
        raise CliError(
            "memory:// queues live inside one Python process, so a command cannot reach them: "
            "use a kafka:// or mqtt:// URI.",
            usage=True,
        )
    kind: Kind = "kafka" if transport.target.startswith("sluice.kafka") else "mqtt"
    what = f"'sluice {command}'" if command else "This command"
    if kind not in kinds:
        raise CliError(
            f"{what} works on {' and '.join(k + '://' for k in kinds)} URIs, not {scheme}://.",
            usage=True,
        )
    try:
        cls = transport.load()
    except ImportError as exc:
        raise CliError(str(exc)) from exc
    top_level = {k.name for k in cls.CONFIG_KEYS if not k.name.startswith("options.")}
    try:
        config = uri_to_config(uri, top_level)
    except ValueError as exc:
        raise CliError(redact_text(str(exc)), usage=True) from exc
    if not config.get("topic"):
        raise CliError(
            f"The URI '{redact_uri(uri)}' names no topic: put it in the path, "
            f"e.g. {scheme}://{urlsplit(uri).netloc.rpartition('@')[2] or 'host:port'}/TOPIC.",
            usage=True,
        )
    return QueueUri(uri, kind, scheme, config)


@contextmanager
def strict_config() -> Iterator[None]:
    """An unknown config key (often a typo in a URI) is an error here, not a warning."""
    from sluice.queues.config import UnknownConfigKeyWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownConfigKeyWarning)
        yield


def _address(config: Mapping[str, Any]) -> str:
    """Where a queue's config points, for a message (no password)."""
    uri = config.get("connection.uri")
    if uri:
        return redact_uri(str(uri))
    host, port = config.get("connection.host"), config.get("connection.port")
    return f"{host or 'localhost'}:{port}" if port else str(host or "the broker")


@contextmanager
def _connecting(config: Mapping[str, Any]) -> Iterator[None]:
    """A spinner naming the broker while a connection is made (on a terminal; in a log it
    prints nothing): a broker that does not answer takes ``options.connect_timeout`` to fail."""
    from . import output

    with output.err().status(f"Connecting to {_address(config)} ..."):
        yield


@contextmanager
def opened(queue: MessageQueue) -> Iterator[MessageQueue]:
    """``queue``, open for the block and closed after it."""
    with strict_config(), _connecting(queue.config):
        queue.open(None)
    try:
        yield queue
    finally:
        queue.close(None)


@contextmanager
def kafka_connection(queue: KafkaMessageQueue) -> Iterator[KafkaConnection]:
    """An open KafkaConnection with ``queue``'s settings (for offsets and publishing)."""
    from sluice.kafka import KafkaConnection

    connection = KafkaConnection()
    with strict_config(), _connecting(queue.config):
        connection.use_config(queue.config)
        connection.open(None)
    try:
        yield connection
    finally:
        connection.close(None)


def read_kafka_ranges(
    config: Mapping[str, Any], topic: str, ranges: list[OffsetRange], timeout: float = 30.0
) -> list[MessageEnvelope]:
    """The messages of ``ranges`` of ``topic``, read without a consumer group (nothing is
    committed, no group is joined), in partition and offset order."""
    from sluice.kafka.config import client_config
    from sluice.kafka.ranges import read_range_records
    from sluice.kafka.records import to_envelope

    found: list[MessageEnvelope] = []
    try:
        for _, records in read_range_records(client_config(dict(config)), topic, ranges, timeout):
            found += [to_envelope(record) for record in records]
    except TimeoutError as exc:
        raise CliError(str(exc)) from None
    return sorted(found, key=lambda m: (m.partition or 0, m.offset or 0))


def topic_offsets(config: Mapping[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """(beginning, end) offset of each partition of ``topic``; {} when it does not exist."""
    from kafka import TopicPartition

    from sluice.kafka.clients import new_consumer
    from sluice.kafka.config import client_config
    from sluice.kafka.offsets import ENDS_CONSUMER, topic_end_offsets

    consumer = new_consumer(
        **client_config(dict(config)), enable_auto_commit=False, **ENDS_CONSUMER
    )
    try:
        ends = topic_end_offsets(consumer, topic)
        tps = [TopicPartition(topic, p) for p in ends]
        beginnings = consumer.beginning_offsets(tps) if tps else {}
        return {tp.partition: (beginnings.get(tp, 0), ends[tp.partition]) for tp in tps}
    finally:
        consumer.close(autocommit=False)


def last_ranges(offsets: Mapping[int, tuple[int, int]], count: int) -> list[OffsetRange]:
    """Ranges holding the last ``count`` messages, shared evenly between partitions."""
    from sluice.batch import OffsetRange, limit_ranges

    full = [OffsetRange(p, b, e) for p, (b, e) in sorted(offsets.items()) if e > b]
    ends = {r.partition: r.end for r in full}
    return [
        OffsetRange(r.partition, ends[r.partition] - r.count, ends[r.partition])
        for r in limit_ranges(full, count)
    ]
