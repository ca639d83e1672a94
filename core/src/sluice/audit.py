"""``sluice audit``: a sink checked against the broker, the oracle of the crash tests.

For every Kafka stream (topic and group) in the sink, per partition, it compares the rows in
the sink's data files (good and quarantined) with the group's committed offset and the
partition's log start and end:

- ``written`` / ``quarantined``: distinct offsets in the data files;
- ``doubled``: offsets found more than once (in one batch or several);
- ``missing``: offsets below the committed offset, from where the group began, in no batch
  and not recorded as lost: the group committed over messages the sink does not have. An
  offset a batch record claims without a row (an ingest reconciled it as having no message: a
  transaction marker, an aborted or compacted record) is asked of the broker: a message found
  there is missing too;
- ``lost``: ranges recorded as lost by an ingest that accepted data loss.

MQTT streams have no offsets: it counts message ids, and ids found more than once.

A current-state table (``write_mode="upsert"``) holds no row per message: the offsets its
batches claim, less the quarantined ones, count as written, and :class:`CurrentStateAudit`
checks the rows. It reads every batch's messages again from the broker, applies them batch by
batch as an ingest does (:mod:`sluice.cdc`: the last change per key, a change older than the
row it would replace ignored) and compares: every key's row equals its last change, and no
deleted key has a row.

The audit passes (:attr:`AuditReport.ok`) when nothing is missing or doubled, and a
current-state table's rows are the ones its committed changes give. Unlike an ingest, it
reads the sink's whole history.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .batch import BatchSpec, OffsetRange

__all__ = [
    "SCHEMA_VERSION",
    "AuditReport",
    "CurrentStateAudit",
    "PartitionAudit",
    "StreamAudit",
    "audit",
]

#: Version of :meth:`AuditReport.to_dict`'s layout (``sluice audit --json``, documented in
#: docs/guides/observability.md); a field is only ever added within a version.
SCHEMA_VERSION = 1


@dataclass
class PartitionAudit:
    partition: int
    log_start: int
    log_end: int
    committed: int | None
    written: int = 0
    quarantined: int = 0
    doubled: int = 0
    missing: list[OffsetRange] = field(default_factory=list)
    lost: list[OffsetRange] = field(default_factory=list)

    @property
    def missing_count(self) -> int:
        return sum(r.count for r in self.missing)

    @property
    def lost_count(self) -> int:
        return sum(r.count for r in self.lost)


@dataclass
class StreamAudit:
    kind: str
    topic: str
    group: str | None
    batches: int = 0
    partitions: list[PartitionAudit] = field(default_factory=list)  # Kafka
    messages: int = 0  # MQTT: distinct ids written
    quarantined: int = 0  # MQTT
    doubled: int = 0  # MQTT: ids found more than once

    @property
    def ok(self) -> bool:
        return not self.doubled and all(not p.doubled and not p.missing for p in self.partitions)


@dataclass
class CurrentStateAudit:
    """A current-state table's rows against its committed changes: ``keys`` the table should
    hold; ``wrong`` of its rows differ from their key's last change, ``absent`` keys have no
    row, ``deleted`` keys (or keys no change names) have one; a few of each in ``examples``."""

    key_columns: list[str]
    keys: int = 0
    rows: int = 0
    wrong: int = 0
    absent: int = 0
    deleted: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.absent or self.deleted) and self.rows == self.keys


@dataclass
class AuditReport:
    sink: str
    streams: list[StreamAudit] = field(default_factory=list)
    current_state: CurrentStateAudit | None = None
    #: data files a plain reader of the dataset sees that no committed batch lists (Parquet
    #: on S3, where batches appear as objects, not by a rename)
    unlisted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        state = self.current_state is None or self.current_state.ok
        return state and not self.unlisted and all(s.ok for s in self.streams)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``sluice audit --json`` (layout :data:`SCHEMA_VERSION`)."""
        return {
            "version": SCHEMA_VERSION,
            "sink": self.sink,
            "ok": self.ok,
            "streams": [{**asdict(s), "ok": s.ok} for s in self.streams],
            "unlisted": self.unlisted,
            **(
                {"current_state": {**asdict(self.current_state), "ok": self.current_state.ok}}
                if self.current_state is not None
                else {}
            ),
        }

    def stream(self, kind: str, topic: str, group: str | None) -> StreamAudit | None:
        """The audit of one stream of the sink (None: the sink holds no batch of it)."""
        found = [s for s in self.streams if (s.kind, s.topic, s.group) == (kind, topic, group)]
        return found[0] if found else None

    def problems(self, stream: StreamAudit | None = None) -> list[str]:
        """What is wrong, one line per stream or partition (empty when the audit passes):
        the reason a check built on the audit fails with."""
        found: list[str] = []
        if stream is None and self.unlisted:
            found.append(
                f"{len(self.unlisted)} data file(s) that plain readers see are in no committed "
                f"batch: {', '.join(self.unlisted[:5])}"
            )
        state = self.current_state
        if stream is None and state is not None and not state.ok:
            found.append(
                f"the current-state table's rows differ from its committed changes: "
                f"{state.wrong} wrong, {state.absent} absent, {state.deleted} deleted but "
                f"present, {state.rows} row(s) for {state.keys} key(s)"
            )
        for s in [stream] if stream is not None else self.streams:
            where = f"{s.kind} topic '{s.topic}' ({'group' if s.kind == 'kafka' else 'session'} "
            where += f"'{s.group}')"
            if s.doubled:
                found.append(f"{where}: {s.doubled} message id(s) written more than once")
            for p in s.partitions:
                if p.missing:
                    ranges = ", ".join(
                        str(r.start) if r.count == 1 else f"{r.start}-{r.end - 1}"
                        for r in p.missing[:5]
                    )
                    found.append(
                        f"{where}, partition {p.partition}: {p.missing_count} offset(s) committed "
                        f"but in no batch ({ranges})"
                    )
                if p.doubled:
                    found.append(
                        f"{where}, partition {p.partition}: {p.doubled} offset(s) written more "
                        "than once"
                    )
        return found

    def lines(self) -> list[str]:
        """The report as text, one line per partition."""
        out = [f"sink {self.sink}"]
        for s in self.streams:
            owner = f"group '{s.group}'" if s.kind == "kafka" else f"session '{s.group}'"
            out.append(f"{s.kind} topic '{s.topic}', {owner}: {s.batches} batch(es)")
            if s.kind == "mqtt":
                out.append(
                    f"  messages {s.messages}, quarantined {s.quarantined}, doubled {s.doubled}"
                )
            for p in s.partitions:
                out.append(
                    f"  partition {p.partition}: log start {p.log_start}, end {p.log_end}, "
                    f"committed {p.committed}, written {p.written}, quarantined "
                    f"{p.quarantined}, doubled {p.doubled}, missing {p.missing_count}, "
                    f"lost {p.lost_count}"
                )
                out += [f"    missing offsets {r.start}-{r.end - 1}" for r in p.missing[:10]]
        state = self.current_state
        if state is not None:
            out.append(
                f"current-state table keyed by {', '.join(state.key_columns)}: {state.rows} "
                f"row(s) for {state.keys} key(s), wrong {state.wrong}, absent {state.absent}, "
                f"deleted but present {state.deleted}"
            )
            out += [f"  {example}" for example in state.examples]
        out += [f"in no committed batch, seen by plain readers: {u}" for u in self.unlisted[:20]]
        out.append(
            "OK: every message is in the sink once."
            if self.ok
            else "FAILED: messages are missing or doubled (see above)."
        )
        return out


def audit(
    sink: str | os.PathLike[str],
    source: str | Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    value_format: str = "json",
    key_format: str = "bytes",
    schema_registry: str | Mapping[str, Any] | None = None,
) -> AuditReport:
    """Audit ``sink``; ``source`` (a queue URI or config naming the Kafka cluster) is needed
    when the sink holds Kafka batches. ``progress(done, total)`` is called per batch read.
    A current-state table's envelopes are read as its ingest read them: ``value_format``,
    ``key_format`` and ``schema_registry`` as :func:`sluice.spark.ingest` takes them with
    ``write_mode="upsert"`` (Debezium's JSON by default, or Avro from a registry)."""
    from .spark.sinks import open_sink

    opened = open_sink(sink)
    opened.recover()
    records = sorted(opened.records(), key=lambda r: r.published_at)
    routed = next((r for r in records if r.routes is not None), None)
    if routed is not None:
        what = f"route table {routed.route}" if routed.route else "a routed ingest's sink"
        raise ValueError(
            f"{opened.location} is {what}: it holds only the messages its routes send there. "
            "Audit the routed stream with its routes: sluice audit SINK --routes ROUTES, SINK "
            "being the routed ingest's own sink (sluice.route_audit.audit_routes)."
        )
    streams: dict[tuple[str, str, str | None], list[Any]] = {}
    for record in records:
        key = record.stream
        streams.setdefault((key.kind, key.topic, key.group), []).append(record)
    report = AuditReport(opened.location)
    key_columns = getattr(opened, "current_key_columns", lambda: None)()
    done = 0
    for (kind, topic, group), batch_records in streams.items():
        stream = StreamAudit(kind, topic, group, batches=len(batch_records))
        if kind == "kafka":
            if source is None:
                raise ValueError(
                    f"The sink holds Kafka batches of topic '{topic}': give the source "
                    "(--source kafka://HOST:PORT) so that the audit can read the group's "
                    "committed offsets."
                )
            _audit_kafka(opened, stream, batch_records, source, key_columns is not None)
        else:
            _audit_mqtt(opened, stream, batch_records)
        report.streams.append(stream)
        done += len(batch_records)
        if progress is not None:
            progress(done, len(records))
    if key_columns is not None:
        formats = {
            "value_format": value_format,
            "key_format": key_format,
            "schema_registry": schema_registry,
        }
        report.current_state = _audit_current_state(opened, key_columns, records, source, formats)
    report.unlisted = getattr(opened, "unlisted", list)()
    return report


def _audit_current_state(
    sink: Any, key_columns: list[str], records: list[Any], source: Any, formats: dict[str, Any]
) -> CurrentStateAudit:
    """The table's rows against its batches' changes, read again from the broker and applied
    batch by batch in publish order (see the module docstring); ``formats``: the envelopes'
    (:func:`sluice.spark.ingest.envelope_decoders`' arguments)."""

    from .cdc import POSITION_COLUMN, Change, Decoders, TableShape, reduce_messages
    from .kafka.ranges import RangeReader
    from .spark.ingest import envelope_decoders, source_config
    from .spark.kafka_source import reader_kwargs
    from .spark.sinks.base import fold_markers
    from .spark.sinks.upsert import apply_to_rows, plan

    expected: dict[tuple[Any, ...], Change] = {}
    markers: dict[Any, dict[str, int]] = {}  # each stream's delete markers, as the sink's
    truncated: dict[Any, int] = {}  # each stream's last truncate's position
    decoders: dict[str, Decoders] = {}  # by topic
    shape = TableShape(key_columns)
    readers: dict[str, RangeReader] = {}  # by topic: one consumer, batch after batch
    with contextlib.ExitStack() as stack:
        for record in records:
            if record.stream.kind != "kafka" or not record.ranges:
                continue
            if source is None:
                raise ValueError("give the source (--source kafka://HOST:PORT) to audit the table")
            spec = BatchSpec("kafka", record.stream.topic, group_id=record.stream.group)
            kwargs = reader_kwargs(source_config(spec, source))
            quarantined = _offsets_by_partition(sink, record.batch_id, (True,))[True]
            if spec.topic not in readers:
                readers[spec.topic] = stack.enter_context(RangeReader(kwargs))
                decoders[spec.topic] = envelope_decoders(spec.topic, **formats)
            applied = _applied_messages(readers[spec.topic], spec.topic, record.ranges, quarantined)
            # what was not quarantined was applied: truncates included
            reduced = reduce_messages(
                applied, key_columns, decoders[spec.topic], shape, on_truncate="apply"
            )
            deleted = markers.setdefault(record.stream, {})
            applying = plan(
                reduced,
                {k: c.position for k, c in expected.items()},
                deleted,
                {k: c.row or {} for k, c in expected.items()},
                truncated.get(record.stream),
            )
            apply_to_rows(expected, applying)
            if applying.truncated_at is not None:
                at = applying.truncated_at
                truncated[record.stream] = max(at, truncated.get(record.stream, at))
            fold_markers(deleted, applying.markers)
    table = sink.current_rows()
    audit = CurrentStateAudit(key_columns, keys=len(expected), rows=table.num_rows)
    seen = set()
    for row in table.to_pylist():
        key = tuple(row[c] for c in key_columns)
        seen.add(key)
        last = expected.get(key)
        if last is None:
            audit.deleted += 1
            what = f"key {key} has a row, but its last change deletes it (or none names it)"
        else:
            want = {**dict.fromkeys(row), **(last.row or {}), POSITION_COLUMN: last.position}
            if all(row[c] == want[c] for c in row):
                continue
            audit.wrong += 1
            what = f"key {key}: the row is {row}, its last change gives {want}"
        if len(audit.examples) < 5:
            audit.examples.append(what)
    for key in expected.keys() - seen:
        audit.absent += 1
        if len(audit.examples) < 5:
            audit.examples.append(
                f"key {key} has no row; its last change gives {expected[key].row}"
            )
    return audit


def _applied_messages(
    reader: Any, topic: str, ranges: Any, quarantined: dict[int, list[int]]
) -> Any:
    """A batch's messages its ingest applied (all but the quarantined), read again: a table
    of key, value, partition and offset."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {"key": [], "value": [], "partition": [], "offset": []}
    for partition, found in reader.records(topic, ranges, 30):
        skipped = set(quarantined.get(partition, ()))
        for message in found:
            if message.offset in skipped:
                continue
            columns["key"].append(message.key)
            columns["value"].append(message.value)
            columns["partition"].append(partition)
            columns["offset"].append(message.offset)
    return pa.table(columns)


def _audit_mqtt(sink: Any, stream: StreamAudit, records: list[Any]) -> None:
    counts: Counter[str] = Counter()
    for record in records:
        # a format with several rows per message (Sparkplug B) counts each message once
        several = "messages" in record.counts
        batch: Counter[str] = Counter()
        for quarantined in (False, True):
            ids = sink.row_coordinates(record.batch_id, quarantined).column("message_id")
            batch.update(set(ids.to_pylist()) if several else ids.to_pylist())
            if quarantined:
                stream.quarantined += len(ids)
        counts.update(batch)
    stream.messages = len(counts)
    stream.doubled = sum(1 for n in counts.values() if n > 1)


def _audit_kafka(
    sink: Any,
    stream: StreamAudit,
    records: list[Any],
    source: str | Mapping[str, Any],
    current_state: bool = False,
) -> None:
    """``current_state``: the sink is a current-state table, whose good messages have no
    rows: the offsets a batch claims and did not quarantine count as its rows."""
    from .spark.ingest import source_config
    from .spark.kafka_source import partition_positions, reader_kwargs
    from .spark.sinks.coverage import Coverage

    spec = BatchSpec("kafka", stream.topic, group_id=stream.group)
    kwargs = reader_kwargs(source_config(spec, source))
    partitions = sorted({r.partition for record in records for r in record.ranges})
    positions = partition_positions(kwargs, stream.topic, str(stream.group), partitions)
    committed, bounds = positions.committed, positions.bounds
    which = (True,) if current_state else (False, True)
    rows = {r.batch_id: _offsets_by_partition(sink, r.batch_id, which) for r in records}
    if current_state:
        for record in records:
            bad = rows[record.batch_id][True]
            applied: dict[int, list[int]] = {}
            for r in record.ranges:
                skip = set(bad.get(r.partition, ()))
                applied.setdefault(r.partition, []).extend(
                    o for o in range(r.start, r.end) if o not in skip
                )
            rows[record.batch_id][False] = applied
    for p in partitions:
        epoch = [r for r in records if p in r.reset_partitions]
        since = epoch[-1].published_at if epoch else 0.0
        current = [r for r in records if r.published_at >= since]
        offsets: Counter[int] = Counter()
        good: set[int] = set()
        quarantined: set[int] = set()
        for record in current:
            for is_bad, into in ((False, good), (True, quarantined)):
                found = rows[record.batch_id][is_bad].get(p, [])
                offsets.update(found)
                into.update(found)
        log_start, log_end = bounds.get(p, (0, 0))
        lost = Coverage()
        for record in current:
            for loss in record.lost:
                if loss["partition"] == p and loss.get("reason") == "retention":
                    lost.add(p, int(loss["start"]), int(loss["end"]))
        starts = [r.group_start[p] for r in current if p in r.group_start]
        base = min(starts) if starts else min([log_start, *offsets]) if offsets else log_start
        held = Coverage.of_offsets(p, offsets).union(lost)
        top = committed.get(p)
        holes = held.missing(p, base, top) if top is not None and top > base else []
        claimed = Coverage.of(r for record in current for r in record.ranges if r.partition == p)
        stream.partitions.append(
            PartitionAudit(
                partition=p,
                log_start=log_start,
                log_end=log_end,
                committed=top,
                written=len(good),
                quarantined=len(quarantined),
                doubled=sum(1 for n in offsets.values() if n > 1),
                missing=_missing(kwargs, stream.topic, holes, claimed, log_start),
                lost=[OffsetRange(p, s, e) for s, e in lost.intervals.get(p, [])],
            )
        )


def _missing(
    kwargs: Any, topic: str, holes: list[OffsetRange], claimed: Any, log_start: int
) -> list[OffsetRange]:
    """The parts of ``holes`` (offsets of one partition below the committed offset without a
    row or a recorded loss) that hold a message: those no batch claims, and those a batch
    claims as having none but where the broker still has one. Claimed offsets below the log
    start cannot be asked any more: their ingest reconciled them when it could."""
    from .kafka.ranges import RangeReader
    from .spark.sinks.coverage import Coverage

    if not holes:
        return []
    partition = holes[0].partition
    missing = Coverage()
    with RangeReader(kwargs) as reader:
        for hole in holes:
            missing.add_ranges(claimed.missing(partition, hole.start, hole.end))
            for part in claimed.overlaps([hole]):
                if part.end <= log_start:
                    continue
                piece = OffsetRange(partition, max(part.start, log_start), part.end)
                for _, records in reader.records(topic, [piece], 30, lambda _: None):
                    offsets = (r.offset for r in records)
                    missing = missing.union(Coverage.of_offsets(partition, offsets))
    return [OffsetRange(partition, s, e) for s, e in missing.intervals.get(partition, [])]


def _offsets_by_partition(
    sink: Any, batch_id: str, which: tuple[bool, ...] = (False, True)
) -> dict[bool, dict[int, list[int]]]:
    """{quarantined?: {partition: offsets}} of a published batch's rows (``which``)."""
    found: dict[bool, dict[int, list[int]]] = {}
    for quarantined in which:
        table = sink.row_coordinates(batch_id, quarantined)
        by_partition: dict[int, list[int]] = {}
        for part, offset in zip(
            table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True
        ):
            by_partition.setdefault(part, []).append(offset)
        found[quarantined] = by_partition
    return found
