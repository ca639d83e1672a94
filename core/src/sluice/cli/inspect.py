"""``sluice peek`` and ``sluice lag``: look at what waits on a topic, without consuming it."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import output
from .errors import CliError
from .queues import (
    QueueUri,
    kafka_connection,
    last_ranges,
    opened,
    parse,
    read_kafka_ranges,
    topic_offsets,
)

if TYPE_CHECKING:
    from sluice.queues import MessageEnvelope, MessageQueue

__all__ = ["lag", "peek"]

URI_HELP = (
    "Queue URI: kafka://HOST:PORT/TOPIC[?group_id=G] or mqtt://HOST:PORT/TOPIC?client_id=C&qos=1"
)


def peek(
    uri: Annotated[str, typer.Argument(help=URI_HELP, show_default=False)],
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="Messages to show.")] = 10,
    wait: Annotated[
        float, typer.Option(min=0.1, help="MQTT: seconds to wait for the session's messages.")
    ] = 3.0,
    value_format: Annotated[
        str,
        typer.Option("--format", help="Decode values: avro, protobuf, json_schema, sparkplug_b."),
    ] = "bytes",
    schema: Annotated[
        str | None, typer.Option(help="Writer schema of unframed values (with --format).")
    ] = None,
    registry: Annotated[
        str | None, typer.Option(help="Schema Registry URL (or env:VARIABLE, @file).")
    ] = None,
) -> None:
    """Show waiting messages without consuming them.

    Kafka: with group_id in the URI, the next messages that group would read; without, the
    last messages of the topic. Nothing is committed and no group is joined. MQTT: the
    messages waiting in a persistent session (client_id, qos=1), left unacknowledged (while
    peeking, the session's own consumer, if connected, is disconnected by the broker).
    """
    target = parse(uri, command="peek")
    global _DECODE
    _DECODE = _decoder(value_format, target.topic, schema, registry)
    if target.kind == "kafka":
        _peek_kafka(target, count)
    else:
        _peek_mqtt(target, count, wait)


_DECODE: Any = None


def _decoder(fmt: str, topic: str, schema: str | None, registry: str | None) -> Any:
    """What shows a value decoded (None: as it is)."""
    if fmt in ("bytes", "json", "string"):
        return None
    from sluice.formats.plan import plan_payload
    from sluice.formats.sparkplug import SparkplugDecoder
    from sluice.formats.wire import DecodeError
    from sluice.queues.config import ConfigError

    from .ingest import registry_value

    try:
        if fmt == "sparkplug_b":
            sparkplug = SparkplugDecoder()

            def show_sparkplug(value: Any, topic: str) -> Any:
                return sparkplug.decode(topic, value)

            return show_sparkplug
        plan = plan_payload(
            fmt, "value", topic, schema_source=schema, registry=registry_value(registry)
        )
    except (ConfigError, ValueError, ConnectionError) as exc:
        raise CliError(str(exc), usage=True) from None
    decoder = plan.decoder()

    def show(value: Any, topic: str) -> Any:
        try:
            return decoder.decode_one(value)
        except DecodeError as exc:
            return f"<not decoded: {exc}>"

    return show


def _shown(value: Any, topic: str | None) -> Any:
    if _DECODE is None or not isinstance(value, bytes):
        return value
    try:
        return str(_DECODE(value, topic or ""))
    except Exception as exc:  # a peek shows what it can
        return f"<not decoded: {exc}>"


def _peek_kafka(target: QueueUri, count: int) -> None:
    from sluice.batch import plan_batch
    from sluice.kafka import KafkaMessageQueue

    queue = target.queue({"from_beginning": True})
    assert isinstance(queue, KafkaMessageQueue)
    with kafka_connection(queue):  # fails clearly when the broker cannot be reached
        offsets = topic_offsets(queue.config, queue.topic)
    if not offsets:
        raise CliError(_no_topic(target))
    if target.given("group_id"):
        with opened(queue):
            spec = plan_batch(queue, max_messages=count)
        ranges = list(spec.ranges) if spec else []
        which, where = "Next", f"waiting for group '{queue.group_id}' on '{queue.topic}'"
    else:
        ranges = last_ranges(offsets, count)
        which, where = "Last", f"on '{queue.topic}'"
    messages = read_kafka_ranges(queue.config, queue.topic, ranges)
    if not messages:
        output.out().print(f"No messages {where}.")
        return
    output.table(
        f"{which} {len(messages)} message(s) {where}",
        ["partition", "offset", "key", "value"],
        [
            (
                m.partition,
                m.offset,
                output.preview(m.key, 16),
                output.preview(_shown(m.message, m.topic), 50 if _DECODE is None else 200),
            )
            for m in messages
        ],
    )


def _no_topic(target: QueueUri) -> str:
    return (
        f"Topic '{target.topic}' does not exist at {target.shown}; check its name "
        "(publishing to it creates it)."
    )


def _peek_mqtt(target: QueueUri, count: int, wait: float) -> None:
    if not target.given("client_id"):
        raise CliError(
            "Peeking at MQTT reads a persistent session: add client_id=NAME&qos=1 to the URI "
            "(the client id of the session whose messages you want to see).",
            usage=True,
        )
    queue = target.queue(autocommit=False)  # nothing is acknowledged, so nothing is consumed
    if not queue.get_capabilities().can_persist:
        raise CliError(
            "Peeking at MQTT needs QoS 1 on a persistent session: add qos=1 to the URI "
            "(and do not set clean_session).",
            usage=True,
        )
    with opened(queue):
        _wait_quiet(queue, count, wait)
        messages = queue.peek_batch(None, count)
    if not messages:
        output.out().print(f"No messages waiting in session '{target.config['client_id']}'.")
        return
    output.table(
        f"{len(messages)} message(s) waiting in session '{target.config['client_id']}' "
        f"(left unacknowledged; {_modes(messages, queue.config)})",
        ["topic", "message id", "key", "value", "read as"],
        [_mqtt_row(m) for m in messages],
    )


def _modes(messages: list[MessageEnvelope], config: dict[str, Any]) -> str:
    """How the messages were read: Sluice envelopes (unwrapped: their id, key and payload)
    or raw payloads (as published; an id of the receiver's own)."""
    if not config.get("options.serialize_envelope", True):
        return "serialize_envelope=false: every payload read raw"
    enveloped = sum(1 for m in messages if m.wire == "envelope")
    raw = len(messages) - enveloped
    parts = [f"{enveloped} Sluice envelope(s)" if enveloped else ""]
    parts.append(f"{raw} raw payload(s)" if raw else "")
    return ", ".join(p for p in parts if p)


def _mqtt_row(message: MessageEnvelope) -> tuple[str, str, str, str, str]:
    return (
        str(message.topic),
        output.preview(message.message_id, 12),
        output.preview(message.key, 16),
        output.preview(_shown(message.message, message.topic), 44),
        "raw payload" if message.wire == "raw" else "envelope",
    )


def _wait_quiet(queue: MessageQueue, count: int, timeout: float, quiet: float = 0.5) -> None:
    """Wait until ``count`` messages are buffered, none arrived for ``quiet`` s, or ``timeout``."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_seen = queue.read_message_count()
        if now_seen >= count:
            return
        if now_seen != seen:
            seen, since = now_seen, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)


def lag(
    uri: Annotated[
        str,
        typer.Argument(
            help="Kafka URI with the group: kafka://HOST:PORT/TOPIC?group_id=G", show_default=False
        ),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the measurement as JSON (layout: docs/guides/observability.md), with the "
            "age of the oldest waiting message.",
        ),
    ] = False,
    sink: Annotated[
        str | None,
        typer.Option(help="With --json: also the stream's last batch in this sink."),
    ] = None,
) -> None:
    """Per partition: the group's committed offset, the end offset, the lag and how long the
    oldest waiting message has waited, with the total."""
    target = parse(uri, kinds=("kafka",), command="lag")
    if not target.given("group_id"):
        raise CliError(
            "'sluice lag' measures a consumer group: add ?group_id=NAME to the URI.", usage=True
        )
    from sluice.errors import TopicNotFoundError
    from sluice.kafka import KafkaMessageQueue
    from sluice.metrics import measure

    queue = target.queue()
    assert isinstance(queue, KafkaMessageQueue)
    try:
        stream = measure("kafka", queue.config, sink=sink)
    except TopicNotFoundError:
        raise CliError(_no_topic(target)) from None
    if as_json:
        output.out().print(json.dumps(stream.to_dict(), indent=2))
        return
    rows = [
        (p.partition, p.committed, p.end, p.lag, _age(stream.measured_at, p.oldest_timestamp))
        for p in stream.partitions or ()
    ]
    output.table(
        f"Lag of group '{stream.group}' on '{stream.topic}': {stream.lag}",
        ["partition", "committed", "end", "lag", "oldest waiting"],
        rows,
    )
    if any(row[1] is None for row in rows):
        output.out().print(
            "'-': no committed offset yet; its lag counts from the beginning of the partition."
        )
    output.out().print(f"Total lag: {stream.lag}")


def _age(now: float, timestamp: float | None) -> str | None:
    """How long ago ``timestamp`` was, for a table cell (None: nothing waits)."""
    if timestamp is None:
        return None
    seconds = max(0.0, now - timestamp)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
