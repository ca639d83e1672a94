"""``options.reader = "spark"``: a batch's offset ranges read by Spark's own Kafka source
(``spark.read.format("kafka")``), in the JVM of every executor, no Python worker.

The ranges become the source's ``startingOffsets``/``endingOffsets`` (one JSON object per
partition; a partition with several ranges is read in several rounds, one DataFrame each,
unioned), read committed (``kafka.isolation.level``), and the rows get the columns every
other reader gives (:data:`~.records.RAW_SCHEMA_DDL`: no timestamp is null, no header is an
empty list, ``message_id`` from the ``message_id`` header), so classification and quarantine
are unchanged.

The source runs with ``failOnDataLoss`` off: Sluice checks loss itself, as for every reader.
Offsets deleted before the read are found by the plan (:mod:`.remaining`); offsets deleted
while it ran leave holes below the log start, which the reconciliation
(:func:`.reconcile.reconcile_kafka`) turns into :class:`~sluice.errors.DataLossError` naming
partition and offsets (or records, with ``fail_on_data_loss=False``); a partition that now
ends below a range's end (recreated, truncated) fails through
:func:`sluice.kafka.ranges.check_range_ends`.

The connection's settings become the source's ``kafka.*`` options: servers, protocol, SASL
(a JAAS line; Kafka and Spark print it as ``[hidden]``/redacted), the CA file (PEM) and host
name check, timeouts, fetch sizes. A client certificate (``options.ssl_certfile``) is refused:
the Java client takes a PEM key inline only, which would put it in the query's options.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..batch import OffsetRange
from ..kafka.config import Translation, translate_settings
from ..kafka.logs import hide_secret
from ..kafka.records import ID_HEADER
from ..queues.config import ConfigError
from .reading import rounds
from .session import is_connect

__all__ = [
    "FETCH_MAX_WAIT_MS",
    "PYTHON_WRITER_ROUNDS",
    "PYTHON_WRITER_TASK_MESSAGES",
    "kafka_options",
    "kafka_source_loads",
    "read_with_spark",
]


def _renamed(name: str) -> Translation:
    return lambda value: (name, str(value))


def _refused(key: str) -> Translation:
    def refuse(_: Any) -> None:
        raise ConfigError(
            f"options.reader 'spark' does not take {key} (a client certificate): the Java "
            "client reads a PEM key only inline, which would put it in the query's options. "
            "Read with options.reader 'auto', or give the broker's clients no certificate."
        )

    return refuse


#: kafka-python keyword argument -> (the Kafka source's option, value), or None: not needed
#: (the source assigns, never commits, never resets a position itself).
_TRANSLATIONS: dict[str, Translation] = {
    "bootstrap_servers": lambda servers: (
        "kafka.bootstrap.servers",
        servers if isinstance(servers, str) else ",".join(servers),
    ),
    "client_id": _renamed("kafka.client.id"),
    "security_protocol": _renamed("kafka.security.protocol"),
    "sasl_mechanism": _renamed("kafka.sasl.mechanism"),
    "sasl_plain_username": lambda _: None,  # in the JAAS line (_jaas)
    "sasl_plain_password": lambda _: None,
    "ssl_cafile": _renamed("kafka.ssl.truststore.location"),
    "ssl_certfile": _refused("options.ssl_certfile"),
    "ssl_keyfile": _refused("options.ssl_keyfile"),
    "ssl_check_hostname": lambda check: (
        "kafka.ssl.endpoint.identification.algorithm",
        "https" if check else "",
    ),
    "request_timeout_ms": _renamed("kafka.request.timeout.ms"),
    "reconnect_backoff_max_ms": _renamed("kafka.reconnect.backoff.max.ms"),
    "bootstrap_timeout_ms": _renamed("kafka.socket.connection.setup.timeout.ms"),
    "isolation_level": _renamed("kafka.isolation.level"),
    "auto_offset_reset": lambda _: None,
    "enable_auto_commit": lambda _: None,
    "max_poll_records": lambda _: None,
    "fetch_max_bytes": _renamed("kafka.fetch.max.bytes"),
    "fetch_min_bytes": _renamed("kafka.fetch.min.bytes"),
    "fetch_max_wait_ms": _renamed("kafka.fetch.max.wait.ms"),
    "max_partition_fetch_bytes": _renamed("kafka.max.partition.fetch.bytes"),
    "receive_buffer_bytes": _renamed("kafka.receive.buffer.bytes"),
}

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas(kwargs: Mapping[str, Any]) -> dict[str, str]:
    user, password = kwargs.get("sasl_plain_username"), kwargs.get("sasl_plain_password")
    if user is None and password is None:
        return {}
    mechanism = str(kwargs.get("sasl_mechanism") or "PLAIN").upper()
    module = _LOGIN_MODULES.get(mechanism)
    if module is None:
        raise ConfigError(
            f"options.reader 'spark' does not take credential.mechanism {mechanism!r}; use one "
            f"of {', '.join(_LOGIN_MODULES)}, or options.reader 'auto'."
        )

    def quoted(text: Any) -> str:
        return '"' + str(text or "").replace("\\", "\\\\").replace('"', '\\"') + '"'

    line = f"{module} required username={quoted(user)} password={quoted(password)};"
    hide_secret(line)
    return {"kafka.sasl.jaas.config": line}


#: How long the broker may hold a fetch of the source's consumers that finds no new message
#: (``kafka.fetch.max.wait.ms``; Kafka's default is 500 ms). A consumer asks for what follows
#: the records it hands over; at the end of a task's range, the log's end, nothing follows
#: and the broker holds that fetch, which the consumer's next use (a task that takes it from
#: Spark's pool) can wait for. A warm batch of 20,000 messages in three partitions, read as
#: four tasks: 1.7 s with 500 ms, 0.75 s with 10 ms.
FETCH_MAX_WAIT_MS = 10


def kafka_options(
    kwargs: Mapping[str, Any], topic: str, ranges: Sequence[OffsetRange]
) -> dict[str, str]:
    """The Kafka source's options to read ``ranges`` (at most one per partition) of ``topic``
    with the batch reader's kafka-python arguments ``kwargs``. They hold the password: never
    log them. A setting it cannot translate raises :class:`ConfigError` naming the key."""
    options = translate_settings(kwargs, _TRANSLATIONS, "spark", "auto")
    if kwargs.get("ssl_cafile"):
        options["kafka.ssl.truststore.type"] = "PEM"
    options.update(_jaas(kwargs))
    options.setdefault("kafka.isolation.level", "read_committed")
    options.setdefault("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    if kwargs.get("request_timeout_ms"):
        # the stall limit of every reader (options.request_timeout), not Spark's 120 s: a task
        # polling past a partition's end (recreated shorter) waits this long, then steps over
        options["kafkaConsumer.pollTimeoutMs"] = str(kwargs["request_timeout_ms"])
    starts = {str(r.partition): r.start for r in ranges}
    ends = {str(r.partition): r.end for r in ranges}
    return {
        **options,
        "assign": json.dumps({topic: sorted(int(p) for p in starts)}),
        "startingOffsets": json.dumps({topic: starts}),
        "endingOffsets": json.dumps({topic: ends}),
        "failOnDataLoss": "false",  # Sluice's own checks (module docstring)
        "includeHeaders": "true",
    }


_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_SOURCE_LOADS = "_sluice_kafka_source_loads"  # on a session: kafka_source_loads's answer
#: Messages a task of a batch written by Python's writer reads at least, before its tasks
#: are split finer than one per range (up to :data:`PYTHON_WRITER_ROUNDS` rounds of tasks).
PYTHON_WRITER_TASK_MESSAGES = 20_000
#: Rounds of tasks (one task per core each) of a batch written by Python's writer. Each task
#: is a JVM thread that reads and classifies, and a Python worker that writes, one after the
#: other for each chunk; with three tasks per core one's Python writes while another's JVM
#: reads, where one or two leave the cores idle between their chunks. 2,000,000 messages on
#: 2 cores (bench/ingest.py's, three partitions): 8.8 s as 4 tasks, 8.3 s as 6, 8.0 to 8.4 s
#: as 8, 9.3 s as 12; 200,000: 2.51 s as 4, 2.33 s as 6.
PYTHON_WRITER_ROUNDS = 3


def read_with_spark(
    spark: Any,
    kwargs: Mapping[str, Any],
    topic: str,
    ranges: Sequence[OffsetRange],
    python_writes: bool = False,
) -> Any:
    """The messages of ``ranges`` as a DataFrame of the raw columns, read by Spark's Kafka
    source when the job that uses it runs (tasks: at least one per core, in whole rounds).
    ``python_writes``: Python's writer (:mod:`.writing`) writes them, and tasks of more than
    :data:`PYTHON_WRITER_TASK_MESSAGES` messages are split, up to
    :data:`PYTHON_WRITER_ROUNDS` rounds of tasks."""
    from pyspark.sql import functions as F

    from .records import RAW_SCHEMA_DDL

    todo = [r for r in ranges if r.count > 0]
    parallelism = 2 if is_connect(spark) else max(1, int(spark.sparkContext.defaultParallelism))
    frames = []
    for group in rounds(todo):
        options = kafka_options(kwargs, topic, group)
        # whole rounds of tasks: 3 equal ranges on 2 cores as 4 tasks, not 3 (the third alone)
        rounds_of_tasks = -(-max(len(group), parallelism) // parallelism)
        if python_writes:
            messages = sum(r.count for r in group)
            wanted = messages // (parallelism * PYTHON_WRITER_TASK_MESSAGES)
            rounds_of_tasks = max(rounds_of_tasks, min(PYTHON_WRITER_ROUNDS, wanted))
        options["minPartitions"] = str(rounds_of_tasks * parallelism)
        frames.append(_load(spark, options))
    if not frames:
        return spark.createDataFrame([], RAW_SCHEMA_DDL)
    raw = frames[0]
    for frame in frames[1:]:
        raw = raw.unionByName(frame)
    headers = F.coalesce(F.col("headers"), F.array().cast("array<struct<key:string,value:binary>>"))
    return raw.select(
        "key",
        "value",
        "topic",
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.when(F.unix_micros(F.col("timestamp")) >= 0, F.col("timestamp")).alias("timestamp"),
        headers.alias("headers"),
        _header_message_id(headers).alias("message_id"),
    )


def _header_message_id(headers: Any) -> Any:
    """The ``message_id`` header of a record's ``headers`` column (never null) as text, the
    last one with a value winning, as :func:`sluice.kafka.records.header_message_id` reads
    it; null when it has none or an empty one. (A higher-order function: Spark runs the
    projection holding it outside its generated code, where a table keeps the id.)"""
    from pyspark.sql import functions as F

    ids = F.filter(headers, lambda h: (h["key"] == F.lit(ID_HEADER)) & h["value"].isNotNull())
    found = F.try_element_at(ids, F.lit(-1))["value"]
    # bytes that are not UTF-8 replaced as Python's decode(errors="replace") does
    return F.when(F.length(found) > 0, F.make_valid_utf8(found.cast("string")))


def kafka_source_loads(spark: Any) -> bool:
    """Whether Spark's Kafka source is on ``spark``'s class path: a classic session's, asked
    once per session; a Spark Connect session's server is not asked (False)."""
    found = getattr(spark, _SOURCE_LOADS, None)
    if found is None:
        found = False
        if not is_connect(spark):
            try:
                spark._jvm.org.apache.spark.util.Utils.classForName(_SOURCE_CLASS, True, False)
                found = True
            except Exception:  # Py4J's error: the class is not there
                found = False
        setattr(spark, _SOURCE_LOADS, found)
    return bool(found)


def _load(spark: Any, options: Mapping[str, str]) -> Any:
    """The Kafka source's DataFrame, with Spark's "no data source kafka" made an error that
    says what to do."""
    try:
        return spark.read.format("kafka").options(**options).load()
    except Exception as exc:
        if "kafka" not in str(exc).lower() or "data source" not in str(exc).lower():
            raise
        raise ConfigError(
            "options.reader 'spark' needs Spark's Kafka source on the session's class path, and "
            "this session has none. Create the session with "
            "sluice.spark.spark_session(kafka_source=True), or give it "
            "spark.jars=$(python -m sluice.spark.connector) (a Spark Connect server: --jars at "
            "its start)."
        ) from None
