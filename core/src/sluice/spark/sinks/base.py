"""What every sink keeps: a record of each published batch, and a small state per stream.

A *stream* is what one group reads: (kafka, topic, group_id) or (mqtt, topic filter, client id).
Its :class:`StreamState` says which offsets the sink holds (``written``: good or quarantined
rows), which were given up as lost, and (MQTT) the ids of the most recent messages, so that an
ingest decides what is left to do without reading the sink's history (invariant I5).

A :class:`BatchRecord` is published together with the batch's rows, in one atomic step
(invariant I2): a sink either has a batch, rows and record, or has neither.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ...batch import BatchSpec, OffsetRange
from .coverage import Coverage

if TYPE_CHECKING:
    from ..writing import WriteTargets

__all__ = [
    "DEDUP_WINDOW",
    "ROW_COORDINATES",
    "BatchRecord",
    "ConcurrentIngestError",
    "Sink",
    "Staging",
    "StreamKey",
    "StreamState",
    "check_publishable",
    "coordinates_by_batch",
    "no_coordinates",
    "with_coordinates",
]

#: How many of the most recent MQTT message ids a stream remembers for de-duplication. A
#: redelivery after a crash comes from the batch that was being ingested, so a window of the
#: last batches' ids is enough; it keeps the state bounded.
DEDUP_WINDOW = 100_000
#: How many batch ids a stream remembers (makes folding a batch into the state idempotent).
RECENT_BATCHES = 1_000


class ConcurrentIngestError(RuntimeError):
    """Another ingest of the same stream is running, or published some of the same offsets
    while this one ran (invariant I7)."""


@dataclass(frozen=True)
class StreamKey:
    kind: str
    topic: str
    group: str | None  # Kafka group id, or MQTT session client id
    # a routed batch's slice: the route table it went to (sluice.routes), None otherwise
    route: str | None = None

    @classmethod
    def of(cls, spec: BatchSpec, route: str | None = None) -> StreamKey:
        group = spec.group_id if spec.kind == "kafka" else spec.client_id
        return cls(spec.kind, spec.topic, group, route)

    @property
    def slug(self) -> str:
        text = f"{self.kind}\0{self.topic}\0{self.group}"
        if self.route is not None:  # a stream without a route keeps its slug
            text += f"\0{self.route}"
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class BatchRecord:
    """What a published batch holds (its manifest). Counts and offsets, never payloads."""

    batch_id: str
    spec: dict[str, Any]
    ranges: list[OffsetRange] = field(default_factory=list)  # Kafka: offsets written (both tables)
    group_start: dict[int, int] = field(default_factory=dict)  # where a new group began
    lost: list[dict[str, Any]] = field(default_factory=list)  # accepted losses, with reasons
    reset_partitions: list[int] = field(default_factory=list)  # recreated partitions
    # the group's committed offset of a reset partition when it was reset (the old topic's)
    reset_commits: dict[int, int] = field(default_factory=dict)
    message_ids: list[str] = field(default_factory=list)  # MQTT: ids written (both tables)
    quarantined_ids: dict[str, str] = field(default_factory=dict)  # MQTT: id -> reason
    counts: dict[str, int] = field(default_factory=dict)
    dead_letter_topic: str | None = None
    published_at: float = 0.0  # seconds since the epoch
    broker_dropped: int | None = None  # MQTT: the broker's drop counter at this ingest
    # Kafka, per partition: offset and fingerprint of the last message written
    fingerprints: dict[int, tuple[int, str]] = field(default_factory=dict)
    topic_id: str | None = None  # Kafka: the topic's id, where the broker has them (KIP-516)
    run: str | None = None  # the run that published it (one of possibly several of the batch)
    planned_on: int | None = None  # how many batches the stream's state held when it was planned
    # what a payload format keeps per stream (Sparkplug B: the alias book), as of this batch
    format_state: dict[str, Any] = field(default_factory=dict)
    # change data capture: the delete markers this batch sets (key -> the delete's source
    # position) or drops (None), see sluice.spark.sinks.upsert
    cdc_markers: dict[str, int | None] = field(default_factory=dict)
    cdc_truncated: int | None = None  # the source position of a truncate this batch applied
    # routed batches (sluice.routes): a slice's table, and the digest of the batch's routes
    route: str | None = None
    routes: str | None = None

    @property
    def stream(self) -> StreamKey:
        return StreamKey.of(BatchSpec.from_dict(self.spec), self.route)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "spec": self.spec,
            "ranges": [r.__dict__ for r in self.ranges],
            "group_start": {str(p): s for p, s in self.group_start.items()},
            "lost": self.lost,
            "reset_partitions": self.reset_partitions,
            "reset_commits": {str(p): o for p, o in self.reset_commits.items()},
            "message_ids": self.message_ids,
            "quarantined_ids": self.quarantined_ids,
            "counts": self.counts,
            "dead_letter_topic": self.dead_letter_topic,
            "published_at": self.published_at,
            "broker_dropped": self.broker_dropped,
            "fingerprints": {str(p): list(f) for p, f in self.fingerprints.items()},
            "topic_id": self.topic_id,
            "run": self.run,
            "planned_on": self.planned_on,
            "format_state": self.format_state,
            **({"cdc_markers": self.cdc_markers} if self.cdc_markers else {}),
            **({"cdc_truncated": self.cdc_truncated} if self.cdc_truncated is not None else {}),
            **({"route": self.route} if self.route is not None else {}),
            **({"routes": self.routes} if self.routes is not None else {}),
        }

    def summary_json(self) -> dict[str, Any]:
        """The record as a commit's own metadata carries it (an Iceberg snapshot's summary, a
        Delta commit's ``commitInfo``): bounded, whatever the batch. MQTT message ids, the
        quarantine's reasons and the delete markers stay in the record's file and the stream
        state; their counts are here."""
        stored = self.to_json()
        stored["message_ids"], stored["quarantined_ids"] = [], {}
        markers = stored.pop("cdc_markers", None)
        if markers:
            stored["cdc_marker_count"] = len(markers)
        return stored

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchRecord:
        return cls(
            batch_id=data["batch_id"],
            spec=data["spec"],
            ranges=[OffsetRange(**r) for r in data.get("ranges", [])],
            group_start={int(p): int(s) for p, s in (data.get("group_start") or {}).items()},
            lost=list(data.get("lost", [])),
            reset_partitions=[int(p) for p in data.get("reset_partitions", [])],
            reset_commits={int(p): int(o) for p, o in (data.get("reset_commits") or {}).items()},
            message_ids=list(data.get("message_ids", [])),
            quarantined_ids=dict(data.get("quarantined_ids", {})),
            counts=dict(data.get("counts", {})),
            dead_letter_topic=data.get("dead_letter_topic"),
            published_at=float(data.get("published_at", 0.0)),
            broker_dropped=data.get("broker_dropped"),
            fingerprints=_fingerprints(data.get("fingerprints")),
            topic_id=data.get("topic_id"),
            run=data.get("run"),
            planned_on=data.get("planned_on"),
            format_state=dict(data.get("format_state") or {}),
            cdc_markers=dict(data.get("cdc_markers") or {}),
            cdc_truncated=data.get("cdc_truncated"),
            route=data.get("route"),
            routes=data.get("routes"),
        )


def fold_markers(deleted: dict[str, int], markers: dict[str, int | None]) -> None:
    """Set (a position) or drop (None) a stream's change data capture delete markers."""
    for key, position in markers.items():
        if position is None:
            deleted.pop(key, None)
        else:
            deleted[key] = position


def check_publishable(state: StreamState, record: BatchRecord) -> None:
    """Raise :class:`ConcurrentIngestError` (nothing is published then) when another run of
    the stream published since ``record``'s run planned from ``state`` (invariant I7): the
    state holds more batches than when it planned, or some of the same offsets or ids."""
    stream = record.stream
    reset = set(record.reset_partitions)
    taken = state.written.overlaps([r for r in record.ranges if r.partition not in reset])
    moved = record.planned_on is not None and state.batches != record.planned_on
    if taken or moved or any(i in state.recent_ids for i in record.message_ids):
        what = ", ".join(_describe(r) for r in taken[:5]) or (
            "message ids" if not moved else f"{state.batches - (record.planned_on or 0)} batch(es)"
        )
        raise ConcurrentIngestError(
            f"Another ingest of {stream.kind} topic '{stream.topic}' published while batch "
            f"{record.batch_id} was ingested ({what}). Nothing was published or committed; "
            "run the batch again to ingest what is left."
        )


def _describe(r: OffsetRange) -> str:
    return f"partition {r.partition} offsets {r.start}-{r.end - 1}"


def _fingerprints(data: Any) -> dict[int, tuple[int, str]]:
    return {int(p): (int(f[0]), str(f[1])) for p, f in (data or {}).items()}


@dataclass
class StreamState:
    """A stream's bounded state (see the module docstring)."""

    written: Coverage = field(default_factory=Coverage)
    lost: Coverage = field(default_factory=Coverage)
    recent_ids: dict[str, str | None] = field(default_factory=dict)  # id -> quarantine reason
    recent_batches: list[str] = field(default_factory=list)
    batches: int = 0
    broker_dropped: int | None = None  # MQTT: the broker's drop counter at the last ingest
    fingerprints: dict[int, tuple[int, str]] = field(default_factory=dict)  # Kafka: see record
    topic_id: str | None = None  # Kafka: the id of the topic written, where the broker has ids
    # Kafka: a reset partition's old committed offset, stale until the group commits anew
    stale_commits: dict[int, int] = field(default_factory=dict)
    format_state: dict[str, Any] = field(default_factory=dict)  # see BatchRecord.format_state
    cdc_deleted: dict[str, int] = field(default_factory=dict)  # see BatchRecord.cdc_markers
    cdc_truncated: int | None = None  # the position of the last truncate applied

    @property
    def held(self) -> Coverage:
        """Offsets the group may commit over: written, or given up as lost."""
        return self.written.union(self.lost)

    def fold(self, record: BatchRecord) -> bool:
        """Add a published batch; False if it was already folded in."""
        if record.batch_id in self.recent_batches:
            return False
        for partition in record.reset_partitions:
            self.written.forget(partition)
            self.lost.forget(partition)
            self.fingerprints.pop(partition, None)
            self.stale_commits.pop(partition, None)
            if partition in record.reset_commits:
                self.stale_commits[partition] = record.reset_commits[partition]
        self.written.add_ranges(record.ranges)
        for partition, (offset, fingerprint) in record.fingerprints.items():
            if offset >= self.fingerprints.get(partition, (-1, ""))[0]:
                self.fingerprints[partition] = (offset, fingerprint)
        if record.topic_id is not None:
            self.topic_id = record.topic_id
        for loss in record.lost:
            if loss.get("reason") == "retention":  # a recreated partition's old end is no offset
                self.lost.add(int(loss["partition"]), int(loss["start"]), int(loss["end"]))
        for message_id in record.message_ids:
            self.recent_ids[message_id] = record.quarantined_ids.get(message_id)
        for stale in list(self.recent_ids)[: max(0, len(self.recent_ids) - DEDUP_WINDOW)]:
            del self.recent_ids[stale]
        self.recent_batches = [*self.recent_batches, record.batch_id][-RECENT_BATCHES:]
        if record.broker_dropped is not None:
            self.broker_dropped = record.broker_dropped
        self.format_state.update(record.format_state)
        fold_markers(self.cdc_deleted, record.cdc_markers)
        if record.cdc_truncated is not None:
            self.cdc_truncated = max(record.cdc_truncated, self.cdc_truncated or 0)
        self.batches += 1
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "written": self.written.to_json(),
            "lost": self.lost.to_json(),
            "recent_ids": self.recent_ids,
            "recent_batches": self.recent_batches,
            "batches": self.batches,
            "broker_dropped": self.broker_dropped,
            "fingerprints": {str(p): list(f) for p, f in sorted(self.fingerprints.items())},
            "topic_id": self.topic_id,
            "stale_commits": {str(p): o for p, o in sorted(self.stale_commits.items())},
            **({"format_state": self.format_state} if self.format_state else {}),
            **({"cdc_deleted": self.cdc_deleted} if self.cdc_deleted else {}),
            **({"cdc_truncated": self.cdc_truncated} if self.cdc_truncated is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StreamState:
        return cls(
            written=Coverage.from_json(data.get("written")),
            lost=Coverage.from_json(data.get("lost")),
            recent_ids=dict(data.get("recent_ids", {})),
            recent_batches=list(data.get("recent_batches", [])),
            batches=int(data.get("batches", 0)),
            broker_dropped=data.get("broker_dropped"),
            fingerprints=_fingerprints(data.get("fingerprints")),
            topic_id=data.get("topic_id"),
            stale_commits={int(p): int(o) for p, o in (data.get("stale_commits") or {}).items()},
            format_state=dict(data.get("format_state") or {}),
            cdc_deleted={k: int(p) for k, p in (data.get("cdc_deleted") or {}).items()},
            cdc_truncated=data.get("cdc_truncated"),
        )


@dataclass(frozen=True)
class Staging:
    """Where one run writes a batch before it is published."""

    batch_id: str
    directory: Path  # becomes the batch: good rows, and quarantine/ inside
    scratch: Path  # hand-over files from the driver to Spark; never published

    @property
    def data(self) -> Path:
        return self.directory

    @property
    def quarantine(self) -> Path:
        return self.directory / "_quarantine"


class Sink(Protocol):
    """Where batches go (see :mod:`sluice.spark.sinks.parquet`)."""

    location: str

    def check(self) -> None:
        """Raise ``ConfigError`` saying what to fix when the sink cannot be written."""

    def kept_columns(self) -> tuple[str, ...] | None:
        """The message columns the table's rows keep (:mod:`sluice.spark.layout`), as recorded
        when it was made (a table made before that was recorded: the whole message); None:
        no table yet."""

    def keep_columns(self, kept: Sequence[str]) -> None:
        """Record that the rows keep the message columns ``kept``, unless the table has its
        choice recorded (an ingest calls it after :meth:`kept_columns`, before it writes)."""

    def exclusive(self, stream: StreamKey) -> AbstractContextManager[None]:
        """Hold the stream for one run (invariant I7): a second run of the same stream gets
        :class:`ConcurrentIngestError` instead of touching the first run's work."""

    def recover(self) -> None:
        """Finish or forget what a crashed run left between two steps of a publish."""

    def find(self, batch_id: str) -> BatchRecord | None:
        """The record of a published batch, or None."""

    def state(self, stream: StreamKey) -> StreamState:
        """The stream's current state."""

    def stage(self, batch_id: str) -> Staging:
        """A fresh staging area for one run of ``batch_id``."""

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        """Make the staged batch visible and recorded in one step, then fold it into its
        stream's state. Raises :class:`ConcurrentIngestError` when another run published some
        of ``record``'s offsets meanwhile (nothing is published then)."""

    def discard(self, staging: Staging) -> None:
        """Forget a staging area."""

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> WriteTargets:
        """Where a chunk's good and quarantined rows (of these schemas) go in ``staging``
        (directories a run's files are moved into, :mod:`sluice.spark.writing`)."""

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        """(good rows, quarantined rows) in ``staging``."""

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        """message_id -> reason of the quarantined rows in ``staging``."""

    def output_location(self, batch_id: str) -> str:
        """Where a published batch's good rows are, for the result (a path or a table)."""

    def quarantine_location(self, batch_id: str) -> str:
        """Where a published batch's quarantined rows are."""

    def quarantine_table(self, batch_id: str) -> pa.Table:
        """The published quarantined rows of ``batch_id``."""

    def records(self) -> Iterator[BatchRecord]:
        """Every published batch (for the audit; an ingest never calls it)."""

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        """``partition``, ``offset`` and ``message_id`` of a published batch's rows."""

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        """How far sending the dead letters of ``batch_id`` got (None: not started)."""

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        """Record how far sending the dead letters of ``batch_id`` got."""


@contextmanager
def stream_lock(path: Path, stream: StreamKey, where: str) -> Iterator[None]:
    """The one run of ``stream`` (invariant I7) on a local sink: ``flock`` on ``path``, which
    names its holder; a second run gets :class:`ConcurrentIngestError`. ``where``: the sink,
    as the error names it ("this sink", "the Delta table ...")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConcurrentIngestError(
                f"Another ingest of {stream.kind} topic '{stream.topic}' "
                f"({'group' if stream.kind == 'kafka' else 'session'} '{stream.group}') is "
                f"running on {where} ({holder}). Nothing was done; run the batch again once it "
                "has finished (its commit may have ingested these messages)."
            ) from None
        try:
            handle.truncate(0)
            handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.ctime()}")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def rows_by_batch(rows: pa.Table, column: str) -> dict[str, pa.Table]:
    """``rows`` split by the value of ``column`` (a batch id), without that column."""
    import pyarrow.compute as pc

    return {
        name: rows.filter(pc.equal(rows.column(column), name)).drop_columns([column])
        for name in set(rows.column(column).to_pylist())
    }


#: What the audit reads of each row to find its message: Kafka's partition and offset, an
#: MQTT message's id.
ROW_COORDINATES = {"partition": pa.int32(), "offset": pa.int64(), "message_id": pa.string()}


def with_coordinates(rows: pa.Table) -> pa.Table:
    """The :data:`ROW_COORDINATES` columns of ``rows``; one it lacks (``message_id`` of a
    table that keeps no message id) is null."""
    for name, kind in ROW_COORDINATES.items():
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, kind))
    return rows.select(list(ROW_COORDINATES)).cast(pa.schema(ROW_COORDINATES.items()))


def no_coordinates() -> pa.Table:
    return pa.table({c: pa.array([], t) for c, t in ROW_COORDINATES.items()})


def coordinates_by_batch(rows: pa.Table, column: str) -> dict[str, pa.Table]:
    """The coordinates of ``rows`` (:func:`with_coordinates`) by the batch id in ``column``."""
    batches = rows.column(column).cast(pa.string())
    return rows_by_batch(with_coordinates(rows).append_column(column, batches), column)
