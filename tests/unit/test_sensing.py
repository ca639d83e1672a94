"""sluice.sensing: settings of a sensing queue, and the one sensing model a watcher follows."""

from __future__ import annotations

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.cursor import BatchCursor, BatchRequest, RunState, run_state_from_offsets
from sluice.queues.config import ConfigError
from sluice.sensing import next_emission, sensing_config, waiting_status

LEASE = 60.0


def kafka(*ranges: tuple[int, int, int], topic: str = "t", group: str = "g") -> BatchSpec:
    return BatchSpec("kafka", topic, group_id=group, ranges=tuple(OffsetRange(*r) for r in ranges))


def emit(
    cursor: BatchCursor, waiting: BatchSpec | None, now: float, **kw: int
) -> tuple[BatchCursor, BatchRequest]:
    cursor, decision = next_emission(cursor, waiting, now, LEASE, **kw)
    assert isinstance(decision, BatchRequest), decision
    return cursor, decision


def held(cursor: BatchCursor, waiting: BatchSpec | None, now: float, **kw: int) -> str:
    after, decision = next_emission(cursor, waiting, now, LEASE, topic="t", **kw)
    assert isinstance(decision, str), decision
    assert after is cursor
    return decision


def test_kafka_sensing_reads_the_backlog_and_commits_nothing() -> None:
    assert sensing_config("kafka", {"group_id": "g"}) == {
        "group_id": "g",
        "autocommit": False,
        "from_beginning": True,
        "options.create_topic": False,  # a misspelt topic is an error, never a new topic
    }
    assert sensing_config("kafka", {"from_beginning": False})["from_beginning"] is False


def test_mqtt_sensing_needs_a_session_and_acknowledges_nothing() -> None:
    with pytest.raises(ConfigError, match="'client_id'"):
        sensing_config("mqtt", {"topic": "a/#"})
    assert sensing_config("mqtt", {"client_id": "c"}) == {
        "client_id": "c",
        "autocommit": False,
        "options.qos": 1,
    }


def test_a_failed_batch_is_emitted_again_never_skipped() -> None:
    """The finding of issue 10: [0,100) fails, [100,200) must not be emitted over it."""
    cursor, first = emit(BatchCursor(), kafka((0, 0, 100)), now=0.0, max_messages=100)
    assert first.spec == kafka((0, 0, 100)) and first.attempt == 0
    # the run failed (nothing committed) and 100 more arrived: nothing while the lease runs
    assert "not committed yet" in held(cursor, kafka((0, 0, 200)), 30.0, max_messages=100)
    # the lease ran out: the same batch, the same id, the next attempt
    cursor, again = emit(cursor, kafka((0, 0, 200)), now=LEASE, max_messages=100)
    assert again.spec == first.spec and again.spec.batch_id == first.spec.batch_id
    assert (again.attempt, again.retry) == (1, True)
    assert cursor.emitted_at == LEASE  # a new lease
    # committed up to 100: the next batch starts there
    cursor, following = emit(cursor, kafka((0, 100, 200)), now=LEASE + 1, max_messages=100)
    assert following.spec == kafka((0, 100, 200)) and following.attempt == 0


def test_a_batch_whose_offsets_were_committed_is_done_before_its_lease_ends() -> None:
    cursor, _ = emit(BatchCursor(), kafka((0, 0, 5), (1, 0, 3)), now=0.0)
    # partition 0 committed, partition 1 not yet: still in flight
    held(cursor, kafka((1, 0, 3)), 1.0)
    assert run_state_from_offsets(cursor, kafka((1, 0, 3)), 1.0, LEASE) is RunState.ACTIVE
    # both committed, new messages in partition 1
    cursor, following = emit(cursor, kafka((1, 3, 7)), now=2.0)
    assert following.spec == kafka((1, 3, 7))


def test_a_batch_that_landed_after_its_lease_is_not_emitted_again() -> None:
    cursor, _ = emit(BatchCursor(), kafka((0, 0, 5)), now=0.0)
    assert run_state_from_offsets(cursor, None, LEASE * 2, LEASE) is RunState.SUCCEEDED
    assert held(cursor, None, LEASE * 2) == "waiting: 0 of 1 messages on t"
    cursor, following = emit(cursor, kafka((0, 5, 6)), now=LEASE * 2)
    assert following.spec == kafka((0, 5, 6))


def test_min_messages_holds_back_and_says_how_many_wait() -> None:
    assert held(BatchCursor(), kafka((0, 0, 3)), 0.0, min_messages=10) == (
        "waiting: 3 of 10 messages on t"
    )
    assert waiting_status(0, 0, "x") == "waiting: 0 of 1 messages on x"


def test_a_cursor_of_another_group_plans_afresh() -> None:
    cursor, _ = emit(BatchCursor(), kafka((0, 0, 5)), now=0.0)
    other = kafka((0, 0, 5), group="other")
    assert run_state_from_offsets(cursor, other, 1.0, LEASE) is RunState.NONE
    _, first = emit(cursor, other, now=1.0)
    assert first.spec == other


def test_a_cursor_without_an_emission_time_is_past_its_lease() -> None:
    cursor = BatchCursor(positions={0: 5}, last=kafka((0, 0, 5)))
    assert run_state_from_offsets(cursor, kafka((0, 0, 5)), 0.0, LEASE) is RunState.FAILED


def test_an_mqtt_batch_is_never_in_flight_for_a_watcher() -> None:
    """No offsets: what a run does not acknowledge stays in the session for the next batch."""
    one = BatchSpec("mqtt", "a/#", client_id="c", max_messages=5)
    cursor, _ = emit(BatchCursor(), one, now=0.0)
    assert run_state_from_offsets(cursor, None, 1.0, LEASE) is RunState.SUCCEEDED
    two = BatchSpec("mqtt", "a/#", client_id="c", max_messages=5, sequence=2)
    _, second = emit(cursor, two, now=1.0)
    assert second.spec == two and second.attempt == 0


def test_the_emission_time_survives_json() -> None:
    cursor, _ = emit(BatchCursor(), kafka((0, 0, 5)), now=12.5)
    again = BatchCursor.from_json(cursor.to_json())
    assert again == cursor and again.emitted_at == 12.5


def test_a_recreated_topic_neither_stalls_the_sensor_nor_has_an_old_batch_emitted_again() -> None:
    """Found by the nemesis: partition 0's position of an earlier batch (of the old topic)
    lay past the new topic's committed offset; every later batch counted as failed and was
    emitted again forever. Only the last batch's partitions say whether it is done; and a
    batch past its partitions' ends (planned on the old topic) is planned anew."""
    cursor, _ = emit(BatchCursor(), kafka((0, 19, 37), (1, 16, 31)), now=0.0)
    cursor, last = emit(cursor, kafka((1, 0, 14)), now=LEASE)  # the new topic's partition 1
    assert last.spec == kafka((1, 0, 14))
    # partition 1 committed up to 14; partition 0 still at the old topic's 19, below 37
    cursor, following = emit(cursor, kafka((0, 19, 48), (1, 14, 38)), now=2 * LEASE)
    assert following.spec == kafka((0, 19, 48), (1, 14, 38)) and following.attempt == 0
    # a batch that failed and no longer fits the (recreated, shorter) partitions
    cursor, _ = emit(BatchCursor(), kafka((0, 30, 40)), now=0.0)
    cursor, fresh = emit(cursor, kafka((0, 0, 8)), now=LEASE)
    assert fresh.spec == kafka((0, 0, 8)), "not the old [30, 40) again"


def test_a_batch_of_a_topic_recreated_since_is_never_emitted_again() -> None:
    """Found by the nemesis on Apache Kafka (seed 22, recreate at commit.after): the broker
    deletes the group's offsets with the topic, so the last batch (of the old topic id)
    looked uncommitted and was emitted again forever; the ingest refuses such a batch. A
    plan with another topic id is another topic's: planned afresh."""
    old = BatchSpec("kafka", "t", group_id="g", ranges=(OffsetRange(0, 0, 5),), topic_id="a")
    cursor, _ = emit(BatchCursor(), old, now=0.0)
    new = BatchSpec("kafka", "t", group_id="g", ranges=(OffsetRange(0, 0, 9),), topic_id="b")
    assert run_state_from_offsets(cursor, new, 2 * LEASE, LEASE) is RunState.NONE
    _, fresh = emit(cursor, new, now=2 * LEASE)
    assert fresh.spec == new and fresh.attempt == 0
    # a plan that does not know the topic's id says nothing about a recreation
    unknown = BatchSpec("kafka", "t", group_id="g", ranges=(OffsetRange(0, 0, 5),))
    assert run_state_from_offsets(cursor, unknown, 1.0, LEASE) is RunState.ACTIVE


def test_a_batch_committed_past_its_ends_is_done() -> None:
    """A run with ``up_to="latest"`` takes what arrived after the emission and commits past
    the emitted batch's ends: that batch is done, and the next one starts past them."""
    cursor, _ = emit(BatchCursor(), kafka((0, 0, 5), (1, 0, 3)), now=0.0)
    assert run_state_from_offsets(cursor, kafka((0, 9, 12)), 1.0, LEASE) is RunState.SUCCEEDED
    assert run_state_from_offsets(cursor, None, 1.0, LEASE) is RunState.SUCCEEDED
    cursor, following = emit(cursor, kafka((0, 9, 12)), now=1.0)
    assert following.spec == kafka((0, 9, 12)) and following.attempt == 0
