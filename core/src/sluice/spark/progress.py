"""Progress of an ingest, phase by phase, for a terminal, a task log, or a signal.

:func:`sluice.spark.ingest` reports :class:`~sluice.spark.ingest.IngestEvent` objects to its
``progress`` callback: ``starting`` (the session's Python workers are checked), ``reading``
(messages read so far), ``read``, ``writing`` (Spark tasks, one file each, done of the job's
tasks, from Spark's status tracker; Spark Connect has none, so only the phase is reported),
``publishing``, ``written`` (the batch is published), ``committing`` and ``committed``.

- :class:`ProgressLog` turns events into lines (``reading: 50,000 of 200,000 messages,
  41,000 msg/s``): one at each change of phase, at most every ``every`` seconds within one,
  and the last of a phase when it ends. The CLI, ``python -m sluice.spark``, the Airflow
  operator's and the Dagster op's logs all use it.
- :meth:`ProgressLog.state` says what an interruption left: nothing published, published but
  not committed, or committed; :func:`sigterm_interrupts` makes SIGTERM an interruption
  (Spark's jobs cancelled) like Ctrl-C.
- :func:`job_progress` follows the Spark jobs a block starts, for the ``writing`` phase.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ingest import IngestEvent

__all__ = ["ProgressLog", "job_progress", "sigterm_interrupts"]

#: The phases before which nothing of the batch is published.
_UNPUBLISHED = ("starting", "reading", "read", "writing")


class ProgressLog:
    """An ingest's ``progress`` callback that writes lines to ``emit`` (see the module
    docstring) and remembers the last event, for :meth:`state`."""

    def __init__(
        self,
        emit: Callable[[str], None],
        batch_id: str | None = None,
        every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.emit, self.batch_id, self.every, self.clock = emit, batch_id, every, clock
        self.last: IngestEvent | None = None
        self._said_at = 0.0
        self._reading_since: tuple[float, int] | None = None
        self._unsaid: IngestEvent | None = None  # the phase's latest event, not yet shown

    def __call__(self, event: IngestEvent) -> None:
        now = self.clock()
        if event.stage == "reading" and self._reading_since is None:
            self._reading_since = (now, event.read)
        changed = self.last is None or self.last.stage != event.stage
        if changed and self._unsaid is not None:  # how the phase ended, if not said yet
            self.emit(self.line(self._unsaid))
        self.last, self._unsaid = event, event
        if changed or now - self._said_at >= self.every:
            self._said_at, self._unsaid = now, None
            self.emit(self.line(event))

    def rate(self, event: IngestEvent) -> float | None:
        """Messages per second since reading began (None before it)."""
        if self._reading_since is None:
            return None
        since, first = self._reading_since
        seconds = self.clock() - since
        return (event.read - first) / seconds if seconds > 0 else None

    def line(self, event: IngestEvent) -> str:
        """One line for ``event``."""
        total = f" of {event.total:,}" if event.total is not None else ""
        rate = self.rate(event)
        speed = f", {rate:,.0f} msg/s" if rate else ""
        stage = event.stage
        if stage == "starting":
            return "starting: checking that Spark's Python workers can run the ingest"
        if stage == "reading":
            return f"reading: {event.read:,}{total} messages{speed}"
        if stage == "read":
            return f"read: {event.read:,}{total} messages{speed}"
        if stage == "writing":
            if event.parts is None and event.done is None:
                return (
                    "writing: Spark is sorting and writing the rows (Spark Connect shows no tasks)"
                )
            if event.parts is None:
                return "writing: the Spark job that sorts and writes the rows is starting"
            return f"writing: {event.done or 0} of {event.parts} Spark tasks (files) done"
        if stage == "publishing":
            return f"publishing batch {event.batch_id or self.batch_id}"
        if stage == "written":
            return f"written: batch {event.batch_id or self.batch_id} is published"
        if stage == "committing":
            return "committing: offsets (Kafka) or acknowledgements (MQTT)"
        return f"committed: batch {event.batch_id or self.batch_id} is done"

    def state(self) -> str:
        """What an interruption now leaves of the batch, and what to do."""
        batch = (self.last.batch_id if self.last else None) or self.batch_id or "(not planned)"
        stage = self.last.stage if self.last else "starting"
        if stage in _UNPUBLISHED:
            return (
                f"Interrupted while {stage}: nothing of batch {batch} was published or "
                "committed. Rerun to ingest it (what this run staged is replaced)."
            )
        if stage == "publishing":
            return (
                f"Interrupted while publishing batch {batch}: it may be published, nothing is "
                "committed. Rerun to finish it: nothing is written twice."
            )
        if stage in ("written", "committing"):
            return (
                f"Interrupted after batch {batch} was published, before its offsets or "
                "acknowledgements were all committed. Rerun to finish batch "
                f"{batch}: nothing is written twice."
            )
        return f"Interrupted after batch {batch} was committed: nothing is left to do."


@contextlib.contextmanager
def sigterm_interrupts(spark: Any = None) -> Iterator[None]:
    """Within the block, SIGTERM cancels ``spark``'s jobs and raises KeyboardInterrupt, as
    Ctrl-C does (only in the main thread; elsewhere the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        context = getattr(spark, "_sc", None)
        if context is not None:
            with contextlib.suppress(Exception):
                context.cancelAllJobs()
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def job_progress(
    spark: Any, report: Callable[[int | None, int | None], None], every: float = 0.5
) -> Iterator[None]:
    """Report ``(tasks done, tasks)`` of the Spark jobs the block starts in this thread, every
    ``every`` seconds while they run (Spark's status tracker). Spark Connect has no tracker:
    ``report(None, None)`` once."""
    context = getattr(spark, "_sc", None)
    if context is None:  # Spark Connect
        report(None, None)
        yield
        return
    group = f"sluice-{uuid.uuid4().hex[:12]}"
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    saved = {key: context.getLocalProperty(key) for key in keys}
    context.setJobGroup(group, "sluice ingest: write the batch", interruptOnCancel=True)
    stop = threading.Event()
    tracker = context.statusTracker()

    def follow() -> None:
        seen: tuple[int, int] | None = None
        while not stop.wait(every):
            now = _tasks(tracker, group)
            if now is not None and now != seen:
                seen = now
                report(*now)

    report(0, None)
    thread = threading.Thread(target=follow, name="sluice-job-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        final = _tasks(tracker, group)
        if final is not None:
            report(*final)
        for key, value in saved.items():
            context.setLocalProperty(key, value)


def _tasks(tracker: Any, group: str) -> tuple[int, int] | None:
    """(completed, all) tasks of the stages of ``group``'s jobs; None before the first."""
    done = total = 0
    try:
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
    except Exception:  # the context is stopping: no more progress to show
        return None
    return (done, total) if total else None
