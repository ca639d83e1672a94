"""``sluice ingest URI --sink DIR``: plan one batch and ingest it with Spark, by hand."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import output
from .errors import CliError, is_debug
from .queues import QueueUri, parse, strict_config

if TYPE_CHECKING:
    from sluice.batch import BatchSpec
    from sluice.spark import IngestResult

__all__ = ["MQTT_PLAN_WAIT", "ingest"]

#: Seconds an MQTT plan waits for the session's queued messages to arrive.
MQTT_PLAN_WAIT = 2.0


class Format(StrEnum):
    json = "json"
    avro = "avro"
    protobuf = "protobuf"
    json_schema = "json_schema"
    string = "string"
    bytes = "bytes"
    sparkplug_b = "sparkplug_b"
    raw = "raw"  # deprecated: bytes


class KeyFormat(StrEnum):
    bytes = "bytes"
    string = "string"
    json = "json"
    avro = "avro"
    protobuf = "protobuf"
    json_schema = "json_schema"


class OnIncompatible(StrEnum):
    quarantine = "quarantine"
    fail = "fail"


class Mode(StrEnum):
    auto = "auto"
    driver = "driver"
    executors = "executors"


class WriteMode(StrEnum):
    append = "append"
    upsert = "upsert"


class OnTruncate(StrEnum):
    quarantine = "quarantine"
    apply = "apply"


def ingest(
    uri: Annotated[
        str,
        typer.Argument(
            help="Kafka URI with the group (kafka://HOST:PORT/TOPIC?group_id=G) or MQTT URI of "
            "a persistent session (mqtt://HOST:PORT/TOPIC?client_id=C&qos=1)",
            show_default=False,
        ),
    ],
    sink: Annotated[
        str,
        typer.Option(
            help="Directory of the Parquet dataset (the batch goes to <sink>/batch_id=<id>/), "
            "an Apache Iceberg table: iceberg://CATALOG/NAMESPACE.TABLE, or a Delta Lake "
            "table: delta://PATH.",
            show_default=False,
        ),
    ],
    schema: Annotated[
        str | None,
        typer.Option(
            help="Spark DDL schema of the JSON payload, e.g. 'device STRING, temperature DOUBLE'."
        ),
    ] = None,
    value_format: Annotated[
        Format,
        typer.Option(
            "--format",
            help="json (with --schema), avro, protobuf, json_schema (schemas from --registry or "
            "--value-schema), string, bytes, or sparkplug_b (MQTT, a row per metric).",
        ),
    ] = Format.json,
    key_format: Annotated[
        KeyFormat, typer.Option(help="How keys are read (bytes: kept as they are).")
    ] = KeyFormat.bytes,
    registry: Annotated[
        str | None,
        typer.Option(
            help="Schema Registry URL (payloads in the Confluent wire format); a URL with a "
            "password as env:VARIABLE or @file keeps it off the command line.",
        ),
    ] = None,
    value_schema: Annotated[
        str | None,
        typer.Option(
            help="Writer schema of unframed values: .avsc, .proto[#Message], .desc, JSON Schema."
        ),
    ] = None,
    key_schema: Annotated[
        str | None, typer.Option(help="Writer schema of the keys (json keys: Spark DDL).")
    ] = None,
    on_incompatible: Annotated[
        OnIncompatible,
        typer.Option(help="A record whose schema does not fit the table: quarantine it, or fail."),
    ] = OnIncompatible.quarantine,
    mode: Annotated[
        Mode, typer.Option(help="Read on the driver, on the executors, or choose by batch size.")
    ] = Mode.auto,
    max_messages: Annotated[
        int | None, typer.Option(min=1, help="Ingest at most this many messages.")
    ] = None,
    master: Annotated[
        str | None,
        typer.Option(
            help="Spark master (local[*], spark://H:7077, sc://H:15002 ...); "
            "default $SLUICE_SPARK_MASTER, else local[*]."
        ),
    ] = None,
    payload_column: Annotated[
        str | None,
        typer.Option(help="Keep the parsed payload as one struct column of this name."),
    ] = None,
    dead_letter: Annotated[
        bool, typer.Option(help="Also republish records that do not parse to <topic>.dlq.")
    ] = False,
    fail_on_broker_drops: Annotated[
        bool,
        typer.Option(
            help="MQTT: fail when the broker's count of dropped messages rose since the last "
            "ingest (mosquitto's max_queued_messages was reached)."
        ),
    ] = False,
    max_quarantined: Annotated[
        str,
        typer.Option(
            help="Fail the batch (nothing published or committed) when more than this goes to "
            "quarantine: a ratio (0.5, 50%), a count (100) or none."
        ),
    ] = "0.5",
    accept_data_loss: Annotated[
        bool,
        typer.Option(
            help="Skip messages the broker no longer has (retention, a recreated topic) and "
            "record the loss, instead of failing."
        ),
    ] = False,
    partition_by: Annotated[
        str | None,
        typer.Option(
            help="Partition the table: an Iceberg table's spec on creation, a Parquet "
            "dataset's hive-style directories, e.g. 'day(timestamp),bucket(16,device)' "
            "(identity, year, month, day, hour, bucket(N,col), truncate(W,col)). An existing "
            "table keeps its own spec."
        ),
    ] = None,
    write_mode: Annotated[
        WriteMode,
        typer.Option(
            help="append: every message a row. upsert: a change data capture topic (Debezium "
            "JSON) kept as a current-state Iceberg or Delta table, by key (docs/guides/cdc.md)."
        ),
    ] = WriteMode.append,
    key: Annotated[
        list[str] | None,
        typer.Option(
            help="With --write-mode upsert: a key column of the rows (repeat for several, or "
            "id,tenant); default: the message keys' fields."
        ),
    ] = None,
    on_truncate: Annotated[
        OnTruncate,
        typer.Option(
            help="With --write-mode upsert: what a truncate of the source table does. "
            "quarantine: set aside with its reason; apply: every row older than it is deleted "
            "(Debezium sends truncates when skipped.operations leaves out 't')."
        ),
    ] = OnTruncate.quarantine,
    keep_message: Annotated[
        str | None,
        typer.Option(
            help="Keep the message beside its fields (a bronze copy): all, none, or some of "
            "key,value,topic,headers,message_id. Default: the table's own choice (none for a "
            "new table); rows always have partition, offset and timestamp."
        ),
    ] = None,
    routes: Annotated[
        str | None,
        typer.Option(
            help="Send each message to a table of its own (JSON, or @FILE), e.g. "
            '\'{"by": "field:event_type", "template": "iceberg://lake/events.{event_type}"}\'; '
            "--sink then takes the messages no route takes (docs/how-to/routed-topics.md)."
        ),
    ] = None,
) -> None:
    """Ingest the messages waiting now: plan one batch, write it to Parquet, then commit."""
    target = parse(uri, command="ingest")
    _check_uri(target)
    _check_before_spark(schema, payload_column)
    parsed_routes = _routes(routes)
    limit = _limit(max_quarantined)
    keep = _keep(keep_message)
    spec = _plan(target, max_messages)
    if spec is None:
        output.out().print(f"Nothing to ingest: no messages waiting on '{target.topic}'.")
        return
    key_columns = [c.strip() for k in key for c in k.split(",") if c.strip()] if key else None
    # only now: nothing waiting creates nothing
    _check_sink(sink, partition_by, write_mode.value, key_columns, on_truncate.value, keep)
    from sluice.spark import ingest as run_ingest

    with _phases(spec) as (progress, say):
        say(f"starting Spark ({master or os.environ.get('SLUICE_SPARK_MASTER') or 'local[*]'})")
        spark = _spark(master, spec.message_count or None)
        result = run_ingest(
            spark,
            spec,
            sink,
            source=target.uri,
            schema=schema,
            payload_column=payload_column,
            value_format=value_format.value,
            key_format=key_format.value,
            value_schema=value_schema,
            key_schema=key_schema,
            schema_registry=registry_value(registry),
            on_incompatible=on_incompatible.value,
            mode=mode.value,
            dead_letter=dead_letter,
            fail_on_data_loss=not accept_data_loss,
            fail_on_broker_drops=fail_on_broker_drops,
            progress=progress,
            max_quarantined=limit,
            partition_by=partition_by,
            write_mode=write_mode.value,
            key_columns=key_columns,
            on_truncate=on_truncate.value,
            keep_message=keep,
            routes=parsed_routes,
        )
    if result.kind == "mqtt" and not (result.read or result.skipped):
        output.out().print(f"Nothing to ingest: the session's drain of '{spec.topic}' was empty.")
        return
    _show(result)


def _limit(text: str) -> float | int | None:
    from sluice.quarantine import parse_limit

    try:
        return parse_limit(text)
    except ValueError as exc:
        raise CliError(str(exc), usage=True) from None


@contextlib.contextmanager
def _phases(spec: BatchSpec) -> Iterator[tuple[Any, Any]]:
    """(the ingest's progress callback, a function that shows a line) for the block: a bar
    on a terminal, else one line per phase on stderr. Ctrl-C or SIGTERM in the block exits
    130 saying what the batch was left as."""
    from sluice.spark.progress import ProgressLog, sigterm_interrupts

    console = output.err()
    with output.progress() as bar:
        total = spec.message_count if spec.kind == "kafka" else None
        task = bar.add_task(f"planned batch {spec.batch_id}", total=total)

        def say(line: str) -> None:
            if console.is_terminal:
                bar.update(task, description=line)
            else:
                console.print(f"sluice: {line}", highlight=False, soft_wrap=True)

        log = ProgressLog(say, spec.batch_id, every=0.5 if console.is_terminal else 5.0)

        def progress(event: Any) -> None:
            log(event)
            if event.stage == "writing" and event.parts:
                bar.update(task, completed=event.done or 0, total=event.parts)
            else:
                bar.update(task, completed=event.read, total=event.total or total)

        try:
            with sigterm_interrupts():
                yield progress, say
        except KeyboardInterrupt:
            bar.stop()
            console.print(log.state(), highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None


@contextlib.contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``log`` while the block runs: a process started meanwhile
    (Spark's JVM) keeps writing there, this one writes to the terminal again afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "ab") as handle:
        os.dup2(handle.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def registry_value(text: str | None) -> str | None:
    """A --registry value: the URL itself, ``env:VARIABLE`` or ``@file``; its password is
    registered as a secret."""
    if text is None:
        return None
    from sluice.secrets import remember_text

    if text.startswith("env:"):
        name = text[4:]
        if name not in os.environ:
            raise CliError(f"--registry names the variable {name}, which is not set.", usage=True)
        text = os.environ[name]
    elif text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise CliError(f"--registry file {path} does not exist.", usage=True)
        text = path.read_text().strip()
    remember_text(text)
    return text


def _check_before_spark(schema: str | None, payload_column: str | None) -> None:
    """What the user typed, checked in seconds: Spark takes several to start."""
    if importlib.util.find_spec("pyspark") is None:
        raise CliError("'sluice ingest' needs PySpark: pip install 'sluice-core[spark]'.")
    from sluice.spark.classify import parse_schema

    parse_schema(schema, payload_column)


def _keep(text: str | None) -> bool | list[str] | None:
    """``--keep-message``, checked (a column that is not a message's is named)."""
    from sluice.spark.layout import keep_of_text, normalize

    keep = keep_of_text(text)
    normalize(keep, "--keep-message")
    return keep


def _routes(text: str | None) -> Any:
    """The routes of --routes, checked before anything is read."""
    if text is None:
        return None
    from sluice.queues.config import ConfigError
    from sluice.routes import Routes

    try:
        return Routes.parse(text)
    except ConfigError as exc:
        raise CliError(f"--routes: {exc}", usage=True) from None


def _check_sink(
    sink: str,
    partition_by: str | None = None,
    write_mode: str = "append",
    key_columns: list[str] | None = None,
    on_truncate: str = "quarantine",
    keep: bool | list[str] | None = None,
) -> None:
    from sluice.spark.layout import resolve
    from sluice.spark.sinks import open_sink
    from sluice.spark.sinks.upsert import upsert_sink

    opened = open_sink(sink, partition_by)
    if write_mode == "upsert":
        upsert_sink(opened, key_columns, on_truncate=on_truncate)  # type: ignore[arg-type]
    opened.check()
    if write_mode != "upsert":  # another choice than the table's, before Spark starts
        resolve(keep, opened.kept_columns(), f"The sink {opened.location}")


def _spark(master: str | None, batch_messages: int | None) -> Any:
    from sluice.spark import spark_session
    from sluice.spark.session import DEFAULT_MASTER, MASTER_ENV

    chosen = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    if chosen.startswith("local"):
        # A local Spark has no business on the network: keep its driver on loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if is_debug():
        spark = spark_session(chosen, batch_messages=batch_messages)
    else:  # Spark's start-up lines would bury the result: the JVM writes to a log file
        with _stderr_to(Path(tempfile.gettempdir()) / f"sluice-spark-{os.getpid()}.log"):
            spark = spark_session(chosen, batch_messages=batch_messages)
    if not is_debug() and hasattr(spark, "sparkContext") and not chosen.startswith("sc://"):
        spark.sparkContext.setLogLevel("ERROR")  # Spark's warnings would bury the result
    return spark


def _check_uri(target: QueueUri) -> None:
    if target.kind == "kafka" and not target.given("group_id"):
        raise CliError(
            "'sluice ingest' commits what it ingested for a consumer group: add "
            "?group_id=NAME to the URI.",
            usage=True,
        )


def _plan(target: QueueUri, max_messages: int | None) -> BatchSpec | None:
    """What waits now, as the sensors see it (:func:`sluice.sensing.plan_now`), before Spark
    starts: a Kafka topic that does not exist is an error, an MQTT session with nothing
    waiting is "Nothing to ingest" in seconds."""
    from sluice.queues.config import ConfigError
    from sluice.sensing import plan_now

    if target.kind == "mqtt" and not target.given("client_id"):
        raise CliError(
            "An MQTT batch is a persistent session: add client_id=NAME&qos=1 to the URI.",
            usage=True,
        )
    with strict_config():
        try:
            spec, _ = plan_now(target.kind, target.settings(), 1, max_messages, MQTT_PLAN_WAIT)
        except ConfigError as exc:
            raise CliError(str(exc), usage=True) from exc
    return spec


def _show(result: IngestResult) -> None:
    data = result.to_dict()
    ranges = ", ".join(f"p{r['partition']}: {r['start']}..{r['end']}" for r in data["ranges"])
    rows: list[tuple[str, Any]] = [
        ("batch id", data["batch_id"]),
        ("topic", data["topic"]),
        ("mode", data["mode"]),
        ("ranges", ranges or "-"),
        ("read", data["read"]),
        ("written", data["written"]),
        ("quarantined", data["quarantined"]),
        ("duplicates", data["duplicates"]),
        ("skipped", data["skipped"]),
        ("broker dropped", data["dropped"]),
        ("bytes", data["bytes"]),
        ("seconds", data["seconds"]),
        ("msg/s", round(result.messages_per_second)),
        *((f"changes {name}", n) for name, n in data["changes"].items()),
        *(
            (f"table {table}", f"{c['written']} written, {c['quarantined']} quarantined")
            for table, c in data["tables"].items()
        ),
        ("committed", "yes" if data["committed"] else "no"),
        ("output", data["output"]),
        ("quarantine", data["quarantine_output"]),
    ]
    output.table(f"Ingested batch {data['batch_id']}", ["", "value"], rows)
