"""The nemesis' routed scenarios (``Scenario(routes=True)``): one Kafka topic, many tables,
while the environment fails (docs/fault-model.md).

The world (:class:`RoutedWorld`) is a Kafka world whose payloads carry a ``kind``, routed by
it (``routes={"by": "field:kind", ...}``) to five route tables of every sink kind: two Iceberg
tables on the scenario's faulty catalog (so the catalog's faults apply whatever the
scenario's own sink: they hit a route table's commit or its quarantine's), two Delta tables and
a Parquet dataset. The scenario's sink is the ingest's own (the *home*): it holds the group's
batches and takes the messages no route takes. Which it does with them is the seed's choice:
``unmatched="quarantine"`` quarantines them there with the reason, ``"table"`` makes the
well-formed ones its rows.

Every message carries its own id. What a round publishes, message by message:

- ``routed``: a reading of a kind a route takes: a good row of that route's table;
- ``bad-in-route``: a kind a route takes, a temperature that is no number: quarantined in that
  route's table;
- ``no-kind`` (the field is absent) and ``other-kind`` (a kind no route takes): quarantined in
  the home, or its rows (``unmatched="table"``);
- ``number-kind`` (the kind is a JSON number) and ``not-json``: quarantined in the home with
  the reason, whatever ``unmatched`` says.

Kills (``kill``) also fall between two tables' commits, after every table's, and inside the
second or third table's publish (:data:`~sluice.testing.nemesis.ROUTED_STEPS`); a catalog fault
is planned for a table (or quarantine table) the batch writes.

The oracle, after the last round: ``sluice audit --routes`` passes; every id found is in
exactly the place it belongs (its table's rows or quarantine, the home's rows or quarantine),
once; every published id not found is lost to a fault and recorded, as in the plain Kafka
scenarios; nothing waits.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..batch import BatchSpec
from ..routes import Routes, Unmatched
from .nemesis import (
    Fault,
    Outcome,
    RouteFindings,
    Scenario,
    _KafkaWorld,
    _parquet_rows,
    table_columns,
)

__all__ = ["KINDS", "SCHEMA", "RoutedWorld", "payload_id"]

SCHEMA = "id STRING, kind STRING, device STRING, temperature DOUBLE"
#: The route values, and the sink kind of each one's table.
KINDS = {"k0": "iceberg", "k1": "iceberg", "k2": "delta", "k3": "delta", "k4": "parquet"}
#: Shares of a round's messages that are not a good routed reading, by what they are.
SHARES = (
    ("bad-in-route", 0.06),
    ("no-kind", 0.04),
    ("other-kind", 0.04),
    ("number-kind", 0.03),
    ("not-json", 0.05),
)
_JSON_ID = re.compile(rb'"id": "([^"]+)"')
_TEXT_ID = re.compile(rb"not json (\S+)")

#: Where a message belongs: a table's location (or the home's), and whether quarantined.
Place = tuple[str, bool]


def payload_id(value: bytes | None) -> str | None:
    """The id a payload of this world carries (good, bad or not JSON at all)."""
    match = _JSON_ID.search(value or b"") or _TEXT_ID.search(value or b"")
    return match.group(1).decode() if match else None


class RoutedWorld(_KafkaWorld):
    """A Kafka world of routed payloads (see the module docstring)."""

    def __init__(self, spark: Any, scenario: Scenario, workdir: Path) -> None:
        super().__init__(spark, scenario, workdir)
        seeded = random.Random(f"routes-{scenario.seed}")
        self.unmatched: Unmatched = "table" if seeded.random() < 0.5 else "quarantine"
        self.tables = {kind: self._table(kind, sink) for kind, sink in KINDS.items()}
        self.routes = Routes(by="field:kind", tables=self.tables, unmatched=self.unmatched)
        self.belongs: dict[str, Place] = {}  # payload id -> where it belongs
        self.at: dict[tuple[int, int, int], str] = {}  # (generation, partition, offset) -> id
        self.findings = RouteFindings(tables=len(self.tables))
        self.outcome.routed = self.findings

    def _table(self, kind: str, sink: str) -> str:
        if sink == "iceberg":
            return f"iceberg://{self.catalog}/nemesis.{kind}"
        if sink == "delta":
            return f"delta://{self.workdir / 'routes' / kind}"
        return str(self.workdir / "routes" / kind)

    def _write_options(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "routes": self.routes.to_dict()}

    # -- the payloads ----------------------------------------------------------------------

    def payload(self, message_id: str, chooser: random.Random) -> bytes:
        roll, what = chooser.random(), "routed"
        for name, share in SHARES:
            if roll < share:
                what = name
                break
            roll -= share
        self.findings.sent[what] += 1
        kind = chooser.choice(sorted(KINDS))
        reading: dict[str, Any] = {"id": message_id, "device": f"d{chooser.randint(0, 4)}"}
        reading["temperature"] = 1.5
        home = self.sink
        if what == "not-json":
            self.belongs[message_id] = (home, True)
            return f"not json {message_id}".encode()
        if what == "routed":
            reading["kind"] = kind
            self.belongs[message_id] = (self.tables[kind], False)
        elif what == "bad-in-route":
            reading.update(kind=kind, temperature="hot")
            self.belongs[message_id] = (self.tables[kind], True)
        elif what == "number-kind":
            reading["kind"] = chooser.randint(0, 4)
            self.belongs[message_id] = (home, True)
        else:
            if what == "other-kind":
                reading["kind"] = f"x{chooser.randint(0, 4)}"
            self.belongs[message_id] = (home, self.unmatched == "quarantine")
        return json.dumps(reading).encode()

    def publish(self, count: int, chooser: random.Random) -> None:
        before = len(self.published)
        super().publish(count, chooser)
        for message_id in self.published[before:]:
            self.at[self.where[message_id]] = message_id

    # -- the faults ------------------------------------------------------------------------

    def hook(self, fault: Fault, spec: BatchSpec, chooser: random.Random) -> Callable[[], None]:
        if fault.name.startswith("catalog-"):
            return lambda: self._plan_table_fault(fault.name, spec, chooser)
        return super().hook(fault, spec, chooser)

    def _plan_table_fault(self, name: str, spec: BatchSpec, chooser: random.Random) -> None:
        """A catalog fault for the next commit of an Iceberg table (or quarantine table) this
        batch writes, where it writes one; else of any of them."""
        from .faulty_catalog import plan_fault

        names = self._iceberg_names(spec) or sorted(self._iceberg_places().values())
        fault = {
            "catalog-fail": "fail",
            "catalog-conflict": "conflict",
            "catalog-unknown": "unknown-after",
            "catalog-unknown-before": "unknown-before",
        }[name]
        table = chooser.choice(names)
        self._note(table)
        plan_fault(fault, table)

    def _iceberg_places(self) -> dict[Place, str]:
        """Each Iceberg place (a table's rows or its quarantine) and its table's name."""
        places = {}
        for location in [self.sink, *self.tables.values()]:
            if location.startswith("iceberg://"):
                name = location.rsplit(".", 1)[-1]
                places[(location, False)] = name
                places[(location, True)] = f"{name}__quarantine"
        return places

    def _iceberg_names(self, spec: BatchSpec) -> list[str]:
        iceberg = self._iceberg_places()
        names = set()
        for r in spec.ranges:
            for offset in range(r.start, r.end):
                message_id = self.at.get((self.generation, r.partition, offset))
                place = self.belongs.get(message_id or "")
                if place in iceberg:
                    names.add(iceberg[place])
        return sorted(names)

    # -- the oracle ------------------------------------------------------------------------

    def judge(self) -> Outcome:
        from ..route_audit import audit_routes

        outcome, found = self.outcome, self.findings
        places: dict[str, list[Place]] = {}
        for location in [self.sink, *self.tables.values()]:
            good, bad = _place_ids(location)
            for quarantined, ids in ((False, good), (True, bad)):
                found.rows[_shown((location, quarantined))] += len(ids)
                for message_id in ids:
                    places.setdefault(message_id, []).append((location, quarantined))
        published = set(self.published)
        outcome.published = len(published)
        outcome.held = len(places)
        outcome.doubled = sorted(i for i, where in places.items() if len(where) > 1)
        outcome.unknown = sorted(set(places) - published)
        found.misplaced = sorted(
            f"{i} in {', '.join(map(_shown, where))}, belongs in {_shown(self.belongs[i])}"
            for i, where in places.items()
            if i in self.belongs and any(place != self.belongs[i] for place in where)
        )
        missing = sorted(published - set(places))
        outcome.missing, outcome.accounted = self.accounted(missing)
        report = audit_routes(self.sink, self.source(), self.routes)
        outcome.audit_ok = report.ok
        outcome.audit_lines = report.lines()
        outcome.waiting = self.left_waiting()
        return outcome


def _shown(place: Place) -> str:
    location, quarantined = place
    return f"{location}{' (quarantine)' if quarantined else ''}"


def _place_ids(location: str) -> tuple[list[str], list[str]]:
    """The payload ids of a sink's good rows and of its quarantined ones."""
    if location.startswith(("iceberg://", "delta://")):
        good = table_columns(location, False, ("id",)).column("id").to_pylist()
        values = table_columns(location, True, ("value",)).column("value").to_pylist()
    else:
        good, values = _parquet_rows(Path(location))
    bad = [payload_id(value) or f"(no id: {value!r:.80})" for value in values]
    return [i for i in good if i is not None], bad
