"""What is left of a batch, and how far a group may commit (invariant I1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.spark.remaining import DataLossError, commit_targets, remaining
from sluice.spark.sinks import Coverage, StreamState


def spec(*ranges: tuple[int, int, int]) -> BatchSpec:
    return BatchSpec("kafka", "t", group_id="g", ranges=tuple(OffsetRange(*r) for r in ranges))


def state(**written: list[tuple[int, int]]) -> StreamState:
    held = StreamState()
    for partition, intervals in written.items():
        for start, end in intervals:
            held.written.add(int(partition[1:]), start, end)
    return held


BOUNDS = {0: (0, 1000), 1: (0, 1000)}


def test_a_batch_after_the_committed_offset_takes_the_gap() -> None:
    work = remaining(spec((0, 100, 200)), {0: 0}, BOUNDS, StreamState())
    assert work.todo == [OffsetRange(0, 0, 200)]
    assert work.gaps == [OffsetRange(0, 0, 100)] and work.skipped == 0


def test_a_gap_the_sink_already_holds_is_not_read_again() -> None:
    work = remaining(spec((0, 100, 200)), {0: 0}, BOUNDS, state(p0=[(0, 50)]))
    assert work.todo == [OffsetRange(0, 50, 200)] and work.gaps == [OffsetRange(0, 50, 100)]


def test_a_batch_below_the_committed_offset_writes_what_the_sink_lacks() -> None:
    work = remaining(spec((0, 0, 100)), {0: 200}, BOUNDS, state(p0=[(100, 200)]))
    assert work.todo == [OffsetRange(0, 0, 100)] and work.skipped == 0


def test_a_rerun_skips_what_is_written() -> None:
    work = remaining(
        spec((0, 0, 100), (1, 0, 10)), {0: None, 1: None}, BOUNDS, state(p0=[(0, 100)])
    )
    assert work.todo == [OffsetRange(1, 0, 10)] and work.skipped == 100
    assert work.group_start == {1: 0}, "partition 1 begins with this batch"


def test_a_new_group_begins_at_its_first_batch() -> None:
    work = remaining(spec((0, 500, 600)), {0: None}, BOUNDS, StreamState())
    assert work.todo == [OffsetRange(0, 500, 600)] and work.group_start == {0: 500}


def test_retention_fails_naming_the_partition_and_the_range() -> None:
    with pytest.raises(DataLossError, match=r"offsets 0-49 of partition 0 .* log start \(50\)"):
        remaining(spec((0, 0, 100)), {0: 0}, {0: (50, 1000)}, StreamState())
    work = remaining(spec((0, 0, 100)), {0: 0}, {0: (50, 1000)}, StreamState(), False)
    assert work.todo == [OffsetRange(0, 50, 100)]
    assert work.lost == [{"partition": 0, "start": 0, "end": 50, "reason": "retention"}]


def test_a_recreated_partition_fails_or_starts_afresh() -> None:
    with pytest.raises(DataLossError, match="recreated"):
        remaining(spec((0, 0, 10)), {0: 300}, {0: (0, 10)}, state(p0=[(0, 300)]))
    work = remaining(spec((0, 0, 10)), {0: 300}, {0: (0, 10)}, state(p0=[(0, 300)]), False)
    assert work.todo == [OffsetRange(0, 0, 10)] and work.reset_partitions == [0]


@pytest.mark.parametrize("now", [None, "other-id"])
def test_a_batch_past_the_end_of_its_partition_is_refused(now: str | None) -> None:
    """Planned on another topic (no id to tell, or another id): plan again."""
    planned = replace(spec((0, 0, 2000)), topic_id="T")
    with pytest.raises(ValueError, match="past its end"):
        remaining(planned, {0: 0}, BOUNDS, StreamState(), topic_id=now)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_batch_past_the_end_of_a_truncated_log_always_fails(fail_on_data_loss: bool) -> None:
    """Planned on this topic (same id), whose log then ended at 50 (an unclean election):
    refused, never recorded (a plan from a stale end looks the same)."""
    planned = replace(spec((0, 0, 100)), topic_id="T")
    with pytest.raises(DataLossError, match=r"offsets 50-99 of partition 0 .* truncated"):
        remaining(planned, {0: None}, {0: (0, 50)}, StreamState(), fail_on_data_loss, topic_id="T")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_log_truncated_below_what_the_sink_holds_always_fails(fail_on_data_loss: bool) -> None:
    held = state(p0=[(0, 100)])
    held.topic_id = "T"
    with pytest.raises(DataLossError, match=r"truncated .* ends at offset 80, below offset 100"):
        remaining(spec((0, 0, 80)), {0: 100}, {0: (0, 80)}, held, fail_on_data_loss, topic_id="T")


def test_commits_never_pass_an_offset_the_sink_does_not_hold() -> None:
    held = Coverage({0: [(0, 100), (150, 200)], 1: [(10, 20)]})
    assert commit_targets([0, 1], {0: 0, 1: None}, held) == {0: 100, 1: 20}
    assert commit_targets([0], {0: 100}, held) == {}, "no move over the hole at 100-149"
    assert commit_targets([0], {0: 300}, held) == {}, "never backwards"
    assert commit_targets([0], {0: 300}, held, reset_partitions=[0]) == {0: 100}
