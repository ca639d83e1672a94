"""SIGTERM for a trigger that ``airflow dags test`` runs inline.

``dag.test()`` runs a deferred task's trigger in its own process, still under the SIGTERM
handler that Airflow's task runner installed for the task (it calls the task's ``on_kill`` and
returns), so SIGTERM no longer stops the command while the trigger waits; Ctrl-C does. While a
trigger runs under that handler, and only then (a triggerer has its own), SIGTERM stops it as
Ctrl-C does.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["sigterm_stops_inline_run"]

TASK_RUNNER = "airflow.sdk.execution_time.task_runner"


@contextmanager
def sigterm_stops_inline_run() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    inline = (
        threading.current_thread() is threading.main_thread()
        and getattr(previous, "__module__", None) == TASK_RUNNER
    )
    if not inline:
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
