"""ingest(): one BatchSpec becomes rows of a Parquet dataset, exactly once (see DESIGN.md).

The steps, and what a crash after each leaves:

1. find what is left to do: the spec's ranges minus what the group has committed and what
   other published batches hold (Kafka); a batch whose manifest exists is already written;
2. read exactly those messages (on the driver in chunks, or one Spark task per range);
3. sort them into good rows and quarantined ones and write both to a staging directory
   (a crash here leaves only staging, which the rerun ignores);
4. publish: move the output into place and write the manifest (see :mod:`.dataset`);
5. only then commit the Kafka offsets, or acknowledge the MQTT messages (a crash before this
   makes the rerun skip straight to it for Kafka, or de-duplicate the redelivered messages
   by ``message_id`` for MQTT).
"""

from __future__ import annotations

import hashlib
import os
import queue as queue_module
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..batch import BatchSpec, OffsetRange
from ..queues.config import ConfigError
from ..queues.uri import config_from_uri, queue_from_config
from .classify import Rules, bad_rows, classify, good_rows, parse_schema
from .dataset import Dataset, parquet_rows
from .records import RAW_SCHEMA_DDL
from .result import IngestResult

__all__ = ["AUTO_EXECUTOR_MESSAGES", "IngestEvent", "ingest"]

Stage = Literal["reading", "read", "written", "committed"]
Mode = Literal["auto", "driver", "executors"]

#: ``mode="auto"`` reads on the executors from this many messages on.
AUTO_EXECUTOR_MESSAGES = 1_000_000
#: Rows per Arrow batch a Spark task hands back in executor mode.
TASK_BATCH_ROWS = 10_000
_SCHEMES = {"kafka": ("kafka", "kafka+ssl"), "mqtt": ("mqtt", "mqtts")}


@dataclass(frozen=True)
class IngestEvent:
    """Progress of an ingest: ``stage`` and how many messages were read of ``total``."""

    stage: Stage
    read: int
    total: int | None


def ingest(
    spark: Any,
    spec: BatchSpec | Mapping[str, Any] | str,
    sink: str | os.PathLike[str],
    *,
    source: str | Mapping[str, Any],
    schema: Any = None,
    value_format: Literal["json", "raw"] = "json",
    mode: Mode = "auto",
    quarantine: str | os.PathLike[str] | None = None,
    dead_letter: bool = False,
    chunk_size: int = 100_000,
    max_value_bytes: int = 1_000_000,
    payload_column: str | None = None,
    progress: Callable[[IngestEvent], None] | None = None,
) -> IngestResult:
    """Read exactly the messages of ``spec``, write them to ``sink``, then commit or ack.

    ``source`` is a queue URI (``kafka://host:9092``, ``mqtt://host:1883?qos=1``) or a mapping
    of config keys naming the broker and credentials; the topic, group and session come from
    ``spec``. ``schema`` (Spark DDL or StructType) parses JSON values into columns; records
    that fail go to ``quarantine`` (default ``<sink>/_quarantine``) with a reason, and with
    ``dead_letter`` also to the source's dead-letter topic. ``mode`` says where Kafka
    messages are read: on the driver in chunks of ``chunk_size``, or on the executors, one
    task per range of at most ``chunk_size`` messages (``auto``: executors from
    :data:`AUTO_EXECUTOR_MESSAGES` on). Returns counts and ranges, never payloads.
    """
    started = time.monotonic()
    spec = _as_spec(spec)
    if mode not in ("auto", "driver", "executors"):
        raise ConfigError(f"mode must be 'auto', 'driver' or 'executors', not {mode!r}")
    if value_format not in ("json", "raw"):
        raise ConfigError(f"value_format must be 'json' or 'raw', not {value_format!r}")
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be at least 1, not {chunk_size}")
    job = _Job(
        spark=spark,
        spec=spec,
        config=_source_config(spec, source),
        rules=Rules(
            parse_schema(schema, payload_column), value_format, max_value_bytes, payload_column
        ),
        dataset=Dataset(sink, quarantine),
        dead_letter=dead_letter,
        chunk_size=chunk_size,
        report=progress or (lambda event: None),
    )
    result = job.run_kafka(mode) if spec.kind == "kafka" else job.run_mqtt()
    result.seconds = time.monotonic() - started
    return result


def _as_spec(spec: BatchSpec | Mapping[str, Any] | str) -> BatchSpec:
    if isinstance(spec, BatchSpec):
        return spec
    if isinstance(spec, str):
        return BatchSpec.from_json(spec)
    return BatchSpec.from_dict(dict(spec))


def _source_config(spec: BatchSpec, source: str | Mapping[str, Any]) -> dict[str, Any]:
    """The validated queue config of the batch's source, with the spec's topic and session."""
    if isinstance(source, str):
        scheme = urlsplit(source).scheme.lower()
        if not scheme:
            raise ConfigError(f"source {source!r} has no scheme; write e.g. kafka://localhost:9092")
        try:
            config = config_from_uri(source)[1]
        except ValueError:  # several Kafka servers: the queue reads them from connection.uri
            config = {"connection.uri": source}
    else:
        scheme, config = spec.kind, dict(source)
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


T = TypeVar("T")


def _prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items``, produced on a thread of their own up to ``depth`` ahead, so that reading the
    next chunk overlaps with Spark writing this one."""
    handoff: queue_module.Queue[tuple[str, Any]] = queue_module.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        handoff.put(("item", item), timeout=0.2)
                        break
                    except queue_module.Full:
                        continue
                if stop.is_set():
                    return
            handoff.put(("end", None))
        except BaseException as exc:  # handed to the consuming thread, which raises it
            handoff.put(("error", exc))

    thread = threading.Thread(target=produce, name="sluice-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join(timeout=10)


def split_ranges(ranges: list[OffsetRange], size: int) -> list[OffsetRange]:
    """``ranges`` cut into pieces of at most ``size`` messages (one Spark task each)."""
    return [
        OffsetRange(r.partition, start, min(r.end, start + size))
        for r in ranges
        for start in range(r.start, r.end, size)
    ]


@dataclass
class _Job:
    spark: Any
    spec: BatchSpec
    config: dict[str, Any]
    rules: Rules
    dataset: Dataset
    dead_letter: bool
    chunk_size: int
    report: Callable[[IngestEvent], None]

    def _result(self, mode: str, output_id: str) -> IngestResult:
        return IngestResult(
            batch_id=self.spec.batch_id,
            kind=self.spec.kind,
            topic=self.spec.topic,
            sink=str(self.dataset.root),
            mode=mode,
            ranges=list(self.spec.ranges),
            output=str(self.dataset.output_dir(output_id)),
            quarantine_output=str(self.dataset.quarantine_dir(output_id)),
        )

    def _write(self, raw: Any, staging: Path) -> None:
        """Sort ``raw`` into good and bad rows and append both to ``staging`` (one pass over
        ``raw``: it is cached for the second write)."""
        classified = classify(raw, self.rules).persist()
        try:
            good_rows(classified, self.rules).write.mode("append").parquet(str(staging / "data"))
            bad_rows(classified).write.mode("append").parquet(str(staging / "quarantine"))
        finally:
            classified.unpersist()

    def _write_batch(self, batch: pa.RecordBatch, staging: Path, number: int) -> None:
        """Hand a batch read on the driver to Spark through a local Parquet file: Spark's tasks
        read it themselves, instead of the batch travelling inside the tasks."""
        raw_file = staging / "raw" / f"part-{number:05d}.parquet"
        raw_file.parent.mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_batches([batch]), raw_file, compression="none")
        self._write(self.spark.read.parquet(str(raw_file)), staging)
        raw_file.unlink()

    # ---- Kafka ---------------------------------------------------------------------------

    def run_kafka(self, mode: Mode) -> IngestResult:
        from .kafka_source import commit_offsets, committed_offsets, reader_kwargs

        spec, kwargs = self.spec, reader_kwargs(self.config)
        chosen = mode
        if mode == "auto":
            chosen = "executors" if spec.message_count >= AUTO_EXECUTOR_MESSAGES else "driver"
        result = self._result(chosen, spec.batch_id)
        partitions = [r.partition for r in spec.ranges]
        committed = committed_offsets(kwargs, spec.topic, str(spec.group_id), partitions)
        if self.dataset.manifest(spec.batch_id) is None:
            written = self.dataset.written_ends(spec.topic, spec.group_id)
            todo = [
                OffsetRange(
                    r.partition,
                    min(
                        r.end,
                        max(r.start, committed[r.partition] or 0, written.get(r.partition, 0)),
                    ),
                    r.end,
                )
                for r in spec.ranges
            ]
            todo = [r for r in todo if r.count]
            result.skipped = spec.message_count - sum(r.count for r in todo)
            staging = self.dataset.stage(spec.batch_id)
            if todo:
                if chosen == "driver":
                    result.bytes = self._read_on_driver(kwargs, todo, staging, result.skipped)
                else:
                    result.bytes = self._read_on_executors(kwargs, todo, staging)
            result.written = _rows(staging / "data")
            result.quarantined = _rows(staging / "quarantine")
            result.read = result.written + result.quarantined
            self.report(IngestEvent("read", result.read + result.skipped, spec.message_count))
            if self.dead_letter and result.quarantined:
                self._dead_letter_kafka(staging / "quarantine")
            self.dataset.publish(
                staging,
                spec.batch_id,
                {**spec.to_dict(), "ranges": [r.__dict__ for r in todo], **_counts(result)},
            )
        else:
            result.skipped = spec.message_count
        self.report(IngestEvent("written", result.read + result.skipped, spec.message_count))
        ahead = {r.partition: r.end for r in spec.ranges if (committed[r.partition] or -1) < r.end}
        commit_offsets(kwargs, spec.topic, str(spec.group_id), ahead)
        result.committed = True
        self.report(IngestEvent("committed", result.read + result.skipped, spec.message_count))
        return result

    def _stall_timeout_s(self) -> float:
        return float(self.config["options.request_timeout"]) / 1000

    def _read_on_driver(
        self, kwargs: dict[str, Any], todo: list[OffsetRange], staging: Path, done: int
    ) -> int:
        from .kafka_source import read_ranges

        total_bytes = 0
        chunks = read_ranges(
            kwargs, self.spec.topic, todo, self.chunk_size, self._stall_timeout_s()
        )
        for number, batch in enumerate(_prefetch(chunks)):
            total_bytes += _value_bytes(batch)
            self._write_batch(batch, staging, number)
            done += batch.num_rows
            self.report(IngestEvent("reading", done, self.spec.message_count))
        return total_bytes

    def _read_on_executors(
        self, kwargs: dict[str, Any], todo: list[OffsetRange], staging: Path
    ) -> int:
        from pyspark.sql import functions as F

        from .kafka_source import read_ranges

        pieces = split_ranges(todo, self.chunk_size)
        rows = [(r.partition, r.start, r.end) for r in pieces]
        ranges_schema = "partition INT, start BIGINT, end BIGINT"
        try:  # classic Spark: exactly one task per range
            ranges = self.spark.createDataFrame(
                self.spark.sparkContext.parallelize(rows, len(rows)), ranges_schema
            )
        except Exception:  # Spark Connect has no SparkContext
            ranges = self.spark.createDataFrame(rows, ranges_schema).repartition(len(rows))
        topic, stall_s = self.spec.topic, self._stall_timeout_s()

        def read_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for partition, start, end in zip(*batch.to_pydict().values(), strict=True):
                    piece = [OffsetRange(partition, start, end)]
                    yield from read_ranges(kwargs, topic, piece, TASK_BATCH_ROWS, stall_s)

        raw = ranges.mapInArrow(read_task, RAW_SCHEMA_DDL).persist()
        try:
            value_bytes = raw.select(F.sum(F.length("value"))).first()[0]  # reads, and caches
            self._write(raw, staging)
        finally:
            raw.unpersist()
        self.report(IngestEvent("reading", self.spec.message_count, self.spec.message_count))
        return int(value_bytes or 0)

    def _dead_letter_kafka(self, quarantined: Path) -> None:
        from ..kafka.connection import KafkaConnection
        from ..kafka.records import dead_letter_headers

        table = pq.read_table(quarantined)
        topic = self.config["options.dead_letter_topic"] or f"{self.spec.topic}.dlq"
        records = [
            {
                "key": row["key"],
                "value": row["value"],
                "headers": [
                    *[(h["key"], h["value"]) for h in row["headers"] or []],
                    *dead_letter_headers(
                        row["topic"], row["partition"], row["offset"], row["reason"]
                    ),
                ],
            }
            for row in table.to_pylist()
        ]
        connection = KafkaConnection()
        connection.use_config(self.config)
        connection.open(None)
        try:
            connection.publish(topic, records)
        finally:
            connection.close(None)

    # ---- MQTT ----------------------------------------------------------------------------

    def run_mqtt(self) -> IngestResult:
        from .mqtt_source import drain, open_session, to_columns

        spec = self.spec
        session = open_session(self.config)
        try:
            self.report(IngestEvent("reading", 0, spec.max_messages))
            messages = drain(session, spec.max_messages)
            seen = self.dataset.written_message_ids(spec.topic)
            fresh = []
            for message in messages:
                if message.message_id not in seen:
                    seen.add(message.message_id)
                    fresh.append(message)
            ids = sorted(m.message_id for m in fresh)
            output_id = hashlib.sha256("\n".join([spec.batch_id, *ids]).encode()).hexdigest()[:20]
            result = self._result("driver", output_id)
            result.read, result.duplicates = len(messages), len(messages) - len(fresh)
            self.report(IngestEvent("read", result.read, spec.max_messages))
            reasons: dict[str, str] = {}
            if fresh:
                batch = to_columns(fresh).to_batch()
                result.bytes = _value_bytes(batch)
                staging = self.dataset.stage(output_id)
                self._write_batch(batch, staging, 0)
                result.written = _rows(staging / "data")
                result.quarantined = _rows(staging / "quarantine")
                if self.dead_letter and result.quarantined:
                    table = pq.read_table(staging / "quarantine", columns=["message_id", "reason"])
                    reasons = dict(zip(*table.to_pydict().values(), strict=True))
                self.dataset.publish(
                    staging, output_id, {**spec.to_dict(), "message_ids": ids, **_counts(result)}
                )
            self.report(IngestEvent("written", result.read, spec.max_messages))
            for message in messages:
                reason = reasons.pop(message.message_id, None)
                if reason is not None:
                    session.move_to_dead_letter(message, reason)
                else:
                    session.complete(message)
            result.committed = True
            self.report(IngestEvent("committed", result.read, spec.max_messages))
            return result
        finally:
            session.close(None)


def _value_bytes(batch: pa.RecordBatch) -> int:
    return int(pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0)


def _rows(directory: Path) -> int:
    return parquet_rows(directory) if directory.exists() else 0


def _counts(result: IngestResult) -> dict[str, int]:
    return {
        "read": result.read,
        "written": result.written,
        "quarantined": result.quarantined,
        "duplicates": result.duplicates,
    }
