"""Test utilities shipped beside the library: evaluate a sensor or a schedule as the daemon
does.

::

    from sluice_dagster.testing import ScheduleTicker, SensorTicker

    ticker = SensorTicker.from_definitions(defs, "orders_sensor", DagsterInstance.ephemeral())
    request = ticker.request()  # the one run request of the next tick
    job.execute_in_process(run_config=request.run_config, tags=request.tags)
    with instance_for_test() as persistent:  # a schedule looks its runs up in a persistent one
        ScheduleTicker.from_definitions(defs, "orders_hourly", persistent).skip()  # its reason

Used by Sluice's own tests and by ``make demo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    DagsterInstance,
    Definitions,
    RunRequest,
    ScheduleDefinition,
    SensorDefinition,
    build_schedule_context,
    build_sensor_context,
)
from dagster._core.definitions.schedule_definition import ScheduleExecutionData
from dagster._core.definitions.sensor_definition import SensorExecutionData

__all__ = ["ScheduleTicker", "SensorTicker"]


class _Ticks:
    """The one run request, or the skip message, of a tick (:meth:`tick`)."""

    def tick(self) -> SensorExecutionData | ScheduleExecutionData:
        raise NotImplementedError

    def request(self) -> RunRequest:
        """The one run request of the next tick; AssertionError with the skip message if the
        tick skips, or if it asks for more than one run."""
        data = self.tick()
        requests = list(data.run_requests or [])
        if data.skip_message is not None or len(requests) != 1:
            raise AssertionError(
                f"expected one run request, got {len(requests)} "
                f"(skip message: {data.skip_message!r})"
            )
        return requests[0]

    def skip(self) -> str:
        """The skip message of the next tick; AssertionError if it requests a run."""
        data = self.tick()
        if data.run_requests:
            raise AssertionError(f"the tick requested {len(data.run_requests)} run(s)")
        if not data.skip_message:
            raise AssertionError("the tick neither skipped nor requested a run")
        return data.skip_message


class SensorTicker(_Ticks):
    """Evaluates a sensor as the daemon does (``evaluate_tick``), keeping its cursor between
    ticks. The instance is where the sensor looks up the runs it asked for."""

    def __init__(
        self,
        sensor: SensorDefinition,
        resources: Mapping[str, Any],
        instance: DagsterInstance,
        definitions: Definitions | None = None,
    ) -> None:
        self.sensor, self.resources, self.instance = sensor, dict(resources), instance
        self.definitions = definitions  # an asset sensor needs them to resolve its selection
        self.cursor: str | None = None

    @classmethod
    def from_definitions(
        cls, definitions: Definitions, sensor_name: str, instance: DagsterInstance
    ) -> SensorTicker:
        """The sensor ``sensor_name`` of ``definitions``, with their resources."""
        sensor = definitions.resolve_sensor_def(sensor_name)
        return cls(sensor, definitions.resources or {}, instance, definitions)

    def tick(self) -> SensorExecutionData:
        """One evaluation: its run requests, or its skip message; the cursor moves on."""
        with build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources=self.resources,
            sensor_name=self.sensor.name,
            definitions=self.definitions,
        ) as context:
            data = self.sensor.evaluate_tick(context)
        self.cursor = data.cursor
        return data


class ScheduleTicker(_Ticks):
    """Evaluates a schedule as the daemon does (``evaluate_tick``) at the current time. The
    instance is where the schedule looks up the runs it launched; it must be persistent
    (``dagster.instance_for_test()``): a schedule's context does not take an ephemeral one."""

    def __init__(
        self,
        schedule: ScheduleDefinition,
        resources: Mapping[str, Any],
        instance: DagsterInstance,
        definitions: Definitions | None = None,
    ) -> None:
        if not instance.is_persistent:
            raise ValueError(
                "ScheduleTicker needs a persistent Dagster instance (dagster.instance_for_test()):"
                " a schedule's evaluation context does not take an ephemeral one."
            )
        self.schedule, self.resources, self.instance = schedule, dict(resources), instance
        self.definitions = definitions

    @classmethod
    def from_definitions(
        cls, definitions: Definitions, schedule_name: str, instance: DagsterInstance
    ) -> ScheduleTicker:
        """The schedule ``schedule_name`` of ``definitions``, with their resources."""
        schedule = definitions.resolve_schedule_def(schedule_name)
        return cls(schedule, definitions.resources or {}, instance, definitions)

    def tick(self) -> ScheduleExecutionData:
        """One evaluation: its run request, or its skip message."""
        repository = self.definitions.get_repository_def() if self.definitions else None
        with build_schedule_context(
            instance=self.instance, resources=self.resources, repository_def=repository
        ) as context:
            return self.schedule.evaluate_tick(context)
