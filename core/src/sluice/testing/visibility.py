"""What a reader of a table and of its quarantine table sees of each batch, polled while
ingests crash: the harness of the visibility test and benchmark (docs/fault-model.md, "A
batch and its quarantine, for a reader").

A :class:`VisibilityPoller` reads both tables over and over in a thread, as a user would
(pyiceberg scans, delta-rs reads of their ``batch_id`` column; :func:`iceberg_batches`,
:func:`delta_batches`): the table, then the quarantine table, then the table again. A batch
in the first read of the table and not in the quarantine's is seen *rows without
quarantine*; a batch in the quarantine and not in the second read of the table is seen
*quarantine without rows*. Both are sound while batches only ever appear (no compaction
during the poll): the first read of the table came before the quarantine's, the second after
it. Every batch is expected to have both kinds of rows (the loops give each batch good and
bad records).

A disagreement is an :class:`Episode`: its batch and kind, the label the loop had set
(:meth:`VisibilityPoller.mark`, e.g. the failpoint of the ingest just killed), and the
start times of the poll that first saw it, of the last poll that saw it, and of the first
poll that no longer did. A read that fails is counted, with its error, not hidden.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..batch import BatchSpec

__all__ = [
    "Episode",
    "VisibilityPoller",
    "VisibilityReport",
    "delta_batches",
    "iceberg_batches",
    "kill_loop",
]

Kind = Literal["rows without quarantine", "quarantine without rows"]
Reader = Callable[[], set[str]]
BATCH_COLUMN = "batch_id"


def iceberg_batches(catalog_name: str, identifier: str) -> Reader:
    """The batch ids in the rows of the Iceberg table ``identifier`` of the catalog
    ``catalog_name`` (configured the pyiceberg way), by a scan of its ``batch_id`` column;
    none while it does not exist."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.utils.config import Config

    # the configuration as it is now (pyiceberg's load_catalog reads the environment's once)
    properties = Config().get_catalog_config(catalog_name) or {}
    catalog = load_catalog(catalog_name, **properties)  # type: ignore[arg-type]

    def read() -> set[str]:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            return set()
        if table.current_snapshot() is None:
            return set()
        rows = table.scan(selected_fields=(BATCH_COLUMN,)).to_arrow()
        return set(rows.column(BATCH_COLUMN).to_pylist())

    return read


def delta_batches(path: str | Path) -> Reader:
    """The batch ids in the rows of the Delta table at ``path``, read with delta-rs; none
    while it does not exist."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    def read() -> set[str]:
        try:
            table = DeltaTable(str(path))
        except TableNotFoundError:
            return set()
        if BATCH_COLUMN not in table.schema().to_arrow().names:
            return set()
        rows = table.to_pyarrow_table(columns=[BATCH_COLUMN])
        return set(rows.column(BATCH_COLUMN).to_pylist())

    return read


@dataclass
class Episode:
    """One batch seen in one kind of disagreement, over consecutive polls."""

    batch_id: str
    kind: Kind
    label: str
    first_seen: float  # (time.monotonic() at the start of the poll)
    last_seen: float
    cleared: float | None = None  # the start of the first poll that no longer saw it
    polls: int = 1

    @property
    def seen_for(self) -> float:
        """How long polls kept seeing it (a lower bound of how long it lasted)."""
        return self.last_seen - self.first_seen

    @property
    def gone_within(self) -> float | None:
        """From the first poll that saw it to the first that no longer did (an upper bound,
        but for the poll before the first that saw it); None if it never cleared."""
        return None if self.cleared is None else self.cleared - self.first_seen


@dataclass
class VisibilityReport:
    """What the poller saw."""

    polls: int
    seconds: float
    poll_seconds: list[float]
    episodes: list[Episode]
    errors: list[str]

    def of_kind(self, kind: Kind) -> list[Episode]:
        return [e for e in self.episodes if e.kind == kind]

    def lines(self) -> list[str]:
        """For people: the polls, then each kind's episodes and how long they lasted."""
        period = statistics.median(self.poll_seconds) if self.poll_seconds else 0.0
        lines = [
            f"{self.polls} polls in {self.seconds:.1f} s (median poll {period * 1000:.0f} ms), "
            f"{len(self.errors)} failed reads"
        ]
        for kind in ("rows without quarantine", "quarantine without rows"):
            found = self.of_kind(kind)
            if not found:
                lines.append(f"  {kind}: never seen")
                continue
            lines.append(f"  {kind}: {len(found)} batch(es)")
            for episode in found:
                gone = episode.gone_within
                lines.append(
                    f"    {episode.batch_id} [{episode.label}]: seen by {episode.polls} "
                    f"poll(s) over {episode.seen_for * 1000:.0f} ms, "
                    + ("never cleared" if gone is None else f"gone within {gone * 1000:.0f} ms")
                )
        lines += [f"  read failed: {error}" for error in self.errors[:5]]
        return lines


@dataclass
class VisibilityPoller:
    """Polls ``rows`` (the table's batch ids) and ``quarantine`` (the quarantine table's) in
    a thread from :meth:`start` to :meth:`stop`, which returns what it saw."""

    rows: Reader
    quarantine: Reader
    label: str = ""
    interval: float = 0.01  # between polls (the rest of the machine runs the ingests)
    _open: dict[tuple[str, Kind], Episode] = field(default_factory=dict)
    _closed: list[Episode] = field(default_factory=list)
    _errors: list[str] = field(default_factory=list)
    _poll_seconds: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started: float = 0.0
    _last_poll: float = 0.0  # the start of the last poll that ended

    def mark(self, label: str) -> None:
        """Label the episodes first seen from now on (e.g. ``killed at publish.after_rename``)."""
        self.label = label

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until a poll that started after this call has ended: the tables as they are
        now have been seen at least once."""
        from .waiting import wait_until

        now = time.monotonic()
        wait_until(lambda: self._last_poll > now, timeout, 0.01, "a poll of both tables")

    def start(self) -> VisibilityPoller:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="visibility-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> VisibilityReport:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        seconds = time.monotonic() - self._started
        episodes = sorted([*self._closed, *self._open.values()], key=lambda e: e.first_seen)
        polls = len(self._poll_seconds)
        return VisibilityReport(polls, seconds, list(self._poll_seconds), episodes, self._errors)

    def poll(self) -> None:
        """One poll: the table, the quarantine table, the table again."""
        started = time.monotonic()
        try:
            before, bad, after = self.rows(), self.quarantine(), self.rows()
        except Exception as exc:  # a reader's failure is a finding, not the end of the poll
            self._errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)
            return
        self._poll_seconds.append(time.monotonic() - started)
        self._record(started, before, bad, after)
        self._last_poll = started

    def _record(self, started: float, before: set[str], bad: set[str], after: set[str]) -> None:
        seen: set[tuple[str, Kind]] = {(b, "rows without quarantine") for b in before - bad}
        seen |= {(b, "quarantine without rows") for b in bad - after}
        for key in seen:
            episode = self._open.get(key)
            if episode is None:
                self._open[key] = Episode(key[0], key[1], self.label, started, started)
            else:
                episode.last_seen, episode.polls = started, episode.polls + 1
        for key in set(self._open) - seen:
            episode = self._open.pop(key)
            episode.cleared = started
            self._closed.append(episode)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()


def kill_loop(
    spark: Any,
    sink: str,
    next_batch: Callable[[], BatchSpec],
    points: list[str],
    poller: VisibilityPoller,
    **options: Any,
) -> list[str]:
    """For each failpoint of ``points``: an ingest of the batch ``next_batch()`` sends and
    plans, in a child process SIGKILLed at that point (:func:`sluice.testing.crash.run_child`),
    then, once ``poller`` has seen what the crash left, its rerun in this process; ``poller``
    labelled with where each step is. Returns the batch ids, in order."""
    from ..spark import ingest
    from .crash import run_child

    batches = []
    for point in points:
        spec = next_batch()
        batches.append(spec.batch_id)
        poller.mark(f"ingest killed at {point}")
        code, stderr = run_child(spark, {"spec": spec.to_dict(), "sink": sink, **options}, point)
        if code != -9:
            raise RuntimeError(f"the ingest did not die at {point} ({code}): {stderr[-2000:]}")
        poller.settle()  # what the crash left has been seen
        poller.mark(f"rerun after {point}")
        ingest(spark, spec, sink, **options)
    poller.mark("after the loop")
    poller.settle()
    return batches
