"""``sluice dlq replay``: send dead letters back to the topic they came from.

Kafka dead letters (written by ``KafkaMessageQueue.move_to_dead_letter`` and by ingest) sit on
``<topic>.dlq`` with headers naming where they came from and why. Replaying publishes each one
to its original topic (or ``--to``) without those headers, then commits the replay group's
offset on the dead-letter topic: a replay interrupted half-way goes on where it stopped.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from . import output
from .errors import CliError
from .queues import QueueUri, opened, parse, read_kafka_ranges, strict_config

if TYPE_CHECKING:
    from sluice.kafka import KafkaMessageQueue
    from sluice.queues import MessageEnvelope, MessageQueue

__all__ = ["app", "dead_letter_header_names"]

ORIGINAL_TOPIC = "sluice.original_topic"
DEFAULT_GROUP = "sluice-dlq-replay"

app = typer.Typer(help="Dead-letter topics: replay their messages.", no_args_is_help=True)


@app.command()
def replay(
    uri: Annotated[
        str,
        typer.Argument(
            help="Kafka URI of the original topic (its dead letters are on <topic>.dlq): "
            "kafka://HOST:PORT/TOPIC[?group_id=G]",
            show_default=False,
        ),
    ],
    to: Annotated[
        str | None,
        typer.Option("--to", help="Publish to this topic instead of each message's original."),
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max", min=1, help="Replay at most this many.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the dead letters; replay and commit nothing.")
    ] = False,
) -> None:
    """Republish the dead letters of a Kafka topic to their original topic.

    The replay group (group_id in the URI, default 'sluice-dlq-replay') remembers how far
    it got: each message is committed right after it is republished.
    """
    target = parse(uri, kinds=("kafka",), command="dlq replay")
    reader = _reader(target)
    with opened(reader):
        from sluice.batch import plan_batch

        spec = plan_batch(reader, max_messages=max_messages)
        waiting = spec.message_count if spec else 0
        if waiting == 0:
            output.out().print(
                f"No dead letters to replay on '{reader.topic}' for group '{reader.group_id}'."
            )
            return
        if dry_run:
            assert spec is not None
            _list(reader, read_kafka_ranges(reader.config, reader.topic, list(spec.ranges)))
            return
        replayed = _replay(target, reader, waiting, to)
    output.table(
        f"Replayed {sum(replayed.values())} dead letter(s) from '{reader.topic}'",
        ["to topic", "messages"],
        sorted(replayed.items()),
    )


def _reader(target: QueueUri) -> KafkaMessageQueue:
    from sluice.kafka import KafkaMessageQueue

    probe = target.queue()
    assert isinstance(probe, KafkaMessageQueue)
    topic = probe.topic
    dead_letters = topic if topic.endswith(".dlq") else probe.dead_letter_topic
    reader = target.queue(
        {"group_id": DEFAULT_GROUP},
        topic=dead_letters,
        from_beginning=True,
        autocommit=False,
    )
    assert isinstance(reader, KafkaMessageQueue)
    return reader


def _list(reader: KafkaMessageQueue, messages: list[MessageEnvelope]) -> None:
    output.table(
        f"{len(messages)} dead letter(s) on '{reader.topic}' (dry run: nothing replayed)",
        ["partition", "offset", "from", "reason", "key", "value"],
        [
            (
                m.partition,
                m.offset,
                _origin(m),
                output.preview(m.header("sluice.reason"), 40),
                output.preview(m.key, 20),
                output.preview(m.message, 40),
            )
            for m in messages
        ],
    )


def _origin(message: MessageEnvelope) -> str:
    topic = message.header(ORIGINAL_TOPIC)
    if topic is None:
        return "-"
    partition = (message.header("sluice.original_partition") or b"?").decode()
    offset = (message.header("sluice.original_offset") or b"?").decode()
    return f"{topic.decode()}[{partition}]@{offset}"


def _replay(
    target: QueueUri, reader: KafkaMessageQueue, count: int, to: str | None
) -> Counter[str]:
    from sluice.queues import MessageEnvelope

    senders: dict[str, MessageQueue] = {}
    added = dead_letter_header_names()
    replayed: Counter[str] = Counter()
    wait_ms = 2 * int(reader.config["options.session_timeout"]) + 10_000
    try:
        with output.progress() as bar:
            task = bar.add_task(f"replaying {reader.topic}", total=count)
            for _ in range(count):
                letter = reader.receive(None, wait_ms)
                if letter is None:
                    raise CliError(
                        f"No dead letter arrived from '{reader.topic}' within "
                        f"{wait_ms / 1000:.0f} s; {sum(replayed.values())} were replayed. "
                        "Run the command again to go on."
                    )
                destination = to or _original_topic(letter)
                clean = MessageEnvelope(
                    letter.correlation_id,
                    letter.message_type,
                    letter.message,
                    key=letter.key,
                    headers=[h for h in letter.headers if h[0] not in added],
                )
                clean.message_id = letter.message_id
                _sender(target, destination, senders).send(None, clean)
                reader.complete(letter)  # committed only once it is back on its topic
                replayed[destination] += 1
                bar.update(task, advance=1)
    finally:
        for sender in senders.values():
            sender.close(None)
    return replayed


def dead_letter_header_names() -> frozenset[str]:
    """The headers a dead letter carries on top of the original message's."""
    from sluice.kafka.records import dead_letter_headers

    return frozenset(name for name, _ in dead_letter_headers("", None, None, None))


def _original_topic(letter: MessageEnvelope) -> str:
    topic = letter.header(ORIGINAL_TOPIC)
    if not topic:
        raise CliError(
            f"The dead letter at partition {letter.partition} offset {letter.offset} has no "
            f"'{ORIGINAL_TOPIC}' header, so its topic is unknown: pass --to TOPIC."
        )
    return topic.decode()


def _sender(target: QueueUri, topic: str, senders: dict[str, MessageQueue]) -> MessageQueue:
    if topic not in senders:
        queue = target.queue(topic=topic, from_beginning=True)
        with strict_config():
            queue.open(None)
        senders[topic] = queue
    return senders[topic]
