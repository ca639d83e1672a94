"""System tests run whole deployments (schedulers, daemons, Spark clusters, README sessions):
each gets a longer pytest-timeout than the suite's 300 s, so a slow machine fails them on
their own waits, which name what did not happen, not on the watchdog. A test's own
``@pytest.mark.timeout`` still wins."""

from __future__ import annotations

import pytest

SYSTEM_TIMEOUT = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/system/" in item.nodeid and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SYSTEM_TIMEOUT))
