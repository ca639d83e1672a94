"""The nemesis' change data capture scenarios (``Scenario(write_mode="upsert")``): Debezium
changes of a simulated source table, on Kafka, applied to a current-state Iceberg or Delta table
(``ingest(..., write_mode="upsert", on_truncate="apply")``) while the environment fails
(docs/fault-model.md).

The world (:class:`CdcWorld`) is a Kafka world whose rounds publish changes of a
:class:`~sluice.testing.debezium.SourceTable` of a few keys: inserts, updates, deletes with
their tombstones, now and then a truncate (key-less) or a heartbeat, and from some point on a
new column (``ALTER TABLE ... ADD COLUMN``), the ``lsn`` growing with every change. Each
message is keyed as Debezium keys it and sent to the partition Kafka's default partitioner
picks for its key (murmur2 of the key's bytes), so the fault "partitions-added" moves keys to
other partitions: a key's older change can wait in an old partition while its newer one is
read from another, and the source position must win. The sensor plans batches of at most
:attr:`CdcWorld.cap` messages (shared between the partitions, as ``plan_batch`` shares them),
fewer than the rounds publish: a partition's tail waits for a later batch while another
partition's newer changes are read (the healing phase then drains the rest at once).

Some messages are bad, each carrying its own id (``s<seed>-bad-<n>``) in its value: not JSON,
an unknown op, an update without ``after``, no key, a key holding an object, a reserved column
name; and once the table has fixed its key and types, a key of text or boolean where the table
has integers, a key of other fields (named like an SQL predicate), a text or a float in the
integer column. Every one must be quarantined, once, and nothing else.

The oracle, after the last round: the table's rows (without ``_sluice_source_position``) equal
the source table's final rows, every key and every column (a column the table gained later is
null in the rows no change gave it); the quarantine holds every bad message once and no other;
``sluice audit`` passes (it applies the committed batches' changes again and compares); nothing
waits. The faults that delete messages on purpose (retention, segment-retention, recreate) are
left out: with changes lost, the table cannot equal the source.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..batch import BatchSpec, plan_batch
from .debezium import Message, SourceTable
from .nemesis import CdcFindings, Outcome, Scenario, _KafkaWorld, table_columns

__all__ = ["BAD_KINDS", "TABLE_BAD_KINDS", "CdcWorld", "bad_message", "differences"]

#: The source table's keys (few: updates and deletes of one key come often).
KEYS = 16
#: After this many changes the source table gains the column ``tier``.
ALTER_AFTER = 60
#: Shares of a round's messages: bad ones, heartbeats, truncates (at most two a scenario).
BAD_SHARE = 0.12
HEARTBEAT_SHARE = 0.03
TRUNCATE_SHARE = 0.015
MAX_TRUNCATES = 2
#: Messages bad whatever the table (the envelope or the key cannot be read as a change).
BAD_KINDS = ("not-json", "unknown-op", "no-after", "no-key", "object-key", "reserved-column")
#: Messages bad against the table's key columns and types, sent once the table has them (a
#: new table takes its key and types from its first batch: such a message there could set them).
TABLE_BAD_KINDS = ("text-key", "boolean-key", "other-key", "text-column", "float-column")
#: The most messages a batch the sensor plans holds, one per scenario: fewer than a round
#: publishes on average, so a backlog grows and each partition's tail waits for later batches.
CAPS = (10, 15, 20)
_BAD_ID = re.compile(rb"s\d+-bad-\d+")


class CdcWorld(_KafkaWorld):
    """A Kafka world of Debezium changes into a current-state table (see the module
    docstring)."""

    def __init__(self, spark: Any, scenario: Scenario, workdir: Path) -> None:
        super().__init__(spark, scenario, workdir)
        # the world's own choices, apart from the rounds' chooser
        seeded = random.Random(f"cdc-{scenario.seed}")
        #: JSON with the schema/payload wrapper (schemas.enable) or bare envelopes
        self.database = SourceTable("shop.customers", wrapped=seeded.random() < 0.5)
        #: the most messages a batch the sensor plans holds (None: all that wait)
        self.cap: int | None = seeded.choice(CAPS)
        self.bad: dict[str, str] = {}  # bad id -> its kind
        self.turns = [0, 0]  # bad messages sent of BAD_KINDS, of TABLE_BAD_KINDS
        self.findings = CdcFindings()
        self.outcome.cdc = self.findings
        self.homes: dict[bytes, set[int]] = {}  # a key's bytes -> the partitions it went to
        #: (partition, offset) -> (key's bytes, source position) of each change published
        self.positions: dict[tuple[int, int], tuple[bytes, int]] = {}
        self.sent = 0
        self.table_fixed = False

    def _write_options(self) -> dict[str, Any]:
        return {"write_mode": "upsert", "on_truncate": "apply"}

    # -- the source table's messages -------------------------------------------------------

    def publish(self, count: int, chooser: random.Random) -> None:
        messages: list[Message] = []
        changes: list[bool] = []  # whether each message is a change of a key
        for _ in range(count):
            roll = chooser.random()
            change = False
            if roll < BAD_SHARE:
                found = [self._bad(chooser)]
            elif roll < BAD_SHARE + HEARTBEAT_SHARE:
                found = [self.database.heartbeat()]
            elif (
                roll < BAD_SHARE + HEARTBEAT_SHARE + TRUNCATE_SHARE
                and self.findings.changes > 20
                and self.findings.truncates < MAX_TRUNCATES
            ):
                found = self.database.truncate()
                self.findings.truncates += 1
                self.findings.changes += 1
            else:
                found, change = self._change(chooser), True
            messages += found
            changes += [change] * len(found)
        futures = [self._send(value, key, None) for key, value in messages]
        self.producer.flush(30)
        for (key, value), change, future in zip(messages, changes, futures, strict=True):
            metadata = future.get(30)
            if key is not None and value is not None and change:
                self.homes.setdefault(key, set()).add(metadata.partition)
                position = _position(value)
                self.positions[(metadata.partition, metadata.offset)] = (key, position)
        self.sent += len(messages)

    def _add_partition(self, chooser: random.Random) -> None:
        """Changes of many keys first, left in the old partitions behind what the batch in
        flight reads; then the new partition, and newer changes, whose keys often hash to
        another partition than their older changes' (Kafka's default partitioner)."""
        self.publish(chooser.randint(CAPS[0], 2 * CAPS[-1]), chooser)
        super()._add_partition(chooser)

    def _change(self, chooser: random.Random) -> list[Message]:
        """An insert, update or delete of a random key of the source table."""
        key = chooser.randrange(KEYS)
        self.findings.changes += 1
        number = self.findings.changes
        if key in self.database.rows and chooser.random() < 0.25:
            return self.database.delete(key)
        values: dict[str, Any] = {"name": f"c{key}-{number}", "visits": number}
        if number > ALTER_AFTER:
            values["tier"] = chooser.choice(["gold", "silver", "bronze"])
        return self.database.upsert(key, **values)

    def _bad(self, chooser: random.Random) -> Message:
        """A message that must be quarantined, its id in its value."""
        ident = f"s{self.scenario.seed}-bad-{len(self.bad) + 1}"
        # each kind in turn (once the table is fixed, its kinds every other time)
        if self._table_fixed() and len(self.bad) % 2 == 0:
            kind = TABLE_BAD_KINDS[self.turns[1] % len(TABLE_BAD_KINDS)]
            self.turns[1] += 1
        else:
            kind = BAD_KINDS[self.turns[0] % len(BAD_KINDS)]
            self.turns[0] += 1
        self.bad[ident] = kind
        self.findings.kinds[kind] += 1
        return bad_message(self.database, kind, ident, chooser.randrange(KEYS))

    def _table_fixed(self) -> bool:
        """Whether the table exists with its key and columns (their types are then fixed)."""
        if not self.table_fixed:
            from ..spark.sinks import open_sink

            opened: Any = open_sink(self.sink)
            names = set(opened.current_rows().column_names)
            self.table_fixed = {"id", "name", "visits"} <= names
        return self.table_fixed

    # -- the sensor ------------------------------------------------------------------------

    def waiting(self) -> BatchSpec | None:
        return plan_batch(self._queue(), self.cap)

    def heal(self) -> None:
        self.cap = None  # the operator drains what waits
        super().heal()

    # -- the oracle ------------------------------------------------------------------------

    def judge(self) -> Outcome:
        from ..audit import audit
        from ..cdc import POSITION_COLUMN
        from ..spark.sinks import open_sink

        outcome, found = self.outcome, self.findings
        outcome.published = self.sent
        opened: Any = open_sink(self.sink)
        rows = opened.current_rows().to_pylist()
        found.rows = outcome.held = len(rows)
        found.source_rows = len(self.database.rows)
        found.bad = len(self.bad)
        found.moved = sum(1 for partitions in self.homes.values() if len(partitions) > 1)
        found.overtaken = self._overtaken(opened.records())
        found.differs = differences(rows, self.database.rows, POSITION_COLUMN)
        quarantine = table_columns(self.sink, True, ("value", "reason", "partition", "offset"))
        found.quarantined = quarantine.num_rows
        counts: Counter[str] = Counter()
        for row in quarantine.to_pylist():
            match = _BAD_ID.search(row["value"] or b"")
            ident = match.group().decode() if match else None
            if ident in self.bad:
                counts[ident] += 1
            else:
                where = f"partition {row['partition']} offset {row['offset']}"
                outcome.unknown.append(f"{where}: {row['reason']}")
        outcome.doubled = sorted(f"{i} ({self.bad[i]})" for i, n in counts.items() if n > 1)
        outcome.missing = sorted(f"{i} ({k})" for i, k in self.bad.items() if i not in counts)
        report = audit(self.sink, self.source())
        outcome.audit_ok = report.ok
        outcome.audit_lines = report.lines()
        outcome.waiting = self.left_waiting()
        return outcome

    def _overtaken(self, records: Any) -> int:
        """How many changes were committed in a later batch than a newer change of their key
        (the order the table must not take from the batches): from the batches' ranges."""
        newest: dict[bytes, int] = {}
        overtaken = 0
        for record in sorted(records, key=lambda r: r.published_at):
            batch: dict[bytes, int] = {}
            for r in record.ranges:
                for offset in range(r.start, r.end):
                    found = self.positions.get((r.partition, offset))
                    if found is None:
                        continue
                    key, position = found
                    if position < newest.get(key, position):
                        overtaken += 1
                    batch[key] = max(position, batch.get(key, position))
            for key, position in batch.items():
                newest[key] = max(position, newest.get(key, position))
        return overtaken


def bad_message(database: SourceTable, kind: str, ident: str, key: int) -> Message:
    """A message of ``kind`` (:data:`BAD_KINDS`, :data:`TABLE_BAD_KINDS`) shaped like
    ``database``'s changes of ``key``, that a current-state table keyed by ``id`` (an integer)
    must set aside; ``ident`` is in its value."""
    row = {"id": key, "name": ident, "visits": key}
    stray = database.stray
    if kind == "not-json":
        return stray({"id": key}, "u", row)[0], f"not json {ident}".encode()
    makers: dict[str, Callable[[], Message]] = {
        "unknown-op": lambda: stray({"id": key}, "x", row),
        "no-after": lambda: stray({"id": key}, "u", None, nemesis=ident),
        "no-key": lambda: stray(None, "c", row),
        "object-key": lambda: stray({"id": {"nested": key}}, "c", row),
        "reserved-column": lambda: stray({"id": key}, "c", {**row, "_sluice_flag": 1}),
        "text-key": lambda: stray({"id": ident}, "c", {**row, "id": ident}),
        "boolean-key": lambda: stray({"id": True}, "c", {**row, "id": True}),
        # issue 44's injection: a key field named like a predicate, next to ordinary changes
        "other-key": lambda: stray({"id IS NULL OR TRUE OR s.id IS NULL": key}, "u", row),
        "text-column": lambda: stray({"id": key}, "u", {**row, "visits": "many"}),
        "float-column": lambda: stray({"id": key}, "u", {**row, "visits": key + 0.5}),
    }
    return makers[kind]()


def _position(value: bytes) -> int:
    """The ``lsn`` of a change the world published (bare or wrapped)."""
    document = json.loads(value)
    envelope = document.get("payload", document)
    return int(envelope["source"]["lsn"])


def differences(
    rows: list[dict[str, Any]], source: dict[int, dict[str, Any]], position: str
) -> list[str]:
    """How the table's ``rows`` differ from the ``source`` table's (key ``id`` -> row): a key
    with two rows, a row of a key the source has none of, a source row the table lacks, a
    column whose value differs (a column only one side has is null on the other). Sluice's
    ``position`` column is left out."""
    found: list[str] = []
    table: dict[Any, dict[str, Any]] = {}
    for row in rows:
        row = {c: v for c, v in row.items() if c != position}
        if row.get("id") in table:
            found.append(f"key {row.get('id')!r} has two rows: {table[row['id']]} and {row}")
        table[row.get("id")] = row
    columns = sorted({c for r in (*table.values(), *source.values()) for c in r})
    for key in sorted(set(table) | set(source), key=repr):
        want, got = source.get(key), table.get(key)
        if want is None:
            found.append(f"key {key!r}: the table has {got}, the source no row")
        elif got is None:
            found.append(f"key {key!r}: the table has no row, the source {want}")
        else:
            expected = {c: want.get(c) for c in columns}
            held = {c: got.get(c) for c in columns}
            if held != expected:
                found.append(f"key {key!r}: the table has {held}, the source {expected}")
    return found
