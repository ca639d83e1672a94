"""The crash matrix of a routed batch: ten routes into Parquet, Delta and Iceberg tables
(:class:`.conftest.RoutedLake`), an ingest SIGKILLed at every failpoint a routed Kafka ingest
passes, then run again: the driver's steps (reading, staging, committing), each sink's publish
inside a route table's publish (the Parquet table's, a Delta table's and an Iceberg table's:
``publish.*@N``, the N-th table to publish), between two tables' commits, after every
table's and before the group's commit.

The points share one topic and one set of tables, a round each (its own batch), so each
later round also lands on tables that hold the earlier rounds' batches; the killed ingests
run in children attached to the session's Spark (:func:`sluice.testing.crash.run_child`: no
JVM of their own); one rerun is ``sluice ingest --routes``. After each rerun ``sluice audit
--routes`` finds every message once in its own table and in no other (the rounds so far),
each table holds exactly its own messages, the ones with no route are quarantined once in the
ingest's own sink, and the group's lag is 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.route_index import HOME
from sluice.spark import ingest
from sluice.spark.failpoints import FAILPOINTS, ROUTE_FAILPOINTS
from tests.unit.cli.runner import assert_ok, run

from ..spark.conftest import KafkaTopic
from ..spark.crashes import run_child
from .conftest import KINDS, SCHEMA, RoutedLake, event

#: The tables publish in the order of their locations: the Parquet one (k9), the four Delta
#: ones (k5-k8), the five Iceberg ones (k0-k4); then the ingest's own sink (Delta).
POINTS = [
    "read.before",  # planned, nothing read
    "read.after_first_chunk",  # read, nothing staged
    "stage.after_write",  # every table's slice staged, none published
    "publish.after_intent",  # inside the 1st table's publish (Parquet): intent, no rename
    "publish.after_rename@2",  # inside the 2nd's (Delta): committed, its state not finished
    "publish.after_state@6",  # inside the 6th's (Iceberg): its state, not the next tables'
    "routes.after_table@4",  # between the 4th and the 5th table's commits
    "routes.after_tables",  # every table holds its slice, the ingest's own sink not the batch
    "commit.before",  # the batch published everywhere, the group's offsets not committed
    "commit.after",  # committed: the rerun finds nothing to do
]
#: What a routed Kafka ingest never passes: MQTT's partial acknowledgement, and dead letters
#: (routes and dead_letter do not combine: sluice.spark.routed.routed_job refuses them).
NOT_PASSED = {"commit.midway", "dead_letters.after_send"}


def test_the_matrix_covers_every_failpoint_of_a_routed_kafka_ingest() -> None:
    covered = {point.partition("@")[0] for point in POINTS}
    assert covered == {*FAILPOINTS, *ROUTE_FAILPOINTS} - NOT_PASSED


# ten rounds of a child killed and a rerun: under the two-core machine's full load (a soak
# beside the suite) setup and rounds took 300 s
@pytest.mark.timeout(600)
def test_a_routed_batch_killed_at_each_step_is_exactly_once_in_each_table(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake, tmp_path: Path
) -> None:
    routes, home = routed_lake.routes, routed_lake.home
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(routes.to_json())
    options = {"source": topic.source, "schema": SCHEMA, "routes": routes.to_dict()}
    audit = ("audit", home, "--source", topic.source, "--routes", f"@{routes_file}")
    sent: dict[str, list[int]] = {kind: [] for kind in KINDS}  # each kind's n, so far

    for number, point in enumerate(POINTS, 1):
        values = [event(k, number * 100) for k in KINDS]  # one message a table: cheap rounds
        topic.send([*values, event("nobody", number * 100 + 99), b"not json"])
        for kind in KINDS:
            sent[kind].append(number * 100)
        spec = topic.plan()
        code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": home, **options}, point)
        assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"

        if point == "routes.after_table@4":  # this rerun through the command line
            uri = f"{topic.source}/{topic.name}?group_id={spec.group_id}"
            ingest_args = ("ingest", uri, "--sink", home, "--schema", SCHEMA)
            shown = assert_ok(run(*ingest_args, "--routes", f"@{routes_file}"))
            assert spec.batch_id in shown, shown
            assert re.search(r"\b1 written", shown), shown  # the line of a table it wrote
        else:
            ingest(spark, spec, home, **options)

        report = json.loads(assert_ok(run(*audit, "--json")))
        assert report["ok"], f"after a kill at {point}: {report}"
        tables = {t["table"]: t for t in report["tables"]}
        for kind in KINDS:
            table = tables[routed_lake.table(kind)]
            assert table["expected"] == table["written"] == number, (point, table)
            assert table["quarantined"] == 0, (point, table)
        assert tables[HOME]["quarantined"] == number * 2, (point, tables[HOME])
        for kind in KINDS:  # each table holds its own messages once, read by its own reader
            rows = routed_lake.rows(kind)
            assert {r["event_type"] for r in rows} == {kind}, (point, kind)
            assert sorted(r["n"] for r in rows) == sent[kind], (point, kind)
        quarantined = routed_lake.quarantined(home)
        assert len(quarantined) == number * 2, point
        assert {r["reason"].split(":")[0] for r in quarantined} == {"no route"}, point
        assert plan_batch(topic.queue) is None, f"lag 0 after a kill at {point}"

    assert "OK: every message is in its own table once." in assert_ok(run(*audit))
