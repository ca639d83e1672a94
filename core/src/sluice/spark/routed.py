"""A routed ingest: one read of a batch, many tables, each table's slice exactly once.

``ingest(spark, spec, sink, routes=...)`` (:mod:`sluice.routes` says how a message finds its
table) runs the ingest's steps unchanged (:mod:`.ingest`: what is left, read, stage,
reconcile, publish, commit) over a :class:`RoutedSink`: the ingest's own sink (the *home*)
plus the route tables, each an ordinary sink (Parquet, Iceberg or Delta, mixed as the routes
say) behind the one :class:`~sluice.spark.sinks.Sink` interface. What changes:

- **Staging** (:meth:`_RoutedJob._write`): the batch's distinct route values are decided once
  (:mod:`.routing`), the tables they name are opened (created on first use, with the route's
  schema), and one Spark job per distinct schema writes every table's rows into that table's
  own staging (:mod:`.routed_writing`). Messages with no route go to the home: quarantined
  with the reason, or as its rows (``unmatched="table"``).
- **Publishing** (:meth:`RoutedSink.publish`): each table's slice is published by its own sink,
  in one atomic step of its own (invariant I2), with a record of its own: the batch's id and
  offsets, on the table's own stream (:class:`~sluice.spark.sinks.StreamKey` with the
  table as its ``route``), so each table's state is its own. Only then is the batch published
  to the home, whose record is the group's: the ingest commits the group's offsets after that,
  as it always does, so the group never passes a message that is in no table (I1).
- **Reruns.** A run killed between two tables' commits left some tables with their slice and
  the home without the batch: the rerun reads the batch again, and a table's rows that the
  table holds already (its state's offsets, or for MQTT its message ids) are *held*: not
  written again, counted as written (reconciled like the rest, I6). A table's offsets are
  trusted only for the topic it was written from (its topic id, or the fingerprint of its
  last message where the broker has no ids): after a topic was recreated they are the old
  topic's. A batch begun under other routes (the digest in its records) is refused.
- **One run per stream** (I7): the home's stream is held for the whole run, and each table's
  own stream from the moment the table is opened.

Failpoints (:mod:`.failpoints`): ``routes.after_table`` after each table's publish (a kill
there leaves the next tables without their slice), ``routes.after_tables`` after the last
(every table holds its slice, the home does not); the sinks' own ``publish.*`` points fire in
each publish, the home's last (arm them with ``@N`` for the ``N``-th).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..queues.config import ConfigError
from ..routes import Extracted, Routes
from . import layout
from .classify import REASON_COLUMN, Classification, parse_schema
from .failpoints import failpoint
from .ingest import KafkaRead, _Job
from .reconcile import ReconcileError
from .routing import (
    HELD,
    HOME,
    HOME_QUARANTINE,
    REASON,
    ROUTE,
    Distinct,
    distinct_values,
    held_column,
    with_routes,
)
from .sinks import BatchRecord, Sink, Staging, StreamKey, StreamState, open_sink
from .sinks.coverage import Coverage
from .writing import WriteCounts, merge_reports

__all__ = ["RoutedSink", "RoutedStaging", "routed_job"]

log = logging.getLogger("sluice.spark")


@dataclass
class _Slice:
    """One table's part of a run: its sink, staging, what was written and what it held."""

    table: str
    sink: Sink
    staging: Staging
    state: StreamState
    held: Coverage = field(default_factory=Coverage)  # Kafka: offsets the table holds
    stale: list[int] = field(default_factory=list)  # partitions whose old offsets it forgets
    own_topic: bool = False  # its topic id is the topic's read now: the sink's resets are not its
    held_ids: set[str] = field(default_factory=set)  # MQTT: ids the table holds
    ids: list[str] = field(default_factory=list)  # MQTT: ids of the run routed here
    whole: bool = False  # the table published this very batch already
    counts: WriteCounts = field(default_factory=lambda: WriteCounts(0, 0, 0))
    held_rows: int = 0
    published: bool = False


@dataclass(frozen=True)
class RoutedStaging(Staging):
    """A routed run's staging: the home's (its scratch takes the hand-over files) and each
    table's, as the run finds the tables."""

    home: Staging | None = None
    slices: dict[str, _Slice] = field(default_factory=dict)
    held: list[int] = field(default_factory=lambda: [0])  # rows held by their tables


class RoutedSink:
    """The home sink and the route tables as one :class:`~sluice.spark.sinks.Sink` (see the
    module docstring). Everything about the group's stream (its state, its batches, the
    dead letters) is the home's."""

    def __init__(self, home: Sink, routes: Routes) -> None:
        self.home = home
        self.routes = routes
        self.location = home.location
        self._tables: dict[str, Sink] = {}
        self._stack: ExitStack | None = None
        self._held: set[str] = set()  # tables whose stream this run holds
        self._kept: tuple[str, ...] | None = None  # the message columns every table keeps
        self.summary: dict[str, dict[str, int]] = {}

    def check(self) -> None:
        self.home.check()
        self.check_tables()

    def check_tables(self) -> None:
        """The tables the routes name without a message: each a sink, none the home."""
        for table in self.routes.known_tables():
            if table == self.home.location:
                raise ConfigError(
                    f"routes: the table {table} is the ingest's own sink; the ingest's sink "
                    "takes the messages no route takes (routes' unmatched='table'): give the "
                    "route another table"
                )
            self._open(table)  # a location that is no sink fails here, before any read

    def _open(self, table: str) -> Sink:
        sink = self._tables.get(table)
        if sink is None:
            try:
                sink = self._tables[table] = open_sink(table)
            except ConfigError as exc:
                raise ConfigError(f"routes: the table {table}: {exc}") from None
            if self._kept is not None:
                self._keep(table, sink)
        return sink

    # ---- the message columns: every table keeps the same (sluice.spark.layout) -------------

    def kept_columns(self) -> tuple[str, ...] | None:
        return self.home.kept_columns()

    def keep_columns(self, kept: Sequence[str]) -> None:
        """Every table keeps ``kept`` (the ingest's choice, or the home's recorded one): a
        route table made with another choice is refused before anything is read."""
        self._kept = tuple(sorted(kept))
        self.home.keep_columns(self._kept)
        for table, sink in self._tables.items():
            self._keep(table, sink)

    def _keep(self, table: str, sink: Sink) -> None:
        assert self._kept is not None
        layout.resolve(self._kept, sink.kept_columns(), f"The route table {table}")
        sink.keep_columns(self._kept)

    def table(self, location: str, stream: StreamKey) -> Sink:
        """A route table, checked and recovered, its stream held for this run."""
        sink = self._open(location)
        if location not in self._held:
            sink.check()
            if self._stack is None:
                raise RuntimeError("RoutedSink.table() outside exclusive()")
            self._stack.enter_context(sink.exclusive(stream))
            sink.recover()
            self._held.add(location)
        return sink

    def exclusive(self, stream: StreamKey) -> AbstractContextManager[None]:
        return self._exclusive(stream)

    @contextlib.contextmanager
    def _exclusive(self, stream: StreamKey) -> Iterator[None]:
        with self.home.exclusive(stream), ExitStack() as stack:
            self._stack, self._held = stack, set()
            try:
                yield
            finally:
                self._stack = None
                self._held = set()

    # ---- the group's stream: the home's ---------------------------------------------------

    def recover(self) -> None:
        self.home.recover()

    def find(self, batch_id: str) -> BatchRecord | None:
        return self.home.find(batch_id)

    def state(self, stream: StreamKey) -> StreamState:
        return self.home.state(stream)

    def records(self) -> Iterator[BatchRecord]:
        return self.home.records()

    def row_coordinates(self, batch_id: str, quarantined: bool) -> pa.Table:
        return self.home.row_coordinates(batch_id, quarantined)

    def quarantine_table(self, batch_id: str) -> pa.Table:
        return self.home.quarantine_table(batch_id)

    def dead_letter_progress(self, batch_id: str) -> dict[str, Any] | None:
        return self.home.dead_letter_progress(batch_id)

    def save_dead_letter_progress(self, batch_id: str, progress: dict[str, Any]) -> None:
        self.home.save_dead_letter_progress(batch_id, progress)

    def output_location(self, batch_id: str) -> str:
        return f"the route tables of {self.routes.template or 'the routes'} (batch {batch_id})"

    def quarantine_location(self, batch_id: str) -> str:
        return f"each table's quarantine; no route: {self.home.quarantine_location(batch_id)}"

    # ---- one run ---------------------------------------------------------------------------

    def stage(self, batch_id: str) -> Staging:
        home = self.home.stage(batch_id)
        return RoutedStaging(batch_id, home.directory, home.scratch, home=home)

    def targets(self, staging: Staging, good: pa.Schema, bad: pa.Schema) -> Any:
        raise RuntimeError("a routed run writes each table's rows itself (routed_writing)")

    def staged_counts(self, staging: Staging) -> tuple[int, int]:
        routed = _routed(staging)
        good, bad = self.home.staged_counts(_home(routed))
        for piece in routed.slices.values():
            g, b = piece.sink.staged_counts(piece.staging)
            good, bad = good + g, bad + b
        return good + routed.held[0], bad

    def staged_quarantine_reasons(self, staging: Staging) -> dict[str, str]:
        routed = _routed(staging)
        reasons = dict(self.home.staged_quarantine_reasons(_home(routed)))
        for piece in routed.slices.values():
            reasons.update(piece.sink.staged_quarantine_reasons(piece.staging))
        return reasons

    def discard(self, staging: Staging) -> None:
        routed = _routed(staging)
        for piece in routed.slices.values():
            with contextlib.suppress(Exception):  # a discard that fails must not hide why
                piece.sink.discard(piece.staging)
        self.home.discard(_home(routed))

    def publish(self, staging: Staging, record: BatchRecord) -> None:
        """Each table's slice, one table after another, then the batch on the home (see the
        module docstring)."""
        routed = _routed(staging)
        record.routes = self.routes.digest
        for table in sorted(routed.slices):
            piece = routed.slices[table]
            total = piece.counts.good + piece.counts.bad
            self.summary[table] = {
                "written": piece.counts.good,
                "quarantined": piece.counts.bad,
                "held": piece.held_rows,
            }
            if piece.whole or total == 0:
                piece.sink.discard(piece.staging)
                continue
            piece.sink.publish(piece.staging, self._slice_record(piece, record))
            piece.published = True
            failpoint("routes.after_table")
        failpoint("routes.after_tables")
        self.home.publish(_home(routed), record)

    def _slice_record(self, piece: _Slice, record: BatchRecord) -> BatchRecord:
        ranges = [
            part for r in record.ranges for part in piece.held.missing(r.partition, r.start, r.end)
        ]
        quarantined = piece.sink.staged_quarantine_reasons(piece.staging) if piece.ids else {}
        held = set(piece.held_ids)
        return BatchRecord(
            record.batch_id,
            record.spec,
            ranges=ranges,
            reset_partitions=sorted(
                {*piece.stale} if piece.own_topic else {*record.reset_partitions, *piece.stale}
            ),
            counts={
                "read": piece.counts.good + piece.counts.bad,
                "written": piece.counts.good,
                "quarantined": piece.counts.bad,
                "duplicates": 0,
            },
            fingerprints={
                p: (w.last_offset, w.last_fingerprint) for p, w in piece.counts.partitions.items()
            },
            topic_id=record.topic_id,
            planned_on=piece.state.batches,
            message_ids=[i for i in piece.ids if i not in held],
            quarantined_ids=quarantined,
            route=piece.table,
            routes=self.routes.digest,
        )


def _routed(staging: Staging) -> RoutedStaging:
    if not isinstance(staging, RoutedStaging):
        raise TypeError(f"a routed run's staging, not {type(staging).__name__}")
    return staging


def _home(staging: RoutedStaging) -> Staging:
    assert staging.home is not None
    return staging.home


def routed_job(job: _Job, routes: Routes | Mapping[str, Any] | str, schema: Any) -> _Job:
    """The ingest job ``job`` as a routed one, its sink wrapped in a :class:`RoutedSink`;
    refuses what routes do not combine with."""
    from .kafka_source import DEFAULT_READER, SPARK_READER

    parsed = Routes.parse(routes)
    if job.upsert:
        raise ConfigError(
            "routes and write_mode='upsert' do not combine: a current-state table is keyed "
            "by its own topic; ingest each change stream into its own table"
        )
    if job.dead_letter:
        raise ConfigError(
            "routes and dead_letter do not combine yet: quarantined records stay in their "
            "table's quarantine (and those with no route in the ingest's sink's)"
        )
    if job.formats.multi_row:
        raise ConfigError(
            "routes and value_format='sparkplug_b' do not combine: route Sparkplug B topics "
            "by subscribing one ingest per topic filter"
        )
    if getattr(job.sink, "partitioning", None):
        raise ConfigError(
            "routes and partition_by do not combine: partition a route's Iceberg table in its "
            "location (iceberg://CATALOG/NS.events_{kind}?partition_by=...)"
        )
    if parsed.source[0] == "field" and job.formats.value_format != "json":
        raise ConfigError(
            f"routes by={parsed.by!r} reads a field of a JSON payload, and value_format is "
            f"{job.formats.value_format!r}: route by key, header:NAME or topic instead"
        )
    if parsed.schemas and job.formats.value_format != "json":
        raise ConfigError(
            "routes' schemas (a schema per route) are for JSON payloads; the writer's schema "
            f"of {job.formats.value_format} payloads is every route's"
        )
    for value, text in parsed.schemas.items():
        try:
            parse_schema(text, job.rules.payload_column)
        except ConfigError as exc:
            raise ConfigError(f"routes: the schema of route {value!r}: {exc}") from None
    if job.spec.kind == "mqtt" and parsed.source[0] in ("key", "header"):
        raise ConfigError(
            f"routes by={parsed.by!r}: MQTT messages have no Kafka key or headers; route them "
            "by topic, topic_level:N or field:NAME"
        )
    config = dict(job.config)
    if config.get("options.reader") == SPARK_READER:
        log.info("options.reader 'spark': a routed batch is read by %r", DEFAULT_READER)
        config["options.reader"] = DEFAULT_READER
    values = {f.name: getattr(job, f.name) for f in dataclasses.fields(_Job) if f.init}
    sink = RoutedSink(job.sink, parsed)
    sink.check_tables()
    values.update(config=config, sink=sink)
    return _RoutedJob(**values, routes=parsed, default_schema=schema)


@dataclass
class _RoutedJob(_Job):
    """The ingest's job with routed writing (see the module docstring)."""

    routes: Routes | None = None
    default_schema: Any = None

    @property
    def _routes(self) -> Routes:
        assert self.routes is not None
        return self.routes

    @property
    def _sink(self) -> RoutedSink:
        assert isinstance(self.sink, RoutedSink)
        return self.sink

    def _write(
        self,
        raw: Any,
        staging: Staging,
        largest: int | None = None,
        aliases: Mapping[str, Any] | None = None,
        in_jvm: Sequence[int] = (),
        kafka: KafkaRead | None = None,  # routed rows reach the writers whole
        probe_workers: bool = True,  # probed all the same: the routes' job comes first
        on_driver: bool = False,  # routed batches are written by Spark's tasks
    ) -> WriteCounts:
        from pyspark import StorageLevel

        from .formats import format_task_errors
        from .gateway import disable_nagle
        from .progress import job_progress
        from .workers import check_python_workers

        disable_nagle(self.spark)  # this thread's connection to the JVM too (:mod:`.gateway`)
        routed = _routed(staging)
        mqtt = self.spec.kind == "mqtt"
        cached = largest is None  # read on the executors: read once, route and write from it
        if cached:
            raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            found = distinct_values(raw, self._routes, with_ids=mqtt)
            decided, tables = self._decide(found)
            held_by_route = self._open_tables(routed, tables, found)
            staged = self.formats.stage(raw, aliases)
            frame = with_routes(
                staged, self._routes, decided, held_column(held_by_route, self.spec.kind)
            )
            counts = [self._held_counts(frame, routed, tables)] if held_by_route else []
            check_python_workers(self.spark)
            total = self.spec.message_count if self.spec.kind == "kafka" else None

            def writing(done: int | None, parts: int | None) -> None:
                self._event("writing", total or 0, total, done=done, parts=parts)

            with format_task_errors(), job_progress(self.spark, writing):
                for group in self._groups(routed, tables, decided):
                    counts += self._write_group(frame, routed, tables, group, largest)
        finally:
            if cached:
                raw.unpersist()
        return _merged(counts)

    # ---- deciding -------------------------------------------------------------------------

    def _decide(
        self, found: Sequence[Distinct]
    ) -> tuple[dict[Extracted, tuple[int, str | None]], list[str]]:
        """Each distinct value's route number (:mod:`.routing`), and the tables, in order."""
        decisions = {d.found: self._routes.decide(d.found) for d in found}
        tables = sorted({d.table for d in decisions.values() if d.table is not None})
        for table in tables:
            if table == self._sink.home.location:
                raise ConfigError(
                    f"routes: the table {table} is the ingest's own sink: give the route "
                    "another table (the ingest's sink takes the messages no route takes, "
                    "with unmatched='table')"
                )
        index = {table: number for number, table in enumerate(tables)}
        decided: dict[Extracted, tuple[int, str | None]] = {}
        for found_value, decision in decisions.items():
            if decision.table is not None:
                decided[found_value] = (index[decision.table], None)
            elif decision.reason is not None:
                decided[found_value] = (HOME_QUARANTINE, decision.reason)
            else:
                decided[found_value] = (HOME, None)
        return decided, tables

    def _open_tables(
        self, routed: RoutedStaging, tables: list[str], found: Sequence[Distinct]
    ) -> dict[int, Coverage | set[str]]:
        """Open each table of the batch, stage it, and find what of the batch it holds."""
        held_by_route: dict[int, Coverage | set[str]] = {}
        ids: dict[str, list[str]] = {}
        for d in found:
            decision = self._routes.decide(d.found)
            if decision.table is not None:
                ids.setdefault(decision.table, []).extend(d.message_ids)
        for number, table in enumerate(tables):
            stream = StreamKey.of(self.spec, table)
            sink = self._sink.table(table, stream)
            state = sink.state(stream)
            piece = _Slice(table, sink, sink.stage(self.spec.batch_id), state)
            piece.ids = sorted(ids.get(table, []))
            routed.slices[table] = piece
            self._check_routes(piece)
            piece.whole = self.spec.batch_id in state.recent_batches
            if self.spec.kind == "kafka":
                if piece.whole:  # every row of the table in this run is in it already
                    piece.held = Coverage.of(self._planned()[0].todo)
                else:
                    piece.held = self._valid_coverage(piece)
                if piece.held.intervals:
                    held_by_route[number] = piece.held
            else:
                held = set(piece.ids) if piece.whole else set(state.recent_ids)
                piece.held_ids = held & set(piece.ids)
                if piece.held_ids:
                    held_by_route[number] = piece.held_ids
        return held_by_route

    def _check_routes(self, piece: _Slice) -> None:
        """A batch a table holds under other routes is not finished under these."""
        existing = piece.sink.find(self.spec.batch_id)
        digest = self._routes.digest
        if existing is not None and existing.routes not in (None, digest):
            raise ConfigError(
                f"Batch {self.spec.batch_id} is in table {piece.table} under other routes "
                f"(digest {existing.routes}, these are {digest}): the routes changed while "
                "the batch was ingested. Ingest it with the routes it began with; change the "
                "routes once it is committed."
            )

    def _planned(self) -> tuple[Any, Any]:
        if self.planned is None:
            raise RuntimeError("a routed Kafka run writes after planning (the job's planned)")
        return self.planned  # type: ignore[no-any-return]

    def _valid_coverage(self, piece: _Slice) -> Coverage:
        """The offsets of this run's work that the table holds, where they are offsets of the
        topic read now (see the module docstring); the partitions whose offsets are an
        earlier topic's go to ``piece.stale``.

        Where the broker has topic ids, the table's own id decides, not the ingest's own
        sink: a table may hold this topic's messages from a run killed before the sink
        published (nemesis with routes, seed 304: the sink, still on the old topic, reset the
        partitions, and the table's slice was written again). A table of another topic gives
        up every partition it holds, overlapping this work or not, so that none of its old
        offsets outlives the id its next slice records."""
        work, positions = self._planned()
        state = piece.state
        overlap = Coverage.of(state.written.overlaps(work.todo))
        stale: set[int] = set()
        if state.topic_id and positions.topic_id:
            if state.topic_id != positions.topic_id:
                stale = {*state.written.intervals, *state.lost.intervals}
            else:
                piece.own_topic = True
        elif not overlap.intervals:
            return overlap
        else:
            stale = {p for p in overlap.intervals if p in work.reset_partitions}
            stale |= self._fingerprints_moved(piece, set(overlap.intervals) - stale)
        if not stale:
            return overlap
        piece.stale = sorted(stale)
        log.warning(
            "Table %s holds offsets of partition(s) %s of an earlier topic '%s' (deleted and "
            "created again since): they are not this topic's messages",
            piece.table,
            ", ".join(map(str, piece.stale)),
            self.spec.topic,
        )
        return Coverage({p: i for p, i in overlap.intervals.items() if p not in stale})

    def _fingerprints_moved(self, piece: _Slice, partitions: set[int]) -> set[int]:
        """Partitions where the message at the table's last offset is another than the one
        it wrote there (on a broker without topic ids)."""
        from .kafka_source import fingerprints_at, reader_kwargs

        known = piece.state.fingerprints
        check = {p: offset for p, (offset, _) in known.items() if p in partitions}
        if not check:
            return set()
        kwargs = reader_kwargs(self.config)
        found = fingerprints_at(kwargs, self.spec.topic, check, self._stall_timeout_s())
        return {p for p, print_ in found.items() if print_ is not None and print_ != known[p][1]}

    def _held_counts(self, frame: Any, routed: RoutedStaging, tables: list[str]) -> WriteCounts:
        """What the rows their tables hold cover: offsets, rows, the last message (Kafka).
        They are reconciled as written: they are, in their table."""
        from pyspark.sql import functions as F

        from .fingerprints import message_fingerprint

        columns = ["partition", "offset", "key", "value", "timestamp", ROUTE]
        rows = frame.filter(F.col(HELD)).select(*columns).collect()
        routed.held[0] = len(rows)
        for row in rows:
            routed.slices[tables[row[ROUTE]]].held_rows += 1
        if self.spec.kind != "kafka":
            return WriteCounts(len(rows), 0, 0)
        report: dict[str, dict[str, Any]] = {}
        for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            part = report.setdefault(
                str(row["partition"]), {"intervals": [], "rows": 0, "last": [-1, ""]}
            )
            part["intervals"].append([row["offset"], row["offset"] + 1])
            part["rows"] += 1
            stamp = row["timestamp"]
            millis = None if stamp is None else int(stamp.timestamp() * 1000)
            part["last"] = [row["offset"], message_fingerprint(row["key"], row["value"], millis)]
        return WriteCounts(len(rows), 0, 0, merge_reports([report]))

    # ---- writing --------------------------------------------------------------------------

    def _groups(
        self,
        routed: RoutedStaging,
        tables: list[str],
        decided: Mapping[Extracted, tuple[int, str | None]],
    ) -> list[tuple[Any, list[int]]]:
        """The routes to write, by schema: (schema, route numbers) per Spark job."""
        by_schema: dict[str, tuple[Any, list[int]]] = {}

        def add(schema: Any, route: int) -> None:
            key = schema if isinstance(schema, str) or schema is None else schema.json()
            by_schema.setdefault(str(key), (schema, []))[1].append(route)

        for route in sorted({route for route, _ in decided.values() if route < 0}):
            add(self.default_schema, route)
        for number, table in enumerate(tables):
            if not routed.slices[table].whole:
                add(self._routes.schema_for(table, self.default_schema), number)
        return list(by_schema.values())

    def _write_group(
        self,
        frame: Any,
        routed: RoutedStaging,
        tables: list[str],
        group: tuple[Any, list[int]],
        largest: int | None,
    ) -> list[WriteCounts]:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        from .routed_writing import RouteOutput, write_routed

        schema, numbers = group
        rules = self.rules
        if schema is not self.default_schema:
            rules = dataclasses.replace(
                rules, schema=parse_schema(schema, self.rules.payload_column)
            )
        classification = Classification.for_session(self.spark, rules)
        rows = classification.apply(
            frame.filter(F.col(ROUTE).isin(numbers) & ~F.col(HELD)), keep=(ROUTE, REASON)
        ).withColumn(
            REASON_COLUMN,
            F.when(F.col(ROUTE) == HOME_QUARANTINE, F.col(REASON)).otherwise(F.col(REASON_COLUMN)),
        )
        good, bad = [*classification.good], [*classification.bad]
        arrow = to_arrow_schema(rows.schema, timezone="UTC")
        good_schema = pa.schema([arrow.field(c) for c in good])
        bad_schema = pa.schema([arrow.field(c) for c in bad])
        if HOME in numbers and HOME_QUARANTINE in numbers:  # one staging: one output
            rows = rows.withColumn(
                ROUTE,
                F.when(F.col(ROUTE) == HOME_QUARANTINE, F.lit(HOME)).otherwise(F.col(ROUTE)),
            )
            numbers = [n for n in numbers if n != HOME_QUARANTINE]
        outputs: dict[int, RouteOutput] = {}
        for number in numbers:
            if number < 0:
                sink, piece_staging = self._sink.home, _home(routed)
            else:
                piece = routed.slices[tables[number]]
                sink, piece_staging = piece.sink, piece.staging
            targets = sink.targets(piece_staging, good_schema, bad_schema)
            outputs[number] = RouteOutput(good, bad, targets)
        written = write_routed(rows.drop(REASON), ROUTE, outputs, largest)
        for number, counts in written.items():
            if number < 0:
                continue
            piece = routed.slices[tables[number]]
            piece.counts = counts
            staged = piece.sink.staged_counts(piece.staging)
            if staged != (counts.good, counts.bad):
                raise ReconcileError(
                    f"Batch {self.spec.batch_id}: the write job wrote {counts.good} good and "
                    f"{counts.bad} quarantined rows to table {piece.table}, but its staged "
                    f"files hold {staged[0]} and {staged[1]}. Nothing was published or "
                    "committed; run the batch again."
                )
        return list(written.values())


def _merged(counts: Sequence[WriteCounts]) -> WriteCounts:
    """Several writes' counts as one (the batch's, for the ingest's reconciliation)."""
    reports = [
        {
            str(p): {
                "intervals": [list(i) for i in w.intervals],
                "rows": w.rows,
                "last": [w.last_offset, w.last_fingerprint],
            }
            for p, w in c.partitions.items()
        }
        for c in counts
    ]
    return WriteCounts(
        sum(c.good for c in counts),
        sum(c.bad for c in counts),
        sum(c.value_bytes for c in counts),
        merge_reports(reports),
    )
