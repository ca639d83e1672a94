"""The MQTT flow: the Dagster sensor ticked as the daemon would, and the job it asks for."""

from __future__ import annotations

import json
import os
import runpy
import time
from pathlib import Path
from typing import Any

from .settings import (
    DAGSTER_DEFS,
    DAGSTER_JOB,
    DAGSTER_SENSOR,
    MQTT_TOPIC,
    NOTHING_WAITING,
    TICK_PAUSE_S,
    TICKS,
    DemoError,
)


class DagsterMqtt:
    """The Dagster example Definitions: the sensor ``mqtt_readings_sensor`` ticked as the
    daemon would (keeping its cursor), and each run it asks for executed in process on a
    real (ephemeral) instance, where the sensor looks its runs up."""

    def __init__(self, mqtt_url: str, output: Path, schema: str) -> None:
        os.environ.update(
            {
                "SLUICE_EXAMPLE_MQTT_URL": mqtt_url,
                "SLUICE_EXAMPLE_MQTT_TOPIC": MQTT_TOPIC,
                "SLUICE_EXAMPLE_SINK": str(output),
            }
        )
        self.schema = schema
        self.instance: Any = None
        self.ticker: Any = None
        self.defs: Any = None

    def load(self) -> None:
        from dagster import DagsterInstance

        from sluice_dagster.testing import SensorTicker

        # Run here, not at import: the Definitions read the environment __init__ set.
        self.defs = runpy.run_path(str(DAGSTER_DEFS))["defs"]
        self.instance = DagsterInstance.ephemeral()
        self.ticker = SensorTicker.from_definitions(self.defs, DAGSTER_SENSOR, self.instance)

    def tick(self) -> Any:
        """One sensor evaluation: a run request, or None with the reason it skipped."""
        data = self.ticker.tick()
        requests = list(data.run_requests or [])
        if len(requests) > 1:
            raise DemoError(f"the sensor asked for {len(requests)} runs at once")
        return (requests[0], None) if requests else (None, data.skip_message)

    def open_session(self, say: Any) -> str:
        """The first tick: it connects as the persistent session (which from then on keeps
        what is published for it) and finds nothing waiting."""
        for attempt in range(1, TICKS + 1):
            request, reason = self.tick()
            if request is not None:
                raise DemoError("the Dagster sensor found readings before any were published")
            if NOTHING_WAITING in (reason or ""):
                return str(reason)
            say(f"tick {attempt} skipped: {reason}")
            time.sleep(TICK_PAUSE_S)
        raise DemoError(f"the Dagster sensor could not open its MQTT session: {reason}")

    def next_request(self, say: Any) -> Any:
        """Tick until the sensor asks for a run, as the daemon would (every 30 s by default;
        here a few seconds apart): a tick can skip when the broker is slow to answer."""
        for attempt in range(1, TICKS + 1):
            request, reason = self.tick()
            if request is not None:
                return request
            say(f"tick {attempt} skipped: {reason}")
            time.sleep(TICK_PAUSE_S)
        raise DemoError(f"the Dagster sensor requested no run in {TICKS} ticks: {reason}")

    def run(self, request: Any) -> dict[str, Any]:
        job = self.defs.resolve_job_def(DAGSTER_JOB)
        run_config = json.loads(json.dumps(request.run_config))
        [op_name] = run_config["ops"]
        # dagster_defs.py's job is defined for another payload schema: parse the readings'
        run_config["ops"][op_name]["config"]["schema_ddl"] = self.schema
        result = job.execute_in_process(
            run_config=run_config, instance=self.instance, tags=request.tags
        )
        if not result.success:
            raise DemoError(f"the Dagster run {result.run_id} failed")
        output: dict[str, Any] = result.output_for_node(op_name)
        return output

    def close(self) -> None:
        if self.instance is not None:
            self.instance.dispose()
