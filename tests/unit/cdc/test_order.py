"""One order, whatever the batching: the same messages give the same table as one batch, as
many, and spread over partitions; truncates, unsent (TOASTed) columns and messages that carry
no change."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sluice.cdc import UNAVAILABLE

from .lake import Lake, Message


def change(op: str, key: int, lsn: int, **values: Any) -> Message:
    row = {"id": key, **values}
    return (
        {"id": key},
        {
            "op": op,
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"connector": "postgresql", "lsn": lsn},
        },
    )


def workload(seed: int, count: int = 300, keys: int = 12) -> tuple[list[Message], dict]:
    """Changes of a source table in commit order (lsn growing), and its final rows."""
    rng = random.Random(seed)
    rows: dict[int, dict[str, Any]] = {}
    out: list[Message] = []
    for number in range(count):
        key, lsn = rng.randrange(keys), 1_000 + 8 * number
        if key in rows and rng.random() < 0.25:
            del rows[key]
            out += [change("d", key, lsn), ({"id": key}, None)]
        else:
            rows[key] = {"id": key, "v": number}
            out.append(change("u" if key in rows else "c", key, lsn, v=number))
    return out, {(k,): r for k, r in sorted(rows.items())}


def spread(messages: list[Message], partitions: int, seed: int) -> list[tuple[int, int, Message]]:
    """The messages over ``partitions`` partitions, not by key (as after a topic gained
    partitions): each partition keeps the messages' order among its own."""
    rng = random.Random(seed)
    offsets = [0] * partitions
    placed = []
    for message in messages:
        p = rng.randrange(partitions)
        placed.append((p, offsets[p], message))
        offsets[p] += 1
    return placed


def batches_of(placed: list[tuple[int, int, Message]], cuts: int, seed: int) -> list[list]:
    """The placed messages read in ``cuts`` batches, each batch taking a random further share
    of every partition (a reader's batches: per partition in order, partitions interleaved
    however their ends fall)."""
    rng = random.Random(seed)
    per: dict[int, list] = {}
    for item in placed:
        per.setdefault(item[0], []).append(item)
    out: list[list] = [[] for _ in range(cuts)]
    for items in per.values():
        bounds = sorted(rng.randrange(len(items) + 1) for _ in range(cuts - 1))
        for number, (low, high) in enumerate(zip([0, *bounds], [*bounds, len(items)], strict=True)):
            out[number] += items[low:high]
    return out


def state_of(batches: list[list]) -> dict:
    lake = Lake()
    for one in batches:
        lake.ingest(one)
    assert lake.quarantined == {}
    return {k: {c: v for c, v in row.items()} for k, row in lake.state().items()}


@pytest.mark.parametrize("seed", range(6))
def test_the_same_messages_give_the_same_table_however_batched_or_partitioned(seed: int) -> None:
    messages, source = workload(seed)
    one_batch = state_of([spread(messages, 1, seed)])
    assert one_batch == source
    assert state_of(batches_of(spread(messages, 1, seed), 7, seed)) == source
    for partitions in (2, 3):
        placed = spread(messages, partitions, seed)
        assert state_of([placed]) == source
        assert state_of(batches_of(placed, 5, seed + 1)) == source


def test_without_positions_the_offset_order_decides() -> None:
    def bare(op: str, key: int, v: int) -> Message:
        key_doc, value = change(op, key, 0, v=v)
        value["source"] = {}
        return key_doc, value

    lake = Lake()
    lake.ingest([(0, 0, bare("c", 1, 1)), (0, 1, bare("u", 1, 2))])
    lake.ingest([(0, 2, bare("u", 1, 0))])
    assert lake.state()[(1,)]["v"] == 0


def test_a_delete_leaves_a_marker_that_an_older_change_in_a_later_batch_meets() -> None:
    lake = Lake()
    lake.ingest([(0, 0, change("c", 1, 10)), (1, 0, change("d", 1, 20))])
    assert lake.markers == {"[1]": 20}
    lake.ingest([(0, 1, change("u", 1, 15, v="late"))])  # older: stale
    assert lake.rows == {}


def test_a_truncate_deletes_every_older_row_and_the_batchs_changes_before_it() -> None:
    lake = Lake()
    lake.ingest([(0, i, change("c", i, 10 + i, v="old")) for i in range(3)])
    truncate = (None, {"op": "t", "before": None, "after": None, "source": {"lsn": 50}})
    applying = lake.ingest(
        [
            (0, 3, change("u", 0, 40, v="before")),
            (0, 4, truncate),
            (0, 5, change("c", 1, 60, v="after")),
        ]
    )
    assert lake.state() == {(1,): {"id": 1, "v": "after"}}
    assert applying.counts["truncates"] == 1 and applying.counts["truncated"] == 1
    lake.ingest([(1, 0, change("c", 2, 45, v="late"))])  # older than the truncate: stale
    assert (2,) not in lake.rows


def test_a_truncate_is_set_aside_unless_applying_truncates_is_asked_for() -> None:
    lake = Lake(on_truncate="quarantine")
    lake.ingest([(0, 0, change("c", 1, 10))])
    lake.ingest([(0, 1, (None, {"op": "t", "source": {"lsn": 20}}))])
    assert (1,) in lake.rows
    assert "not applied" in lake.quarantined[(0, 1)]
    assert "on_truncate='apply'" in lake.quarantined[(0, 1)]


def test_an_unsent_toasted_column_keeps_the_value_it_had() -> None:
    lake = Lake()
    lake.ingest(
        [
            (0, 0, change("c", 1, 10, big="x" * 10, n=1)),
            (0, 1, change("u", 1, 11, big=UNAVAILABLE, n=2)),  # filled within the batch
        ]
    )
    assert lake.state()[(1,)] == {"id": 1, "big": "x" * 10, "n": 2}
    lake.ingest([(0, 2, change("u", 1, 12, big=UNAVAILABLE, n=3))])  # filled from the table
    assert lake.state()[(1,)] == {"id": 1, "big": "x" * 10, "n": 3}


def test_heartbeats_and_transaction_boundaries_are_counted_not_quarantined() -> None:
    lake = Lake()
    plan = lake.ingest(
        [
            (0, 0, ({"serverName": "shop"}, {"ts_ms": 1})),
            (0, 1, (None, {"status": "BEGIN", "id": "571:1", "ts_ms": 1})),
            (0, 2, change("c", 1, 10)),
            (0, 3, (None, {"status": "END", "id": "571:1", "ts_ms": 1, "event_count": 1})),
        ]
    )
    assert lake.quarantined == {}
    assert plan.reduced.notes == {"heartbeat": 1, "transaction": 2}
    assert list(lake.rows) == [(1,)]
