"""``sluice publish URI``: JSON lines from a file or stdin, or sample IoT readings, to a queue."""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import output
from .errors import CliError
from .queues import QueueUri, kafka_connection, opened, parse

if TYPE_CHECKING:
    from sluice.queues import MessageEnvelope

__all__ = ["iot_readings", "publish"]

KAFKA_CHUNK = 500
MQTT_CHUNK = 50


class Sample(StrEnum):
    iot = "iot"


@dataclass(frozen=True)
class Line:
    """One message to publish: its payload, and its key when --key-field names one."""

    payload: bytes
    key: bytes | None


def iot_readings(count: int, malformed: int = 0, seed: int | None = None) -> Iterator[str]:
    """``count`` sensor readings as JSON text ({device, temperature, humidity, ts}); ``malformed``
    of them, spread evenly, are not valid JSON (to try quarantines and dead letters)."""
    rng = random.Random(seed)
    bad = {int((i + 0.5) * count / malformed) for i in range(malformed)} if malformed else set()
    start = datetime(2024, 1, 1, tzinfo=UTC) if seed is not None else datetime.now(UTC)
    for index in range(count):
        device = f"sensor-{rng.randrange(1, 11):03d}"
        if index in bad:
            yield (
                f'{{"device": "{device}", "temperature": '
                if index % 2
                else f"{device} temperature=?? humidity=??"
            )
            continue
        yield json.dumps(
            {
                "device": device,
                "temperature": round(rng.gauss(21.0, 3.0), 2),
                "humidity": round(rng.uniform(30.0, 70.0), 1),
                "ts": (start + timedelta(milliseconds=index)).isoformat(),
            }
        )


def _key(document: Any, field: str | None, where: str) -> bytes | None:
    if field is None:
        return None
    if not isinstance(document, dict) or field not in document:
        raise CliError(
            f"{where} has no field '{field}' to use as the key (--key-field); add the field "
            "or publish without --key-field.",
            usage=True,
        )
    value = document[field]
    return (value if isinstance(value, str) else json.dumps(value)).encode()


def _parsed(text: str, key_field: str | None, where: str) -> Line:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CliError(
            f"{where} is not valid JSON ({exc}); fix or remove that line (each line must be "
            "one JSON document).",
            usage=True,
        ) from None
    return Line(text.encode(), _key(document, key_field, where))


def _json_lines(lines: Iterator[str], source: str, key_field: str | None) -> Iterator[Line]:
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if text:
            yield _parsed(text, key_field, f"Line {number} of {source}")


def _samples(count: int, malformed: int, seed: int | None, key_field: str | None) -> list[Line]:
    lines = []
    for text in iot_readings(count, malformed, seed):
        try:
            document = json.loads(text)
        except ValueError:
            lines.append(Line(text.encode(), None))  # malformed on purpose
            continue
        lines.append(Line(text.encode(), _key(document, key_field, "A sample reading")))
    return lines


def _input(
    file: Path | None,
    stdin: bool,
    sample: Sample | None,
    count: int,
    malformed: int,
    seed: int | None,
    key_field: str | None,
) -> tuple[Callable[[], Iterator[Line]], int]:
    """What to publish (re-iterable, already validated) and how many messages that is."""
    chosen = [
        name for name, on in (("--file", file), ("--stdin", stdin), ("--sample", sample)) if on
    ]
    if len(chosen) != 1:
        raise CliError(
            "Say what to publish with exactly one of --file F, --stdin or --sample iot"
            + (f" (got {' and '.join(chosen)})." if chosen else "."),
            usage=True,
        )
    if malformed and sample is None:
        raise CliError("--malformed goes with --sample iot.", usage=True)
    if malformed > count:
        raise CliError(f"--malformed {malformed} is more than --count {count}.", usage=True)
    if file is not None:
        path = file

        def from_file() -> Iterator[Line]:
            with path.open(encoding="utf-8", errors="replace") as handle:
                yield from _json_lines(handle, str(path), key_field)

        total = sum(1 for _ in from_file())  # validates every line before anything is sent
        return from_file, total
    if stdin:
        lines = list(_json_lines(iter(sys.stdin), "stdin", key_field))
        return lambda: iter(lines), len(lines)
    samples = _samples(count, malformed, seed, key_field)
    return lambda: iter(samples), len(samples)


def _envelope(line: Line) -> MessageEnvelope:
    from sluice.queues import MessageEnvelope

    return MessageEnvelope(None, None, line.payload, key=line.key)


def _chunks(lines: Iterator[Line], size: int) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


Send = Callable[[list["MessageEnvelope"]], None]


@contextmanager
def _sender(target: QueueUri) -> Iterator[tuple[Send, int]]:
    """A function that publishes a chunk of messages, and the chunk size that suits it."""
    reads_nothing = {"options.autosubscribe": False}
    if target.kind == "kafka":
        reads_nothing["from_beginning"] = True  # no look at where the topic ends on open
    queue = target.queue(reads_nothing)
    if target.kind == "kafka":
        from sluice.kafka import KafkaMessageQueue
        from sluice.kafka.records import to_record

        assert isinstance(queue, KafkaMessageQueue)
        partition = queue.config.get("options.write_partition")
        with kafka_connection(queue) as connection:

            def send_batch(envelopes: list[MessageEnvelope]) -> None:
                # One batch of records, then one wait for all the acks (queue.send waits
                # for each message: ten times slower).
                records = [to_record(e) for e in envelopes]
                connection.publish(queue.topic, records, {"partition": partition})

            yield send_batch, KAFKA_CHUNK
    else:
        with opened(queue):

            def send_each(envelopes: list[MessageEnvelope]) -> None:
                for envelope in envelopes:
                    queue.send(None, envelope)

            yield send_each, MQTT_CHUNK


def _send_all(
    target: QueueUri, lines: Iterator[Line], total: int, rate: float | None
) -> tuple[int, float]:
    """Publish every line at most ``rate`` per second; returns (sent, seconds spent sending)."""
    with _sender(target) as (send, size), output.progress() as bar:
        task = bar.add_task(f"publishing to {target.topic}", total=total)
        if rate:
            size = max(1, min(size, int(rate / 10)))
        sent, started = 0, time.perf_counter()
        for chunk in _chunks(lines, size):
            send([_envelope(line) for line in chunk])
            sent += len(chunk)
            bar.update(task, completed=sent)
            if rate:
                ahead = sent / rate - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        return sent, time.perf_counter() - started


def publish(
    uri: Annotated[
        str,
        typer.Argument(
            help="Queue URI: kafka://HOST:PORT/TOPIC or mqtt://HOST:PORT/TOPIC?qos=1",
            show_default=False,
        ),
    ],
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            exists=True,
            dir_okay=False,
            readable=True,
            help="Publish each line of this JSON-lines file.",
        ),
    ] = None,
    stdin: Annotated[bool, typer.Option("--stdin", help="Publish JSON lines from stdin.")] = False,
    sample: Annotated[
        Sample | None,
        typer.Option(help="Publish generated sample messages (iot: sensor readings)."),
    ] = None,
    count: Annotated[int, typer.Option(min=1, help="How many sample messages.")] = 100,
    malformed: Annotated[
        int, typer.Option(min=0, help="How many of the samples are not valid JSON.")
    ] = 0,
    seed: Annotated[int | None, typer.Option(help="Seed for reproducible samples.")] = None,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="At most this many messages per second.")
    ] = None,
    key_field: Annotated[
        str | None, typer.Option(help="Use this JSON field of each message as its key.")
    ] = None,
    allow_empty: Annotated[
        bool, typer.Option(help="Succeed when --file or --stdin holds no message.")
    ] = False,
    value_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="Write each JSON document as json (as is), avro, protobuf or json_schema (with "
            "--schema), string, or sparkplug_b.",
        ),
    ] = "json",
    schema: Annotated[
        str | None,
        typer.Option(
            help="Writer schema: .avsc, .proto[#Message] or a descriptor set, JSON Schema."
        ),
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            help="Schema Registry URL (or env:VARIABLE, @file): the schema is registered under "
            "<topic>-value and payloads are framed with its id."
        ),
    ] = None,
) -> None:
    """Publish JSON lines (a file, stdin) or sample IoT readings to a Kafka or MQTT topic."""
    target = parse(uri, command="publish")
    if target.kind == "mqtt" and ("+" in target.topic or "#" in target.topic):
        raise CliError(
            f"Cannot publish to '{target.topic}': + and # make it a topic filter. "
            "Name one concrete topic in the URI.",
            usage=True,
        )
    lines, total = _input(file, stdin, sample, count, malformed, seed, key_field)
    if total == 0 and not allow_empty:
        where = f"the file {file}" if file is not None else "standard input"
        raise CliError(
            f"Nothing to publish: {where} holds no JSON line. Pass --allow-empty if that is "
            "expected."
        )
    if value_format != "json" or schema is not None or registry is not None:
        lines = _encoded(lines, value_format, target.topic, schema, registry)
    sent, seconds = _send_all(target, lines(), total, rate) if total else (0, 0.0)
    speed = sent / seconds if seconds > 0 else 0.0
    # the malformed samples are among the sent ones: say so, or the count reads as all good
    bad = f" ({malformed:,} of them malformed on purpose)" if malformed and sent == total else ""
    output.out().print(
        f"Published {_messages(sent)}{bad} to {target.shown} in {seconds:.2f} s "
        f"({speed:,.0f} msg/s)."
    )


def _encoded(
    lines: Callable[[], Iterator[Line]],
    value_format: str,
    topic: str,
    schema: str | None,
    registry: str | None,
) -> Callable[[], Iterator[Line]]:
    """``lines`` with each JSON document written in ``value_format`` (:mod:`sluice.formats`);
    a line that is not JSON (a malformed sample) becomes a truncated payload of the format."""
    from sluice.formats.encode import Encoder
    from sluice.queues.config import ConfigError

    from .ingest import registry_value

    try:
        encoder = Encoder(value_format, topic, schema, registry_value(registry))
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc), usage=True) from None

    def encode(line: Line) -> Line:
        try:
            document = json.loads(line.payload)
        except ValueError:  # malformed on purpose: a frame cut short, for the quarantine
            return Line(line.payload[:3], line.key)
        try:
            return Line(encoder.encode(document), line.key)
        except ValueError as exc:
            raise CliError(f"Cannot write a message as {value_format}: {exc}") from None

    return lambda: (encode(line) for line in lines())


def _messages(count: int) -> str:
    return f"{count:,} message" + ("" if count == 1 else "s")
