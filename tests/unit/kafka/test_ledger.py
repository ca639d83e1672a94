"""The ledger's rules: commit only below the lowest uncompleted offset; tenures and rebalances."""

from __future__ import annotations

from sluice.kafka.ledger import Ledger

A, B = object(), object()  # two consumer threads of one queue


def ledger_with(offsets: list[int], holder: object = A, partition: int = 0) -> tuple[Ledger, int]:
    ledger = Ledger()
    token, _ = ledger.token_for(partition, holder)
    for offset in offsets:
        ledger.received(partition, offset)
    return ledger, token


def test_out_of_order_completes_commit_only_up_to_the_lowest_uncompleted() -> None:
    ledger, _ = ledger_with([5, 6, 7])
    assert ledger.completed(0, 7) == 5  # 5 and 6 still out: no further than 5
    assert ledger.completed(0, 6) is None  # 5 still out: nothing moves
    assert ledger.completed(0, 5) == 8  # all done: commit past the highest
    assert ledger.completed(0, 5) is None  # completing twice commits nothing new


def test_an_earlier_uncompleted_message_holds_the_commit_back() -> None:
    ledger, _ = ledger_with([5, 6])
    assert ledger.completed(0, 5) == 6
    ledger.received(0, 7)
    assert ledger.completed(0, 7) is None  # 6 still out
    assert ledger.pending(0) == {6}
    assert ledger.completed(0, 6) == 8


def test_a_revoked_partition_assigned_again_keeps_its_tenure() -> None:
    ledger, token = ledger_with([3])
    ledger.revoked(A, {0, 1})
    assert ledger.assigned(A, {0}) == []
    assert ledger.holds(0, token) and ledger.completed(0, 3) == 4


def test_a_partition_given_to_another_consumer_ends_the_tenure() -> None:
    ledger, token = ledger_with([3])
    ledger.revoked(A, {0})
    assert ledger.assigned(A, set()) == [token]
    assert not ledger.holds(0, token) and ledger.holder(0, token) is None
    assert ledger.pending(0) == set()


def test_a_message_fetched_by_another_thread_of_the_queue_starts_a_new_tenure() -> None:
    ledger, old = ledger_with([3])
    new, ended = ledger.token_for(0, B)
    assert ended == old and new != old
    assert ledger.holder(0, new) is B and not ledger.holds(0, old)
    ledger.revoked(A, {0})
    assert ledger.assigned(A, set()) == [], "A's late assignment must not end B's tenure"
    assert ledger.holds(0, new)


def test_lost_partitions_end_only_the_holders_tenures() -> None:
    ledger, token = ledger_with([1])
    assert ledger.lost(B, {0}) == []
    assert ledger.lost(A, {0}) == [token]


def test_skipping_to_an_offset_starts_afresh_there() -> None:
    ledger, token = ledger_with([1, 2])
    ledger.skipped_to(0, 10, A)
    assert not ledger.holds(0, token)
    ledger.token_for(0, A)
    ledger.received(0, 10)
    assert ledger.completed(0, 10) == 11
