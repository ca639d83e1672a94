"""sluice.cursor: what the queue sensor asks for next, given the broker and the last run."""

from __future__ import annotations

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.cursor import BatchCursor, BatchRequest, RunState


def kafka(*ranges: tuple[int, int, int]) -> BatchSpec:
    return BatchSpec(
        "kafka", "orders", group_id="lake", ranges=tuple(OffsetRange(*r) for r in ranges)
    )


MQTT = BatchSpec("mqtt", "plant/#", client_id="lake")


def request(
    cursor: BatchCursor, waiting: BatchSpec | None, state: RunState, **kw: int
) -> BatchRequest:
    decision = cursor.next_request(waiting, state, **kw)
    assert isinstance(decision, BatchRequest), decision
    return decision


def test_the_first_batch_is_all_that_waits_under_its_batch_id() -> None:
    waiting = kafka((0, 0, 3), (1, 0, 2))
    first = request(BatchCursor(), waiting, RunState.NONE)
    assert first.spec == waiting
    assert (first.attempt, first.run_key, first.retry) == (0, waiting.batch_id, False)
    cursor = BatchCursor().advance(first)
    assert cursor.positions == {0: 3, 1: 2}
    assert cursor.last_run_key == waiting.batch_id


def test_max_and_min_messages_cut_and_hold_back() -> None:
    cursor = BatchCursor()
    cut = request(cursor, kafka((0, 0, 10), (1, 0, 10)), RunState.NONE, max_messages=6)
    assert cut.spec.ranges == (OffsetRange(0, 0, 3), OffsetRange(1, 0, 3))
    held = cursor.next_request(kafka((0, 0, 2)), RunState.NONE, min_messages=5)
    assert held == "2 message(s) waiting on orders, fewer than min_messages=5"
    assert cursor.next_request(None, RunState.NONE) == "no messages waiting"


def test_nothing_new_while_the_last_run_is_active() -> None:
    cursor = BatchCursor().advance(BatchRequest(kafka((0, 0, 3))))
    decision = cursor.next_request(kafka((0, 0, 9)), RunState.ACTIVE)
    assert isinstance(decision, str) and "still being ingested" in decision


def test_a_failed_batch_is_asked_for_again_unchanged_under_a_new_run_key() -> None:
    failed = kafka((0, 0, 3))
    cursor = BatchCursor().advance(BatchRequest(failed))
    # more messages arrived since, but the batch stays what it was: same ranges, same id
    retry = request(cursor, kafka((0, 0, 7)), RunState.FAILED)
    assert retry.spec == failed
    assert (retry.run_key, retry.retry) == (f"{failed.batch_id}.1", True)
    cursor = cursor.advance(retry)
    again = request(cursor, kafka((0, 0, 7)), RunState.FAILED)
    assert again.run_key == f"{failed.batch_id}.2"


def test_a_batch_whose_run_does_not_exist_yet_is_asked_for_under_the_same_run_key() -> None:
    planned = kafka((0, 0, 3))
    cursor = BatchCursor().advance(BatchRequest(planned))
    same = request(cursor, kafka((0, 0, 5)), RunState.MISSING)
    assert (same.spec, same.run_key) == (planned, planned.batch_id)


def test_after_a_committed_batch_the_next_starts_where_it_ended() -> None:
    cursor = BatchCursor().advance(BatchRequest(kafka((0, 0, 3))))
    following = request(cursor, kafka((0, 3, 5)), RunState.SUCCEEDED)
    assert following.spec.ranges == (OffsetRange(0, 3, 5),)
    assert following.attempt == 0


def test_a_failed_run_that_had_committed_does_not_hold_newer_messages_back() -> None:
    cursor = BatchCursor().advance(BatchRequest(kafka((0, 0, 3))))
    following = request(cursor, kafka((0, 3, 4)), RunState.FAILED)
    assert following.spec.ranges == (OffsetRange(0, 3, 4),)


def test_mqtt_batches_number_their_attempts() -> None:
    first = request(BatchCursor(), MQTT, RunState.NONE)
    assert first.run_key == MQTT.batch_id
    cursor = BatchCursor().advance(first)
    assert request(cursor, MQTT, RunState.MISSING).run_key == MQTT.batch_id
    assert request(cursor, MQTT, RunState.SUCCEEDED).run_key == f"{MQTT.batch_id}.1"
    assert request(cursor, MQTT, RunState.FAILED).run_key == f"{MQTT.batch_id}.1"


def test_the_cursor_round_trips_through_json() -> None:
    cursor = BatchCursor().advance(BatchRequest(kafka((0, 0, 3), (7, 1, 2)), attempt=2))
    assert BatchCursor.from_json(cursor.to_json()) == cursor
    assert BatchCursor.from_json(None) == BatchCursor() == BatchCursor.from_json("")


def test_a_cursor_that_is_not_ours_says_how_to_recover() -> None:
    with pytest.raises(ValueError, match="Clear the cursor"):
        BatchCursor.from_json('{"positions": [1, 2]}')


def test_an_mqtt_batch_whose_run_does_not_exist_yet_is_asked_for_unchanged() -> None:
    """Each MQTT plan is a new batch: the one asked for is kept until its run exists."""
    planned = BatchSpec("mqtt", "plant/#", client_id="lake", sequence=1)
    cursor = BatchCursor().advance(BatchRequest(planned))
    later = BatchSpec("mqtt", "plant/#", client_id="lake", sequence=2)
    same = request(cursor, later, RunState.MISSING)
    assert (same.spec, same.run_key, same.retry) == (planned, planned.batch_id, True)
    assert request(cursor, later, RunState.FAILED).spec == later
