"""ClockTrigger: an AssetWatcher's trigger that fires on a timetable (bench/trigger_latency.py).

Each event carries the moment it was due, and the trigger yields it at that moment. The asset
event's timestamp minus ``due`` is therefore what a real triggerer adds between a trigger's
``yield`` and the event in the database, whatever the trigger watches: a floor under every
trigger's produce-to-event latency. (Airflow 3's trigger runner hands its triggers' events to
the supervisor once per pass of its loop, which sleeps up to a second.)

The triggerer imports it by its module name, ``clock_trigger``: the bench puts this directory
on the triggerer's PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

#: Seconds between two events: not a divisor of the runner's one-second pass, so the events
#: fall on every phase of it.
DEFAULT_PERIOD = 0.77


class ClockTrigger(BaseEventTrigger):
    """Yield ``{"due": t}`` at ``t = start + k * period`` for k = 1, 2, ..."""

    def __init__(self, period: float = DEFAULT_PERIOD) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.period = period

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("clock_trigger.ClockTrigger", {"period": self.period})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        due = time.time()
        while True:
            due += self.period
            await asyncio.sleep(max(0.0, due - time.time()))
            yield TriggerEvent({"due": due})  # type: ignore[no-untyped-call]
