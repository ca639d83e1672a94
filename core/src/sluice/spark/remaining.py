"""What is left of a Kafka batch, and how far its group may commit: invariant I1, in one place.

The sink is the truth about what is written; the group's committed offset is where the next
plan starts. Per partition of a batch ``[start, end)``:

- the *base* is the group's committed offset; a group that never committed starts where the
  sink's data of the partition starts, or, with nothing in the sink either, at the batch's
  start (the first batch of a group says where the group begins: ``group_start``);
- a batch that starts after the base **also takes the gap** ``[base, start)``: an earlier
  batch that failed can then never be committed over (the event-driven path of Airflow emits
  batches one after the other, and a failed one must not be skipped);
- from ``min(start, base)`` to ``end``, what the sink holds is skipped and the rest is read:
  a rerun writes nothing twice, and a batch entirely below the committed offset still writes
  what the sink does not have;
- offsets below the partition's log start (deleted by retention) fail the ingest with
  :class:`DataLossError` naming the partition and the range, unless ``fail_on_data_loss`` is
  off: then they are recorded as lost (in the batch record and the result) and skipped;
- a partition that was recreated (deleted and created again, or its offsets reset) fails the
  same way, or, accepted, is read again from its log start, its old coverage forgotten. It
  is recognised by its end being below the group's or the sink's position, or by the caller
  (``recreated``: a topic id or a fingerprint that does not match, :mod:`.fingerprints`),
  which catches a new log that has grown past the old position too;
- a partition whose log ends below the batch's end although the topic is the one the batch
  was planned on (the same topic id: ``topic_id``) was **truncated** (an unclean leader
  election made a replica that lacked the end of the log its leader): the ingest fails
  naming the offsets past the new end, whether the loss is accepted or not (a plan from a
  stale end looks the same; a new plan reads what the log holds). A log truncated below what
  the group committed or the sink holds fails the same way: the sink's rows at those
  offsets are the old messages, and new ones there could not be told from them.

:func:`commit_targets` is the only place that decides what to commit: per partition, as far
as the sink holds (written or recorded lost) without a gap from the base, never over an offset
that is in no published batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..batch import BatchSpec, OffsetRange
from ..errors import DataLossError
from .sinks.base import StreamState
from .sinks.coverage import Coverage

__all__ = [
    "DataLossError",
    "Work",
    "commit_targets",
    "live_commits",
    "remaining",
    "truncated_below",
]


@dataclass
class Work:
    """What an ingest of a Kafka batch has to read, and what it found on the way."""

    todo: list[OffsetRange] = field(default_factory=list)
    skipped: int = 0  # messages of the batch the sink already holds
    gaps: list[OffsetRange] = field(default_factory=list)  # taken before the batch's start
    lost: list[dict[str, Any]] = field(default_factory=list)
    group_start: dict[int, int] = field(default_factory=dict)
    reset_partitions: list[int] = field(default_factory=list)
    reset_commits: dict[int, int] = field(default_factory=dict)  # the old topic's offsets


def remaining(
    spec: BatchSpec,
    committed: Mapping[int, int | None],
    bounds: Mapping[int, tuple[int, int]],
    state: StreamState,
    fail_on_data_loss: bool = True,
    recreated: Mapping[int, str] | None = None,
    also: Sequence[int] = (),
    topic_id: str | None = None,
) -> Work:
    """The work left of ``spec`` (see the module docstring). ``bounds`` gives each partition's
    (log start, log end); ``state`` is the stream's state in the sink; ``recreated`` names
    partitions known to be recreated, with the evidence; ``also`` names recreated partitions
    outside the batch, read from their log start with it (their old committed offsets
    belong to the old topic); ``topic_id`` is the topic's id now, where the broker has ids."""
    work = Work()
    planned_here = spec.topic_id is not None and spec.topic_id == topic_id
    written_here = state.topic_id is not None and state.topic_id == topic_id
    held = state.held
    outside = [OffsetRange(p, bounds[p][1], bounds[p][1]) for p in also if p in bounds]
    for r in [*spec.ranges, *outside]:
        p = r.partition
        if p not in bounds:
            raise ValueError(
                f"Partition {p} of topic '{spec.topic}' does not exist: the batch was planned "
                "on another topic or cluster, or the topic was recreated with fewer partitions."
            )
        log_start, log_end = bounds[p]
        base = committed.get(p)
        ahead = max(base or 0, held.last(p) or 0)
        evidence = (recreated or {}).get(p)
        if evidence is None and ahead > log_end:
            if written_here or planned_here:
                raise truncated_below(
                    spec.topic,
                    p,
                    str(topic_id),
                    f"it ends at offset {log_end}, below offset {ahead} that the group "
                    "committed or the sink holds",
                )
            evidence = f"it ends at offset {log_end}, but the group or the sink is at {ahead}"
        if r.end > log_end:
            if not planned_here:
                raise ValueError(
                    f"The batch ends at offset {r.end} of partition {p} of topic "
                    f"'{spec.topic}', past its end ({log_end}): it was planned on another topic "
                    "or cluster, or the topic was recreated. Plan the batch again."
                )
            # Refused, not recorded even when the loss is accepted: a plan from a stale end
            # looks the same (nemesis seed 11 on three nodes, right after a recreation, and
            # the same batch was then emitted again forever), and its rerun, or a new plan
            # from the committed offset, reads what the log holds now
            raise DataLossError(
                f"Data loss: offsets {max(r.start, log_end)}-{r.end - 1} of partition {p} of "
                f"topic '{spec.topic}' are past its log end ({log_end}), which moved back "
                "since the batch was planned on this same topic: its log was truncated (an "
                "unclean leader election). Nothing was written or committed. Plan the batch "
                "again (accepting the loss does not change this): the next plan starts at the "
                "group's committed offset and takes what the log holds now, including the "
                "messages written at these offsets since."
            )
        if evidence is not None:
            _lose(
                work,
                fail_on_data_loss,
                f"partition {p} of topic '{spec.topic}' was deleted and recreated (or its "
                f"offsets reset): {evidence}. The messages of the old topic that were not "
                "ingested are gone",
                {"partition": p, "reason": "recreated", "detail": evidence},
            )
            work.reset_partitions.append(p)
            if base is not None:
                work.reset_commits[p] = base
            held = Coverage({q: i for q, i in held.intervals.items() if q != p})
            base = log_start  # the new topic's messages are all there: read them from its start
            work.group_start[p] = log_start
        if base is None:
            base = held.first(p)
            if base is None:
                base = r.start
                work.group_start[p] = r.start
        if base < r.start:
            work.gaps.extend(held.missing(p, base, r.start))
        for piece in held.missing(p, min(base, r.start), r.end):
            if piece.start < log_start:
                gone = OffsetRange(p, piece.start, min(piece.end, log_start))
                _lose(
                    work,
                    fail_on_data_loss,
                    f"offsets {gone.start}-{gone.end - 1} of partition {p} of topic "
                    f"'{spec.topic}' are below its log start ({log_start}): deleted by retention",
                    {**gone.__dict__, "reason": "retention"},
                )
                if piece.end <= log_start:
                    continue
                piece = OffsetRange(p, log_start, piece.end)
            work.todo.append(piece)
    reading = Coverage.of(spec.ranges).overlaps(work.todo)
    work.skipped = spec.message_count - sum(r.count for r in reading)
    return work


def truncated_below(topic: str, partition: int, topic_id: str, evidence: str) -> DataLossError:
    """The error of a log truncated below what the group committed or the sink holds."""
    return DataLossError(
        f"Data loss: partition {partition} of topic '{topic}' (the same topic: its id is "
        f"still {topic_id}) was truncated (an unclean leader election): {evidence}. "
        "The sink holds the messages the broker had at those offsets before; the messages it "
        "writes there now are other messages, which this stream cannot tell from them. "
        "Nothing was written or committed, and accepting the loss does not change that: "
        "ingest the partition's new messages with another consumer group into another sink."
    )


def _lose(work: Work, fail: bool, what: str, loss: dict[str, Any]) -> None:
    if fail:
        raise DataLossError(
            f"Data loss: {what}. Nothing was written or committed. To skip the missing "
            "messages and record the loss in the batch record, ingest with "
            "fail_on_data_loss=False (CLI: --accept-data-loss)."
        )
    work.lost.append(loss)


def live_commits(committed: Mapping[int, int | None], state: StreamState) -> dict[int, int | None]:
    """The group's committed offsets, None where one is the old topic's offset of a partition
    the sink has since reset (a run published the new topic's first batch and died before it
    committed): the sink's coverage is then where the group stands. A coincidence of the new
    topic's commit with the old value only makes the ingest look for gaps it does not have."""
    return {
        p: None if offset is not None and state.stale_commits.get(p) == offset else offset
        for p, offset in committed.items()
    }


def commit_targets(
    partitions: list[int],
    committed: Mapping[int, int | None],
    held: Coverage,
    reset_partitions: list[int] | None = None,
) -> dict[int, int]:
    """The offset to commit in each of ``partitions`` (only where it moves): from the base (the
    committed offset, else the first held offset) as far as ``held`` runs without a gap. A
    reset partition may move back (its committed offset belongs to the old topic)."""
    targets = {}
    for p in partitions:
        current = committed.get(p)
        reset = p in (reset_partitions or [])
        base = held.first(p) if current is None or reset else current
        if base is None:
            continue
        target = held.contiguous_end(p, base)
        if (current is None or reset or target > current) and target != current:
            targets[p] = target
    return targets
