"""What the nemesis tests share: a scenario run on the session's Spark and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.testing.nemesis import Outcome, Scenario, run_scenario


def assert_survives(spark: Any, scenario: Scenario, workdir: Path) -> Outcome:
    """Every fault of the scenario's transport and sink was injected, and the oracle passed
    (the report names the seed that replays it)."""
    outcome = run_scenario(spark, scenario, workdir)
    injected = {entry.split("@")[0] for entry in outcome.injected}
    expected = {f.name for f in scenario.faults()}
    expected = {f for f in expected if not scenario.only or f in scenario.only}
    assert injected == expected, outcome.report()
    assert outcome.ok, outcome.report()
    assert outcome.published > 0 and outcome.held > 0, outcome.report()
    return outcome
