"""The real change data capture path, end to end, with faults: PostgreSQL, Debezium in Kafka
Connect (:mod:`.debezium_postgres`), Apache Kafka, and Sluice ingesting each source table's
topic into a current-state Iceberg table and a Delta table (``write_mode="upsert"``).

:func:`run_pipeline` runs a seeded :class:`~.cdc_workload.Workload` round by round and
ingests a batch into every table after each round, while it kills every process of the path
once, at moments the seed picks: an ingest (a child process on the caller's Spark, SIGKILLed
at a failpoint, then run again: :func:`sluice.testing.crash.run_child`), the Connect worker
(SIGKILL, the round's changes made while it is down, then started again) and PostgreSQL
(immediate shutdown, then started again). Then it fences (every change is in Kafka),
ingests what is left and compares each table with ``SELECT *`` of its source
(:mod:`.cdc_oracle`), and audits each sink (``sluice audit``). The end-to-end test runs one
seed; ``bench/cdc_debezium.py`` many.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..spark.failpoints import FAILPOINTS
from .cdc_oracle import compare, source_table
from .cdc_workload import TABLES
from .debezium_postgres import Capture

__all__ = ["CRASH_POINTS", "Feed", "Figures", "feeds_for", "run_pipeline"]

#: Failpoints an upsert ingest without dead letters always passes (an MQTT-only point and
#: the dead-letter one left out), where the pipeline kills one.
CRASH_POINTS = tuple(p for p in FAILPOINTS if p not in ("commit.midway", "dead_letters.after_send"))
SINKS = ("iceberg", "delta")


@dataclass
class Feed:
    """One source table's topic ingested into one current-state table by its own group."""

    table: str
    kind: str  # "iceberg" or "delta"
    sink: str
    topic: str
    group: str
    read: Callable[[], Any]  # the table as Arrow (None before its first commit)
    queue: Any = None

    def open(self, bootstrap: str) -> None:
        from sluice.kafka import KafkaMessageQueue

        self.queue = KafkaMessageQueue(self.topic)
        self.queue.configure(
            {
                "connection.uri": bootstrap,
                "topic": self.topic,
                "group_id": self.group,
                "from_beginning": True,
            }
        )
        self.queue.open(None)

    def plan(self) -> Any:
        from sluice.batch import plan_batch

        return plan_batch(self.queue)

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close(None)


def feeds_for(
    capture: Capture,
    catalog_name: str,
    catalog: Any,
    namespace: str,
    delta_root: Path,
    name: str = "",
) -> list[Feed]:
    """An Iceberg table (in ``catalog``, a pyiceberg catalog that Sluice knows as
    ``catalog_name``: ``PYICEBERG_CATALOG__<NAME>__*``) and a Delta table (under
    ``delta_root``) for each source table of ``capture``'s workload."""
    feeds = []
    for table in TABLES:
        stem = f"{table}{name}"
        identifier = f"{namespace}.{stem}"
        feeds.append(
            Feed(
                table,
                "iceberg",
                f"iceberg://{catalog_name}/{identifier}",
                capture.topic(table),
                f"{capture.prefix}-{stem}-iceberg",
                partial(_iceberg_rows, catalog, identifier),
            )
        )
        path = delta_root / stem
        feeds.append(
            Feed(
                table,
                "delta",
                f"delta://{path}",
                capture.topic(table),
                f"{capture.prefix}-{stem}-delta",
                partial(_delta_rows, path),
            )
        )
    return feeds


def _iceberg_rows(catalog: Any, identifier: str) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier).scan().to_arrow()
    except NoSuchTableError:
        return None


def _delta_rows(path: Path) -> Any:
    from deltalake import DeltaTable

    if not (path / "_delta_log").exists():
        return None
    return DeltaTable(str(path)).to_pyarrow_table()


@dataclass
class Figures:
    """What a run did and found."""

    seed: int
    converter: str
    messages: int = 0  # on the source tables' topics
    resent: int = 0  # of those, changes sent again (the same key, op and lsn as an earlier one)
    ops: dict[str, int] = field(default_factory=dict)  # of those, how many of each op
    batches: int = 0  # ingests committed
    sluice_kills: int = 0
    connect_kills: int = 0
    postgres_restarts: int = 0
    quarantined: int = 0
    mismatches: list[str] = field(default_factory=list)
    audit_failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.audit_failures


@dataclass(frozen=True)
class Schedule:
    """Where a run's faults fall: the round after whose changes Connect is killed (it is
    started again after the next round's changes and ingests), the round after which
    PostgreSQL restarts, and the round after which an ingest dies at ``point`` (the first
    ingest from feed number ``feed`` on with something to read)."""

    connect: int
    postgres: int
    sluice: int
    point: str
    feed: int

    @classmethod
    def draw(cls, seed: int, rounds: int, feeds: int) -> Schedule:
        if rounds < 3:
            raise ValueError("a run with faults needs 3 rounds or more: one for each fault")
        rng = random.Random(f"faults-{seed}")
        connect = rng.randrange(rounds - 1)  # Connect comes back a round later
        postgres, sluice = rng.sample([r for r in range(rounds) if r != connect], 2)
        return cls(connect, postgres, sluice, rng.choice(CRASH_POINTS), rng.randrange(feeds))


def _ingest(spark: Any, feed: Feed, spec: Any, options: dict[str, Any]) -> Any:
    from sluice.spark import ingest

    return ingest(spark, spec, feed.sink, **options)


def run_pipeline(
    spark: Any,
    capture: Capture,
    feeds: list[Feed],
    *,
    seed: int,
    faults: bool = True,
    say: Callable[[str], None] = lambda _line: None,
) -> Figures:
    """Run ``capture``'s workload (its tables made, the connector running) round by round
    into ``feeds``, with the faults of ``seed``; compare and audit. Returns the figures."""
    from sluice.audit import audit

    from .crash import run_child

    started = time.monotonic()
    workload = capture.workload
    figures = Figures(seed, capture.converter.name)
    schedule = Schedule.draw(seed, workload.rounds, len(feeds))
    source = f"kafka://{capture.bootstrap}"
    # Debezium sends truncates here (skipped.operations=none): the lake applies them
    options: dict[str, Any] = {"source": source, "write_mode": "upsert", "on_truncate": "apply"}
    for feed in feeds:
        feed.open(capture.bootstrap)

    def note(event: str) -> None:
        figures.events.append(event)
        say(event)

    def ingest_all(number: int) -> None:
        for index, feed in enumerate(feeds):
            spec = feed.plan()
            if spec is None:
                continue
            # the first ingest from the scheduled one on with something to read dies
            due = number > schedule.sluice or (number == schedule.sluice and index >= schedule.feed)
            if faults and due and figures.sluice_kills == 0:
                arguments = {"spec": spec.to_dict(), "sink": feed.sink, **options}
                code, stderr = run_child(spark, arguments, schedule.point)
                if code != -9:
                    raise RuntimeError(
                        f"the ingest of {feed.sink} did not die at {schedule.point} "
                        f"(exit {code}): {stderr[-2000:]}"
                    )
                figures.sluice_kills += 1
                note(f"round {number}: ingest into {feed.sink} killed at {schedule.point}")
            result = _ingest(spark, feed, spec, options)
            figures.batches += 1
            figures.quarantined += result.quarantined

    try:
        down = False
        for number in range(workload.rounds):
            workload.run_round(capture.dsn)
            if faults and number == schedule.connect:
                # at once after the round's commits, while Debezium sends them: what it sent
                # without committing its offsets it sends again
                capture.kill_connect()
                down = True
                figures.connect_kills += 1
                note(f"round {number}: Kafka Connect killed (SIGKILL)")
            if faults and number == schedule.postgres:
                capture.restart_postgres(wait=not down)
                figures.postgres_restarts += 1
                note(f"round {number}: PostgreSQL restarted (immediate shutdown)")
            ingest_all(number)
            if down and number > schedule.connect:  # a round's changes made while it was down
                capture.restart_connect()
                down = False
                note(f"round {number}: Kafka Connect started again")
        capture.fence()
        ingest_all(workload.rounds)
        for feed in feeds:
            spec = feed.plan()
            assert spec is None, f"{feed.sink}: a batch is left after the last ingest"
            lake = feed.read()
            expected = source_table(capture.dsn, feed.table, workload.schema)
            if lake is None:
                figures.mismatches.append(f"{feed.kind} {feed.table}: no table was written")
                continue
            found = compare(expected, lake, typed=capture.converter.schemas)
            figures.mismatches += [f"{feed.kind} {line}" for line in found]
            report = audit(feed.sink, source)
            if not report.ok:
                lines = "; ".join(report.lines())
                figures.audit_failures.append(f"{feed.kind} {feed.table}: {lines}")
        for table in TABLES:
            messages, resent = _sent(capture.bootstrap, capture.topic(table), figures.ops)
            figures.messages += messages
            figures.resent += resent
    finally:
        for feed in feeds:
            feed.close()
        figures.seconds = time.monotonic() - started
    return figures


def _sent(bootstrap: str, topic: str, ops: dict[str, int]) -> tuple[int, int]:
    """(messages on ``topic``, changes among them sent again): a Connect worker killed
    before it committed its offsets, or PostgreSQL restarted before the slot saved its
    position, sends changes again. Counts each op (``tombstone`` too) into ``ops``."""
    import json

    from .debezium_postgres import topic_records

    records = topic_records(bootstrap, topic)
    seen: set[tuple[Any, ...]] = set()
    resent = 0
    for record in records:
        if record.value is None:
            ops["tombstone"] = ops.get("tombstone", 0) + 1
            continue
        envelope = json.loads(record.value)
        envelope = envelope.get("payload", envelope) if "schema" in envelope else envelope
        ops[str(envelope.get("op"))] = ops.get(str(envelope.get("op")), 0) + 1
        change = (record.key, envelope.get("op"), (envelope.get("source") or {}).get("lsn"))
        resent += change in seen
        seen.add(change)
    return len(records), resent
