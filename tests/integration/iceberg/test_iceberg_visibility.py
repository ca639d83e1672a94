"""A reader of an Iceberg table and of its quarantine table, polling both (pyiceberg scans of
their ``batch_id`` column) while ingests are SIGKILLed at each failpoint around the commits
and run again (:mod:`sluice.testing.visibility`), each batch with good and bad records:

- on a REST catalog, where a batch and its quarantine rows are one commit (the multi-table
  commit), it never sees a batch's rows without its quarantine rows, nor the reverse, crash
  or not;
- on a SQL catalog (SQLite), where they are two commits, the batch's first, it never sees
  quarantine rows of a batch whose rows it does not see; it sees the rows of the batch killed
  between the two commits without its quarantine rows until the rerun, and a batch between
  its two commits only for that moment.

Every message is in the tables once (``sluice audit``). The numbers over more rounds:
``bench/quarantine_visibility.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec
from sluice.testing.plugin import Broker
from sluice.testing.visibility import VisibilityPoller, iceberg_batches, kill_loop

from ..spark.conftest import SCHEMA, KafkaTopic, opened_topic, reading
from ..spark.crashes import assert_exactly_once
from ..spark.test_crash_matrix import BAD
from .conftest import Lake, table_rows

#: The failpoints around the commits (the others leave the tables as the rerun finds them;
#: bench/quarantine_visibility.py kills at every one)
POINTS = ["publish.after_intent", "publish.after_rename", "publish.after_state", "commit.before"]
BETWEEN = "publish.after_rename"  # the batch's commit is done, its quarantine's not (SQL)


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    yield from opened_topic(apache_kafka_broker, unique_name)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("catalog", ["rest", "sqlite"])
def test_a_reader_of_both_tables_during_a_kill_loop(
    spark: Any, topic: KafkaTopic, catalog: str, request: pytest.FixtureRequest
) -> None:
    lake: Lake = request.getfixturevalue(f"{catalog}_lake")
    sink = lake.sink()
    numbers = itertools.count()

    def next_batch() -> BatchSpec:
        first = next(numbers) * 10
        topic.send([reading(first + i) for i in range(10)] + BAD)
        return topic.plan()

    table = f"{lake.namespace}.readings"
    poller = VisibilityPoller(
        iceberg_batches(lake.catalog_name, table),
        iceberg_batches(lake.catalog_name, f"{table}__quarantine"),
    ).start()
    try:
        options = {"source": topic.source, "schema": SCHEMA, "dead_letter": True}
        batches = kill_loop(spark, sink, next_batch, POINTS, poller, **options)
    finally:
        report = poller.stop()
    print("\n".join(report.lines()))

    assert not report.errors
    assert report.polls > 2 * len(POINTS), "every crash's state was polled"
    assert not report.of_kind("quarantine without rows")
    lagging = report.of_kind("rows without quarantine")
    if catalog == "rest":
        assert not lagging, "one commit: never a batch without its quarantine"
    else:
        assert all(e.cleared is not None for e in lagging), "each got its quarantine"
        killed = batches[POINTS.index(BETWEEN)]
        after_kill = [e.batch_id for e in lagging if e.label == f"ingest killed at {BETWEEN}"]
        assert after_kill == [killed], "two commits: the crash between them is seen"
    assert_exactly_once(audit(sink, topic.source), len(POINTS) * 12)
    assert len(table_rows(lake, "readings__quarantine")) == len(POINTS) * 2
