"""SparkIngestOperator: ingests one batch (a BatchSpec) of a Kafka or MQTT topic into Parquet.

The batch comes from ``batch`` (by default the XCom of a ``wait_for_messages`` sensor), else
from the run's triggering asset events (an ``AssetWatcher`` on a
:class:`~sluice_airflow.triggers.queue.QueueMessageTrigger`; a run may gather several
events, each one batch), else from ``dag_run.conf["batch"]`` (a run triggered by hand).

``batch="waiting"`` plans the batch in the task itself, for a DAG on any schedule (cron, a
timetable, ``@hourly``): what waits on ``topic`` when the task runs, from the group's committed
offsets (:func:`sluice.sensing.plan_now`, committing nothing), at most ``max_messages``. So a
retry, a rerun of an old run or a catchup run ingests what waits *then*, never a stale range:
after a failed run the next one takes its messages too. With nothing waiting the task is
skipped (``if_nothing_waiting="succeed"``: it succeeds with an empty summary). MQTT cannot see
a backlog: the task looks into the persistent session first (as the sensor does) and skips
when nothing arrives there, or when the ingest's drain comes back empty.
:func:`sluice.spark.ingest` reads exactly that batch, writes it, then commits or acknowledges.
The XCom value is the ingest summary (counts and ranges, never payloads). The connection's
password goes to Spark in-process, or to ``spark-submit`` in a file only the current user can
read: never on a command line, in XCom or in a log.

After each batch the task sends the stream's lag, the age of its oldest waiting message and
the time of its last batch as Airflow metrics (:mod:`sluice_airflow.metrics`, through
Airflow's ``Stats``), and, with apache-airflow-providers-openlineage installed, the run's
OpenLineage events name the topic, the sink, the batch and its counts
(:mod:`sluice_airflow.lineage`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowSkipException

from sluice.batch import BatchSpec
from sluice.connection_fields import check_no_secrets
from sluice.quarantine import DEFAULT_MAX_QUARANTINED, check_limit
from sluice.routes import Routes
from sluice.secrets import is_secret_key, redact_config, redact_text, redacted_errors
from sluice.sensing import plan_now

from ..hooks.queue import QueueHook
from ..rendered import parse_rendered
from ..sensors.queue import MQTT_POKE_WAIT
from ..triggers.queue import describe_batch

__all__ = ["DEFAULT_BATCH", "WAITING", "SparkIngestOperator", "batches_from_context"]

DEFAULT_BATCH = "{{ ti.xcom_pull(task_ids='wait_for_messages') }}"
#: ``batch=WAITING``: the task plans its batch from what waits when it runs.
WAITING = "waiting"

_NOTHING = (None, "", "None", "null")


def _as_spec(value: Any, what: str) -> BatchSpec:
    if isinstance(value, BatchSpec):
        return value
    if isinstance(value, str):
        value = parse_rendered(value, what)
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a BatchSpec dict, got {type(value).__name__}.")
    return BatchSpec.from_dict(dict(value))


def _event_payloads(context: Mapping[str, Any]) -> Iterable[Any]:
    events = context.get("triggering_asset_events") or {}
    for asset_events in events.values():
        for event in asset_events:
            payload = (getattr(event, "extra", None) or {}).get("payload")
            if isinstance(payload, Mapping) and "kind" in payload:
                yield payload


def batches_from_context(batch: Any, context: Mapping[str, Any]) -> list[BatchSpec]:
    """The batches a run ingests (see the module docstring), each once, in order."""
    if batch not in _NOTHING:
        specs = [_as_spec(batch, "SparkIngestOperator: 'batch'")]
    else:
        specs = [_as_spec(p, "a triggering asset event") for p in _event_payloads(context)]
        dag_run = context.get("dag_run")
        conf = getattr(dag_run, "conf", None) or {}
        if not specs and conf.get("batch") not in _NOTHING:
            specs = [_as_spec(conf["batch"], "dag_run.conf['batch']")]
    unique = {spec.batch_id: spec for spec in specs}
    return list(unique.values())


class SparkIngestOperator(BaseOperator):
    """Ingest a batch into the Parquet dataset at ``sink``; return the ingest summary.

    :param conn_id: the ``sluice_kafka`` / ``sluice_mqtt`` connection the batch was sensed on.
    :param sink: the dataset directory (templated); output goes to ``<sink>/batch_id=<id>/``.
        Or an Apache Iceberg table, ``iceberg://CATALOG/NAMESPACE.TABLE``, or a Delta Lake
        table, ``delta://PATH``.
    :param batch: the BatchSpec, its dict or JSON (templated; default: the XCom of task
        ``wait_for_messages``); empty: take the batches from the triggering asset events;
        ``"waiting"``: plan the batch that waits on ``topic`` when the task runs (a DAG on a
        schedule, no sensor; see the module docstring).
    :param topic: with ``batch="waiting"``: the Kafka topic or MQTT topic filter (templated);
        the consumer group (``group_id``) or MQTT session (``client_id``) comes from
        ``config`` or the connection's extra.
    :param up_to: ``"planned"`` (default): a Kafka batch is read as it was planned;
        ``"latest"``: it also takes the messages that arrived on its topic since (while the
        run was queued and the task started), as Spark's ``availableNow`` takes what is
        there when a query starts, so they need not wait for the next run. The task plans
        that once, from the group's committed offsets, when it starts (a new ``batch_id``;
        the batch record, the summary and the lineage name it). MQTT batches drain the
        session anyway.
    :param max_messages: with ``batch="waiting"``: the most messages one run ingests (None:
        all that wait; MQTT: the most the run drains from the session); with
        ``up_to="latest"``: the most a batch grows to (never below what was planned).
    :param if_nothing_waiting: with ``batch="waiting"``: ``"skip"`` (default) skips the task
        when nothing waits; ``"succeed"`` ends it successfully, returning an empty summary
        (the same keys, ``batch_id`` None, counts 0).
    :param schema: Spark DDL (templated) or StructType parsing the JSON payload (the schema
        formats: the table's columns; default: from the writer's schemas).
    :param value_format: "json", "avro", "protobuf", "json_schema", "string", "bytes"
        ("raw", deprecated) or "sparkplug_b" (MQTT); see :func:`sluice.spark.ingest`.
    :param key_format: how keys are read ("bytes", the default, keeps them as they are).
    :param value_schema: writer schema of unframed values (a file, or inline; templated).
    :param key_schema: writer schema of unframed keys (json keys: Spark DDL).
    :param schema_registry: Schema Registry URL without a password (templated); or
    :param schema_registry_conn_id: an Airflow connection naming the registry, its login and
        password (:mod:`sluice_airflow.hooks.schema_registry`).
    :param on_incompatible: "quarantine" (default) or "fail": a record whose schema does not
        fit the table's.
    :param mode: where Kafka messages are read: "driver", "executors" or "auto".
    :param fail_on_data_loss: fail when messages of the batch are gone from the broker
        (retention, a recreated topic); False records the loss and goes on.
    :param dead_letter: also republish bad records to the dead-letter topic.
    :param max_quarantined: fail the batch, before anything is published or committed, when
        more of it goes to quarantine than this: a ratio of the messages read (default 0.5:
        more than half) or a count (an int); None: no limit.
    :param spark_master: Spark master URL or ``sc://`` (default: $SLUICE_SPARK_MASTER, else
        ``local[*]``); in-process, an active SparkSession is reused.
    :param spark_conf: Spark settings.
    :param submit: run the ingest with ``spark-submit`` in its own process instead.
    :param spark_submit: the spark-submit executable (default: the one on PATH, else pyspark's).
    :param config: config keys on top of the connection's for reading the source.
    :param ingest_kwargs: further keyword arguments of :func:`sluice.spark.ingest`
        (``chunk_size``, ``max_value_bytes``, ...).
    :param partition_by: partition the table (templated): an Iceberg table's spec on creation
        (like the URI's ``?partition_by=``), a Parquet dataset's hive-style directories in each
        batch; e.g. ``"day(timestamp),bucket(16,device)"``. An existing table keeps its spec
        (another one fails the task before anything is read).
    :param write_mode: "append" (default: every message a row) or "upsert": a change data
        capture topic (Debezium JSON) kept as a current-state Iceberg or Delta table
        (docs/guides/cdc.md).
    :param key_columns: with ``write_mode="upsert"``, the rows' key columns (default: the
        message keys' fields).
    :param on_truncate: with ``write_mode="upsert"``, what a truncate of the source table
        does: ``"quarantine"`` (default: set aside with its reason) or ``"apply"`` (every row
        older than it is deleted).
    :param keep_message: keep the message beside its fields, a bronze copy: ``True`` (its key,
        value, topic, headers and message id), a list of those columns, or ``False``. None
        (default): the table's own choice, none for a new table. Rows always have partition,
        offset and timestamp; another choice than an existing table's fails the task.
    :param routes: a routed topic (:mod:`sluice.routes`, the dict or JSON of a ``Routes``):
        each message goes to the table its route names, ``sink`` takes the messages no route
        takes; one read of the batch writes every table (docs/how-to/routed-topics.md). The
        :class:`~sluice_airflow.triggers.routed.RoutedMessageTrigger` watchers of the route
        assets must be given the same routes.
    :param metrics: after each batch, measure the stream's lag and the age of its oldest
        waiting message (Kafka: one look at the broker) and send them with the batch's counts
        as Airflow metrics (:mod:`sluice_airflow.metrics`); False sends nothing.
    :return: ``IngestResult.to_dict()``; a list of them when the run gathered several batches.
    """

    template_fields: Sequence[str] = (
        "batch",
        "sink",
        "schema",
        "topic",
        "value_schema",
        "key_schema",
        "schema_registry",
        "partition_by",
    )
    ui_color = "#f5cba7"

    def __init__(
        self,
        *,
        conn_id: str = QueueHook.default_conn_name,
        sink: str,
        batch: Any = DEFAULT_BATCH,
        schema: Any = None,
        value_format: str = "json",
        key_format: str = "bytes",
        value_schema: str | None = None,
        key_schema: str | None = None,
        schema_registry: str | None = None,
        schema_registry_conn_id: str | None = None,
        on_incompatible: Literal["quarantine", "fail"] = "quarantine",
        mode: Literal["auto", "driver", "executors"] = "auto",
        dead_letter: bool = False,
        fail_on_data_loss: bool = True,
        spark_master: str | None = None,
        spark_conf: dict[str, str] | None = None,
        submit: bool = False,
        spark_submit: str | None = None,
        config: dict[str, Any] | None = None,
        ingest_kwargs: dict[str, Any] | None = None,
        topic: str | None = None,
        max_messages: int | None = None,
        if_nothing_waiting: Literal["skip", "succeed"] = "skip",
        max_quarantined: float | int | None = DEFAULT_MAX_QUARANTINED,
        metrics: bool = True,
        partition_by: str | None = None,
        write_mode: Literal["append", "upsert"] = "append",
        key_columns: Sequence[str] | None = None,
        on_truncate: Literal["quarantine", "apply"] = "quarantine",
        keep_message: bool | Sequence[str] | None = None,
        routes: Mapping[str, Any] | str | None = None,
        up_to: Literal["planned", "latest"] = "planned",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_limit(max_quarantined)
        if key_columns is not None:  # one rule, whether the ingest runs here or is submitted
            from sluice.spark.sinks.upsert import check_key_columns

            check_key_columns(key_columns)
        check_no_secrets(config, f"SparkIngestOperator({self.task_id})")
        _check_waiting_options(self.task_id, batch, topic, max_messages, if_nothing_waiting, up_to)
        if submit and (spark_master or "").startswith("sc://"):
            raise ValueError(
                f"SparkIngestOperator({self.task_id}): spark-submit does not take a Spark "
                f"Connect URL ({spark_master}). Leave submit=False: the task is then a Connect "
                "client and the work runs on the Connect server."
            )
        self.conn_id = conn_id
        self.sink = sink
        self.batch = batch
        self.schema = schema
        self.value_format = value_format
        self.key_format = key_format
        self.value_schema = value_schema
        self.key_schema = key_schema
        self.schema_registry = schema_registry
        self.schema_registry_conn_id = schema_registry_conn_id
        self.on_incompatible = on_incompatible
        self.mode = mode
        self.fail_on_data_loss = fail_on_data_loss
        self.dead_letter = dead_letter
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})
        self.submit = submit
        self.spark_submit = spark_submit
        self.config = dict(config or {})
        self.ingest_kwargs = dict(ingest_kwargs or {})
        self.topic = topic
        self.max_messages = max_messages
        self.if_nothing_waiting = if_nothing_waiting
        self.max_quarantined = max_quarantined
        self.metrics = metrics
        self.partition_by = partition_by
        self.write_mode = write_mode
        self.key_columns = list(key_columns) if key_columns is not None else None
        self.on_truncate = on_truncate
        self.keep_message = (
            list(keep_message) if isinstance(keep_message, (list, tuple)) else keep_message
        )
        self.routes = Routes.parse(routes).to_dict() if routes is not None else None
        self.up_to = up_to
        self._ingested: list[tuple[BatchSpec, dict[str, Any]]] = []  # for the lineage events

    def execute(self, context: Context) -> dict[str, Any] | list[dict[str, Any]]:
        self._ingested = []  # this run's own (the task object may be a copy sharing a list)
        if self.batch == WAITING:
            return self._ingest_waiting(context)
        specs = batches_from_context(self.batch, context)
        if not specs:
            raise ValueError(
                "SparkIngestOperator: no batch to ingest. Give 'batch' (e.g. the XCom of a "
                "QueueMessageSensor), schedule the DAG on an Asset watched by a "
                'QueueMessageTrigger, or trigger the run with conf {"batch": <BatchSpec dict>}.'
            )
        hook = QueueHook(self.conn_id)
        source = hook.config(**self.config)
        self.log.info("Source: %s", redact_config(source))
        with redacted_errors(source):
            results = [self._ingest_one(spec, source, context) for spec in specs]
        return results[0] if len(results) == 1 else results

    def _ingest_waiting(self, context: Context) -> dict[str, Any]:
        """``batch="waiting"``: plan what waits now, ingest it, or skip (module docstring)."""
        hook = QueueHook(self.conn_id)
        kind = hook.kind
        planning = hook.config(self.topic, **self.config)
        source = hook.config(**self.config)
        self.log.info("Source: %s", redact_config(source))
        with redacted_errors(source):
            wait = MQTT_POKE_WAIT if kind == "mqtt" else 0.0
            spec, count = plan_now(kind, planning, 1, self.max_messages, wait)
            if spec is None:
                return self._nothing_waiting(kind, planning, f"{count} messages")
            self.log.info("Planned from what waits now: %s", describe_batch(spec))
            result = self._ingest_one(spec, source, context)
        if kind == "mqtt" and not (result.get("read") or result.get("skipped")):
            return self._nothing_waiting(kind, planning, "the ingest's drain found no message")
        return result

    def _nothing_waiting(
        self, kind: str, planning: Mapping[str, Any], found: str
    ) -> dict[str, Any]:
        """Skip the task (or, with ``if_nothing_waiting="succeed"``, return an empty summary)."""
        if kind == "mqtt":
            owner = f"session {planning.get('client_id')}"
        else:
            owner = f"group {planning.get('group_id')}"
        line = f"Nothing waiting on {self.topic} for {owner} ({found}): nothing to ingest"
        if self.if_nothing_waiting == "skip":
            self.log.info("%s, the task is skipped", line)
            raise AirflowSkipException(f"{line}.")
        self.log.info("%s, the task succeeds with an empty summary", line)
        return empty_summary(kind, str(self.topic), self.sink, self.mode)

    def _ingest_one(
        self, spec: BatchSpec, source: dict[str, Any], context: Context
    ) -> dict[str, Any]:
        spark = None if self.submit else self._start_session(spec)
        if self.up_to == "latest" and self.batch != WAITING:
            spec = self._latest(spec, source)
        self.log.info("Ingesting %s", describe_batch(spec))
        result = (
            self._run_submit(spec, source) if self.submit else self._run_here(spark, spec, source)
        )
        self.log.info(
            "Batch %s: read %s, written %s, quarantined %s, duplicates %s, skipped %s",
            spec.batch_id,
            result.get("read"),
            result.get("written"),
            result.get("quarantined"),
            result.get("duplicates"),
            result.get("skipped"),
        )
        if result.get("dropped"):
            self.log.warning(
                "The MQTT broker dropped %s message(s) since the last ingest of this session: "
                "raise max_queued_messages in mosquitto.conf",
                result["dropped"],
            )
        if result.get("lost"):
            self.log.warning("Messages lost to retention (accepted): %s", result["lost"])
        self._ingested.append((spec, result))
        self._send_metrics(spec, result)
        return result

    def _send_metrics(self, spec: BatchSpec, result: Mapping[str, Any]) -> None:
        """The batch's counts, the stream's lag and freshness as Airflow metrics (a metric
        that cannot be measured is a warning: the batch is written and committed)."""
        if not self.metrics:
            return
        from sluice.metrics import measure

        from ..metrics import send_counts, send_stream

        group = spec.group_id if spec.kind == "kafka" else spec.client_id
        send_counts(spec.kind, spec.topic, group, result)
        hook = QueueHook(self.conn_id)
        if spec.kind == "kafka":  # one try: a broker gone since the commit must not hold the task
            owner = {"group_id": spec.group_id, "options.max_retries": 1}
        else:
            owner = {"client_id": spec.client_id}
        config = hook.config(spec.topic, **{**self.config, **owner})
        try:
            lag = measure(spec.kind, config, self.sink)
        except Exception as exc:
            self.log.warning(
                "Could not measure the lag of %s: %s", spec.topic, redact_text(str(exc), config)
            )
            return
        send_stream(lag)
        self.log.info(
            "Stream %s: lag %s, oldest waiting message %s s old, last batch %s",
            spec.topic,
            "unknown (MQTT)" if lag.lag is None else lag.lag,
            "-" if lag.oldest_age is None else round(lag.oldest_age, 1),
            lag.last_batch_id,
        )

    # ---- OpenLineage (apache-airflow-providers-openlineage calls these) -----------------------

    def get_openlineage_facets_on_start(self) -> Any:
        """The topic and the sink (and the batch, when it is known before the run)."""
        return self._lineage(done=False)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The topic, the sink with its schema and the rows written and quarantined, and the
        batches' ids and offset ranges."""
        return self._lineage(done=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """What the run was to read and write, and the batches it got to."""
        return self._lineage(done=True)

    def _lineage(self, done: bool) -> Any:
        from sluice.lineage import source_dataset

        from ..lineage import ingest_lineage

        hook = QueueHook(self.conn_id)
        kind, source = hook.kind, hook.config(**self.config)
        with redacted_errors(source):
            specs = [spec for spec, _ in self._ingested] if done else self._known_batches()
            topics = [spec.topic for spec in specs] or ([self.topic] if self.topic else [])
            fields: list[tuple[str, str]] = []
            if isinstance(self.schema, str) and not done:
                from sluice.spark.ddl import parse_ddl

                fields = [(f.name, f.dataType.simpleString()) for f in parse_ddl(self.schema)]
            return ingest_lineage(
                [source_dataset(kind, source, topic) for topic in topics],
                self.sink,
                specs,
                [result for _, result in self._ingested] if done else [],
                fields,
            )

    def _known_batches(self) -> list[BatchSpec]:
        """The batches a run will ingest, when its (rendered) ``batch`` says so already."""
        if self.batch in (*_NOTHING, WAITING):
            return []
        try:
            return batches_from_context(self.batch, {})
        except ValueError:  # not rendered yet, or not a batch: the complete event has it
            return []

    def _options(self) -> dict[str, Any]:
        """The ingest's options (the registry's settings, with its password, included)."""
        from ..hooks.schema_registry import registry_settings

        registry = registry_settings(self.schema_registry_conn_id, self.schema_registry)
        return {
            "schema": self.schema,
            "value_format": self.value_format,
            "key_format": self.key_format,
            "value_schema": self.value_schema,
            "key_schema": self.key_schema,
            "schema_registry": registry.to_dict() if registry is not None else None,
            "on_incompatible": self.on_incompatible,
            "mode": self.mode,
            "dead_letter": self.dead_letter,
            "fail_on_data_loss": self.fail_on_data_loss,
            "max_quarantined": self.max_quarantined,
            "partition_by": self.partition_by or None,
            "write_mode": self.write_mode,
            "key_columns": self.key_columns,
            "on_truncate": self.on_truncate,
            "keep_message": self.keep_message,
            "routes": self.routes,
            **self.ingest_kwargs,
        }

    def _start_session(self, spec: BatchSpec) -> Any:
        """A SparkSession for ``spec``, or one starting on a thread of its own: the task plans
        and reads the batch meanwhile (a task is one process for one batch)."""
        from sluice.spark.session import start_session

        self.log.info("starting Spark (%s)", self.spark_master or "$SLUICE_SPARK_MASTER")
        return start_session(
            self.spark_master,
            f"sluice-{self.task_id}",
            self.spark_conf,
            batch_messages=spec.message_count or None,
        )

    def _latest(self, spec: BatchSpec, source: dict[str, Any]) -> BatchSpec:
        """``up_to="latest"``: ``spec`` with what arrived since it was planned."""
        from sluice.sensing import extend_to_latest

        latest = extend_to_latest(spec, source, self.max_messages)
        if latest.batch_id != spec.batch_id:
            self.log.info(
                "Batch %s taken up to the latest messages: %d more arrived since it was "
                "planned, batch %s",
                spec.batch_id,
                latest.message_count - spec.message_count,
                latest.batch_id,
            )
        return latest

    def _run_here(self, spark: Any, spec: BatchSpec, source: dict[str, Any]) -> dict[str, Any]:
        from sluice.spark import ingest
        from sluice.spark.progress import ProgressLog

        log = ProgressLog(lambda line: self.log.info("%s", line), spec.batch_id)
        try:
            result = ingest(spark, spec, self.sink, source=source, progress=log, **self._options())
        except Exception:  # an error says itself what happened
            raise
        except BaseException:  # the task is being killed (SIGTERM, a timeout): say what is left
            self.log.warning("%s", log.state())
            raise
        return result.to_dict()

    def _submit_executable(self) -> str:
        if self.spark_submit:
            return self.spark_submit
        found = shutil.which("spark-submit")
        if found:
            return found
        import pyspark

        return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")

    def _run_submit(self, spec: BatchSpec, source: dict[str, Any]) -> dict[str, Any]:
        """spark-submit the ingest script (:func:`sluice.spark.submit_script_path`). The source
        config, with its password, goes in a 0600 file in a private temporary directory
        (``--source @file``), removed afterwards; the summary is the last line of stdout."""
        from sluice.spark import submit_script_path

        with tempfile.TemporaryDirectory(prefix="sluice-submit-") as tmp:
            source_file = Path(tmp) / "source.json"
            fd = os.open(source_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(source, handle)
            options = self._options()
            registry = options.pop("schema_registry", None)
            if registry is not None:  # its password, like the source's, in a private file
                registry_file = Path(tmp) / "registry.json"
                fd = os.open(registry_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as handle:
                    json.dump(registry, handle)
                options["registry"] = f"@{registry_file}"
            command = [self._submit_executable()]
            if self.spark_master:
                command += ["--master", self.spark_master]
            for key, value in self.spark_conf.items():
                command += ["--conf", f"{key}={value}"]
            command += [
                submit_script_path(),
                *submit_arguments(spec, self.sink, options),
                "--source",
                f"@{source_file}",
            ]
            self.log.info("Running %s", self._shown(command))
            # The driver (and local executors) run this interpreter, which has Sluice installed,
            # unless the deployment says otherwise.
            python = os.environ.get("PYSPARK_PYTHON", sys.executable)
            env = {
                **os.environ,
                "PYSPARK_PYTHON": python,
                "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", python),
            }
            done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        output = redact_text(done.stderr, source)
        if done.returncode != 0:
            printed = redact_text(done.stdout, source)
            raise RuntimeError(
                f"spark-submit exited with {done.returncode}:\n{printed[-2000:]}{output[-4000:]}"
            )
        self.log.info("spark-submit log (end):\n%s", output[-2000:])
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(
                f"spark-submit printed no ingest summary:\n{redact_text(done.stdout, source)}"
            )
        result: dict[str, Any] = json.loads(lines[-1])
        return result

    def _shown(self, command: Sequence[str]) -> str:
        """``command`` for the log: secret Spark settings (``--conf spark...secret.key=...``)
        and URI passwords masked."""
        shown = list(command)
        for i, arg in enumerate(shown):
            key, eq, _ = arg.partition("=")
            if i and shown[i - 1] == "--conf" and eq and is_secret_key(key):
                shown[i] = f"{key}=***"
        return redact_text(" ".join(shown))


def _check_waiting_options(
    task_id: str,
    batch: Any,
    topic: str | None,
    max_messages: int | None,
    if_nothing_waiting: str,
    up_to: str = "planned",
) -> None:
    """ValueError when the options of ``batch="waiting"`` (or ``up_to``) are missing or given
    without it."""
    where = f"SparkIngestOperator({task_id})"
    if up_to not in ("planned", "latest"):
        raise ValueError(f"{where}: up_to must be 'planned' or 'latest', not {up_to!r}.")
    if if_nothing_waiting not in ("skip", "succeed"):
        raise ValueError(
            f"{where}: if_nothing_waiting must be 'skip' or 'succeed', not {if_nothing_waiting!r}."
        )
    if batch == WAITING:
        if not topic:
            raise ValueError(
                f'{where}: batch="waiting" plans what waits on a topic: give topic=... '
                "(and the group_id or client_id in config or the connection's extra)."
            )
        if max_messages is not None and max_messages < 1:
            raise ValueError(f"{where}: max_messages must be at least 1, not {max_messages}.")
    elif topic is not None or (max_messages is not None and up_to != "latest"):
        raise ValueError(
            f'{where}: topic and max_messages are for batch="waiting" (the task plans its '
            'batch; max_messages also bounds up_to="latest"); a given batch already names '
            "its topic and messages."
        )
    elif max_messages is not None and max_messages < 1:
        raise ValueError(f"{where}: max_messages must be at least 1, not {max_messages}.")


def empty_summary(kind: str, topic: str, sink: str, mode: str) -> dict[str, Any]:
    """The ingest summary of a run that found nothing: ``IngestResult.to_dict()``'s keys,
    ``batch_id`` None, every count 0, nothing committed."""
    from sluice.spark.result import IngestResult

    summary = IngestResult("", kind, topic, str(sink), mode).to_dict()
    summary["batch_id"] = None
    return summary


#: Options of :func:`sluice.spark.ingest` whose flag in the submit script is not their name.
_FLAGS = {"value_format": "--format"}
#: Options that are on by default, and the flag that turns each off.
_OFF_FLAGS = {"fail_on_data_loss": "--accept-data-loss"}


def submit_arguments(spec: BatchSpec, sink: str, options: Mapping[str, Any]) -> list[str]:
    """The submit script's arguments for ``spec`` and ``options`` (no secrets among them)."""
    args = ["--spec", spec.to_json(), "--sink", str(sink)]
    for name, value in options.items():
        if name in _OFF_FLAGS:
            args += [_OFF_FLAGS[name]] if value is False else []
            continue
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if name == "max_quarantined" and value is None:
            args += [flag, "none"]
            continue
        if name == "keep_message":  # all, none or columns; None: the table's choice
            from sluice.spark.layout import keep_text

            text = keep_text(value)
            args += [flag, text] if text is not None else []
            continue
        if value is None or value is False:
            continue
        if name == "routes":
            args += [flag, json.dumps(value, sort_keys=True)]
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            args += [flag, ",".join(value)]  # key_columns
        elif isinstance(value, (str, int, float)):
            args += [flag, str(value)]
        else:
            raise TypeError(
                f"SparkIngestOperator(submit=True): {name} must be a string or a number for "
                f"spark-submit, got {type(value).__name__} (give the schema as Spark DDL)."
            )
    return args
