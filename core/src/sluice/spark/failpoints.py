"""Named crash points in the ingest, armed only by tests (see docs/architecture.md, I4).

Every step of :func:`sluice.spark.ingest` that changes something outside the process passes
through :func:`failpoint` with one of the names in :data:`FAILPOINTS`. Unarmed, a failpoint is
a lookup in an empty frozenset. A test arms points through the environment of the process it
starts::

    SLUICE_FAILPOINTS="publish.after_rename"          # SIGKILL the process there
    SLUICE_FAILPOINTS="commit.before=raise"           # raise FailpointError instead
    SLUICE_FAILPOINTS="publish.after_rename@3"        # at its third pass (a routed batch
                                                      # publishes to several sinks)

or in-process with :func:`armed`, which also takes a function to call there: how the nemesis
suite (:mod:`sluice.testing.nemesis`) makes the environment fail at a step (retention moving,
a topic recreated, a broker restarted, a second run starting). The crash matrix
(tests/integration/spark/test_crash_matrix.py) kills an ingest at each point, reruns it and
checks the sink with ``sluice audit``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = [
    "FAILPOINTS",
    "MAINTENANCE_FAILPOINTS",
    "OBJECT_STORE_FAILPOINTS",
    "ROUTE_FAILPOINTS",
    "TASK_FAILPOINTS",
    "FailpointError",
    "armed",
    "failpoint",
    "is_armed",
]

ENVIRONMENT_VARIABLE = "SLUICE_FAILPOINTS"

#: Every failpoint, in the order an ingest passes them.
FAILPOINTS = (
    "read.before",  # what is left is planned, nothing read yet
    "read.after_first_chunk",  # messages read, nothing written yet
    "stage.after_write",  # the batch is in staging
    "publish.after_intent",  # the intent to publish is recorded, nothing visible
    "publish.after_rename",  # the batch is visible and recorded, the stream state is not updated
    "publish.after_state",  # the stream state is updated, the intent not yet removed
    "dead_letters.after_send",  # dead letters sent, not yet marked as sent
    "commit.before",  # published, nothing committed or acknowledged
    "commit.midway",  # MQTT: some messages acknowledged, not all
    "commit.after",  # committed or acknowledged
)


#: Steps only the Parquet sink on S3 passes (:mod:`.sinks.parquet_s3`), after its commit.
OBJECT_STORE_FAILPOINTS = (
    "publish.midway",  # the batch's quarantine object is complete, its good rows' are not
)

#: Steps of a routed batch (:mod:`.routed`), which publishes each route table's slice (the
#: ``publish.*`` points, once per table) before the batch on the ingest's own sink.
ROUTE_FAILPOINTS = (
    "routes.after_table",  # a table's slice is published, the next tables' are not
    "routes.after_tables",  # every table holds its slice, the ingest's sink not the batch
)

#: Faults inside Spark tasks rather than at a step of the driver: ``task.lost`` makes the
#: first writing task of the next write job die (``os._exit``) after writing its files and
#: before reporting them, as an executor lost at that moment would.
TASK_FAILPOINTS = ("task.lost",)

#: Steps of ``sluice compact`` and ``sluice expire`` (:mod:`sluice.maintenance`), in order.
MAINTENANCE_FAILPOINTS = (
    "compact.before_commit",  # the merged files are written (Delta: not yet), nothing committed
    "compact.after_intent",  # Parquet: the intent is recorded, the merged directory not in place
    "compact.after_commit",  # committed (Iceberg: the snapshot; Parquet: the merged directory;
    # Delta: the table's optimize commit, before its checkpoint)
    "compact.after_supersede",  # Parquet: the compacted directories are moved aside
    "compact.after_checkpoint",  # Delta: the table's checkpoint is written, the quarantine's not
    "compact.after_quarantine_commit",  # Delta: the quarantine table's optimize is committed
    "expire.after_commit",  # Iceberg: snapshots expired, their files not yet deleted
)


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with ``=raise``."""


def _parse(text: str) -> dict[str, str]:
    points: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, action = item.partition("=")
        name, at, nth = name.partition("@")
        known = (
            FAILPOINTS
            + OBJECT_STORE_FAILPOINTS
            + ROUTE_FAILPOINTS
            + TASK_FAILPOINTS
            + MAINTENANCE_FAILPOINTS
        )
        if name not in known:
            raise ValueError(
                f"{ENVIRONMENT_VARIABLE} names an unknown failpoint {name!r}; "
                f"known: {', '.join(known)}"
            )
        if action not in ("", "kill", "raise"):
            raise ValueError(f"failpoint {name!r}: action must be 'kill' or 'raise'")
        if at and not (nth.isdigit() and int(nth) >= 1):
            raise ValueError(f"failpoint {name!r}: @{nth} must be a pass number from 1")
        points[name] = action or "kill"
        if at:
            _nth[name] = int(nth)
    return points


Action = str | Callable[[], None]

#: Failpoints armed for their N-th pass only (``name@N``), and each one's passes so far.
_nth: dict[str, int] = {}
_passes: dict[str, int] = {}
_armed: dict[str, Action] = dict(_parse(os.environ.get(ENVIRONMENT_VARIABLE, "")))


def is_armed(name: str) -> bool:
    """Whether a test armed ``name`` (for faults that happen elsewhere than here)."""
    return bool(_armed) and name in _armed


def failpoint(name: str) -> None:
    """Crash here (or run the function armed here) if a test armed ``name``; otherwise do
    nothing."""
    if _armed and name in _armed:
        if name in _nth:
            _passes[name] = _passes.get(name, 0) + 1
            if _passes[name] != _nth[name]:
                return
        action = _armed[name]
        if callable(action):
            action()
        elif action == "raise":
            raise FailpointError(f"failpoint {name} was armed")
        else:
            os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def armed(name: str, action: Action = "raise") -> Iterator[None]:
    """Arm ``name`` in this process for the duration of the block (tests): ``kill``,
    ``raise``, or a function to call there."""
    global _armed
    previous, counted = _armed, (dict(_nth), dict(_passes))
    if callable(action):
        _parse(name)  # the name must be known
        _armed = {**previous, name.partition("@")[0]: action}
    else:
        _armed = {**previous, **_parse(f"{name}={action}")}
    _passes.pop(name.partition("@")[0], None)
    try:
        yield
    finally:
        _armed = previous
        _nth.clear()
        _nth.update(counted[0])
        _passes.clear()
        _passes.update(counted[1])
