"""What a polling sensor has already asked for, so it never asks twice and never skips ahead.

A scheduler's sensor (Dagster's queue sensor, or any poller that launches one run per batch)
plans a batch without committing anything, asks for a run to ingest it, and stores a
:class:`BatchCursor` between ticks: the last batch it requested, how often it requested it,
and (Kafka) the end offset it requested up to in each partition. The ingest run commits.

One batch is in flight at a time, and :meth:`BatchCursor.next_request` decides the next one
from what is waiting on the broker and what became of the last batch's run:

- its run is queued or running: nothing new (two runs of one group or one MQTT session
  would race each other's commits or take each other's connection);
- its run failed or was cancelled, and the group's committed offsets are still behind the
  requested positions: the *same* batch again, same ranges and so the same ``batch_id``
  (its output directory is replaced, never duplicated), under a new run key
  ``<batch_id>.<attempt>`` because schedulers drop a run request whose key they have seen;
- its run is not found yet (asked for, not launched): the same batch under the same run
  key, which the scheduler de-duplicates;
- otherwise: the next batch, from the committed offsets to the end of the topic, cut to
  ``max_messages``, if at least ``min_messages`` wait.

MQTT has no offsets: a batch is "drain the persistent session" and a failed run's messages
stay unacknowledged in the session, so the next batch takes them again. A batch whose run is
not found yet is asked for again unchanged (same ``batch_id``, same run key); otherwise each
tick plans the session's next batch.

A scheduler that cannot see its runs (Airflow's trigger) decides the run state from the
broker instead, with :func:`run_state_from_offsets`; the rules are in :mod:`sluice.sensing`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from .batch import BatchSpec, limit_ranges

__all__ = ["BatchCursor", "BatchRequest", "RunState", "run_key", "run_state_from_offsets"]


class RunState(StrEnum):
    """What became of the run of the last requested batch."""

    NONE = "none"  # no batch was requested yet
    MISSING = "missing"  # requested, but no run for it exists (yet)
    ACTIVE = "active"  # queued, starting or running
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed or cancelled


def run_key(batch_id: str, attempt: int) -> str:
    """The run key of ``attempt`` (0 first) at a batch: its ``batch_id``, then ``<id>.<n>``."""
    return batch_id if attempt == 0 else f"{batch_id}.{attempt}"


@dataclass(frozen=True)
class BatchRequest:
    """A batch to ask a run for, and which attempt at it this is."""

    spec: BatchSpec
    attempt: int = 0
    retry: bool = False  # the last batch again, after its run failed or was not found

    @property
    def run_key(self) -> str:
        return run_key(self.spec.batch_id, self.attempt)


@dataclass(frozen=True)
class BatchCursor:
    """A sensor's memory between ticks (see the module docstring). JSON via :meth:`to_json`."""

    positions: Mapping[int, int] = field(default_factory=dict)  # Kafka: partition -> end
    last: BatchSpec | None = None
    attempt: int = 0
    requested: int = 0  # batches requested so far
    emitted_at: float | None = None  # when ``last`` was requested (epoch seconds), if known

    @property
    def last_run_key(self) -> str | None:
        return run_key(self.last.batch_id, self.attempt) if self.last is not None else None

    def to_json(self) -> str:
        return json.dumps(
            {
                "positions": {str(p): end for p, end in sorted(self.positions.items())},
                "last": self.last.to_dict() if self.last is not None else None,
                "attempt": self.attempt,
                "requested": self.requested,
                "emitted_at": self.emitted_at,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> BatchCursor:
        """Parse :meth:`to_json` output; None or "" is a fresh cursor."""
        if not text:
            return cls()
        try:
            data: dict[str, Any] = json.loads(text)
            last = data.get("last")
            return cls(
                positions={int(p): int(end) for p, end in (data.get("positions") or {}).items()},
                last=BatchSpec.from_dict(last) if last else None,
                attempt=int(data.get("attempt", 0)),
                requested=int(data.get("requested", 0)),
                emitted_at=_optional_float(data.get("emitted_at")),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"The sensor cursor is not a Sluice batch cursor ({exc}): {text[:200]!r}. "
                "Clear the cursor (the sensor then plans from the committed offsets)."
            ) from None

    def outstanding(self, waiting: BatchSpec | None) -> bool:
        """Whether the group's committed offsets (the starts of ``waiting``, a Kafka plan not
        cut to a size) are still behind the positions requested, in some partition of the
        last batch. (Positions of partitions the last batch did not read are an earlier
        batch's; after a topic was recreated they can lie past a new log's offsets.)"""
        if waiting is None or waiting.kind != "kafka" or self.last is None:
            return False
        partitions = {r.partition for r in self.last.ranges}
        return any(
            r.start < self.positions.get(r.partition, 0)
            for r in waiting.ranges
            if r.partition in partitions
        )

    def next_request(
        self,
        waiting: BatchSpec | None,
        last_run: RunState,
        max_messages: int | None = None,
        min_messages: int = 1,
    ) -> BatchRequest | str:
        """The batch to request now, or why nothing is (a message for a skipped tick).

        ``waiting`` is what the broker holds: for Kafka the whole backlog of the group (its
        committed offsets to the end offsets, not cut to ``max_messages``), for MQTT the
        session's batch when at least ``min_messages`` are waiting; None when nothing is.
        """
        if last_run is RunState.ACTIVE:
            return (
                f"batch {self.last_run_key} is still being ingested; "
                "the next batch is planned once its run has finished"
            )
        spec: BatchSpec | None
        retry = False
        if (
            self.last is not None
            and self.last.kind == "kafka"
            and last_run in (RunState.FAILED, RunState.MISSING)
            and self.outstanding(waiting)
            and _within(self.last, waiting)
        ):
            spec, retry = self.last, True
        elif self.last is not None and self.last.kind == "mqtt" and last_run is RunState.MISSING:
            spec = self.last  # each MQTT plan is a new batch: keep the one asked for
        elif waiting is not None and waiting.kind == "kafka":
            ranges = list(waiting.ranges)
            if max_messages is not None:
                ranges = limit_ranges(ranges, max_messages)
            count = sum(r.count for r in ranges)
            if count < max(1, min_messages):
                return _nothing_waiting(waiting.topic, waiting.message_count, min_messages)
            spec = replace(waiting, ranges=tuple(ranges))
        else:
            spec = waiting
        if spec is None:
            return _nothing_waiting(None, 0, min_messages)
        attempt = 0
        if self.last is not None and spec.batch_id == self.last.batch_id:
            again = last_run is RunState.MISSING
            attempt = self.attempt if again else self.attempt + 1
            retry = retry or again
        return BatchRequest(spec, attempt, retry)

    def advance(self, request: BatchRequest, now: float | None = None) -> BatchCursor:
        """The cursor after ``request`` was asked for (at ``now``, epoch seconds, if given)."""
        positions = dict(self.positions)
        for r in request.spec.ranges:
            positions[r.partition] = r.end
        return BatchCursor(positions, request.spec, request.attempt, self.requested + 1, now)


def run_state_from_offsets(
    cursor: BatchCursor, waiting: BatchSpec | None, now: float, rerun_after: float
) -> RunState:
    """The run state of ``cursor.last`` as the broker shows it, for a sensor that cannot see
    its runs (the rules are in :mod:`sluice.sensing`).

    ``waiting`` is the group's whole backlog (a Kafka plan from the committed offsets, not cut
    to a size; None when nothing waits). Kafka: SUCCEEDED once the committed offsets reached
    the last batch's ends in every partition; else ACTIVE until ``rerun_after`` seconds after
    it was emitted, FAILED from then on. A cursor of another topic or group is NONE. MQTT has
    no offsets: an emitted MQTT batch counts as SUCCEEDED (what its run does not acknowledge
    stays in the session, for the next batch).
    """
    last = cursor.last
    if last is None:
        return RunState.NONE
    if last.kind != "kafka":
        return RunState.SUCCEEDED
    if waiting is not None and (waiting.topic, waiting.group_id) != (last.topic, last.group_id):
        return RunState.NONE
    if waiting is not None and last.topic_id and waiting.topic_id not in (None, last.topic_id):
        # The topic was deleted and created again since ``last`` was planned (its id moved):
        # that batch can neither be committed nor run again (the ingest refuses a batch of
        # the old topic), so it is another topic's cursor. Apache Kafka deletes the group's
        # offsets with the topic, so ``last`` looked outstanding and was emitted again
        # forever (nemesis seed 22, --broker kafka, recreate at commit.after).
        return RunState.NONE
    if not cursor.outstanding(waiting):
        return RunState.SUCCEEDED
    if cursor.emitted_at is not None and now - cursor.emitted_at < rerun_after:
        return RunState.ACTIVE
    return RunState.FAILED


def _within(batch: BatchSpec, waiting: BatchSpec | None) -> bool:
    """Whether every range of ``batch`` ends within its partition's current end (the ends of
    ``waiting``, a plan up to them). A batch past them was planned on a topic that has since
    been recreated shorter: emitting it again would fail again, so a new one is planned."""
    if waiting is None:
        return False
    ends = {r.partition: r.end for r in waiting.ranges}
    return all(r.end <= ends.get(r.partition, r.start) for r in batch.ranges if r.count)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _nothing_waiting(topic: str | None, count: int, min_messages: int) -> str:
    where = f" on {topic}" if topic else ""
    if count:
        return f"{count} message(s) waiting{where}, fewer than min_messages={min_messages}"
    return f"no messages waiting{where}"
