"""The crash matrix of a routed batch: ten routes into Parquet, Delta and Iceberg tables
(:class:`.conftest.RoutedLake`), an ingest SIGKILLed between two tables' commits, after every
table's and before the group's commit, then run again. (A kill inside one table's publish is
that sink's own crash matrix's: the rerun recovers the table before it holds or writes.)

The points share one topic and one set of tables, a round each (its own batch), so each
later round also lands on tables that hold the earlier rounds' batches; the killed ingests
run in children attached to the session's Spark (:func:`sluice.testing.crash.run_child`: no
JVM of their own); one rerun is ``sluice ingest --routes``. After each rerun ``sluice audit
--routes`` finds every message once in its own table and in no other (the rounds so far),
and the group's lag is 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.batch import plan_batch
from sluice.route_index import HOME
from sluice.spark import ingest
from tests.unit.cli.runner import assert_ok, run

from ..spark.conftest import KafkaTopic
from ..spark.crashes import run_child
from .conftest import KINDS, SCHEMA, RoutedLake, event

PER_KIND = 2
#: The tables publish in the order of their locations: the Parquet one (k9), the four Delta
#: ones (k5-k8), the five Iceberg ones (k0-k4); then the ingest's own sink (Delta).
POINTS = [
    "routes.after_table@4",  # between the 4th and the 5th table's commits
    "routes.after_tables",  # every table holds its slice, the ingest's own sink not the batch
    "commit.before",  # the batch published everywhere, the group's offsets not committed
]


def test_a_routed_batch_killed_at_each_step_is_exactly_once_in_each_table(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake, tmp_path: Path
) -> None:
    routes, home = routed_lake.routes, routed_lake.home
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(routes.to_json())
    options = {"source": topic.source, "schema": SCHEMA, "routes": routes.to_dict()}

    for number, point in enumerate(POINTS, 1):
        values = [event(k, number * 100 + i) for i in range(PER_KIND) for k in KINDS]
        topic.send([*values, event("nobody", number * 100 + 99), b"not json"])
        spec = topic.plan()
        code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": home, **options}, point)
        assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"

        if point == "routes.after_table@4":  # this rerun through the command line
            uri = f"{topic.source}/{topic.name}?group_id={spec.group_id}"
            ingest_args = ("ingest", uri, "--sink", home, "--schema", SCHEMA)
            shown = assert_ok(run(*ingest_args, "--routes", f"@{routes_file}"))
            assert spec.batch_id in shown and "2 written" in shown, shown  # a table's line
        else:
            ingest(spark, spec, home, **options)

        audit = ("audit", home, "--source", topic.source, "--routes", f"@{routes_file}")
        report = json.loads(assert_ok(run(*audit, "--json")))
        assert report["ok"], f"after a kill at {point}: {report}"
        tables = {t["table"]: t for t in report["tables"]}
        for kind in KINDS:
            table = tables[routed_lake.table(kind)]
            assert table["expected"] == table["written"] == number * PER_KIND, (point, table)
        assert tables[HOME]["quarantined"] == number * 2, (point, tables[HOME])
        assert plan_batch(topic.queue) is None, f"lag 0 after a kill at {point}"

    assert "OK: every message is in its own table once." in assert_ok(run(*audit))
    for kind in KINDS:  # each table holds its own messages, read by its own reader
        rows = routed_lake.rows(kind)
        assert {r["event_type"] for r in rows} == {kind}
        assert len(rows) == len({r["n"] for r in rows}) == len(POINTS) * PER_KIND
