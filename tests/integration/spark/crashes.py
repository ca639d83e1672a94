"""Helpers of the crash tests: an ingest in a child process on the session's Spark, killed at
a failpoint or at a moment, and the checks that follow (``sluice audit`` is the oracle)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from sluice.audit import AuditReport, audit
from sluice.batch import OffsetRange
from sluice.kafka.ranges import read_range_records
from sluice.maintenance import compact, expire
from sluice.queues.config import ConfigError
from sluice.spark.kafka_source import DEFAULT_READER
from sluice.spark.sinks.s3 import is_s3
from sluice.testing.crash import run_child

__all__ = [
    "assert_exactly_once",
    "dead_letter_origins",
    "kafka_audit",
    "maintain_days_later",
    "run_child",
    "with_reader",
]


def with_reader(source: str, reader: str) -> str:
    """The Kafka source URI ``source`` reading batches with ``reader`` (``options.reader``);
    the default reader leaves the URI as it is."""
    return source if reader == DEFAULT_READER else f"{source}?reader={reader}"


#: How long after a crash the maintenance of :func:`maintain_days_later` runs: more than
#: ``sluice expire``'s default cutoff (7 days) and minimum age (1 hour).
DAYS_LATER = 8 * 86400


#: Failpoints before an ingest's first write: the crash may leave no table, and a command
#: on a sink without one says so (ConfigError: "give the sink of an ingest").
UNWRITTEN = ("read.before", "read.after_first_chunk")


def maintain_days_later(sink: str | os.PathLike[str], point: str) -> None:
    """``sluice compact`` and ``sluice expire`` on ``sink`` with their defaults, in-process, as
    if eight days had passed since a crash at ``point`` (expiry's clock is moved, not the
    files'); on S3 only the expiry."""
    commands = [lambda: compact(sink), lambda: expire(sink, now=time.time() + DAYS_LATER)]
    if is_s3(sink):
        commands.pop(0)  # a Parquet dataset on S3 is not compacted (sluice compact says why)
    for command in commands:
        with contextlib.suppress(ConfigError) if point in UNWRITTEN else contextlib.nullcontext():
            command()


def assert_exactly_once(report: AuditReport, messages: int) -> None:
    """The audit passes and holds ``messages`` offsets, each once."""
    assert report.ok, "\n".join(report.lines())
    held = sum(p.written + p.quarantined for s in report.streams for p in s.partitions)
    assert held == messages, "\n".join(report.lines())


def kafka_audit(sink: Path, source: str) -> AuditReport:
    return audit(sink, source)


def dead_letter_origins(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of origin of every record on the dead-letter topic ``topic``."""
    from sluice.kafka.offsets import topic_ends

    kwargs = {"bootstrap_servers": bootstrap}
    ends = topic_ends(kwargs, topic)
    origins = []
    ranges = [OffsetRange(p, 0, end) for p, end in ends.items()]
    for _, records in read_range_records(kwargs, topic, ranges, 30):
        for r in records:
            headers = dict(r.headers)
            origins.append(
                (int(headers["sluice.original_partition"]), int(headers["sluice.original_offset"]))
            )
    return sorted(origins)
