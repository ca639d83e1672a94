"""Change data capture into a current-state Iceberg table (write_mode="upsert"), on Apache
Kafka: Debezium envelopes applied by key, one snapshot per batch with its offsets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.audit import audit
from sluice.cdc import POSITION_COLUMN
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.testing.debezium import Message, SourceTable
from sluice.testing.plugin import Broker

from ..spark.conftest import KafkaTopic, open_topic
from .conftest import Lake, sluice_summaries, table_rows


@pytest.fixture
def topic(apache_kafka_broker: Broker, unique_name: str) -> Iterator[KafkaTopic]:
    opened = open_topic(apache_kafka_broker, unique_name)
    yield opened
    opened.queue.close(None)
    opened.producer.close()


def send(topic: KafkaTopic, messages: list[Message]) -> None:
    """Send in order, each key to the partition Kafka's default partitioner picks for it (as
    Debezium does: all of a key's changes in one partition)."""
    sent = [topic.producer.send(topic.name, key=key, value=value) for key, value in messages]
    topic.producer.flush(10)
    for future in sent:
        future.get(10)


def current(lake: Lake, name: str = "customers") -> dict[int, dict[str, Any]]:
    """The table's rows by id, without Sluice's position column."""
    rows = table_rows(lake, name)
    found = {r["id"]: {k: v for k, v in r.items() if k != POSITION_COLUMN} for r in rows}
    assert len(found) == len(rows), "a key has two rows"
    return found


def expected(source: SourceTable, columns: list[str]) -> dict[int, dict[str, Any]]:
    return {k: {c: row.get(c) for c in columns} for k, row in source.rows.items()}


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "schema-payload"])
def test_batches_of_changes_leave_the_source_tables_current_state(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake, wrapped: bool
) -> None:
    source = SourceTable(wrapped=wrapped)
    sink = sqlite_lake.sink("customers")
    messages: list[Message] = []
    for key in range(8):
        messages += source.upsert(key, name=f"c{key}")
    messages += source.upsert(3, name="c3-renamed")
    messages += source.delete(5)
    messages += source.upsert(5, name="c5-again")  # deleted, then created again
    messages += source.delete(6)  # with its tombstone
    send(topic, messages)
    first = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert first.written == len(messages) and first.quarantined == 0
    assert first.changes == {
        "changes": 8,
        "tombstones": 2,
        "upserted": 7,
        "deleted": 0,  # 6 was created and deleted in the batch: no row to delete
        "stale": 0,
    }
    assert current(sqlite_lake) == expected(source, ["id", "name"])

    # a later batch: updates, deletes of rows the table holds, a new column, bad envelopes
    later = source.upsert(1, name="c1", tier="gold")  # a new column
    later += source.delete(2) + source.delete(3)
    later += source.upsert(4, name="c4-renamed")
    bad = [(b'{"id": 9}', b"not json"), (b'{"id": 9}', b'{"op": "c", "after": null}')]
    send(topic, later + bad)
    second = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert (second.written, second.quarantined) == (len(later), 2)
    assert second.changes["deleted"] == 2 and second.changes["upserted"] == 2
    assert current(sqlite_lake) == expected(source, ["id", "name", "tier"])
    reasons = sorted(r["reason"] for r in table_rows(sqlite_lake, "customers__quarantine"))
    assert reasons == [
        "cdc: op 'c' has no 'after' object (the row after the change)",
        "cdc: the message value is not JSON (Expecting value: line 1 column 1 (char 0))",
    ]
    # one snapshot per batch names it and its offsets (a delete's rewrite commits with it)
    summaries = sluice_summaries(sqlite_lake, "customers")
    assert [s["sluice.batch-id"] for s in summaries] == [first.batch_id, second.batch_id]
    record = json.loads(summaries[1]["sluice.record"])
    assert record["counts"]["deleted"] == 2
    assert sqlite_lake.table("customers").properties["sluice.cdc.key-columns"] == '["id"]'
    report = audit(sink, topic.source)
    assert report.ok, report.lines()
    assert report.current_state is not None and report.current_state.keys == len(source.rows)
    assert sum(p.written for p in report.streams[0].partitions) == len(messages + later)

    # the audit is the oracle: a row lost, or one a change does not give, fails it
    from pyiceberg.expressions import EqualTo

    sqlite_lake.table("customers").delete(EqualTo("id", 4))
    broken = audit(sink, topic.source)
    assert not broken.ok and broken.current_state is not None
    assert broken.current_state.absent == 1
    assert "key (4,) has no row" in "\n".join(broken.lines())


def test_a_change_older_than_the_tables_row_is_ignored_and_counted(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    source = SourceTable()
    sink = sqlite_lake.sink("customers")
    old = source.upsert(1, name="old")  # lsn 1008
    send(topic, source.upsert(2, name="two") + source.upsert(1, name="new"))  # lsn 1016, 1024
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    send(topic, old)  # arrives late: its position is older than the row's
    late = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert late.changes["stale"] == 1 and late.changes["upserted"] == 0
    assert current(sqlite_lake) == {1: {"id": 1, "name": "new"}, 2: {"id": 2, "name": "two"}}
    assert {r["id"]: r[POSITION_COLUMN] for r in table_rows(sqlite_lake, "customers")} == {
        1: 1024,
        2: 1016,
    }


def test_a_replay_of_the_same_changes_leaves_the_same_table(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    """A second consumer group reads the whole topic again into the table: every change is
    applied twice, the table is as it was."""
    source = SourceTable()
    sink = sqlite_lake.sink("customers")
    messages: list[Message] = []
    for key in range(6):
        messages += source.upsert(key, name=f"c{key}")
    messages += source.delete(0) + source.upsert(1, name="c1-renamed")
    send(topic, messages)
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    before = table_rows(sqlite_lake, "customers")

    topic.queue.configure({"group_id": f"{topic.name}-replay"})
    replayed = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert replayed.written == len(messages) and replayed.changes["stale"] == 0
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(table_rows(sqlite_lake, "customers"), key=key) == sorted(before, key=key)


def test_key_columns_named_by_the_user_and_the_tables_kind_kept(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    source = SourceTable()
    send(topic, source.upsert(1, name="a") + source.upsert(2, name="b") + source.delete(1))
    sink = sqlite_lake.sink("by_name")
    spec = topic.plan()
    result = ingest(spark, spec, sink, source=topic.source, write_mode="upsert", key_columns=["id"])

    assert result.changes["upserted"] == 1
    assert current(sqlite_lake, "by_name") == {2: {"id": 2, "name": "b"}}
    # refused before anything is written: the table's kind and key stay what they are
    send(topic, source.upsert(3, name="c"))
    later = topic.plan()
    with pytest.raises(ConfigError, match="is a current-state table"):
        ingest(spark, later, sink, source=topic.source, value_format="bytes")
    with pytest.raises(ConfigError, match="keyed by id, not name"):
        ingest(spark, later, sink, source=topic.source, write_mode="upsert", key_columns=["name"])
    appended = sqlite_lake.sink("appended")
    ingest(spark, later, appended, source=topic.source, value_format="bytes")
    send(topic, source.upsert(4, name="d"))
    with pytest.raises(ConfigError, match="holds appended messages"):
        ingest(spark, topic.plan(), appended, source=topic.source, write_mode="upsert")
