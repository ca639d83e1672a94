"""ingest(): one BatchSpec becomes rows of a sink, exactly once (docs/architecture.md).

The steps, and what a crash after each leaves (each step is a named failpoint, see
:mod:`.failpoints`):

1. what is left (:mod:`.remaining`): the spec's ranges, plus any gap since the group's
   committed offset, minus what the sink already holds; a batch already published is only
   finished (dead letters, commit);
2. read exactly those messages (:mod:`.reading`: on the driver in chunks to local files, or
   one Spark task per range);
3. sort them into good rows and quarantined ones and write both to staging (a crash here
   leaves only staging, which the rerun replaces);
4. publish: one atomic step makes the batch visible and recorded (:mod:`.sinks.parquet`);
5. send the quarantined records to the dead-letter topic, once (:mod:`.dead_letters`);
6. only then commit the Kafka offsets (as far as the sink holds without a gap), or
   acknowledge the MQTT messages (a redelivered message whose id the sink holds is
   acknowledged without being written again).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast, get_args

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..batch import BatchSpec, OffsetRange
from ..cdc import Decoders, OnTruncate
from ..errors import DataLossError
from ..formats import ValueFormat
from ..formats.plan import OnIncompatible
from ..formats.registry import RegistrySettings
from ..kafka.ranges import log_bounds
from ..quarantine import DEFAULT_MAX_QUARANTINED, check_limit, check_quarantine
from ..queues.config import ConfigError
from ..queues.envelope import MessageEnvelope
from ..queues.uri import queue_from_config, source_from
from ..routes import Routes
from . import layout
from .classify import Classification, Rules, parse_schema
from .connector import AUTO_SPARK_SOURCE_MESSAGES
from .failpoints import failpoint
from .formats import SPARKPLUG_STATE, Formats, format_task_errors, plan_formats
from .gateway import disable_nagle
from .jvm_writer import jvm_writable, write_outcomes_in_jvm
from .kafka_source import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_READER,
    SPARK_READER,
    Positions,
    ReaderKwargs,
    fingerprints_at,
    reader_kwargs,
    topic_id,
)
from .progress import job_progress
from .reconcile import reconcile_kafka, reconcile_mqtt
from .records import RAW_SCHEMA_DDL, largest_message_bytes
from .remaining import commit_targets, live_commits, remaining, truncated_below
from .result import IngestResult
from .session import SessionStarting, is_connect
from .sinks import BatchRecord, Sink, Staging, StreamKey, StreamState, open_sink
from .sinks.upsert import UpsertSink, upsert_sink
from .workers import (
    check_python_workers,
    lacking_named,
    python_workers_checked,
    python_workers_ran,
    python_workers_start,
)
from .writing import (
    BATCH_BYTES,
    DRIVER_WRITE_BYTES,
    UNKNOWN_FINGERPRINT,
    WriteCounts,
    lean_rows,
    write_outcomes,
)

__all__ = [
    "AUTO_EXECUTOR_MESSAGES",
    "AUTO_EXECUTOR_MESSAGES_COLD",
    "IngestEvent",
    "Mode",
    "ValueFormat",
    "WriteMode",
    "auto_mode",
    "ingest",
    "source_config",
]

log = logging.getLogger("sluice.spark")

Stage = Literal[
    "starting", "reading", "read", "writing", "publishing", "written", "committing", "committed"
]
Mode = Literal["auto", "driver", "executors"]
WriteMode = Literal["append", "upsert"]

#: ``mode="auto"`` reads on the executors from this many messages on, once the session has
#: ingested a batch or started its Python workers (:func:`auto_mode`). Warm, on a 2-core
#: machine against Apache Kafka (``bench/ingest.py``, confluent reader), driver mode was
#: ahead at 20,000 messages (1.31x) and 60,000 (1.10x), executor mode at 200,000 (1.63x).
AUTO_EXECUTOR_MESSAGES = 100_000
#: The same in a session's first ingest: its executor-mode tasks start the Python workers
#: and import the reader there, which a cold Airflow task at 200,000 messages paid with
#: 1.2 s more than driver mode (``bench/cold_task.py --sides sluice,driver``).
AUTO_EXECUTOR_MESSAGES_COLD = 1_000_000
_INGESTED = "_sluice_ingested"  # set on a session once it has ingested a Kafka batch
#: A chunk read on the driver is handed to Spark in one file per core, of at least this many
#: rows each.
MIN_ROWS_PER_TASK = 10_000
_SCHEMES = {"kafka": ("kafka", "kafka+ssl"), "mqtt": ("mqtt", "mqtts")}


class KafkaRead(NamedTuple):
    """The Kafka ranges a batch's rows hold, and the reader's arguments that read them."""

    kwargs: ReaderKwargs
    todo: Sequence[OffsetRange]


@dataclass(frozen=True)
class IngestEvent:
    """Progress of an ingest: ``stage`` and how many messages were read of ``total``; while
    ``writing``, ``done`` of the Spark job's ``parts`` tasks (one file each; None on Spark
    Connect). The phases and a log of them: :mod:`sluice.spark.progress`."""

    stage: Stage
    read: int
    total: int | None
    done: int | None = None
    parts: int | None = None
    batch_id: str | None = None


def ingest(
    spark: Any,
    spec: BatchSpec | Mapping[str, Any] | str | None,
    sink: str | os.PathLike[str],
    *,
    source: str | Mapping[str, Any],
    schema: Any = None,
    value_format: ValueFormat = "json",
    key_format: str = "bytes",
    value_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    key_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    schema_registry: RegistrySettings | str | Mapping[str, Any] | None = None,
    on_incompatible: OnIncompatible = "quarantine",
    mode: Mode = "auto",
    dead_letter: bool = False,
    chunk_size: int = 100_000,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_value_bytes: int = 1_000_000,
    payload_column: str | None = None,
    fail_on_data_loss: bool = True,
    fail_on_broker_drops: bool = False,
    progress: Callable[[IngestEvent], None] | None = None,
    max_quarantined: float | int | None = DEFAULT_MAX_QUARANTINED,
    partition_by: str | Sequence[str] | None = None,
    write_mode: WriteMode = "append",
    key_columns: Sequence[str] | None = None,
    on_truncate: OnTruncate = "quarantine",
    keep_message: layout.KeepMessage = None,
    routes: Routes | Mapping[str, Any] | str | None = None,
) -> IngestResult:
    """Read exactly the messages of ``spec``, write them to ``sink``, then commit or ack.

    ``spark`` is a SparkSession, or a :class:`~sluice.spark.session.SessionStarting`
    (:func:`~sluice.spark.session.start_session`): the batch is then planned and read on the
    driver while the JVM starts, and taken as a session's first batch. ``sink`` is a Parquet
    dataset directory or an Apache Iceberg table (``iceberg://CATALOG/NAMESPACE.TABLE``,
    :mod:`.sinks.iceberg`). ``source`` is a queue URI
    (``kafka://host:9092``, ``mqtt://host:1883?qos=1``) or a mapping of config keys naming the
    broker and credentials; the topic, group and session come from ``spec``. ``schema`` (Spark
    DDL or StructType) parses JSON values into columns; records that fail go to the batch's
    quarantine (``<sink>/batch_id=<id>/_quarantine``) with a reason, and with ``dead_letter``
    also to the source's dead-letter topic. ``mode`` says where Kafka messages are read: on the
    driver in chunks of at most ``chunk_size`` messages and about ``chunk_bytes`` bytes, or on
    the executors, one task per range of at most ``chunk_size`` messages (``auto``: executors
    from :data:`AUTO_EXECUTOR_MESSAGES` on, from :data:`AUTO_EXECUTOR_MESSAGES_COLD` in a
    session's first ingest; :func:`auto_mode`).
    ``value_format`` (and ``key_format``, default ``bytes``: keys kept as they are) says how
    payloads are read: ``json``, ``avro``, ``protobuf``, ``json_schema``, ``string``,
    ``bytes`` (``raw``, deprecated) or, for MQTT, ``sparkplug_b`` (one row per metric). The
    schema formats take the writer's schema from ``schema_registry`` (a URL, or a mapping with
    ``url``, ``username``, ``password``...; payloads in the Confluent wire format) or from
    ``value_schema``/``key_schema`` (a file or an inline schema; unframed payloads). Without
    ``schema`` the table's columns come from the writer's schemas (:mod:`sluice.formats.plan`);
    a record whose schema does not fit them is quarantined, or fails the batch with
    ``on_incompatible="fail"``. Records that do not decode are quarantined with the reason.
    Messages deleted by retention (before or while the batch is read) or a recreated topic fail
    the ingest with :class:`~sluice.errors.DataLossError` unless ``fail_on_data_loss`` is off,
    which records the loss instead. A second ingest of the same stream while one runs gets
    :class:`~sluice.spark.sinks.ConcurrentIngestError`. MQTT: a rise of the broker's count of
    dropped messages since the session's last ingest is reported (``dropped``, a warning),
    and fails the ingest with ``fail_on_broker_drops``. More quarantined than
    ``max_quarantined`` (a ratio of the messages read, or a count; default: more than half;
    None: no limit) fails the batch before it is published, with
    :class:`~sluice.errors.QuarantineLimitError` (:mod:`.guard`). The session's Python workers
    are checked once per session before anything is read (:mod:`.workers`). ``progress``
    gets every phase (:mod:`.progress`). ``partition_by`` partitions the table (an Iceberg
    table's spec on creation; a Parquet dataset's hive-style directories in each batch), e.g.
    ``"day(timestamp),bucket(16,device)"`` (:mod:`.partitioning`); the same as an Iceberg
    URI's ``?partition_by=``. An existing table's spec is used as it is: a different one is
    refused. ``write_mode="upsert"`` reads a change data capture topic (Debezium JSON
    envelopes) into a current-state table, an Iceberg or Delta one, keyed by ``key_columns``
    (default: the message keys' fields, fixed when the table is made): each batch's last
    change per key in the source's order is applied in the batch's one commit, deletes remove
    rows, and envelopes that cannot be applied (malformed, another key, a value of another
    type than its column's) are quarantined; a truncate (``on_truncate="apply"``) deletes
    every row older than it, else it is quarantined too (:mod:`sluice.cdc`,
    :mod:`.sinks.upsert`, docs/guides/cdc.md). A row holds the payload's fields and Kafka's
    coordinates (partition, offset, timestamp); ``keep_message`` keeps the message beside them
    for a bronze copy: ``True`` its key, value, topic, headers and message id, or a list of
    those columns (``["key", "headers"]``), ``False`` none. An existing table keeps the choice
    it was made with (left out: the table's own; a new table keeps none), and another one
    given is a :class:`ConfigError` (:mod:`.layout`). ``routes`` (a
    :class:`~sluice.routes.Routes`, its dict or JSON) sends each message to a table of its own,
    chosen by a payload field, the key, a header or the MQTT topic: one read of the batch, each
    table's slice published by its own sink, then the batch on ``sink`` (which takes the
    messages no route takes), then the commit (:mod:`.routed`, docs/how-to/routed-topics.md);
    every table keeps the same message columns. Returns counts and ranges, never payloads.
    """
    started = time.monotonic()
    if spec is None:
        raise ConfigError(
            "Nothing to ingest: the batch is None (plan_batch returns None when fewer than "
            "min_messages wait). Check `if spec is not None:` before calling ingest()."
        )
    spec = _as_spec(spec)
    _check_choice("mode", mode, Mode)
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be at least 1, not {chunk_size}")
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
    check_limit(max_quarantined)
    _check_choice("write_mode", write_mode, WriteMode)
    config = source_config(spec, source)
    sink_opened = open_sink(sink, partition_by)
    upsert = write_mode == "upsert"
    if upsert:
        _check_upsert(spec, schema, payload_column)
        decoders = envelope_decoders(
            spec.topic,
            value_format,
            key_format,
            value_schema=value_schema,
            key_schema=key_schema,
            schema_registry=schema_registry,
            on_incompatible=on_incompatible,
        )
        upsert_sink(sink_opened, key_columns, decoders, on_truncate)
        # the envelopes are staged as they came and read after staging
        value_format, key_format = "bytes", "bytes"
        value_schema = key_schema = schema_registry = None
        if keep_message is not None:
            raise ConfigError(
                "write_mode='upsert' keeps the changes' rows, not the messages: leave "
                "keep_message out."
            )
    elif key_columns is not None:
        raise ConfigError("key_columns is only for write_mode='upsert'; leave it out.")
    elif on_truncate != "quarantine":
        raise ConfigError("on_truncate is only for write_mode='upsert'; leave it out.")
    layout.normalize(keep_message)  # a wrong column fails before the sink is touched
    formats = plan_formats(
        spec,
        value_format=value_format,
        key_format=key_format,
        schema=parse_schema(schema, payload_column),
        value_schema=value_schema,
        key_schema=key_schema,
        schema_registry=schema_registry,
        on_incompatible=on_incompatible,
        max_value_bytes=max_value_bytes,
    )
    sink_opened.check()
    # upsert: the messages are staged whole, and read again as changes
    kept = layout.FULL if upsert else _kept_columns(sink_opened, keep_message)
    rules = Rules(
        parse_schema(formats.payload_schema, payload_column),
        formats.value_format,
        max_value_bytes,
        payload_column,
        formats.key_format,
        formats.key_type,
    )
    message = layout.message_columns(kept, spec.kind, parsed=bool(rules.payload_fields))
    job = _Job(
        session=spark,
        spec=spec,
        config=config,
        rules=dataclasses.replace(rules, message=message),
        formats=formats,
        sink=sink_opened,
        dead_letter=dead_letter,
        chunk_size=chunk_size,
        chunk_bytes=chunk_bytes,
        fail_on_data_loss=fail_on_data_loss,
        fail_on_broker_drops=fail_on_broker_drops,
        report=progress or (lambda event: None),
        max_quarantined=max_quarantined,
        upsert=upsert,
    )
    if routes is not None:
        from .routed import routed_job

        job = routed_job(job, routes, schema)
    _check_partition_columns(job)
    if not upsert and hasattr(job.sink, "keep_columns"):
        job.sink.keep_columns(kept)
    job.report(IngestEvent("starting", 0, None, batch_id=spec.batch_id))
    result = job.run_kafka(mode) if spec.kind == "kafka" else job.run_mqtt()
    result.seconds = time.monotonic() - started
    result.tables = dict(getattr(job.sink, "summary", {}))
    return result


def _kept_columns(sink: Sink, keep_message: layout.KeepMessage) -> tuple[str, ...]:
    """The message columns the rows keep: ``keep_message``, or the table's recorded choice
    (:func:`.layout.resolve`)."""
    recorded = getattr(sink, "kept_columns", lambda: None)()
    return layout.resolve(keep_message, recorded, f"The sink {sink.location}")


def _check_upsert(spec: BatchSpec, schema: Any, payload_column: str | None) -> None:
    """write_mode="upsert" reads Debezium envelopes from Kafka, and nothing else."""
    if spec.kind != "kafka":
        raise ConfigError(
            "write_mode='upsert' reads change data capture topics on Kafka (Debezium); an "
            "MQTT batch is appended: leave write_mode at 'append'."
        )
    if schema is not None or payload_column is not None:
        raise ConfigError(
            "write_mode='upsert' takes the table's columns from the envelopes' 'after' rows: "
            "leave schema and payload_column out."
        )


def auto_mode(messages: int, warm: bool) -> str:
    """Where ``mode="auto"`` reads a batch of ``messages``: "executors" from
    :data:`AUTO_EXECUTOR_MESSAGES` on in a ``warm`` session (one that has ingested, or
    started its Python workers), else from :data:`AUTO_EXECUTOR_MESSAGES_COLD`; else
    "driver"."""
    threshold = AUTO_EXECUTOR_MESSAGES if warm else AUTO_EXECUTOR_MESSAGES_COLD
    return "executors" if messages >= threshold else "driver"


def envelope_decoders(
    topic: str,
    value_format: str,
    key_format: str,
    *,
    value_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    key_schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    schema_registry: RegistrySettings | str | Mapping[str, Any] | None = None,
    on_incompatible: OnIncompatible = "quarantine",
) -> Decoders:
    """How write_mode="upsert" reads Debezium's envelopes and keys: JSON (value_format
    'json', keys as they are: Debezium's JsonConverter), or Avro (value_format and key_format
    'avro': its AvroConverter) from ``schema_registry`` or unframed with a schema file, as an
    append ingest reads Avro. A registry's later schema versions with new columns are read:
    the new columns join the table."""
    from ..formats import canonical_format
    from ..formats.plan import plan_payload

    value_format = canonical_format(value_format)
    key_format = canonical_format(key_format, "key_format")
    if value_format not in ("json", "avro") or key_format not in ("bytes", "avro"):
        raise ConfigError(
            f"write_mode='upsert' reads Debezium envelopes in JSON (value_format='json', the "
            f"default, keys as they are) or in Avro (value_format='avro', and key_format="
            f"'avro' for Avro keys, with schema_registry), not value_format={value_format!r} "
            f"and key_format={key_format!r}."
        )
    registry_unused = schema_registry is not None and "avro" not in (value_format, key_format)
    if value_format == "json" and (value_schema is not None or registry_unused):
        raise ConfigError(
            "write_mode='upsert' with JSON envelopes takes no value_schema, nor a "
            "schema_registry unless the keys are Avro: leave them out, or give "
            "value_format='avro'."
        )

    def decoder(fmt: str, side: str, source: Any) -> Callable[[bytes], Any] | None:
        if fmt != "avro":
            return None
        plan = plan_payload(
            fmt,
            side,
            topic,
            schema_source=source,
            registry=schema_registry if source is None else None,
            on_incompatible=on_incompatible,
        )
        plan.projected = True  # a later version's new column is the table's next column
        return plan.decoder().decode_one

    return Decoders(
        decoder(value_format, "value", value_schema),
        "Avro" if value_format == "avro" else "JSON",
        decoder(key_format, "key", key_schema),
        "Avro" if key_format == "avro" else "JSON",
    )


def _check_partition_columns(job: _Job) -> None:
    """A partition spec given names columns the batch's rows will have, before anything is
    read (the types are checked when the rows' schema is known, before they are written)."""
    requested = getattr(job.sink, "partitioning", None)
    if not requested:
        return
    columns = [*job.classification.good, "batch_id"]
    for term in requested.terms:
        if term.column in layout.KEEPABLE and term.column not in columns:
            raise ConfigError(
                f"partition_by {str(requested)!r}: the rows keep no {term.column!r} column "
                f"(for {term}): a table keeps the message's own columns only when asked. Give "
                f"keep_message=[{term.column!r}] (a new table only), or partition by another "
                f"of the rows' columns: {', '.join(columns)}."
            )
        if term.column not in columns:
            raise ConfigError(
                f"partition_by {str(requested)!r}: the rows have no column {term.column!r} "
                f"(for {term}). Their columns are: {', '.join(columns)}. Name one of them, "
                "e.g. day(timestamp) for the message's time, or give a schema with the field."
            )


def _check_choice(name: str, value: object, choices: object) -> None:
    """ConfigError unless ``value`` is one of the ``Literal`` type ``choices``."""
    allowed = get_args(choices)
    if value not in allowed:
        listed = ", ".join(repr(c) for c in allowed)
        raise ConfigError(f"{name} must be one of {listed}, not {value!r}")


def _as_spec(spec: BatchSpec | Mapping[str, Any] | str) -> BatchSpec:
    if isinstance(spec, BatchSpec):
        return spec
    if isinstance(spec, str):
        return BatchSpec.from_json(spec)
    return BatchSpec.from_dict(dict(spec))


def source_config(spec: BatchSpec, source: str | Mapping[str, Any]) -> dict[str, Any]:
    """The validated queue config of the batch's source, with the spec's topic and session."""
    scheme, config = source_from(source, spec.kind)
    if scheme not in _SCHEMES[spec.kind]:
        raise ConfigError(
            f"The batch is a {spec.kind} batch but the source is a {scheme}:// source; "
            f"give a {' or '.join(s + '://' for s in _SCHEMES[spec.kind])} source."
        )
    if spec.kind == "kafka":
        config.update(topic=spec.topic, group_id=spec.group_id)
    else:
        config = {"options.qos": 1, **config, "topic": spec.topic, "client_id": spec.client_id}
    values = queue_from_config(scheme, config).config
    if spec.kind == "mqtt" and int(values["options.qos"]) != 1:
        raise ConfigError(
            f"MQTT ingestion needs options.qos 1 (got {values['options.qos']}): only QoS 1 "
            "messages of a persistent session are redelivered after a crash."
        )
    return values


@dataclass
class _Job:
    session: Any  # a SparkSession, or a SessionStarting that gives one when Spark is needed
    spec: BatchSpec
    config: dict[str, Any]
    rules: Rules
    formats: Formats
    sink: Sink
    dead_letter: bool
    chunk_size: int
    chunk_bytes: int
    fail_on_data_loss: bool
    fail_on_broker_drops: bool
    report: Callable[[IngestEvent], None]
    targets: Any = None  # the WriteTargets of the last write
    max_quarantined: float | int | None = DEFAULT_MAX_QUARANTINED
    upsert: bool = False  # write_mode="upsert": the sink applies the batch as changes
    planned: Any = None  # Kafka: (Work, Positions) of the run under way (a routed run's)
    auto_source: bool = False  # mode "auto" chose Spark's Kafka source (_spark_source_reads)

    @property
    def spark(self) -> Any:
        if isinstance(self.session, SessionStarting):
            self.session = self.session.result()
        return self.session

    def _warm(self) -> bool:
        """Whether the session has ingested a batch or started its Python workers (one
        still starting has done neither)."""
        if isinstance(self.session, SessionStarting):
            return False
        return python_workers_checked(self.session) or getattr(self.session, _INGESTED, False)

    def _event(self, stage: Stage, read: int, total: int | None, **more: Any) -> None:
        self.report(IngestEvent(stage, read, total, batch_id=self.spec.batch_id, **more))

    def _guard(self, staging: Staging, read: int, quarantined: int) -> None:
        """Fail the batch, before it is published, when too much went to quarantine."""
        if self.max_quarantined is None or quarantined == 0:
            return
        reasons = self.sink.staged_quarantine_reasons(staging).values()
        check_quarantine(self.spec.batch_id, self.max_quarantined, read, quarantined, reasons)

    def _result(self, mode: str, batch_id: str) -> IngestResult:
        return IngestResult(
            batch_id=batch_id,
            kind=self.spec.kind,
            topic=self.spec.topic,
            sink=self.sink.location,
            mode=mode,
            ranges=list(self.spec.ranges),
            output=self.sink.output_location(batch_id),
            quarantine_output=self.sink.quarantine_location(batch_id),
        )

    def _dead_letter_topic(self) -> str | None:
        if not self.dead_letter:
            return None
        return str(self.config.get("options.dead_letter_topic") or f"{self.spec.topic}.dlq")

    @cached_property
    def classification(self) -> Classification:
        return Classification.for_session(self.spark, self.rules)

    def _write(
        self,
        raw: Any,
        staging: Staging,
        largest: int | None = None,
        aliases: Mapping[str, Any] | None = None,
        in_jvm: Sequence[int] = (),
        kafka: KafkaRead | None = None,
        probe_workers: bool = True,
        on_driver: bool = False,
    ) -> WriteCounts:
        """Decode (:mod:`.formats`) and sort ``raw`` into good and bad rows and add both to
        ``staging``, in one Spark job (:mod:`.writing`); ``largest``: the bytes of its largest
        message, if known; ``aliases``: the Sparkplug B alias book before the batch;
        ``in_jvm``: the Kafka partitions ``raw`` holds, to be written by Spark's own writer
        where nothing needs Python (:mod:`.jvm_writer`): then no Python worker starts;
        ``kafka``: the Kafka ranges ``raw`` holds and how they were read (good rows then
        reach Python's writer without the message columns the table does not keep:
        :func:`.writing.lean_rows`; the last messages' fingerprints that neither writer
        took are fetched from the broker). ``probe_workers``: False where the job's own tasks
        start by running Sluice in the Python workers (executor mode), which answers
        :func:`.workers.check_python_workers` without a job of its own. ``on_driver``: Python's
        writer runs on the driver (:func:`.writing.write_outcomes`), not in Spark's tasks."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        disable_nagle(self.spark)  # this thread's connection to the JVM too (:mod:`.gateway`)
        frame = self.classification.apply(self.formats.stage(raw, aliases))
        good, bad = [*self.classification.good], [*self.classification.bad]
        schema = to_arrow_schema(frame.schema, timezone="UTC")
        targets = self.sink.targets(
            staging,
            pa.schema([schema.field(c) for c in good]),
            pa.schema([schema.field(c) for c in bad]),
        )
        for name, value in targets.constants:
            frame = frame.withColumn(name, F.lit(value))
            good, bad = [*good, name], [*bad, name]
        self.targets = targets
        total = self.spec.message_count if self.spec.kind == "kafka" else None

        def writing(done: int | None, parts: int | None) -> None:
            self._event("writing", total or 0, total, done=done, parts=parts)

        if in_jvm and jvm_writable(self.formats.decodes, targets):
            with job_progress(self.spark, writing):
                counts = write_outcomes_in_jvm(frame, good, bad, targets, in_jvm)
        else:
            if probe_workers:
                check_python_workers(self.spark)
            if kafka is not None:
                frame = lean_rows(frame, good, bad, _last_offsets(kafka.todo))
            with format_task_errors(), job_progress(self.spark, writing):
                counts = write_outcomes(frame, good, bad, targets, largest, on_driver)
        return counts if kafka is None else self._with_fingerprints(counts, kafka.kwargs)

    def _with_fingerprints(self, counts: WriteCounts, kwargs: ReaderKwargs) -> WriteCounts:
        """``counts`` with the fingerprints of the last messages the writing tasks could not
        take (their rows came without the message: :func:`.writing.lean_rows`) fetched from
        the broker; a partition whose message is gone by now keeps none."""
        unknown = {
            p: w.last_offset
            for p, w in counts.partitions.items()
            if w.last_fingerprint == UNKNOWN_FINGERPRINT
        }
        if not unknown:
            return counts
        found = fingerprints_at(kwargs, self.spec.topic, unknown, self._stall_timeout_s())
        partitions = dict(counts.partitions)
        for p, fingerprint in found.items():
            partitions[p] = dataclasses.replace(partitions[p], last_fingerprint=fingerprint or "")
        return dataclasses.replace(counts, partitions=partitions)

    def _hand_over(self, batch: pa.RecordBatch, staging: Staging, number: int) -> list[Path]:
        """Local Parquet files of a batch read on the driver, one per core of at least
        :data:`MIN_ROWS_PER_TASK` rows: Spark's tasks read them themselves, instead of the
        batch travelling inside the tasks. One file when the format decodes in arrival order
        (Sparkplug B). Row groups of about :data:`.writing.BATCH_BYTES` at most: Spark's
        Parquet reader holds a whole row group in the JVM's heap, and a chunk of large
        messages in one row group (256 MiB of 5 MiB messages) ran a 1 GiB driver out of it."""
        pieces = batch.num_rows // MIN_ROWS_PER_TASK
        if self.formats.multi_row:
            pieces = 1
        elif pieces > 1:  # (only then is a session that is still starting waited for)
            pieces = min(_cores(self.spark), pieces)
        pieces = max(1, pieces)
        size = -(-batch.num_rows // pieces)
        group_rows = max(1, BATCH_BYTES // (largest_message_bytes(batch) + 1024))
        files = []
        for piece in range(pieces):
            raw_file = staging.scratch / f"part-{number:05d}-{piece:03d}.parquet"
            pq.write_table(
                pa.Table.from_batches([batch.slice(piece * size, size)]),
                raw_file,
                compression="none",
                row_group_size=group_rows,
            )
            files.append(raw_file)
        return files

    def _write_files(
        self,
        files: list[Path],
        staging: Staging,
        largest: int,
        aliases: Mapping[str, Any] | None = None,
        partitions: Sequence[int] = (),
        kafka: KafkaRead | None = None,
        read_bytes: int | None = None,
    ) -> WriteCounts:
        """Sort the raw rows of ``files`` into ``staging`` (one Spark job), then delete them;
        ``largest``: the bytes of their largest message. ``partitions``: the Kafka partitions
        they hold, written by Spark's own writer where it can (:meth:`_write`) in a session
        whose Python workers have not started and that has not ingested before: a small
        batch read on the driver then starts none, which cost a cold task about as much as
        its write. Once they run, Python's writer is the faster one (bench/ingest.py, driver
        mode: 14% at 200,000 messages; 0.47 s against 0.69 s at 20,000), so a session's
        second ingest starts them, unless they cannot start (no Python on the executors).
        Python's writer runs on the driver itself for a batch of at most
        :data:`.writing.DRIVER_WRITE_BYTES` (``read_bytes``: the batch's, if known), except in
        a Spark Connect session, whose client is not the driver."""
        raw = self.spark.read.schema(RAW_SCHEMA_DDL).parquet(*map(str, files))
        python = self._python_writes()
        on_driver = (
            python
            and read_bytes is not None
            and read_bytes <= DRIVER_WRITE_BYTES
            and not is_connect(self.spark)
        )
        counts = self._write(
            raw,
            staging,
            largest,
            aliases,
            in_jvm=() if python else partitions,
            kafka=kafka,
            on_driver=on_driver,
        )
        for raw_file in files:
            raw_file.unlink()
        return counts

    def _spark_source_reads(self, kwargs: ReaderKwargs) -> bool:
        """Whether ``mode="auto"`` reads this batch with Spark's own Kafka source: from
        :data:`AUTO_SPARK_SOURCE_MESSAGES` messages on, with ``options.reader`` left at
        ``auto``, a payload Spark decodes itself, a session whose class path has the source
        (one started with ``spark_session(kafka_source=True)``, as a Spark user's own Kafka
        job needs; not a Spark Connect session, whose server's class path cannot be asked),
        and connection settings the source takes (not a client certificate)."""
        from .jvm_reader import kafka_options, kafka_source_loads

        if kwargs.reader != "auto" or self.formats.decodes:
            return False
        if self.spec.message_count < AUTO_SPARK_SOURCE_MESSAGES:
            return False
        if not kafka_source_loads(self.spark):
            return False
        try:
            kafka_options(kwargs, self.spec.topic, [])
        except ConfigError:
            return False
        return True

    def _python_writes(self) -> bool:
        """Whether Python's writer writes a batch that Spark's own writer could write too
        (read on the driver, or by Spark's Kafka source): in a session whose Python workers
        run, or that has ingested before (a long-lived session: they are started now), unless
        they cannot start (no Python on the executors). A session's first ingest with no
        Python worker started (a cold task's) starts none: Spark's writer writes it."""
        return python_workers_checked(self.spark) or (
            getattr(self.spark, _INGESTED, False) and python_workers_start(self.spark)
        )

    # ---- Kafka ---------------------------------------------------------------------------

    def run_kafka(self, mode: Mode) -> IngestResult:
        spec = self.spec
        kwargs = reader_kwargs(self.config, accept_loss=not self.fail_on_data_loss)
        if kwargs.reader == SPARK_READER and self.formats.decodes:
            # Python workers run anyway, so the JVM-only read gains nothing; the Python
            # readers are the ones proven with these formats
            log.info(
                "options.reader 'spark': the %s payloads decode in Python, so the batch is "
                "read by options.reader %r instead",
                self.formats.value_format
                if self.formats.value
                else f"key {self.formats.key_format}",
                DEFAULT_READER,
            )
            kwargs = ReaderKwargs(kwargs, DEFAULT_READER, kwargs.accept_loss)
        chosen: str = mode
        if kwargs.reader == SPARK_READER:
            chosen = "spark"
        elif mode == "auto":
            chosen = auto_mode(spec.message_count, self._warm())
            if chosen == "executors" and self._spark_source_reads(kwargs):
                chosen, self.auto_source = "spark", True
        result = self._result(chosen, spec.batch_id)
        with self.sink.exclusive(StreamKey.of(spec)):
            done = self._run_kafka(kwargs, chosen, result)
        # (a driver-mode batch may start no Python worker: the session is warm all the same)
        setattr(self.spark, _INGESTED, True)
        return done

    def _run_kafka(self, kwargs: ReaderKwargs, mode: str, result: IngestResult) -> IngestResult:
        from .dead_letters import send_kafka_dead_letters
        from .kafka_source import commit_offsets, partition_positions

        spec, stream = self.spec, StreamKey.of(self.spec)
        group = str(spec.group_id)
        self.sink.recover()
        partitions = sorted({r.partition for r in spec.ranges})
        state = self.sink.state(stream)
        # The partitions the sink knows matter too: a recreated topic is recreated as a whole,
        # and a partition outside the batch (nothing waiting by the old committed offset) has
        # new messages from offset 0 all the same.
        known = sorted({*partitions, *state.fingerprints, *state.held.intervals})
        positions = partition_positions(kwargs, spec.topic, group, known)
        committed = live_commits(positions.committed, state)
        record = self.sink.find(spec.batch_id)
        if record is None and spec.batch_id in state.recent_batches:
            # published, but its snapshot is gone (expired): the state still says so
            record = BatchRecord(
                spec.batch_id, spec.to_dict(), dead_letter_topic=self._dead_letter_topic()
            )
        if record is not None:
            self._refuse_if_recreated_since(record, kwargs, state, partitions, positions)
        if record is None:
            recreated = self._recreated(kwargs, state, known, positions)
            work = remaining(
                spec,
                committed,
                positions.bounds,
                state,
                self.fail_on_data_loss,
                recreated,
                # nemesis seed 57: the new log of partition 3 had grown to the old committed
                # offset, so the plan left it out, and its offsets 0-9 were never read
                also=[p for p in recreated if p not in partitions and p in positions.bounds],
                topic_id=positions.topic_id,
            )
            result.skipped, result.gaps = work.skipped, work.gaps
            self.planned = (work, positions)
            failpoint("read.before")
            staging = self.sink.stage(spec.batch_id)
            try:
                counts = WriteCounts(0, 0, 0)
                if work.todo:
                    total = sum(r.count for r in work.todo)
                    read = {
                        "driver": self._read_on_driver,
                        "spark": self._read_with_spark,
                    }.get(mode, self._read_on_executors)
                    counts = read(kwargs, work.todo, staging, total)
                failpoint("stage.after_write")
                kept = [p for p in partitions if p not in work.reset_partitions]
                recreated = self._recreated(kwargs, state, kept)
                if recreated:
                    raise DataLossError(
                        f"Data loss: topic '{spec.topic}' was deleted and recreated while the "
                        f"batch was read ({', '.join(sorted(set(recreated.values())))}). "
                        "Nothing was written or committed; run the batch again."
                    )
                done = reconcile_kafka(
                    spec.batch_id,
                    spec.topic,
                    work.todo,
                    counts,
                    self.sink.staged_counts(staging),
                    lambda ps: {p: b[0] for p, b in log_bounds(kwargs, spec.topic, ps).items()},
                    self.fail_on_data_loss,
                )
                result.bytes = counts.value_bytes
                result.written, result.quarantined = done.written, done.quarantined
                result.read = result.written + result.quarantined
                if self.upsert:  # malformed envelopes join the quarantine
                    reduced = cast(UpsertSink, self.sink).reduce_staged(staging)
                    result.written -= len(reduced.malformed)
                    result.quarantined += len(reduced.malformed)
                    result.changes = {"changes": len(reduced.changes)}
                    result.changes["tombstones"] = reduced.tombstones
                result.lost = work.lost + done.lost
                self._guard(staging, result.read, result.quarantined)
                record = BatchRecord(
                    spec.batch_id,
                    spec.to_dict(),
                    ranges=done.ranges,
                    group_start=work.group_start,
                    lost=result.lost,
                    reset_partitions=work.reset_partitions,
                    reset_commits=work.reset_commits,
                    counts=_counts(result),
                    dead_letter_topic=self._dead_letter_topic(),
                    fingerprints=done.fingerprints,
                    topic_id=positions.topic_id,
                    planned_on=state.batches,
                )
                self._event("publishing", result.read + result.skipped, spec.message_count)
                self.sink.publish(staging, record)
                if self.upsert:
                    for name in ("upserted", "deleted", "stale"):
                        result.changes[name] = record.counts.get(name, 0)
            except BaseException:
                self.sink.discard(staging)
                raise
        else:
            result.skipped = spec.message_count
        self._event("written", result.read + result.skipped, spec.message_count)
        self._event("committing", result.read + result.skipped, spec.message_count)
        result.dead_lettered = send_kafka_dead_letters(self.config, kwargs, self.sink, record)
        state = self.sink.state(stream)
        committed = live_commits(positions.committed, state)
        reset = [p for p in record.reset_partitions if p in positions.bounds]
        targets = commit_targets(
            sorted({*partitions, *reset}), committed, state.held, record.reset_partitions
        )
        failpoint("commit.before")
        commit_offsets(kwargs, spec.topic, group, targets)
        failpoint("commit.after")
        result.committed, result.commits = True, targets
        self._event("committed", result.read + result.skipped, spec.message_count)
        return result

    def _refuse_if_recreated_since(
        self,
        record: BatchRecord,
        kwargs: ReaderKwargs,
        state: StreamState,
        partitions: list[int],
        positions: Positions,
    ) -> None:
        """A batch found in the sink is the one asked for only if its topic is still the one
        it was read from: the same ranges of a topic deleted and created again are other
        messages, which taking the batch as published would commit unread."""
        current = positions.topic_id
        if record.topic_id and current and record.topic_id != current:
            why = f"its topic id is {current}, the batch was read from {record.topic_id}"
        else:
            recreated = self._recreated(kwargs, state, partitions, positions)
            if not recreated:
                return
            why = sorted(set(recreated.values()))[0]
        raise DataLossError(
            f"Batch {record.batch_id} is in the sink, read from topic '{self.spec.topic}' "
            f"before it was deleted and created again ({why}). Its offsets now name other "
            "messages, so it is neither taken as published nor committed. Plan the batch again: "
            "where the broker has topic ids (Apache Kafka) a new plan names the new topic and "
            "is another batch; on a broker without them, ingest the new topic into a new sink "
            "or with a new consumer group."
        )

    def _recreated(
        self,
        kwargs: ReaderKwargs,
        state: StreamState,
        partitions: list[int],
        positions: Positions | None = None,
    ) -> dict[int, str]:
        """Partitions of the batch that belong to a topic recreated since the sink last wrote
        them, with the evidence: another topic id (KIP-516 brokers), or another message at
        the offset of the last one written (:mod:`.fingerprints`).

        Before the read (``positions`` given) only offsets still in the log are checked.
        After it (no ``positions``: the check is made again, for a topic recreated while the
        batch was read), an offset now past the log's end raises
        :class:`~sluice.errors.DataLossError` from the reader."""
        topic = self.spec.topic
        current = positions.topic_id if positions else None
        if positions is None and state.topic_id:
            current = topic_id(kwargs, topic)
        if state.topic_id and current and state.topic_id != current:
            why = f"its topic id is {current}, the sink's rows came from {state.topic_id}"
            return dict.fromkeys(partitions, why)
        check = {
            p: offset
            for p, (offset, _) in state.fingerprints.items()
            if p in partitions
            and (positions is None or positions.bounds.get(p, (0, 0))[0] <= offset)
            and (positions is None or offset < positions.bounds.get(p, (0, 0))[1])
        }
        if not check:
            return {}
        found = fingerprints_at(kwargs, topic, check, self._stall_timeout_s())
        recreated = {
            p: f"the message at offset {check[p]} is not the one the sink wrote there"
            for p, fingerprint in found.items()
            if fingerprint is not None and fingerprint != state.fingerprints[p][1]
        }
        if recreated and state.topic_id and current == state.topic_id:
            # the same topic with other messages: its log was truncated and written again
            (first, why), *_ = sorted(recreated.items())
            raise truncated_below(topic, first, state.topic_id, why)
        if recreated:
            # A topic is recreated as a whole: a partition of it that the sink never wrote
            # (so no fingerprint: say every message there went to retention) belongs to the
            # new topic too, and is read from its log start (nemesis seed 1105 lost offsets
            # 0-4 of such a partition, read from the old topic's committed offset)
            (first, why), *_ = sorted(recreated.items())
            for p in partitions:
                if p not in state.fingerprints and p not in recreated:
                    recreated[p] = f"partition {first} of the topic: {why}"
        return recreated

    def _stall_timeout_s(self) -> float:
        return float(self.config["options.request_timeout"]) / 1000

    def _read_on_driver(
        self, kwargs: ReaderKwargs, todo: list[OffsetRange], staging: Staging, total: int
    ) -> WriteCounts:
        """Read ``todo`` in chunks into local files, then sort them all in one Spark job: a
        job costs about 0.3 s whatever its size, more than reading overlapped with writing
        saves, and only one chunk is in memory at a time."""
        from .reading import chunks_on_driver

        self._event("reading", 0, total)
        chunks = chunks_on_driver(
            kwargs,
            self.spec.topic,
            todo,
            self.chunk_size,
            self._stall_timeout_s(),
            self.chunk_bytes,
        )
        files: list[Path] = []
        done = largest = read_bytes = 0
        for number, batch in enumerate(chunks):
            if number == 0:
                failpoint("read.after_first_chunk")
            largest = max(largest, largest_message_bytes(batch))
            read_bytes += batch.nbytes
            files += self._hand_over(batch, staging, number)
            done += batch.num_rows
            del batch  # not held while the next chunk is read: one chunk in memory at a time
            self.report(IngestEvent("reading", done, total))
        self._event("read", done, total)
        if not files:  # none when the ranges hold only offsets without a message
            return WriteCounts(0, 0, 0)
        return self._write_files(
            files,
            staging,
            largest,
            partitions=sorted({r.partition for r in todo}),
            kafka=KafkaRead(kwargs, todo),
            read_bytes=read_bytes,
        )

    def _read_on_executors(
        self, kwargs: ReaderKwargs, todo: list[OffsetRange], staging: Staging, total: int
    ) -> WriteCounts:
        from .reading import read_on_executors, task_errors

        topic, stall_s = self.spec.topic, self._stall_timeout_s()
        self._event("reading", 0, total)
        raw = read_on_executors(self.spark, kwargs, topic, todo, self.chunk_size, stall_s)
        failpoint("read.after_first_chunk")
        # No probe job first (0.5 s of a cold task): the reading tasks are the first to run
        # in the workers, before anything is read; only when a worker cannot import what they
        # need does the probe run, to name all that it lacks.
        with task_errors(), lacking_named(self.spark):
            counts = self._write(raw, staging, kafka=KafkaRead(kwargs, todo), probe_workers=False)
        python_workers_ran(self.spark)
        self.report(IngestEvent("reading", total, total))
        return counts

    def _read_with_spark(
        self, kwargs: ReaderKwargs, todo: list[OffsetRange], staging: Staging, total: int
    ) -> WriteCounts:
        """Read ``todo`` with Spark's Kafka source (:mod:`.jvm_reader`) in the job that
        writes them (Spark's own writer in a cold session, else Python's:
        :meth:`_python_writes`, the faster once its workers run); then check that no
        partition ended below its range meanwhile. A job that fails is checked too: a topic
        recreated under Spark's consumer can fail it (its pool once raised
        ``ConcurrentModificationException`` there), and the data loss is then the error to
        give."""
        from ..kafka.ranges import check_range_ends
        from .jvm_reader import read_with_spark
        from .reading import task_errors

        self._event("reading", 0, total)
        # A batch auto gave to the source is one executor mode would read in Python workers:
        # they write it, with no probe job first (0.5 s of a cold task); a worker that cannot
        # import what the writer needs fails it, naming all that it lacks, as executor mode.
        python = self.auto_source or self._python_writes()
        raw = read_with_spark(self.spark, kwargs, self.spec.topic, todo, python_writes=python)
        failpoint("read.after_first_chunk")
        try:
            with task_errors(), lacking_named(self.spark, probe=self.auto_source):
                counts = self._write(
                    raw,
                    staging,
                    in_jvm=() if python else sorted({r.partition for r in todo}),
                    kafka=KafkaRead(kwargs, todo),
                    probe_workers=not self.auto_source,
                )
        except Exception as failed:
            try:
                check_range_ends(kwargs, self.spec.topic, todo)
            except DataLossError as lost:
                raise lost from failed
            except Exception:
                log.debug("checking the range ends after a failed read failed too", exc_info=True)
            raise
        check_range_ends(kwargs, self.spec.topic, todo)
        if python:
            python_workers_ran(self.spark)
        self.report(IngestEvent("reading", total, total))
        return counts

    # ---- MQTT ----------------------------------------------------------------------------

    def run_mqtt(self) -> IngestResult:
        with self.sink.exclusive(StreamKey.of(self.spec)):
            return self._run_mqtt()

    def _run_mqtt(self) -> IngestResult:
        from .mqtt_source import drain, open_session, to_columns

        spec = self.spec
        self.sink.recover()
        state = self.sink.state(StreamKey.of(spec))
        observed, dropped = self._broker_drops(state.broker_dropped)
        failpoint("read.before")
        session = open_session(self.config)
        try:
            self.report(IngestEvent("reading", 0, spec.max_messages))
            messages = drain(session, spec.max_messages)
            failpoint("read.after_first_chunk")
            known = state.recent_ids
            # A batch already published (a rerun after a crash) only settles what it holds;
            # messages new to the sink stay unacknowledged, for the session's next batch.
            published = (
                self.sink.find(spec.batch_id) is not None or spec.batch_id in state.recent_batches
            )
            fresh: dict[str, MessageEnvelope] = {}
            left = []
            for message in messages:
                if str(message.message_id) in known:
                    continue
                if published:
                    left.append(message)
                else:
                    fresh.setdefault(str(message.message_id), message)
            ids = sorted(fresh)
            result = self._result("driver", spec.batch_id)
            result.dropped = dropped
            messages = [m for m in messages if m not in left]
            result.read, result.duplicates = len(messages), len(messages) - len(fresh)
            result.skipped = len(left)
            self.report(IngestEvent("read", result.read, spec.max_messages))
            reasons = {i: known.get(i) for i in map(str, (m.message_id for m in messages))}
            if fresh:
                batch = to_columns(list(fresh.values())).to_batch()
                result.bytes = _value_bytes(batch)
                staging = self.sink.stage(spec.batch_id)
                aliases, format_state = self._sparkplug_state(state, batch)
                try:
                    files = self._hand_over(batch, staging, 0)
                    counts = self._write_files(
                        files, staging, largest_message_bytes(batch), aliases
                    )
                    failpoint("stage.after_write")
                    staged_ids = None
                    if self.formats.multi_row:
                        from .formats import staged_message_ids

                        staged_ids = staged_message_ids(
                            [self.targets.data, self.targets.quarantine]
                        )
                    done = reconcile_mqtt(
                        spec.batch_id,
                        len(fresh),
                        counts,
                        self.sink.staged_counts(staging),
                        (set(ids), staged_ids) if staged_ids is not None else None,
                    )
                    result.written, result.quarantined = done.written, done.quarantined
                    self._guard(staging, len(fresh), result.quarantined)
                    quarantined = self.sink.staged_quarantine_reasons(staging)
                    record = BatchRecord(
                        spec.batch_id,
                        spec.to_dict(),
                        message_ids=ids,
                        quarantined_ids=quarantined,
                        counts=_counts(result, len(fresh) if self.formats.multi_row else None),
                        format_state=format_state,
                        dead_letter_topic=self._dead_letter_topic(),
                        broker_dropped=observed,
                        planned_on=state.batches,
                    )
                    self._event("publishing", result.read, spec.max_messages)
                    self.sink.publish(staging, record)
                except BaseException:
                    self.sink.discard(staging)
                    raise
                reasons.update({i: quarantined.get(i) for i in ids})
            else:  # nothing new: no batch directory was made
                result.output = result.quarantine_output = None
            self._event("written", result.read, spec.max_messages)
            self._event("committing", result.read, spec.max_messages)
            failpoint("commit.before")
            for number, message in enumerate(messages):
                reason = reasons.get(str(message.message_id))
                if reason is not None and self.dead_letter:
                    session.move_to_dead_letter(message, reason)
                    result.dead_lettered += 1
                    failpoint("dead_letters.after_send")
                else:
                    session.complete(message)
                if number == 0:
                    failpoint("commit.midway")
            failpoint("commit.after")
            result.committed = True
            self._event("committed", result.read, spec.max_messages)
            return result
        finally:
            session.close(None)

    def _sparkplug_state(
        self, state: StreamState, batch: pa.RecordBatch
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Sparkplug B: the stream's alias book before the batch (for the decoding task) and
        the format state after it (its births applied in order, for the batch record)."""
        if not self.formats.multi_row:
            return None, {}
        from ..formats.sparkplug import AliasBook, SparkplugDecoder
        from ..formats.wire import DecodeError

        before = dict(state.format_state.get(SPARKPLUG_STATE) or {})
        decoder = SparkplugDecoder(AliasBook.from_json(before))
        for topic, value in zip(
            batch.column("topic").to_pylist(), batch.column("value").to_pylist(), strict=True
        ):
            if value and "BIRTH/" in topic:
                try:
                    decoder.decode(topic, value)
                except DecodeError:
                    continue  # the task quarantines it
        return before, {SPARKPLUG_STATE: decoder.book.to_json()}

    def _broker_drops(self, baseline: int | None) -> tuple[int | None, int | None]:
        """(the broker's drop counter now, its rise since the session's last ingest); Nones
        when the broker publishes no counter. The counter covers every client of the broker
        and is as old as the broker's ``sys_interval``: a drop seen late is reported by the
        next ingest, never silently."""
        from ..mqtt.drops import read_dropped_count

        observed = read_dropped_count(self.config)
        if observed is None:
            return None, None
        since = baseline or 0
        dropped = observed - since if observed >= since else observed  # lower: a restart
        if dropped:
            when = (
                f"the last ingest of session '{self.spec.client_id}'"
                if baseline is not None
                else "it started"
            )
            message = (
                f"The MQTT broker dropped {dropped} message(s) (all clients together) since "
                f"{when}: a persistent session's queue was full. Raise max_queued_messages "
                "in mosquitto.conf (see docs/guides/mqtt.md)."
            )
            if self.fail_on_broker_drops:
                raise DataLossError(
                    f"{message} Nothing was read or acknowledged; ingest with "
                    "fail_on_broker_drops=False to go on."
                )
            log.warning("%s", message)
        return observed, dropped


def _last_offsets(todo: Sequence[OffsetRange]) -> dict[int, int]:
    """{partition: the last offset of its ranges in ``todo``}."""
    last: dict[int, int] = {}
    for r in todo:
        if r.count > 0:
            last[r.partition] = max(last.get(r.partition, -1), r.end - 1)
    return last


def _cores(spark: Any) -> int:
    """How many tasks the session runs at once (Spark Connect has no SparkContext to ask)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        return os.cpu_count() or 1


def _value_bytes(batch: pa.RecordBatch) -> int:
    return int(pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0)


def _counts(result: IngestResult, messages: int | None = None) -> dict[str, int]:
    """A batch record's counts; ``messages``: of a format with several rows per message
    (then ``written`` counts rows)."""
    counts = {
        "read": result.read,
        "written": result.written,
        "quarantined": result.quarantined,
        "duplicates": result.duplicates,
    }
    if messages is not None:
        counts["messages"] = messages
    return counts
