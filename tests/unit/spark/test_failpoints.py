"""Failpoints: named, armed only on purpose, and unknown names refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.spark.failpoints import FAILPOINTS, FailpointError, armed, failpoint


def test_an_unarmed_failpoint_does_nothing() -> None:
    for name in FAILPOINTS:
        failpoint(name)


def test_an_armed_failpoint_raises_in_process() -> None:
    with armed("commit.before"), pytest.raises(FailpointError, match=r"commit\.before"):
        failpoint("commit.before")
    failpoint("commit.before")


def test_an_unknown_failpoint_in_the_environment_is_refused() -> None:
    code = "import sluice.spark.failpoints"
    env = {**os.environ, "SLUICE_FAILPOINTS": "commit.befor"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "unknown failpoint 'commit.befor'" in done.stderr


def test_the_environment_arms_a_kill() -> None:
    code = "from sluice.spark.failpoints import failpoint; failpoint('commit.after'); print('x')"
    env = {**os.environ, "SLUICE_FAILPOINTS": "commit.after"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == -9 and "x" not in done.stdout


def test_a_failpoint_armed_for_its_nth_pass_fires_there_only() -> None:
    """A routed batch passes a sink's publish points once per table: ``@N`` picks one."""
    with armed("routes.after_table@2"):
        failpoint("routes.after_table")
        with pytest.raises(FailpointError, match=r"routes\.after_table"):
            failpoint("routes.after_table")
        failpoint("routes.after_table")
    failpoint("routes.after_table")


@pytest.mark.parametrize("bad", ["routes.after_table@0", "routes.after_table@x"])
def test_a_pass_number_counts_from_one(bad: str) -> None:
    with pytest.raises(ValueError, match="must be a pass number from 1"), armed(bad):
        pass
