"""The nemesis' change data capture scenarios without brokers: the faults they play, the bad
messages their world sends (each one set aside by the reduction the sinks use, next to good
changes) and the oracle that compares the table with the source table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice.cdc import POSITION_COLUMN, TableShape, reduce_messages
from sluice.testing.debezium import Message, SourceTable
from sluice.testing.nemesis import Scenario, faults_for
from sluice.testing.nemesis_cdc import BAD_KINDS, TABLE_BAD_KINDS, bad_message, differences

#: a current-state table as the scenario's first batch makes it
TABLE = TableShape(
    ["id"],
    pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("visits", pa.int64()),
            (POSITION_COLUMN, pa.int64()),
        ]
    ),
)


def staged(messages: list[Message]) -> pa.Table:
    """``messages`` as a batch's staged columns, all in partition 0."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in messages], pa.binary()),
            "value": pa.array([v for _, v in messages], pa.binary()),
            "partition": pa.array([0] * len(messages), pa.int32()),
            "offset": pa.array(range(len(messages)), pa.int64()),
        }
    )


def test_the_cdc_scenarios_play_every_fault_but_those_that_delete_messages() -> None:
    for broker in ("noida", "kafka", "cluster"):
        for sink in ("iceberg", "delta"):
            appended = {f.name for f in faults_for("kafka", sink, broker=broker)}  # type: ignore[arg-type]
            upserted = Scenario("kafka", sink, 1, broker=broker, write_mode="upsert").faults()  # type: ignore[arg-type]
            assert (
                appended - {f.name for f in upserted}
                == {
                    "retention",
                    "segment-retention",
                    "recreate",
                }
                & appended
            )
    assert "catalog-unknown" in {
        f.name for f in Scenario("kafka", "iceberg", 1, write_mode="upsert").faults()
    }


def test_a_cdc_scenario_is_kafka_into_iceberg_or_delta_and_its_replay_says_upsert() -> None:
    scenario = Scenario("kafka", "delta", 7, broker="kafka", write_mode="upsert")
    assert "--write-mode upsert" in scenario.replay
    assert "upsert" in str(scenario)
    assert "--write-mode" not in Scenario("kafka", "delta", 7).replay
    for transport, sink in (("mqtt", "iceberg"), ("kafka", "parquet")):
        with pytest.raises(ValueError, match="upsert"):
            Scenario(transport, sink, 1, write_mode="upsert")  # type: ignore[arg-type]


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "schema-payload"])
@pytest.mark.parametrize("kind", BAD_KINDS + TABLE_BAD_KINDS)
def test_each_bad_message_is_set_aside_and_the_good_changes_beside_it_applied(
    kind: str, wrapped: bool
) -> None:
    source = SourceTable(wrapped=wrapped)
    good = source.upsert(1, name="a", visits=1) + source.upsert(2, name="b", visits=2)
    bad = bad_message(source, kind, "s9-bad-1", 1)
    later = source.upsert(1, name="a2", visits=3) + source.delete(2)
    assert b"s9-bad-1" in (bad[1] or b"")
    # the kinds bad whatever the table are set aside in a new table's first batch too
    shapes = [TABLE] + ([TableShape()] if kind in BAD_KINDS else [])
    for shape in shapes:
        reduced = reduce_messages(staged([*good, bad, *later]), table=shape)
        assert list(reduced.malformed) == [(0, len(good))], (shape, reduced.malformed)
        assert reduced.key_columns == ["id"]
        rows = {c.key: c.row for c in reduced.changes.values()}
        assert rows == {(1,): source.rows[1], (2,): None}


def test_the_oracle_names_every_way_the_table_differs_from_the_source() -> None:
    source = {1: {"id": 1, "name": "a"}, 2: {"id": 2, "name": "b", "tier": "gold"}}
    same = [
        {"id": 2, "name": "b", "tier": "gold", POSITION_COLUMN: 9},
        {"id": 1, "name": "a", "tier": None, POSITION_COLUMN: 3},  # a column added later
    ]
    assert differences(same, source, POSITION_COLUMN) == []
    found = differences(
        [
            {"id": 1, "name": "a", "tier": "gold"},  # a value the source does not have
            {"id": 3, "name": "c", "tier": None},  # a row the source deleted
            {"id": 3, "name": "c", "tier": None},  # twice
        ],
        source,
        POSITION_COLUMN,
    )
    assert [f.split(":")[0] for f in found] == ["key 3 has two rows", "key 1", "key 2", "key 3"]
    assert "the table has no row" in found[2] and "the source no row" in found[3]
