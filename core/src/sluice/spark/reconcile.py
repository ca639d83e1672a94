"""Reconciled before published (invariant I6): what a run staged, checked against what it
planned, before the batch's record claims it.

Per Kafka partition, every offset of the planned ranges must be written (a good row),
quarantined (a bad row), or have no message (a transaction marker, an aborted transaction, a
compacted record: offsets the reader steps over, having been asked for them), or be recorded
as lost: deleted by retention while the batch was read, which the reader reports by raising
:class:`~sluice.errors.DataLossError`, or, when the ingest accepts data loss, by going on from
the log start; such a hole lies below the partition's log start once the job is done. And the
counts agree: the rows the write job reports, the rows in the sink's staged files, and the
offsets they cover (a row written twice would show as more rows than offsets).

The record then claims the ranges that were reconciled, not the ranges that were planned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..batch import OffsetRange
from ..errors import DataLossError
from .sinks.coverage import Coverage
from .writing import WriteCounts

__all__ = ["ReconcileError", "Reconciled", "reconcile_kafka", "reconcile_mqtt"]


class ReconcileError(RuntimeError):
    """What a run staged does not match what it read (a bug, or files that went missing):
    nothing is published or committed."""


@dataclass
class Reconciled:
    ranges: list[OffsetRange]  # offsets covered: written, quarantined, or without a message
    lost: list[dict[str, Any]] = field(default_factory=list)  # deleted while the batch was read
    written: int = 0
    quarantined: int = 0
    fingerprints: dict[int, tuple[int, str]] = field(default_factory=dict)


def _check_counts(counts: WriteCounts, staged: tuple[int, int], batch_id: str) -> None:
    if (counts.good, counts.bad) != staged:
        raise ReconcileError(
            f"Batch {batch_id}: the write job wrote {counts.good} good and {counts.bad} "
            f"quarantined rows, but the staged files hold {staged[0]} and {staged[1]}. Nothing "
            "was published or committed; run the batch again."
        )


def reconcile_kafka(
    batch_id: str,
    topic: str,
    todo: list[OffsetRange],
    counts: WriteCounts,
    staged: tuple[int, int],
    log_starts: Callable[[list[int]], Mapping[int, int]],
    fail_on_data_loss: bool,
) -> Reconciled:
    """Check a Kafka run's staged rows against ``todo`` (see the module docstring).
    ``log_starts`` reads the current log start of the partitions given (only called when a
    planned offset has no row)."""
    _check_counts(counts, staged, batch_id)
    rows = sum(w.rows for w in counts.partitions.values())
    if rows != counts.good + counts.bad:
        raise ReconcileError(
            f"Batch {batch_id}: {counts.good + counts.bad} rows were written, but {rows} of "
            "them name a Kafka partition and offset. Nothing was published or committed."
        )
    planned = Coverage.of(todo)
    written = Coverage({p: list(w.intervals) for p, w in counts.partitions.items()})
    for p, w in sorted(counts.partitions.items()):
        outside = [r for lo, hi in w.intervals for r in planned.missing(p, lo, hi)]
        if outside:
            raise ReconcileError(
                f"Batch {batch_id}: rows of partition {p} of topic '{topic}' at offsets "
                f"{_ranges_text(outside)} were written, but the batch did not ask for them. "
                "Nothing was published or committed."
            )
        distinct = sum(hi - lo for lo, hi in w.intervals)
        if w.rows != distinct:
            raise ReconcileError(
                f"Batch {batch_id}: partition {p} of topic '{topic}' has {w.rows} rows for "
                f"{distinct} offsets: a message was written twice. Nothing was published or "
                "committed."
            )
    holes = [h for r in todo for h in written.missing(r.partition, r.start, r.end)]
    lost: list[OffsetRange] = []
    if holes:
        starts = log_starts(sorted({h.partition for h in holes}))
        for hole in holes:
            start = starts.get(hole.partition, 0)
            if hole.start < start:
                lost.append(OffsetRange(hole.partition, hole.start, min(hole.end, start)))
    if lost and fail_on_data_loss:
        raise DataLossError(
            f"Data loss: offsets {_ranges_text(lost)} of topic '{topic}' were deleted by "
            "retention while the batch was read. Nothing was written or committed. To skip "
            "the missing messages and record the loss in the batch record, ingest with "
            "fail_on_data_loss=False (CLI: --accept-data-loss)."
        )
    gone = Coverage.of(lost)
    ranges = [piece for r in todo for piece in gone.missing(r.partition, r.start, r.end)]
    return Reconciled(
        ranges=ranges,
        lost=[{**r.__dict__, "reason": "retention"} for r in lost],
        written=counts.good,
        quarantined=counts.bad,
        fingerprints={  # none where the last message was gone before its fingerprint was taken
            p: (w.last_offset, w.last_fingerprint)
            for p, w in counts.partitions.items()
            if w.last_fingerprint
        },
    )


def reconcile_mqtt(
    batch_id: str,
    fresh: int,
    counts: WriteCounts,
    staged: tuple[int, int],
    ids: tuple[set[str], set[str]] | None = None,
) -> Reconciled:
    """Check an MQTT run: every fresh message (by id) was staged once, good or quarantined.
    ``ids``: (fresh ids, ids of the staged rows), for formats that give a message several rows
    (Sparkplug B), whose rows are then checked by id rather than counted."""
    _check_counts(counts, staged, batch_id)
    if ids is not None:
        missing, unknown = ids[0] - ids[1], ids[1] - ids[0]
        if missing or unknown:
            raise ReconcileError(
                f"Batch {batch_id}: {len(missing)} new message(s) have no row and "
                f"{len(unknown)} row id(s) were not read ({sorted(missing | unknown)[:3]}). "
                "Nothing was published or acknowledged; the session's broker sends the "
                "messages again to the next run."
            )
        return Reconciled(ranges=[], written=counts.good, quarantined=counts.bad)
    if counts.good + counts.bad != fresh:
        raise ReconcileError(
            f"Batch {batch_id}: {fresh} new messages were read, but {counts.good + counts.bad} "
            "rows were written. Nothing was published or acknowledged; the session's broker "
            "sends the messages again to the next run."
        )
    return Reconciled(ranges=[], written=counts.good, quarantined=counts.bad)


def _ranges_text(ranges: list[OffsetRange]) -> str:
    shown = ", ".join(f"{r.start}-{r.end - 1} of partition {r.partition}" for r in ranges[:5])
    return shown + (f" and {len(ranges) - 5} more" if len(ranges) > 5 else "")
