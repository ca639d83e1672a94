"""A routed batch: one read of the topic, each message in its own table exactly once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.spark import ingest
from sluice.spark.failpoints import FailpointError, armed

from ..spark.conftest import KafkaTopic
from .conftest import KINDS, SCHEMA, RoutedLake, event


def send_events(topic: KafkaTopic, per_kind: int, start: int = 0) -> dict[str, list[int]]:
    """``per_kind`` events of each kind, interleaved; the ``n`` of each kind's events."""
    sent: dict[str, list[int]] = {k: [] for k in KINDS}
    values = []
    for i in range(start, start + per_kind):
        for kind in KINDS:
            values.append(event(kind, i))
            sent[kind].append(i)
    topic.send(values)
    return sent


def test_each_message_goes_to_its_own_table_once(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    sent = send_events(topic, 6)
    strays = [event(None, 900), event("../escape", 901), event("nobody", 902), b"not json"]
    topic.send(strays)
    spec = topic.plan()

    result = ingest(
        spark,
        spec,
        routed_lake.home,
        source=topic.source,
        schema=SCHEMA,
        routes=routed_lake.routes,
    )

    for kind in KINDS:
        rows = routed_lake.rows(kind)
        assert sorted(r["n"] for r in rows) == sent[kind], kind
        assert {r["event_type"] for r in rows} == {kind}
        assert result.tables[routed_lake.table(kind)] == {"written": 6, "quarantined": 0, "held": 0}
    reasons = Counter(r["reason"].split(":")[0] for r in routed_lake.quarantined(routed_lake.home))
    assert reasons == Counter({"no route": 4})
    assert result.read == 64 and result.committed
    assert plan_batch(topic.queue) is None, "the group committed the whole batch"


def test_a_run_that_fails_between_two_tables_is_finished_by_its_rerun(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    sent = send_events(topic, 4)
    spec = topic.plan()
    options: dict[str, Any] = {
        "source": topic.source,
        "schema": SCHEMA,
        "routes": routed_lake.routes,
    }
    with armed("routes.after_table@3", "raise"), pytest.raises(FailpointError):
        ingest(spark, spec, routed_lake.home, **options)
    first = sorted(routed_lake.table(k) for k in KINDS)[:3]
    assert [len(table_rows_of(routed_lake, t)) for t in first] == [4, 4, 4]
    assert plan_batch(topic.queue) is not None, "nothing committed"

    result = ingest(spark, spec, routed_lake.home, **options)

    for kind in KINDS:
        assert sorted(r["n"] for r in routed_lake.rows(kind)) == sent[kind], kind
    held = {t: c["held"] for t, c in result.tables.items() if c["held"]}
    assert held == dict.fromkeys(first, 4)
    assert plan_batch(topic.queue) is None


def table_rows_of(lake: RoutedLake, location: str) -> list[dict[str, Any]]:
    from .conftest import table_rows

    return table_rows(location)
