"""``sluice audit SINK --routes ROUTES``: a routed stream checked table by table.

A routed ingest (:mod:`sluice.spark.routed`) puts each message in the table its route names,
and the messages no route takes in the ingest's own sink (the *home*, which also holds the
group's batches). The audit reads the broker's messages of every committed range of the
home's batches again, routes each one with the same :class:`~sluice.routes.Routes`, and
compares with where each one is: per table (and for the home), per message,

- ``expected``: messages the routes send there;
- ``written`` / ``quarantined``: messages found there (offsets of its rows);
- ``missing``: messages the routes send there, below the group's committed offset, that are
  not there (the group committed over them);
- ``wrong``: messages found there that the routes send elsewhere (a message in another
  table's place);
- ``doubled``: messages found there more than once.

It passes (:attr:`RoutedAuditReport.ok`) when nothing is missing, wrong or doubled, and every
batch was ingested under these routes (the digest in its record). A partition of a topic that
was deleted and created again is checked from the batch that read the new topic first (its
record names the partition reset) on, as :func:`sluice.audit.audit` does: the rows of earlier
batches, in every table, hold the old topic's messages. MQTT messages are gone
from the broker once acknowledged, so an MQTT stream is checked for ids found twice, in one
table or across them, only. Like :func:`sluice.audit.audit`, it reads the whole history.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .batch import BatchSpec, OffsetRange
from .route_index import HOME
from .routes import Routes

__all__ = ["RouteAudit", "RoutedAuditReport", "audit_routes"]

_EXAMPLES = 5
Place = tuple[str, bool]  # (a table or HOME, quarantined)
Key = tuple[str, str | None, int, int]  # topic, group, partition, offset


@dataclass
class RouteAudit:
    """One table's (or the home's) messages against the broker's (see the module docstring)."""

    table: str
    expected: int = 0
    written: int = 0
    quarantined: int = 0
    doubled: int = 0
    wrong: int = 0
    missing: list[OffsetRange] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def missing_count(self) -> int:
        return sum(r.count for r in self.missing)

    @property
    def ok(self) -> bool:
        return not (self.doubled or self.wrong or self.missing)

    def note(self, text: str) -> None:
        if len(self.examples) < _EXAMPLES:
            self.examples.append(text)


@dataclass
class RoutedAuditReport:
    sink: str
    routes: str  # the routes' digest
    batches: int = 0
    tables: list[RouteAudit] = field(default_factory=list)
    other_routes: list[str] = field(default_factory=list)  # batches of other routes
    mqtt: bool = False

    @property
    def ok(self) -> bool:
        return not self.other_routes and all(t.ok for t in self.tables)

    def table(self, location: str) -> RouteAudit | None:
        found = [t for t in self.tables if t.table == location]
        return found[0] if found else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "routes": self.routes,
            "ok": self.ok,
            "batches": self.batches,
            "other_routes": self.other_routes,
            "tables": [{**asdict(t), "ok": t.ok} for t in self.tables],
        }

    def problems(self) -> list[str]:
        """What is wrong, one line per table (empty when the audit passes)."""
        found = [
            f"batch {batch} was ingested under other routes than these ({self.routes})"
            for batch in self.other_routes[:_EXAMPLES]
        ]
        for t in self.tables:
            found += self.table_problems(t)
        return found

    @staticmethod
    def table_problems(t: RouteAudit) -> list[str]:
        """What is wrong with one table (or the messages with no route)."""
        where = "the messages with no route" if t.table == HOME else f"table {t.table}"
        found = []
        if t.missing:
            ranges = ", ".join(_range(r) for r in t.missing[:_EXAMPLES])
            count = t.missing_count
            found.append(f"{where}: {count} message(s) committed but not there ({ranges})")
        if t.wrong:
            found.append(f"{where}: {t.wrong} message(s) that belong elsewhere")
        if t.doubled:
            found.append(f"{where}: {t.doubled} message(s) there more than once")
        return found

    def lines(self) -> list[str]:
        out = [f"routed sink {self.sink} (routes {self.routes}): {self.batches} batch(es)"]
        for t in self.tables:
            out.append(
                f"  {t.table}: expected {t.expected}, written {t.written}, quarantined "
                f"{t.quarantined}, doubled {t.doubled}, wrong {t.wrong}, missing "
                f"{t.missing_count}"
            )
            out += [f"    {example}" for example in t.examples]
        out += [f"  {line}" for line in self.problems()[: len(self.other_routes)]]
        out.append(
            "OK: every message is in its own table once."
            if self.ok
            else "FAILED: messages are missing, misplaced or doubled (see above)."
        )
        return out


def _range(r: OffsetRange) -> str:
    offsets = str(r.start) if r.count == 1 else f"{r.start}-{r.end - 1}"
    return f"partition {r.partition} offsets {offsets}"


def audit_routes(
    sink: str | os.PathLike[str],
    source: str | Mapping[str, Any] | None,
    routes: Routes | Mapping[str, Any] | str,
    progress: Callable[[int, int], None] | None = None,
) -> RoutedAuditReport:
    """Audit the routed stream whose home is ``sink``, read from ``source`` (a queue URI or
    config of the Kafka cluster), routed by ``routes`` (see the module docstring)."""
    from .spark.sinks import open_sink

    routing = Routes.parse(routes)
    home = open_sink(sink)
    home.recover()
    records = sorted(home.records(), key=lambda r: r.published_at)
    report = RoutedAuditReport(home.location, routing.digest, batches=len(records))
    report.other_routes = [
        r.batch_id for r in records if r.routes is not None and r.routes != routing.digest
    ]
    audits: dict[str, RouteAudit] = {HOME: RouteAudit(HOME)}
    places: dict[Key, Counter[Place]] = {}
    found_ids: dict[str, Counter[str]] = {}
    streams = sorted({(r.stream.kind, r.stream.topic, r.stream.group) for r in records})
    epochs = _Epochs(records)
    for batch in records:
        _note_rows(home, batch, HOME, places, found_ids, epochs)
    if any(kind == "kafka" for kind, _, _ in streams) and source is None:
        raise ValueError(
            "The sink holds Kafka batches: give the source (--source kafka://HOST:PORT) so "
            "that the audit can read the messages again and route them."
        )
    expected = _expected(records, routing, source, progress, epochs) if source is not None else {}
    tables = set(routing.known_tables()) | {b.owner for b in expected.values()} - {HOME}
    for table in sorted(tables):
        audits[table] = RouteAudit(table)
        opened = open_sink(table)
        try:
            opened.recover()
            slices = [
                r
                for r in opened.records()
                if r.route == table and (r.stream.kind, r.stream.topic, r.stream.group) in streams
            ]
        except Exception as exc:  # a table the routes name that was never written
            if _never_written(exc):
                continue
            raise
        # the table's own resets count too: its first slice of a recreated topic may be of a
        # batch the home's records never reset (the home had no batch of the old topic)
        own = _Epochs(sorted(slices, key=lambda r: r.published_at))
        for batch in slices:
            _note_rows(opened, batch, table, places, found_ids, epochs, own)
    report.mqtt = any(kind == "mqtt" for kind, _, _ in streams)
    _compare(expected, places, audits)
    owners: Counter[str] = Counter()
    for owner, ids in found_ids.items():
        audits[owner].doubled += sum(1 for n in ids.values() if n > 1)
        owners.update(set(ids))
    for owner, ids in found_ids.items():  # an MQTT message in two tables
        audits[owner].wrong += sum(1 for i in ids if owners[i] > 1)
    report.tables = [audits[HOME], *(audits[t] for t in sorted(audits) if t != HOME)]
    return report


def _never_written(exc: Exception) -> bool:
    from .queues.config import ConfigError

    return isinstance(exc, (ConfigError, FileNotFoundError))


class _Epochs:
    """Which batches read each partition's current topic: those from the last home batch
    whose record names the partition reset (the topic deleted and created again) on."""

    def __init__(self, records: list[Any]) -> None:
        self._order = {r.batch_id: n for n, r in enumerate(records)}  # by publication
        self._resets: dict[tuple[str, str | None, int], tuple[int, Any]] = {}
        for n, record in enumerate(records):
            for p in record.reset_partitions:
                self._resets[(record.stream.topic, record.stream.group, p)] = (n, record)

    def current(self, record: Any, partition: int) -> bool:
        """Whether ``record``'s rows of ``partition`` are of the partition's current topic. A
        table's slice of a batch the home never published (its run died before) is of the
        current topic when its topic id is the reset batch's, or, without ids, when it reset
        the partition itself or came after the reset."""
        found = self._resets.get((record.stream.topic, record.stream.group, partition))
        if found is None:
            return True
        since, reset = found
        order = self._order.get(record.batch_id)
        if order is not None:
            return order >= since
        if record.topic_id and reset.topic_id:
            return bool(record.topic_id == reset.topic_id)
        return partition in record.reset_partitions or record.published_at >= reset.published_at


def _note_rows(
    sink: Any,
    record: Any,
    owner: str,
    places: dict[Key, Counter[Place]],
    found_ids: dict[str, Counter[str]],
    *epochs: _Epochs,
) -> None:
    """Where the rows of one published batch of ``owner`` are (offsets of the partitions'
    current topics; MQTT: ids)."""
    stream = record.stream
    for quarantined in (False, True):
        rows = sink.row_coordinates(record.batch_id, quarantined)
        if stream.kind == "mqtt":
            found_ids.setdefault(owner, Counter()).update(rows.column("message_id").to_pylist())
            continue
        for partition, offset in zip(
            rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True
        ):
            if not all(e.current(record, partition) for e in epochs):
                continue
            key = (stream.topic, stream.group, partition, offset)
            places.setdefault(key, Counter())[(owner, quarantined)] += 1


@dataclass(frozen=True)
class _Belongs:
    """Where the routes send one message: ``owner`` (a table, or HOME), quarantined there for
    want of a route (``no_route``), and whether the group committed over it."""

    owner: str
    no_route: bool
    committed: bool


def _expected(
    records: list[Any],
    routes: Routes,
    source: str | Mapping[str, Any],
    progress: Callable[[int, int], None] | None,
    epochs: _Epochs,
) -> dict[Key, _Belongs]:
    """Where the routes send each message of the streams' ranges, from where each group
    began to the end of what it committed or its batches claim (of each partition's current
    topic: :class:`_Epochs`)."""
    from .kafka.offsets import topic_ends
    from .kafka.ranges import read_range_records
    from .spark.ingest import source_config
    from .spark.kafka_source import partition_positions, reader_kwargs
    from .spark.sinks.coverage import Coverage

    by_stream: dict[tuple[str, str | None], list[Any]] = {}
    for record in records:
        if record.stream.kind == "kafka":
            by_stream.setdefault((record.stream.topic, record.stream.group), []).append(record)
    found: dict[Key, _Belongs] = {}
    done = 0
    for (topic, group), batches in by_stream.items():
        spec = BatchSpec("kafka", topic, group_id=group)
        kwargs = reader_kwargs(source_config(spec, source))
        # every partition: one the home's batches never read may hold a table's messages
        partitions = sorted(
            {*topic_ends(kwargs, topic), *(r.partition for b in batches for r in b.ranges)}
        )
        positions = partition_positions(kwargs, topic, str(group), partitions)
        ranges = []
        for p in partitions:
            current = [b for b in batches if epochs.current(b, p)]
            lost = Coverage()
            for batch in current:
                for loss in batch.lost:
                    if loss.get("reason") == "retention" and int(loss["partition"]) == p:
                        lost.add(p, int(loss["start"]), int(loss["end"]))
            log_start, _ = positions.bounds.get(p, (0, 0))
            claimed = Coverage.of(r for b in current for r in b.ranges if r.partition == p)
            starts = [b.group_start[p] for b in current if p in b.group_start]
            # from where the group began (its first batch says so), else the log's start
            base = max(min(starts), log_start) if starts else log_start
            end = max(positions.committed.get(p) or 0, claimed.last(p) or 0)
            ranges += lost.missing(p, base, end)
        total = sum(r.count for r in ranges)
        for partition, messages in read_range_records(kwargs, topic, ranges, 30):
            committed = positions.committed.get(partition)
            for m in messages:
                decision = routes.route(m.key, m.value, m.headers, m.topic)
                found[(topic, group, partition, m.offset)] = _Belongs(
                    decision.table or HOME,
                    decision.table is None and decision.reason is not None,
                    committed is not None and m.offset < committed,
                )
            done += len(messages)
            if progress is not None:
                progress(done, total)
    return found


def _compare(
    expected: dict[Key, _Belongs],
    places: dict[Key, Counter[Place]],
    audits: dict[str, RouteAudit],
) -> None:
    """Fill each table's counts from where each message is and where it belongs."""
    from .spark.sinks.coverage import Coverage

    missing: dict[str, Coverage] = {}
    for key, belongs in expected.items():
        audit = audits.setdefault(belongs.owner, RouteAudit(belongs.owner))
        where = places.get(key, Counter())
        here = sum(n for (table, _), n in where.items() if table == belongs.owner)
        if belongs.committed or here:  # past the commit: a batch published, not committed
            audit.expected += 1
        if belongs.committed and not here:
            missing.setdefault(belongs.owner, Coverage()).add(key[2], key[3], key[3] + 1)
            elsewhere = sorted({table for table, _ in where})
            audit.note(
                f"partition {key[2]} offset {key[3]} belongs here; "
                + (f"it is in {', '.join(elsewhere)}" if elsewhere else "it is nowhere")
            )
        if belongs.no_route and where.get((HOME, False)):
            audit.wrong += 1
            audit.note(f"partition {key[2]} offset {key[3]} has no route, yet is a row here")
    for key, where in places.items():
        owned = expected.get(key)
        for (table, quarantined), count in where.items():
            audit = audits.setdefault(table, RouteAudit(table))
            if quarantined:
                audit.quarantined += 1
            else:
                audit.written += 1
            if count > 1:
                audit.doubled += 1
            if owned is not None and table != owned.owner:
                audit.wrong += 1
                owner = "the messages with no route" if owned.owner == HOME else owned.owner
                audit.note(f"partition {key[2]} offset {key[3]} is here; it belongs to {owner}")
    for owner, coverage in missing.items():
        audits[owner].missing = [
            OffsetRange(p, lo, hi)
            for p, spans in sorted(coverage.intervals.items())
            for lo, hi in spans
        ]
