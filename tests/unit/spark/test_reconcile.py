"""Reconciled before published (I6): what a run staged against what it planned. The write
job's report is made by hand here: the edges it covers (a lost file, a row written twice, a
reader that read past its range) do not happen on demand with real parts."""

from __future__ import annotations

import pytest

from sluice.batch import OffsetRange
from sluice.errors import DataLossError
from sluice.spark.reconcile import ReconcileError, reconcile_kafka, reconcile_mqtt
from sluice.spark.writing import PartitionWrites, WriteCounts

TODO = [OffsetRange(0, 0, 10), OffsetRange(1, 5, 8)]


def counts(
    parts: dict[int, list[tuple[int, int]]], rows: dict[int, int] | None = None
) -> WriteCounts:
    writes = {
        p: PartitionWrites(i, (rows or {}).get(p, sum(e - s for s, e in i)), i[-1][1] - 1, "f")
        for p, i in parts.items()
    }
    total = sum(w.rows for w in writes.values())
    return WriteCounts(total - 1, 1, 0, writes)


def no_log_start(partitions: list[int]) -> dict[int, int]:
    raise AssertionError("the log start is only asked about when an offset has no row")


def test_every_planned_offset_written_reconciles_to_the_plan() -> None:
    done = reconcile_kafka(
        "b", "t", TODO, counts({0: [(0, 10)], 1: [(5, 8)]}), (12, 1), no_log_start, True
    )
    assert done.ranges == TODO and done.lost == [] and (done.written, done.quarantined) == (12, 1)
    assert done.fingerprints == {0: (9, "f"), 1: (7, "f")}


def test_a_last_message_without_a_fingerprint_records_none_for_its_partition() -> None:
    """Its message was gone before the ingest could fetch it (the writing task had a lean row):
    the stream keeps the fingerprint it had, never an empty one that no message matches."""
    job = counts({0: [(0, 10)], 1: [(5, 8)]})
    job.partitions[1] = PartitionWrites([(5, 8)], 3, 7, "")
    done = reconcile_kafka("b", "t", TODO, job, (12, 1), no_log_start, True)
    assert done.fingerprints == {0: (9, "f")}


def test_staged_files_that_do_not_hold_what_the_job_wrote_stop_the_publish() -> None:
    with pytest.raises(ReconcileError, match="the staged files hold 11 and 1"):
        reconcile_kafka(
            "b", "t", TODO, counts({0: [(0, 10)], 1: [(5, 8)]}), (11, 1), no_log_start, True
        )


def test_a_row_written_twice_or_outside_the_batch_stops_the_publish() -> None:
    twice = counts({0: [(0, 10)], 1: [(5, 8)]}, rows={0: 11})
    with pytest.raises(ReconcileError, match="11 rows for 10 offsets"):
        reconcile_kafka("b", "t", TODO, twice, (13, 1), no_log_start, True)
    outside = counts({0: [(0, 12)], 1: [(5, 8)]})
    with pytest.raises(ReconcileError, match=r"offsets 10-11 of partition 0 .* did not ask"):
        reconcile_kafka("b", "t", TODO, outside, (14, 1), no_log_start, True)


def test_offsets_without_a_row_above_the_log_start_have_no_message() -> None:
    """Transaction markers, aborted and compacted records: the reader stepped over them."""
    job = counts({0: [(0, 3), (4, 10)], 1: [(5, 8)]})
    done = reconcile_kafka("b", "t", TODO, job, (11, 1), lambda ps: {0: 0}, True)
    assert done.ranges == TODO and done.lost == []


def test_offsets_without_a_row_below_the_log_start_are_a_loss() -> None:
    """Retention moved while the batch was read and the reader, accepting the loss, went on."""
    job = counts({0: [(6, 10)], 1: [(5, 8)]})
    with pytest.raises(DataLossError, match="offsets 0-5 of partition 0 of topic 't'"):
        reconcile_kafka("b", "t", TODO, job, (6, 1), lambda ps: {0: 6}, True)
    done = reconcile_kafka("b", "t", TODO, job, (6, 1), lambda ps: {0: 6}, False)
    assert done.lost == [{"partition": 0, "start": 0, "end": 6, "reason": "retention"}]
    assert done.ranges == [OffsetRange(0, 6, 10), OffsetRange(1, 5, 8)], "claims what it has"


def test_an_mqtt_run_stages_every_new_message_once() -> None:
    assert reconcile_mqtt("b", 5, WriteCounts(4, 1, 0), (4, 1)).written == 4
    with pytest.raises(ReconcileError, match="5 new messages were read, but 4 rows"):
        reconcile_mqtt("b", 5, WriteCounts(3, 1, 0), (3, 1))
