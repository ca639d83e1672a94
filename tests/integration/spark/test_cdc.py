"""Change data capture into current-state tables (write_mode="upsert"), Iceberg (SQL catalog
on SQLite) and Delta (delta-rs), on Apache Kafka: Debezium envelopes applied by key, in one
commit per batch that carries its offsets."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.audit import audit
from sluice.batch import plan_batch
from sluice.cdc import POSITION_COLUMN
from sluice.kafka import KafkaMessageQueue
from sluice.queues import ConfigError
from sluice.spark import ingest
from sluice.testing.debezium import Message, SourceTable
from tests.unit.cli.runner import assert_ok, run

from ..iceberg.conftest import Lake, faulty_lake, sluice_summaries, sqlite_lake, table_rows
from .conftest import KafkaTopic
from .crashes import assert_exactly_once, dead_letter_origins, maintain_days_later, run_child
from .test_crash_matrix import KAFKA_POINTS

__all__ = ["faulty_lake", "sqlite_lake"]  # fixtures of the Iceberg tests, used here


@dataclass
class Target:
    """A current-state table of the test's own: its sink URI, and its rows read back."""

    kind: str
    sink: str
    rows: Callable[[], list[dict[str, Any]]]
    quarantine: Callable[[], list[dict[str, Any]]]
    batches: Callable[[], list[str]]  # the batch ids of its commits, oldest first
    tamper: Callable[[int], None]  # delete the row of an id behind Sluice's back
    other: str  # the sink URI of another table of the same kind
    other_rows: Callable[[], list[dict[str, Any]]]


def iceberg_target(lake: Lake, name: str) -> Target:
    from pyiceberg.expressions import EqualTo

    return Target(
        "iceberg",
        lake.sink(name),
        lambda: table_rows(lake, name),
        lambda: table_rows(lake, f"{name}__quarantine"),
        lambda: [s["sluice.batch-id"] for s in sluice_summaries(lake, name)],
        lambda key: lake.table(name).delete(EqualTo("id", key)),
        lake.sink(f"{name}_other"),
        lambda: table_rows(lake, f"{name}_other"),
    )


def delta_target(path: Path | str) -> Target:
    """A Delta table at ``path``: a local directory, or ``s3://...`` on the test's S3 server."""
    from ..delta.conftest import open_delta

    def rows(where: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = open_delta(where).to_pyarrow_table().to_pylist()
        return found

    def batches() -> list[str]:
        from sluice.spark.sinks.delta import DeltaSink

        sink = DeltaSink(f"delta://{path}")
        history = reversed(sink.commit_infos(sink.root))
        return [h["sluice.batch-id"] for h in history if "sluice.batch-id" in h]

    return Target(
        "delta",
        f"delta://{path}",
        lambda: rows(str(path)),
        lambda: rows(f"{path}/_quarantine"),
        batches,
        lambda key: open_delta(path).delete(f"id = {key}"),
        f"delta://{path}_other",
        lambda: rows(f"{path}_other"),
    )


@pytest.fixture(params=["iceberg", "delta", "delta-s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "iceberg":
        return iceberg_target(request.getfixturevalue("sqlite_lake"), "customers")
    if request.param == "delta-s3":  # a current-state table on the tests' S3 server
        return delta_target(request.getfixturevalue("s3_bucket").uri("customers"))
    return delta_target(tmp_path / "customers")


def send(topic: KafkaTopic, messages: list[Message]) -> None:
    """Send in order, each key to the partition Kafka's default partitioner picks for it (as
    Debezium does: all of a key's changes in one partition)."""
    sent = [topic.producer.send(topic.name, key=key, value=value) for key, value in messages]
    topic.producer.flush(10)
    for future in sent:
        future.get(10)


def current(target: Target) -> dict[int, dict[str, Any]]:
    """The table's rows by id, without Sluice's position column."""
    rows = target.rows()
    found = {r["id"]: {k: v for k, v in r.items() if k != POSITION_COLUMN} for r in rows}
    assert len(found) == len(rows), "a key has two rows"
    return found


def expected(source: SourceTable, columns: list[str]) -> dict[int, dict[str, Any]]:
    return {k: {c: row.get(c) for c in columns} for k, row in source.rows.items()}


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "schema-payload"])
def test_batches_of_changes_leave_the_source_tables_current_state(
    spark: Any, topic: KafkaTopic, target: Target, wrapped: bool
) -> None:
    source = SourceTable(wrapped=wrapped)
    sink = target.sink
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
    assert current(target) == expected(source, ["id", "name"])

    # a later batch: updates, deletes of rows the table holds, a new column, bad envelopes
    later = source.upsert(1, name="c1", tier="gold")  # a new column
    later += source.delete(2) + source.delete(3)
    later += source.upsert(4, name="c4-renamed")
    bad = [(b'{"id": 9}', b"not json"), (b'{"id": 9}', b'{"op": "c", "after": null}')]
    send(topic, later + bad)
    second = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert (second.written, second.quarantined) == (len(later), 2)
    assert second.changes["deleted"] == 2 and second.changes["upserted"] == 2
    assert current(target) == expected(source, ["id", "name", "tier"])
    reasons = sorted(r["reason"] for r in target.quarantine())
    assert reasons == [
        "cdc: op 'c' has no 'after' object (the row after the change)",
        "cdc: the message value is not JSON (Expecting value: line 1 column 1 (char 0))",
    ]
    # one commit per batch names it (Iceberg: a delete's rewrite commits with it)
    assert target.batches() == [first.batch_id, second.batch_id]
    report = audit(sink, topic.source)
    assert report.ok, report.lines()
    assert report.current_state is not None and report.current_state.keys == len(source.rows)
    assert sum(p.written for p in report.streams[0].partitions) == len(messages + later)

    # the audit is the oracle: a row lost, or one a change does not give, fails it
    target.tamper(4)
    broken = audit(sink, topic.source)
    assert not broken.ok and broken.current_state is not None
    assert broken.current_state.absent == 1
    assert "key (4,) has no row" in "\n".join(broken.lines())


def test_a_change_older_than_the_tables_row_is_ignored_and_counted(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    source = SourceTable()
    sink = target.sink
    old = source.upsert(1, name="old")  # lsn 1008
    send(topic, source.upsert(2, name="two") + source.upsert(1, name="new"))  # lsn 1016, 1024
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    send(topic, old)  # arrives late: its position is older than the row's
    late = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert late.changes["stale"] == 1 and late.changes["upserted"] == 0
    assert current(target) == {1: {"id": 1, "name": "new"}, 2: {"id": 2, "name": "two"}}
    assert {r["id"]: r[POSITION_COLUMN] for r in target.rows()} == {
        1: 1024,
        2: 1016,
    }


def test_a_change_older_than_a_delete_does_not_create_the_row_again(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """The deleted key has no row to compare with: the delete's marker (in the stream's
    state, committed with the batch) makes the late change stale."""
    source = SourceTable()
    sink = target.sink
    created = source.upsert(1, name="one")  # lsn 1008
    old = source.upsert(1, name="late")  # lsn 1016, arrives after the delete
    send(topic, created + source.upsert(2, name="two") + source.delete(1))  # delete: lsn 1032
    first = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert first.changes["deleted"] == 0  # created and deleted within the batch
    maintain_days_later(sink, "")  # compaction and expiry keep the marker
    send(topic, old + source.upsert(3, name="three"))
    late = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert late.changes["stale"] == 1 and late.changes["upserted"] == 1
    assert current(target) == {2: {"id": 2, "name": "two"}, 3: {"id": 3, "name": "three"}}
    report = audit(sink, topic.source)  # the audit keeps the markers as the sink does
    assert report.ok, report.lines()

    send(topic, source.upsert(1, name="again"))  # newer than the delete: created again
    again = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert again.changes["stale"] == 0 and again.changes["upserted"] == 1
    assert current(target)[1] == {"id": 1, "name": "again"}


def test_a_batch_whose_changes_touch_no_row_still_commits_and_the_stream_goes_on(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """A batch whose only change deletes a key the table has no row of (created and deleted
    before the table saw it) changes no data file; it is committed all the same, with its
    offsets and its delete marker, and the next batch follows it. (Delta's merge commits
    nothing when it changes no file: the batch was taken as committed without its ``txn``,
    and every later ingest and the audit failed with StreamStateError: nemesis seed 112.)"""
    source = SourceTable()
    sink = target.sink
    send(topic, source.upsert(1, name="one"))
    first = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    late = source.upsert(9, name="late")  # older than the delete, sent after it
    send(topic, source.delete(9))
    quiet = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert (quiet.changes["upserted"], quiet.changes["deleted"]) == (0, 0)
    assert target.batches() == [first.batch_id, quiet.batch_id]

    send(topic, late + source.upsert(2, name="two"))
    after = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert after.changes["stale"] == 1, "the delete's marker was committed with its batch"
    assert current(target) == expected(source, ["id", "name"])
    report = audit(sink, topic.source)
    assert report.ok, report.lines()
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"


def test_another_writers_commit_on_a_new_current_state_table_is_no_appended_batch(
    spark: Any, topic: KafkaTopic, faulty_lake: Lake
) -> None:
    """Another writer commits to a new Iceberg table (an empty snapshot) as the first batch of
    changes commits: the batch commits on its retry, and the table is a current-state table
    from then on. (An empty snapshot was taken for appended messages, and every ingest of the
    stream failed with "holds appended messages": nemesis CDC seed 113.)"""
    from sluice.testing.faulty_catalog import injected, planned

    target = iceberg_target(faulty_lake, "customers")
    source = SourceTable()
    send(topic, source.upsert(1, name="a") + source.upsert(2, name="b"))
    with planned(("conflict", "customers")):
        ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    assert ("conflict", "customers") in injected()
    send(topic, source.upsert(1, name="a2") + source.delete(2))
    ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")

    assert current(target) == expected(source, ["id", "name"])
    report = audit(target.sink, topic.source)
    assert report.ok, report.lines()
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"


def test_a_replay_of_the_same_changes_leaves_the_same_table(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """A second consumer group reads the whole topic again into the table: every change is
    applied twice, the table is as it was."""
    source = SourceTable()
    sink = target.sink
    messages: list[Message] = []
    for key in range(6):
        messages += source.upsert(key, name=f"c{key}")
    messages += source.delete(0) + source.upsert(1, name="c1-renamed")
    send(topic, messages)
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    before = target.rows()

    topic.queue.configure({"group_id": f"{topic.name}-replay"})
    replayed = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert replayed.written == len(messages) and replayed.changes["stale"] == 0
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(target.rows(), key=key) == sorted(before, key=key)


def test_a_first_batch_without_a_change_leaves_the_table_to_the_next(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """Tombstones and a malformed envelope only: no key columns are known yet; the next
    batch's keys are the table's."""
    send(topic, [(b'{"id": 1}', None), (b'{"id": 2}', b"{}")])
    empty = ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    assert (empty.written, empty.quarantined, empty.changes["tombstones"]) == (1, 1, 1)
    source = SourceTable()
    send(topic, source.upsert(1, name="a") + source.upsert(2, name="b"))
    ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    assert current(target) == expected(source, ["id", "name"])
    assert audit(target.sink, topic.source).ok


def test_key_columns_named_by_the_user_and_the_tables_kind_kept(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    source = SourceTable()
    send(topic, source.upsert(1, name="a") + source.upsert(2, name="b") + source.delete(1))
    sink = target.sink
    spec = topic.plan()
    result = ingest(spark, spec, sink, source=topic.source, write_mode="upsert", key_columns=["id"])

    assert result.changes["upserted"] == 1
    assert current(target) == {2: {"id": 2, "name": "b"}}
    # refused before anything is written: the table's kind and key stay what they are
    send(topic, source.upsert(3, name="c"))
    later = topic.plan()
    with pytest.raises(ConfigError, match="is a current-state table"):
        ingest(spark, later, sink, source=topic.source, value_format="bytes")
    with pytest.raises(ConfigError, match="keyed by id, not name"):
        ingest(spark, later, sink, source=topic.source, write_mode="upsert", key_columns=["name"])
    appended = target.other
    ingest(spark, later, appended, source=topic.source, value_format="bytes")
    send(topic, source.upsert(4, name="d"))
    with pytest.raises(ConfigError, match="holds appended messages"):
        ingest(spark, topic.plan(), appended, source=topic.source, write_mode="upsert")


def hostile(key: dict[str, Any], after: dict[str, Any]) -> Message:
    envelope = {"op": "u", "before": None, "after": after, "source": {"lsn": 5_000}}
    return json.dumps(key).encode(), json.dumps(envelope).encode()


#: Changes a hostile or merely odd producer sends, each with the reason it is set aside
HOSTILE = [
    (
        hostile(
            {"id IS NULL OR TRUE OR s.id IS NULL": 999},
            {"id IS NULL OR TRUE OR s.id IS NULL": 999, "name": "pwned"},
        ),
        "the message key has fields 'id IS NULL OR TRUE OR s.id IS NULL'; the table is keyed "
        "by 'id'",
    ),
    (
        hostile({"id": {"nested": 1}}, {"id": {"nested": 1}, "name": "pwned"}),
        "the key column 'id' holds an object",
    ),
    (hostile({"id": "2"}, {"id": "2", "name": "pwned"}), "column 'id' is int64"),
    (hostile({"id": True}, {"id": True, "name": "pwned"}), "column 'id' is int64"),
    (
        hostile({"tenant": 1, "id": 2}, {"tenant": 1, "id": 2, "name": "pwned"}),
        "the message key has fields 'tenant', 'id'",
    ),
    (hostile({"id": 3}, {"id": 3, "name": ["not", "a", "text"]}), "column 'name' is string"),
]


def test_hostile_keys_and_types_touch_no_other_row_and_never_stop_the_stream(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """Keys are data (invariant I10): each hostile change, sent in one batch with ordinary
    updates, is quarantined with its reason; the ordinary ones are applied, no other row
    changes, the batch commits, and the next batch goes through."""
    source = SourceTable()
    sink = target.sink
    send(topic, [m for key in range(5) for m in source.upsert(key, name=f"c{key}")])
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    ordinary = [m for key in range(8) for m in source.upsert(key, name=f"c{key}-updated")]
    send(topic, [*ordinary[:4], *(m for m, _ in HOSTILE), *ordinary[4:]])
    result = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")

    assert (result.written, result.quarantined) == (8, len(HOSTILE)) and result.committed
    assert current(target) == expected(source, ["id", "name"])
    reasons = [r["reason"] for r in target.quarantine()]
    for _, reason in HOSTILE:
        assert sum(r.startswith(f"cdc: {reason}") for r in reasons) >= 1, (reason, reasons)
    # the stream goes on
    send(topic, source.upsert(2, name="c2-later"))
    later = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert later.changes["upserted"] == 1 and later.quarantined == 0
    assert current(target) == expected(source, ["id", "name"])
    report = audit(sink, topic.source)
    assert report.ok, report.lines()


@pytest.mark.parametrize("name", ["customer-id", "a b", "id IS NULL OR TRUE"])
def test_a_key_column_of_any_name_a_column_can_have_is_merged_by_it(
    spark: Any, topic: KafkaTopic, target: Target, name: str
) -> None:
    """Names are quoted wherever they meet an expression: a table keyed by an unusual name
    takes updates and deletes of its own rows only."""

    def change(op: str, key: int, lsn: int, value: str | None = None) -> Message:
        row = {name: key, "v": value}
        envelope = {
            "op": op,
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"lsn": lsn},
        }
        return json.dumps({name: key}).encode(), json.dumps(envelope).encode()

    sink = target.sink
    send(topic, [change("c", k, 10 + k, f"v{k}") for k in range(4)])
    ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    send(topic, [change("u", 1, 20, "one"), change("d", 2, 21)])
    result = ingest(spark, topic.plan(), sink, source=topic.source, write_mode="upsert")
    assert result.quarantined == 0 and result.changes["deleted"] == 1
    rows = {r[name]: r["v"] for r in target.rows()}
    assert rows == {0: "v0", 1: "one", 3: "v3"}


def test_the_same_changes_give_the_same_table_however_batched_or_partitioned(
    spark: Any, topic: KafkaTopic, target: Target
) -> None:
    """Changes spread over the topic's three partitions, not by key (as after a topic gained
    partitions), ingested in several batches of a few messages into the table, and in one
    batch by another group into another table: both equal the source's state."""
    import random

    source = SourceTable()
    rng = random.Random(44)
    sent = []
    for _ in range(60):
        key = rng.randrange(8)
        if key in source.rows and rng.random() < 0.3:
            changes = source.delete(key)
        else:
            changes = source.upsert(key, name=f"n{rng.randrange(1000)}")
        for key_bytes, value in changes:
            partition = rng.randrange(3)
            sent.append(
                topic.producer.send(topic.name, key=key_bytes, value=value, partition=partition)
            )
    topic.producer.flush(10)
    for future in sent:
        future.get(10)
    batches = 0
    while (spec := plan_batch(topic.queue, max_messages=13)) is not None:
        ingest(spark, spec, target.sink, source=topic.source, write_mode="upsert")
        batches += 1
    assert batches >= 4
    assert current(target) == expected(source, ["id", "name"])
    ingest_again(spark, topic, target.other)
    other = {r["id"]: r["name"] for r in target.other_rows()}
    assert other == {k: row["name"] for k, row in source.rows.items()}
    assert audit(target.sink, topic.source).ok


def ingest_again(spark: Any, topic: KafkaTopic, sink: str) -> None:
    """Another group ingests the whole topic into ``sink``, in one batch, with no crash."""
    queue = KafkaMessageQueue(topic.name)
    queue.configure(
        {
            "connection.uri": topic.broker.bootstrap,
            "topic": topic.name,
            "group_id": f"{topic.name}-reference",
            "from_beginning": True,
        }
    )
    queue.open(None)
    try:
        spec = plan_batch(queue)
        assert spec is not None
        ingest(spark, spec, sink, source=topic.source, write_mode="upsert")
    finally:
        queue.close(None)


#: (failpoint, whether ``sluice compact`` and ``sluice expire`` run days later, between the
#: crash and the rerun), from the batch's staged files on: before them a change stream's
#: batch is read as every other (tests/integration/spark/test_crash_matrix.py kills it there)
CRASH_CASES = [(p, False) for p in KAFKA_POINTS if not p.startswith("read.")] + [
    ("commit.before", True)
]
#: ... on each kind of table, and a Delta table on S3 at the points of its commit
TARGET_CASES = [(*case, kind) for kind in ("iceberg", "delta") for case in CRASH_CASES] + [
    ("publish.after_intent", False, "delta-s3"),
    ("publish.after_rename", False, "delta-s3"),
    ("commit.before", True, "delta-s3"),
]


@pytest.mark.parametrize(("point", "maintained", "target"), TARGET_CASES, indirect=["target"])
def test_a_cdc_ingest_killed_at_each_failpoint_then_rerun_gives_the_state_of_no_crash(
    spark: Any, topic: KafkaTopic, target: Target, point: str, maintained: bool
) -> None:
    """The second batch of a current-state table (updates, deletes of rows it holds, a new
    column, a malformed envelope) is SIGKILLed at ``point``, then run again: the table is the
    one another group's ingest of the same topic gives with no crash, the audit passes with
    every offset once, lag 0, the malformed envelope dead-lettered once."""
    source = SourceTable()
    first: list[Message] = []
    for key in range(10):
        first += source.upsert(key, name=f"c{key}")
    send(topic, first)
    earlier = ingest(spark, topic.plan(), target.sink, source=topic.source, write_mode="upsert")
    second = source.upsert(1, name="c1", tier="gold") + source.delete(2) + source.delete(3)
    second += source.upsert(4, name="c4-renamed") + source.upsert(12, name="c12")
    send(topic, [*second, (b'{"id": 9}', b'{"op": "u"}')])
    spec = topic.plan()
    options = {"source": topic.source, "write_mode": "upsert", "dead_letter": True}

    code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": target.sink, **options}, point)
    assert code == -9, f"the ingest did not die at {point}: {stderr[-2000:]}"
    if maintained:
        maintain_days_later(target.sink, point)
    ingest(spark, spec, target.sink, **options)

    assert current(target) == expected(source, ["id", "name", "tier"])
    assert_exactly_once(audit(target.sink, topic.source), len(first) + len(second) + 1)
    assert plan_batch(topic.queue) is None, "lag 0: everything is committed"
    bad = target.quarantine()
    assert [(r["reason"], r["offset"]) for r in bad] == [
        ("cdc: op 'u' has no 'after' object (the row after the change)", bad[0]["offset"])
    ], "the quarantine is committed once"
    origins = [(r["partition"], r["offset"]) for r in bad]
    assert dead_letter_origins(topic.broker.bootstrap, f"{topic.name}.dlq") == origins
    # one commit per batch (the first one's Iceberg snapshot expired by the maintenance)
    expired = maintained and target.kind == "iceberg"
    assert target.batches() == [earlier.batch_id, spec.batch_id][1 if expired else 0 :]
    # the same changes ingested with no crash, by another group, into another table
    ingest_again(spark, topic, target.other)
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(target.rows(), key=key) == sorted(target.other_rows(), key=key)


def _debezium_avro(value: dict[str, Any]) -> dict[str, Any]:
    """The Avro schema of Debezium's envelope (its AvroConverter) for rows of ``value``."""
    optional_long = ["null", "long"]
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "shop.inventory.customers",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "namespace": "io.debezium.connector.postgresql",
                    "fields": [
                        {"name": "connector", "type": "string"},
                        {"name": "lsn", "type": optional_long, "default": None},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": optional_long, "default": None},
        ],
    }


def test_debezium_envelopes_in_avro_from_a_registry_are_applied(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake, schema_registry: Any
) -> None:
    """Debezium's AvroConverter: keys and envelopes framed with their registry ids, written
    here by confluent-kafka's AvroSerializer; a later schema version adds a column."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    columns: list[dict[str, Any]] = [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
    ]
    value_v1 = {"type": "record", "name": "Value", "fields": columns}
    tier = {"name": "tier", "type": ["null", "string"], "default": None}
    value_v2 = {**value_v1, "fields": [*columns, tier]}
    key_schema = {"type": "record", "name": "Key", "fields": [columns[0]]}
    registry = SchemaRegistryClient({"url": schema_registry.url})
    # (the stand-in registry checks compatibility on top-level fields only: it would refuse
    # the record in 'before' gaining a field with a default, which BACKWARD allows)
    registry.set_compatibility(f"{topic.name}-value", "NONE")
    as_key = AvroSerializer(registry, json.dumps(key_schema))
    v1 = AvroSerializer(registry, json.dumps(_debezium_avro(value_v1)))
    v2 = AvroSerializer(registry, json.dumps(_debezium_avro(value_v2)))
    keys = SerializationContext(topic.name, MessageField.KEY)
    values = SerializationContext(topic.name, MessageField.VALUE)
    lsn = iter(range(1008, 2000, 8))

    def change(serializer: Any, op: str, before: Any, after: Any) -> Message:
        row = after or before
        envelope = {
            "before": before,
            "after": after,
            "source": {"connector": "postgresql", "lsn": next(lsn)},
            "op": op,
            "ts_ms": 1_700_000_000_000,
        }
        return as_key({"id": row["id"]}, keys), serializer(envelope, values)

    messages = [change(v1, "c", None, {"id": i, "name": f"c{i}"}) for i in range(1, 5)]
    messages += [
        change(v1, "u", {"id": 2, "name": "c2"}, {"id": 2, "name": "c2-renamed"}),
        change(v1, "d", {"id": 3, "name": "c3"}, None),
        (as_key({"id": 3}, keys), None),  # the delete's tombstone
        change(
            v2, "u", {"id": 4, "name": "c4", "tier": None}, {"id": 4, "name": "c4", "tier": "gold"}
        ),
        (as_key({"id": 5}, keys), b'{"op": "c"}'),  # JSON on an Avro topic
    ]
    send(topic, messages)
    result = ingest(
        spark,
        topic.plan(),
        sqlite_lake.sink("customers"),
        source=topic.source,
        write_mode="upsert",
        value_format="avro",
        key_format="avro",
        schema_registry=schema_registry.url,
    )

    assert (result.written, result.quarantined) == (len(messages) - 1, 1)
    assert result.changes == {
        "changes": 4,
        "tombstones": 1,
        "upserted": 3,
        "deleted": 0,
        "stale": 0,
    }
    rows = {r["id"]: r for r in table_rows(sqlite_lake, "customers")}
    assert {k: (r["name"], r["tier"], r[POSITION_COLUMN]) for k, r in rows.items()} == {
        1: ("c1", None, 1008),
        2: ("c2-renamed", None, 1040),
        4: ("c4", "gold", 1056),
    }
    [bad] = table_rows(sqlite_lake, "customers__quarantine")
    assert bad["reason"].startswith("cdc: the message value is not Avro (")

    # The audit reads the envelopes as the ingest did; read as JSON, none is a change.
    sink = sqlite_lake.sink("customers")
    avro = {"value_format": "avro", "key_format": "avro", "schema_registry": schema_registry.url}
    report = audit(sink, topic.source, **avro)
    assert report.ok, report.lines()
    assert report.current_state is not None and report.current_state.keys == 3
    as_json = audit(sink, topic.source).current_state
    assert as_json is not None and not as_json.ok and as_json.keys == 0
    command = ["audit", sink, "--source", topic.source]
    avro_options = ["--format", "avro", "--key-format", "avro", "--registry", schema_registry.url]
    assert_ok(run(*command, *avro_options))
    assert run(*command).exit_code == 1, "read as JSON, the table's rows match no change"
