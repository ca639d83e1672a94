"""Reading exactly some offset ranges of a topic with confluent-kafka (librdkafka).

The same contract as :func:`sluice.kafka.ranges.read_range_records`, for ingests configured
with ``options.reader`` ``confluent`` (``pip install 'sluice-core[confluent]'``): every record
of the ranges and none beyond, no consumer group joined, nothing committed, the same stall
error. It takes the same kafka-python keyword arguments and translates them
(:func:`librdkafka_config`), so choosing the reader changes nothing else. librdkafka fetches
and parses on its own threads, and ``consume`` hands over thousands of messages per call.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..batch import OffsetRange
from ..queues.config import ConfigError
from ..secrets import install_log_filter, redact_text
from .config import Translation, translate_settings
from .ranges import LostRange, out_of_range, stalled_message

__all__ = ["CONSUME_BATCH", "librdkafka_config", "read_range_messages"]

#: Messages one ``consume`` call hands over at most.
CONSUME_BATCH = 10_000
#: Seconds one ``consume`` call waits (kafka-python's reader polls for as long).
CONSUME_TIMEOUT_S = 0.2
#: librdkafka wants a group id even from a consumer that only assigns; the reader never joins
#: this group nor commits for it.
READER_GROUP = "sluice-range-reader"
#: Errors librdkafka recovers from by itself (it reconnects); an outage that lasts is the stall
#: timeout's to report, as with kafka-python.
_TRANSIENT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})
#: Errors of the client as a whole (not of a partition) that retrying does not cure. Others
#: (say, the reader's unused group refused by an ACL) are logged and left to the stall timeout.
_CLIENT_FAILURES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)

#: librdkafka's own log lines come here (its ERROR lines too), through Sluice's secret filter.
_log = logging.getLogger(__name__)
install_log_filter(__name__)


def _renamed(name: str) -> Translation:
    return lambda value: (name, value)


#: kafka-python keyword argument -> (librdkafka property, value), or None: not needed here.
_TRANSLATIONS: dict[str, Translation] = {
    "bootstrap_servers": lambda servers: (
        "bootstrap.servers",
        servers if isinstance(servers, str) else ",".join(servers),
    ),
    "client_id": _renamed("client.id"),
    "security_protocol": lambda protocol: ("security.protocol", str(protocol).lower()),
    "sasl_mechanism": _renamed("sasl.mechanisms"),
    "sasl_plain_username": _renamed("sasl.username"),
    "sasl_plain_password": _renamed("sasl.password"),
    "ssl_cafile": _renamed("ssl.ca.location"),
    "ssl_certfile": _renamed("ssl.certificate.location"),
    "ssl_keyfile": _renamed("ssl.key.location"),
    "ssl_check_hostname": lambda check: (
        "ssl.endpoint.identification.algorithm",
        "https" if check else "none",
    ),
    "request_timeout_ms": _renamed("socket.timeout.ms"),
    "reconnect_backoff_max_ms": _renamed("reconnect.backoff.max.ms"),
    # librdkafka's smallest connection setup timeout is 1 s
    "bootstrap_timeout_ms": lambda ms: ("socket.connection.setup.timeout.ms", max(1000, ms)),
    "isolation_level": lambda level: ("isolation.level", str(level)),
    # the reader never resets a position (_FIXED); kafka-python's policy does not apply
    "auto_offset_reset": lambda _: None,
    "fetch_max_bytes": _renamed("fetch.max.bytes"),
    "fetch_min_bytes": _renamed("fetch.min.bytes"),
    "fetch_max_wait_ms": _renamed("fetch.wait.max.ms"),
    "max_partition_fetch_bytes": _renamed("max.partition.fetch.bytes"),
    "receive_buffer_bytes": _renamed("socket.receive.buffer.bytes"),
    # the reader never commits, and consumes CONSUME_BATCH messages per call
    "enable_auto_commit": lambda _: None,
    "max_poll_records": lambda _: None,
}

#: What the reader sets whatever the arguments say: assign only, never commit, never reset a
#: position that is out of range (``_AUTO_OFFSET_RESET`` comes back as an error instead).
_FIXED = {
    "group.id": READER_GROUP,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "error",
}


def librdkafka_config(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka configuration of the range reader for kafka-python keyword arguments
    (those of :func:`sluice.kafka.config.client_config` and the batch reader's). A key it cannot
    translate raises :class:`ConfigError` naming the key (never its value)."""
    return {**translate_settings(kwargs, _TRANSLATIONS, "confluent", "kafka-python"), **_FIXED}


def read_range_messages(
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    stall_timeout_s: float,
    lost: LostRange | None = None,
) -> Iterator[tuple[int, list[Message[Any, Any]]]]:
    """(partition, messages) as they are consumed: every message of ``ranges``, none beyond
    (as :func:`sluice.kafka.ranges.read_range_records`, taking the same arguments, with the
    same handling of a position that is out of range).

    A partition is done when the consumer's position reaches its range's end (transaction
    markers and compacted gaps have no message) or a message at or past the end arrives.
    Raises ``TimeoutError`` when nothing arrives for ``stall_timeout_s`` while a range is
    unfinished, and ``RuntimeError`` naming the partition when the broker reports an error.
    """
    ends = {r.partition: r.end for r in ranges if r.count > 0}
    if not ends:
        return
    positions = {r.partition: r.start for r in ranges if r.count > 0}
    errors: list[KafkaError] = []  # the client's own (a refused login, brokers down)
    consumer = _consumer(kwargs, errors.append)
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, start in positions.items()])
        last_progress = time.monotonic()
        while ends:
            wanted = min(CONSUME_BATCH, sum(end - positions[p] for p, end in ends.items()))
            messages = consumer.consume(num_messages=max(1, wanted), timeout=CONSUME_TIMEOUT_S)
            _raise_errors([e for e in errors if e.fatal() or e.code() in _CLIENT_FAILURES], topic)
            _log_errors(errors)
            errors.clear()
            progressed = False
            for partition in _out_of_range(messages):
                if partition in ends:
                    resume = out_of_range(
                        kwargs, topic, partition, positions[partition], ends[partition], lost
                    )
                    positions[partition] = resume
                    if resume < ends[partition]:  # a partition in error takes no seek
                        consumer.incremental_unassign([TopicPartition(topic, partition)])
                        consumer.incremental_assign([TopicPartition(topic, partition, resume)])
                    progressed = True
            for partition, run in _runs(messages, topic):
                end = ends.get(partition)
                if end is None:
                    continue  # a partition already done: fetched before it was paused
                progressed = True
                positions[partition] = max(positions[partition], _offset(run[-1]) + 1)
                if positions[partition] > end:
                    run = [m for m in run if _offset(m) < end]
                if run:
                    yield partition, run
            _finish(consumer, topic, ends, positions)
            if progressed:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                waiting = {p: (positions[p], end) for p, end in ends.items()}
                raise TimeoutError(stalled_message(topic, waiting, stall_timeout_s))
    finally:
        consumer.close()


def _consumer(kwargs: Mapping[str, Any], on_error: Callable[[KafkaError], None]) -> Consumer:
    config = {**librdkafka_config(kwargs), "logger": _log, "error_cb": on_error}
    try:
        return Consumer(config)
    except KafkaException as exc:
        raise ConfigError(
            "options.reader 'confluent': librdkafka refused the reader's configuration: "
            f"{redact_text(str(exc), kwargs)}"
        ) from None


def _out_of_range(messages: list[Message[Any, Any]]) -> list[int]:
    """Partitions whose position librdkafka found out of range (it does not reset it)."""
    return sorted(
        {
            partition
            for m in messages
            if (error := m.error()) is not None
            and error.code() == KafkaError._AUTO_OFFSET_RESET
            and (partition := m.partition()) is not None
        }
    )


def _runs(
    messages: list[Message[Any, Any]], topic: str
) -> Iterator[tuple[int, list[Message[Any, Any]]]]:
    """``messages`` as runs of one partition each, in the order consumed; an error that is not
    transient raises (a position out of range is :func:`_out_of_range`'s)."""
    failed = [
        m
        for m in messages
        if (error := m.error()) is not None and error.code() != KafkaError._AUTO_OFFSET_RESET
    ]
    for message in failed:
        error = message.error()
        if error is not None and error.code() not in _TRANSIENT:
            _raise_errors([error], topic, message.partition())
    if failed:
        _log_errors([m.error() for m in failed])
    messages = [m for m in messages if m.error() is None]
    for partition, run in itertools.groupby(messages, Message.partition):
        assert partition is not None  # a consumed message always has one
        yield partition, list(run)


def _raise_errors(errors: Sequence[KafkaError], topic: str, partition: int | None = None) -> None:
    """Raise the first of ``errors``, naming where it happened."""
    for error in errors:
        where = f"topic '{topic}'"
        if partition is not None and partition >= 0:
            where += f" partition {partition}"
        raise RuntimeError(
            f"Reading {where} failed: {error.str()} ({error.name()}). Nothing was committed."
        )


def _log_errors(errors: Sequence[KafkaError | None]) -> None:
    if errors:
        _log.warning("Kafka client errors (retrying): %s", ", ".join(map(str, errors)))


def _offset(message: Message[Any, Any]) -> int:
    offset = message.offset()
    assert offset is not None  # a consumed message always has one
    return offset


def _finish(
    consumer: Consumer, topic: str, ends: dict[int, int], positions: dict[int, int]
) -> None:
    """Drop from ``ends`` (and pause) every partition whose position reached its end; the
    consumer's position counts the offsets that have no message, too."""
    for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
        positions[tp.partition] = max(positions[tp.partition], tp.offset)
    done = [TopicPartition(topic, p) for p, end in ends.items() if positions[p] >= end]
    if done:
        consumer.pause(done)
        for tp in done:
            del ends[tp.partition]
