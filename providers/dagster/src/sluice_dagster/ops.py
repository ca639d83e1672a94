"""The ingest op: one BatchSpec from run config becomes rows of a Parquet dataset.

The op (and the asset of :mod:`sluice_dagster.assets`) runs :func:`sluice.spark.ingest`
with the queue resource's config as ``source``; ingest commits the Kafka offsets (or acks the
MQTT messages) only after the batch is written. The run's metadata holds counts, ranges,
the backlog left behind and the duration, never payloads or secrets.
"""

from typing import Any, Literal

from dagster import (
    AssetExecutionContext,
    Config,
    MetadataValue,
    OpDefinition,
    OpExecutionContext,
    Out,
    Output,
    op,
)
from pydantic import Field

from sluice.batch import BatchSpec
from sluice.cdc import OnTruncate
from sluice.formats import KeyFormat, ValueFormat
from sluice.quarantine import DEFAULT_MAX_QUARANTINED, check_limit, parse_limit
from sluice.sensing import extend_to_latest
from sluice.spark import IngestResult, ingest
from sluice.spark.ingest import Mode, WriteMode
from sluice.spark.progress import ProgressLog

from .fields import StrictFields
from .resources import UNREACHABLE, QueueResource, SparkResource

__all__ = [
    "INGEST_TAG",
    "IngestConfig",
    "IngestSettings",
    "ingest_run_config",
    "make_ingest_op",
    "run_ingest",
    "spec_config",
]

#: Op tag naming the queue resource an ingest op reads; the queue sensor finds the op by it.
INGEST_TAG = "sluice/ingest"


class IngestConfig(StrictFields, Config):
    """Run config of an ingest op or asset. The queue sensor fills ``spec``; the other
    fields override what the job or asset was defined with."""

    spec: dict[str, Any] = Field(
        description="The batch to ingest: BatchSpec.to_dict() (the queue sensor puts it here)."
    )
    sink: str | None = Field(
        default=None,
        description="Parquet dataset directory, iceberg://CATALOG/NAMESPACE.TABLE or delta://PATH.",
    )
    schema_ddl: str | None = Field(
        default=None, description="Spark DDL of the JSON payload, e.g. 'id INT, name STRING'."
    )
    value_format: str | None = Field(
        default=None,
        description="'json', 'avro', 'protobuf', 'json_schema', 'string', 'bytes' ('raw', "
        "deprecated) or 'sparkplug_b'.",
    )
    mode: str | None = Field(
        default=None, description="Where Kafka messages are read: 'auto', 'driver', 'executors'."
    )
    max_quarantined: str | None = Field(
        default=None,
        description="Fail the batch when more than this goes to quarantine: a ratio ('0.5', "
        "'50%'), a count ('100') or 'none'. Default: the job's or asset's setting.",
    )
    partition_by: str | None = Field(
        default=None,
        description="Partition spec of the table, e.g. 'day(timestamp),bucket(16,device)'. "
        "Default: the job's or asset's setting.",
    )


class IngestSettings(StrictFields, Config):
    """What an ingest job, asset or op is defined with: the resources to use and the defaults
    a run's :class:`IngestConfig` may override. The one settings class of
    :func:`~sluice_dagster.jobs.make_ingest_job`, :func:`~sluice_dagster.assets.make_ingest_asset`
    and :func:`make_ingest_op`; build it with :meth:`of`."""

    resource_key: str = Field(description="Key of the queue resource the batch is read from.")
    sink: str = Field(
        description="Parquet dataset directory, iceberg://CATALOG/NAMESPACE.TABLE or delta://PATH."
    )
    schema_ddl: str | None = Field(
        default=None,
        description="Spark DDL of the JSON payload, e.g. 'id INT, name STRING' (the factories "
        "take it as schema=...). None: the payload is kept as a string.",
    )
    value_format: ValueFormat = Field(
        default="json",
        description="How values are read: 'json', 'avro', 'protobuf', 'json_schema', 'string', "
        "'bytes' ('raw', deprecated) or 'sparkplug_b' (MQTT, a row per metric).",
    )
    key_format: KeyFormat = Field(
        default="bytes", description="How keys are read ('bytes': as is)."
    )
    value_schema: str | None = Field(
        default=None,
        description="Writer schema of unframed values: a file (.avsc, .proto[#Message], a "
        "descriptor set, a JSON Schema) or inline JSON.",
    )
    key_schema: str | None = Field(default=None, description="Writer schema of unframed keys.")
    schema_registry_key: str | None = Field(
        default=None,
        description="Key of a SchemaRegistryResource: payloads in the Confluent wire format.",
    )
    on_incompatible: str = Field(
        default="quarantine",
        description="A record whose schema does not fit the table: 'quarantine' or 'fail'.",
    )
    mode: Mode = Field(
        default="auto", description="Where Kafka messages are read: 'auto', 'driver', 'executors'."
    )
    spark_resource_key: str = Field(
        default="spark",
        description="Key of the resource whose spark_session the ingest runs on (SparkResource, "
        "or dagster-pyspark's PySparkResource).",
    )
    dead_letter: bool = Field(
        default=False, description="Send quarantined messages to the dead-letter topic."
    )
    fail_on_data_loss: bool = Field(
        default=True,
        description="Fail when messages of the batch are gone from the broker; False: record "
        "the loss and go on.",
    )
    fail_on_broker_drops: bool = Field(
        default=False, description="MQTT: fail when the broker's dropped-message count rose."
    )
    payload_column: str | None = Field(
        default=None, description="Keep the parsed payload as one struct column of this name."
    )
    max_quarantined: float | int | None = Field(
        default=DEFAULT_MAX_QUARANTINED,
        description="Fail the batch, before anything is published or committed, when more of "
        "it goes to quarantine: a ratio of the messages read (0.5: more than half), a count "
        "(an int), or None for no limit.",
    )
    partition_by: str | None = Field(
        default=None,
        description="Partition the table: an Iceberg table's spec on creation, a Parquet "
        "dataset's hive-style directories in each batch; e.g. 'day(timestamp),bucket(16,device)' "
        "(identity, year, month, day, hour, bucket(N,col), truncate(W,col)). An existing table "
        "keeps its spec; another one fails the run before anything is read.",
    )
    write_mode: WriteMode = Field(
        default="append",
        description="'append' (every message a row) or 'upsert': a change data capture topic "
        "(Debezium JSON) kept as a current-state Iceberg or Delta table (docs/guides/cdc.md).",
    )
    key_columns: list[str] | None = Field(
        default=None,
        description="With write_mode 'upsert': the rows' key columns (default: the message "
        "keys' fields).",
    )
    on_truncate: OnTruncate = Field(
        default="quarantine",
        description="With write_mode 'upsert': what a truncate of the source table does: "
        "'quarantine' (set aside with its reason) or 'apply' (every row older than it is "
        "deleted).",
    )
    keep_message: bool | list[str] | None = Field(
        default=None,
        description="Keep the message beside its fields, a bronze copy: true (its key, value, "
        "topic, headers and message id), a list of those columns, or false. None: the table's "
        "own choice, none for a new table. Rows always have partition, offset and timestamp; "
        "another choice than an existing table's fails the run.",
    )
    up_to: Literal["planned", "latest"] = Field(
        default="planned",
        description="'planned': a Kafka batch is read as the sensor planned it; 'latest': the "
        "run also takes what arrived on the topic since (a new batch_id), as Spark's "
        "availableNow takes what is there when a query starts.",
    )
    max_messages: int | None = Field(
        default=None,
        ge=1,
        description="With up_to 'latest': the most messages a batch grows to (never fewer "
        "than planned). None: all that wait.",
    )

    routes: dict[str, Any] | None = Field(
        default=None,
        description="A routed ingest: each message to a table of its own (sluice.routes; the "
        "factory make_routed_assets sets it). The sink takes the messages no route takes.",
    )

    def resource_keys(self) -> set[str]:
        """The resources an ingest with these settings needs."""
        keys = {self.resource_key, self.spark_resource_key}
        return keys | ({self.schema_registry_key} if self.schema_registry_key else set())

    @classmethod
    def of(cls, resource_key: str, sink: str, **settings: Any) -> "IngestSettings":
        """The settings a factory was given; ``schema`` is accepted for ``schema_ddl``."""
        if "schema" in settings:
            settings["schema_ddl"] = settings.pop("schema")
        return cls(resource_key=resource_key, sink=sink, **settings)


def spec_config(spec: BatchSpec) -> dict[str, Any]:
    """``spec`` as the ``spec`` field of :class:`IngestConfig` (Dagster config has no nulls)."""
    return {k: v for k, v in spec.to_dict().items() if v is not None}


def ingest_run_config(spec: BatchSpec, op_name: str) -> dict[str, Any]:
    """The run config that has the ingest op (or asset) ``op_name`` ingest ``spec``."""
    return {"ops": {op_name: {"config": {"spec": spec_config(spec)}}}}


def run_ingest(
    context: OpExecutionContext | AssetExecutionContext,
    config: IngestConfig,
    settings: IngestSettings,
) -> tuple[IngestResult, dict[str, Any]]:
    """Ingest the batch of ``config`` and return the result and its metadata."""
    resource = getattr(context.resources, settings.resource_key)
    if not isinstance(resource, QueueResource):
        raise TypeError(
            f"Resource '{settings.resource_key}' is a {type(resource).__name__}, not a Sluice "
            "queue resource (KafkaQueueResource or MqttQueueResource)."
        )
    spec = BatchSpec.from_dict(config.spec)
    if spec.kind != resource.KIND:
        raise ValueError(
            f"The batch {spec.batch_id} is a {spec.kind} batch but resource "
            f"'{settings.resource_key}' is a {resource.KIND} queue."
        )
    limit = (
        parse_limit(config.max_quarantined)
        if config.max_quarantined is not None
        else settings.max_quarantined
    )
    check_limit(limit)
    value_format = config.value_format or settings.value_format
    mode = config.mode or settings.mode
    spark_resource = getattr(context.resources, settings.spark_resource_key)
    if isinstance(spark_resource, SparkResource):
        spark = spark_resource.session_for(spec.message_count or None)
    else:  # dagster-pyspark's PySparkResource, or anything with a spark_session
        spark = spark_resource.spark_session
    registry = None
    if settings.schema_registry_key is not None:
        registry = getattr(context.resources, settings.schema_registry_key).settings()
    context.log.info(
        f"Ingesting batch {spec.batch_id}: {spec.kind} topic {spec.topic}, "
        f"{_describe(spec)}, from {resource.address}"
    )

    try:
        if settings.up_to == "latest":
            latest = extend_to_latest(spec, resource.source, settings.max_messages)
            if latest.batch_id != spec.batch_id:
                context.log.info(
                    f"Batch {spec.batch_id} taken up to the latest messages: "
                    f"{latest.message_count - spec.message_count} more arrived since it was "
                    f"planned, batch {latest.batch_id} ({_describe(latest)})"
                )
                spec = latest
    except UNREACHABLE as exc:
        raise resource.unavailable(exc) from None
    log = ProgressLog(context.log.info, spec.batch_id)
    try:
        result = ingest(
            spark,
            spec,
            config.sink or settings.sink,
            source=resource.source,
            schema=config.schema_ddl or settings.schema_ddl,
            value_format=value_format,  # type: ignore[arg-type]
            key_format=settings.key_format,
            value_schema=settings.value_schema,
            key_schema=settings.key_schema,
            schema_registry=registry,
            on_incompatible=settings.on_incompatible,  # type: ignore[arg-type]
            mode=mode,  # type: ignore[arg-type]
            dead_letter=settings.dead_letter,
            fail_on_data_loss=settings.fail_on_data_loss,
            fail_on_broker_drops=settings.fail_on_broker_drops,
            payload_column=settings.payload_column,
            progress=log,
            max_quarantined=limit,
            partition_by=config.partition_by or settings.partition_by,
            write_mode=settings.write_mode,
            key_columns=settings.key_columns,
            on_truncate=settings.on_truncate,
            keep_message=settings.keep_message,
            routes=settings.routes,
        )
    except UNREACHABLE as exc:
        raise resource.unavailable(exc) from None
    except Exception as exc:
        clean = resource.scrubbed(exc)
        if clean is None:
            raise
        raise clean from None
    except BaseException:  # the run is being terminated: say what it leaves of the batch
        context.log.warning(log.state())
        raise
    metadata = ingest_metadata(result, lag=_lag(context, resource))
    context.log.info(
        f"Batch {spec.batch_id}: {result.read} read, {result.written} written, "
        f"{result.quarantined} quarantined, {result.duplicates} duplicates, "
        f"{result.skipped} skipped in {result.seconds:.1f} s; committed: {result.committed}"
    )
    return result, metadata


def _describe(spec: BatchSpec) -> str:
    if spec.kind == "kafka":
        ranges = ", ".join(f"p{r.partition} [{r.start}, {r.end})" for r in spec.ranges)
        return f"group {spec.group_id}, {spec.message_count} messages ({ranges})"
    limit = spec.max_messages if spec.max_messages is not None else "all"
    return f"session {spec.client_id}, up to {limit} messages"


def _lag(
    context: OpExecutionContext | AssetExecutionContext, resource: QueueResource
) -> int | None:
    """Messages still waiting after this batch (Kafka only: MQTT cannot count them without
    taking the session)."""
    if resource.KIND != "kafka":
        return None
    try:
        waiting = resource.plan_batch()
    except Exception as exc:  # a metric: the batch is written and committed already
        context.log.warning(f"Could not measure the lag: {resource.scrub(str(exc))}")
        return None
    return waiting.message_count if waiting is not None else 0


def ingest_metadata(result: IngestResult, lag: int | None = None) -> dict[str, Any]:
    """Dagster metadata of an ingest: counts, ranges, lag and duration (never payloads)."""
    data = result.to_dict()
    metadata: dict[str, Any] = {
        "batch_id": data["batch_id"],
        "kind": data["kind"],
        "topic": data["topic"],
        "mode": data["mode"],
        "read": MetadataValue.int(result.read),
        "written": MetadataValue.int(result.written),
        "quarantined": MetadataValue.int(result.quarantined),
        "duplicates": MetadataValue.int(result.duplicates),
        "skipped": MetadataValue.int(result.skipped),
        "bytes": MetadataValue.int(result.bytes),
        "duration_seconds": MetadataValue.float(float(data["seconds"])),
        "messages_per_second": MetadataValue.float(round(float(result.messages_per_second), 1)),
        "committed": MetadataValue.bool(result.committed),
        "ranges": MetadataValue.json(data["ranges"]),
    }
    if lag is not None:
        metadata["lag"] = MetadataValue.int(lag)
    if result.dropped is not None:
        metadata["broker_dropped"] = MetadataValue.int(result.dropped)
    if result.lost:
        metadata["lost"] = MetadataValue.json(result.lost)
    if result.gaps:
        metadata["gaps"] = MetadataValue.json(data["gaps"])
    if result.output:
        metadata["output"] = MetadataValue.path(result.output)
    if result.quarantine_output:
        metadata["quarantine_output"] = MetadataValue.path(result.quarantine_output)
    return metadata


def make_ingest_op(
    name: str, settings: IngestSettings, description: str | None = None
) -> OpDefinition:
    """An op that ingests the batch in its run config (see the module docstring)."""

    @op(
        name=name,
        description=description
        or f"Ingest one batch from resource '{settings.resource_key}' into {settings.sink}.",
        required_resource_keys=settings.resource_keys(),
        tags={INGEST_TAG: settings.resource_key},
        out=Out(dict, description="The ingest summary (IngestResult.to_dict())."),
    )
    def _ingest(context: OpExecutionContext, config: IngestConfig) -> Output[dict[str, Any]]:
        result, metadata = run_ingest(context, config, settings)
        return Output(result.to_dict(), metadata=metadata)

    definition: OpDefinition = _ingest
    return definition
