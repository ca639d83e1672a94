"""Keys and column names are data, never code (invariant I10): a change that names other key
fields, holds an object for a key, or a value of another type than its column's, is set aside
with a reason naming what is wrong; the rest of the batch is applied, and no change touches
another key's row."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from sluice.cdc import POSITION_COLUMN, TableShape, reduce_messages
from sluice.cdc.columns import check_name
from sluice.spark.sinks.upsert import merge_predicate

from .lake import Lake, batch


def envelope(op: str, row: dict[str, Any], lsn: int) -> dict[str, Any]:
    return {
        "op": op,
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "source": {"lsn": lsn},
    }


def seeded() -> Lake:
    """A table of five rows keyed by id."""
    lake = Lake()
    lake.ingest(
        [(0, i, ({"id": i}, envelope("c", {"id": i, "v": f"r{i}"}, 100 + i))) for i in range(5)]
    )
    assert lake.key_columns == ["id"] and len(lake.rows) == 5
    return lake


HOSTILE = {
    "predicate-named key": (
        {"id IS NULL OR TRUE OR s.id IS NULL": 999},
        {"id IS NULL OR TRUE OR s.id IS NULL": 999, "id": None, "v": "pwned"},
        "the message key has fields 'id IS NULL OR TRUE OR s.id IS NULL'; the table is keyed "
        "by 'id'",
    ),
    "object key": (
        {"id": {"nested": 1}},
        {"id": {"nested": 1}, "v": "pwned"},
        "the key column 'id' holds an object, which cannot be a key",
    ),
    "list key": ({"id": [1, 2]}, {"id": [1, 2], "v": "pwned"}, "the key column 'id' holds a list"),
    "key of another type": (
        {"id": "3"},
        {"id": "3", "v": "pwned"},
        "column 'id' is int64 (in the table), the change has a text",
    ),
    "boolean for an integer key": (
        {"id": True},
        {"id": True, "v": "pwned"},
        "column 'id' is int64 (in the table), the change has a boolean",
    ),
    "key of other fields": (
        {"tenant": 1, "id": 2},
        {"tenant": 1, "id": 2, "v": "pwned"},
        "the message key has fields 'tenant', 'id'; the table is keyed by 'id'",
    ),
    "value of another type": (
        {"id": 4},
        {"id": 4, "v": {"an": "object"}},
        "column 'v' is string (in the table), the change has an object",
    ),
    "a float for an integer": (
        {"id": 2.5},
        {"id": 2.5, "v": "pwned"},
        "column 'id' is int64 (in the table), the change has a floating-point number",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_hostile_change_next_to_an_ordinary_one_touches_no_other_row(case: str) -> None:
    key, row, reason = HOSTILE[case]
    lake = seeded()
    before = lake.state()
    lake.ingest(
        [
            (0, 10, (key, envelope("u", row, 200))),
            (0, 11, ({"id": 1}, envelope("u", {"id": 1, "v": "updated"}, 201))),
        ]
    )
    assert list(lake.quarantined) == [(0, 10)]
    assert lake.quarantined[(0, 10)].startswith(f"cdc: {reason}"), lake.quarantined
    after = lake.state()
    assert after[(1,)]["v"] == "updated"  # the ordinary change is applied
    for key_of, was in before.items():
        if key_of != (1,):
            assert after[key_of] == was  # no other row touched
    assert set(after) == set(before)


def test_one_stray_key_in_a_new_tables_first_batch_does_not_quarantine_the_rest() -> None:
    lake = Lake()
    lake.ingest(
        [
            (0, 0, ({"other": 9}, envelope("c", {"other": 9}, 1))),
            *[(0, i, ({"id": i}, envelope("c", {"id": i}, 1 + i))) for i in range(1, 4)],
        ]
    )
    assert lake.key_columns == ["id"]
    assert sorted(lake.rows) == [(1,), (2,), (3,)]
    assert list(lake.quarantined) == [(0, 0)]


def test_booleans_and_integers_are_different_keys_in_a_new_table() -> None:
    reduced = reduce_messages(
        batch(
            [
                (0, 0, ({"id": 1}, envelope("c", {"id": 1, "v": "int"}, 1))),
                (0, 1, ({"id": True}, envelope("c", {"id": True, "v": "bool"}, 2))),
            ]
        )
    )
    assert [c.row["v"] for c in reduced.upserts if c.row] == ["int"]
    assert reduced.malformed == {
        (0, 1): "cdc: column 'id' is int64 (by its first value), the change has a boolean"
    }


@pytest.mark.parametrize(
    "name",
    ["a`b", "tab\tname", "", "_sluice_source_position", "_SLUICE_deleted", "x" * 300],
)
def test_a_name_that_cannot_be_a_column_is_a_reason_not_code(name: str) -> None:
    assert check_name(name) is not None
    reduced = reduce_messages(
        batch(
            [
                (0, 0, ({"id": 1}, envelope("c", {"id": 1, name: "x"}, 1))),
                (0, 1, ({"id": 2}, envelope("c", {"id": 2}, 2))),
            ]
        )
    )
    assert list(reduced.changes) == [(2,)]
    assert list(reduced.malformed) == [(0, 0)]


@pytest.mark.parametrize("name", ["customer-id", "a b", 'we"ird', "id IS NULL OR TRUE", "Ünï"])
def test_unusual_names_are_columns_and_quoted_in_the_merge(name: str) -> None:
    assert check_name(name) is None
    assert merge_predicate([name, "id"]) == f"t.`{name}` = s.`{name}` AND t.`id` = s.`id`"


def test_a_value_of_another_type_than_the_tables_names_the_column_and_both_types() -> None:
    schema = pa.schema([("id", pa.int64()), ("score", pa.float64()), (POSITION_COLUMN, pa.int64())])
    reduced = reduce_messages(
        batch(
            [
                (0, 0, ({"id": 1}, envelope("u", {"id": 1, "score": "high"}, 1))),
                (0, 1, ({"id": 2}, envelope("u", {"id": 2, "score": 3}, 2))),
                (0, 2, ({"id": 3}, envelope("u", {"id": 3, "score": 2**70}, 3))),
            ]
        ),
        table=TableShape(["id"], schema),
    )
    assert list(reduced.changes) == [(2,), (3,)]  # an int in a double column is a double
    assert reduced.malformed == {
        (0, 0): "cdc: column 'score' is double (in the table), the change has a text"
    }
    assert reduced.rows(schema).column("score").to_pylist() == [3.0, float(2**70)]


def test_mixed_types_in_a_new_column_keep_the_first_and_set_the_others_aside() -> None:
    reduced = reduce_messages(
        batch(
            [
                (0, 0, ({"id": 1}, envelope("c", {"id": 1, "n": 5}, 1))),
                (0, 1, ({"id": 2}, envelope("c", {"id": 2, "n": "five"}, 2))),
                (0, 2, ({"id": 3}, envelope("c", {"id": 3, "n": None}, 3))),
            ]
        )
    )
    assert reduced.types["n"] == pa.int64()
    assert list(reduced.changes) == [(1,), (3,)]
    assert reduced.malformed[(0, 1)].startswith("cdc: column 'n' is int64 (by its first value)")
    assert reduced.rows().column("n").to_pylist() == [5, None]
