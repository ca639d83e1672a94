"""A routed batch: one read of the topic, each message in its own table exactly once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.queues.config import ConfigError
from sluice.routes import Routes
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
        assert not {"key", "value", "headers"} & set(rows[0]), "lean rows by default"
        assert {"partition", "offset", "timestamp"} <= set(rows[0])
        assert result.tables[routed_lake.table(kind)] == {"written": 6, "quarantined": 0, "held": 0}
    reasons = Counter(r["reason"].split(":")[0] for r in routed_lake.quarantined(routed_lake.home))
    assert reasons == Counter({"no route": 4})
    assert result.read == 64 and result.committed
    assert plan_batch(topic.queue) is None, "the group committed the whole batch"


def test_every_table_keeps_the_message_columns_of_the_ingest(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake, tmp_path: Path
) -> None:
    """keep_message reaches every route table, and a route table made with another choice
    is refused before anything is read."""
    routes = Routes(by="field:event_type", tables={k: routed_lake.table(k) for k in ("k0", "k5")})
    topic.send([event("k0", 1), event("k5", 2)])
    options: dict[str, Any] = {"source": topic.source, "schema": SCHEMA, "routes": routes}
    ingest(spark, topic.plan(), routed_lake.home, keep_message=True, **options)
    for kind in ("k0", "k5"):
        (row,) = routed_lake.rows(kind)
        assert json.loads(row["value"]) == {"n": row["n"], "event_type": kind}

    topic.send([event("k0", 3)])
    spec = topic.plan()
    other_home = f"delta://{tmp_path / 'other_home'}"  # a new sink: it keeps no column
    with pytest.raises(ConfigError, match=r"The route table .* was made with keep_message=True"):
        ingest(spark, spec, other_home, **options)
    again = plan_batch(topic.queue)
    assert again is not None and again.ranges == spec.ranges, "nothing committed"


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


def test_the_audit_checks_each_table_against_the_brokers_messages(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    from sluice.route_audit import audit_routes
    from sluice.route_index import HOME

    send_events(topic, 3)
    topic.send([event("nobody", 900), b"not json"])
    spec = topic.plan()
    routes = routed_lake.routes
    ingest(spark, spec, routed_lake.home, source=topic.source, schema=SCHEMA, routes=routes)

    report = audit_routes(routed_lake.home, topic.source, routes)
    assert report.ok, "\n".join(report.lines())
    for kind in KINDS:
        table = report.table(routed_lake.table(kind))
        assert table is not None and (table.expected, table.written) == (3, 3), kind
    home = report.table(HOME)
    assert home is not None and (home.expected, home.quarantined) == (2, 2)

    # the same tables under routes that swap two of them: every message of both is misplaced
    swapped = dict(routes.tables)
    swapped["k0"], swapped["k5"] = swapped["k5"], swapped["k0"]
    other = audit_routes(routed_lake.home, topic.source, Routes(by=routes.by, tables=swapped))
    assert not other.ok
    for kind in ("k0", "k5"):
        table = other.table(routed_lake.table(kind))
        assert table is not None and table.wrong == 3 and table.missing_count == 3, kind
    assert other.other_routes == [spec.batch_id]


def test_the_audit_finds_a_table_the_group_committed_past(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    """A run dies between two tables' commits and the group commits anyway (what a buggy
    ingest would do): the audit names each table left without its messages."""
    from sluice.route_audit import audit_routes
    from sluice.spark.kafka_source import commit_offsets

    send_events(topic, 2)
    spec = topic.plan()
    options: dict[str, Any] = {
        "source": topic.source,
        "schema": SCHEMA,
        "routes": routed_lake.routes,
    }
    with armed("routes.after_table@4", "raise"), pytest.raises(FailpointError):
        ingest(spark, spec, routed_lake.home, **options)
    commit_offsets(
        {"bootstrap_servers": topic.broker.bootstrap},
        topic.name,
        str(spec.group_id),
        {r.partition: r.end for r in spec.ranges},
    )
    # the home has no batch yet: publish one later batch so that the audit has a record
    topic.send([event("k0", 100)])
    ingest(spark, topic.plan(), routed_lake.home, **options)

    report = audit_routes(routed_lake.home, topic.source, routed_lake.routes)
    assert not report.ok
    tables = sorted(routed_lake.table(k) for k in KINDS)
    short = {t.table: t.missing_count for t in report.tables if t.missing}
    assert short == dict.fromkeys(tables[4:], 2), "\n".join(report.lines())


def test_the_audit_of_a_recreated_topic_checks_each_partition_from_the_new_topic_on(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    """The topic deleted and created again, shorter, its new messages at the old ones' offsets
    all of one kind: the audit checks each partition from the batch that read the new topic
    (its record names the partition reset) on, as ``sluice audit`` does; the tables' older
    rows hold the old topic's messages. (Found by the nemesis with routes, seed 8: the audit
    read the old batches' ranges from the new topic and raised DataLossError.)"""
    from sluice.route_audit import audit_routes

    options: dict[str, Any] = {"source": topic.source, "schema": SCHEMA}
    options["routes"] = routed_lake.routes
    send_events(topic, 2)
    ingest(spark, topic.plan(), routed_lake.home, **options)
    topic.recreate(3)
    for partition in range(3):  # every partition of the new topic, shorter than the old
        topic.send([event("k1", 100 + 10 * partition + i) for i in range(2)], partition)

    ingest(spark, topic.plan(), routed_lake.home, **options, fail_on_data_loss=False)

    report = audit_routes(routed_lake.home, topic.source, routed_lake.routes)
    assert report.ok, "\n".join(report.lines())
    for kind in KINDS:
        table = report.table(routed_lake.table(kind))
        new = 6 if kind == "k1" else 0
        assert table is not None and (table.expected, table.written) == (new, new), kind
    assert len(routed_lake.rows("k1")) == 2 + 6, "the old topic's rows stay"


def test_a_table_holding_a_recreated_topics_messages_from_a_failed_run_keeps_them_once(
    spark: Any, topic: KafkaTopic, routed_lake: RoutedLake
) -> None:
    """The topic deleted and created again; the first run on the new topic fails between two
    tables' commits (the ingest's own sink still holds the old topic); the next batch, planned
    anew over the same messages and more, writes them no second time in the tables that hold
    them: a table's own topic id says whose offsets it holds. (Found by the nemesis with
    routes, seed 304: the sink's reset of the partitions made those tables write them again.)"""
    from sluice.route_audit import audit_routes

    options: dict[str, Any] = {"source": topic.source, "schema": SCHEMA}
    options.update(routes=routed_lake.routes, fail_on_data_loss=False)
    send_events(topic, 2)
    ingest(spark, topic.plan(), routed_lake.home, **options)
    topic.recreate(3)
    for partition in range(3):
        topic.send([event(k, 100 + partition) for k in KINDS], partition)
    with armed("routes.after_table@3", "raise"), pytest.raises(FailpointError):
        ingest(spark, topic.plan(), routed_lake.home, **options)
    topic.send([event(k, 200) for k in KINDS])  # the next plan is another batch

    ingest(spark, topic.plan(), routed_lake.home, **options)

    for kind in KINDS:  # the old topic's 2, the new one's 3 and 1, each once
        numbers = sorted(r["n"] for r in routed_lake.rows(kind))
        assert numbers == [0, 1, 100, 101, 102, 200], kind
    report = audit_routes(routed_lake.home, topic.source, routed_lake.routes)
    assert report.ok, "\n".join(report.lines())
    assert plan_batch(topic.queue) is None
