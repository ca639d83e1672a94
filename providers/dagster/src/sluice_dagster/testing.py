"""Test utilities shipped beside the library: evaluate a sensor as the daemon does.

::

    from sluice_dagster.testing import SensorTicker

    ticker = SensorTicker.from_definitions(defs, "orders_sensor", DagsterInstance.ephemeral())
    request = ticker.request()  # the one run request of the next tick
    job.execute_in_process(run_config=request.run_config, tags=request.tags)

Used by Sluice's own tests and by ``make demo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import DagsterInstance, Definitions, RunRequest, SensorDefinition, build_sensor_context
from dagster._core.definitions.sensor_definition import SensorExecutionData

__all__ = ["SensorTicker"]


class SensorTicker:
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
