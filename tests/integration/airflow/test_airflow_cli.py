"""The provider as Airflow's own command line sees it: listed, and its connections tested."""

from __future__ import annotations

import json
import os
import subprocess

from sluice.testing import free_port
from sluice.testing.plugin import Broker
from tests.airflow_env import airflow_command

from .conftest import SetConnection


def airflow(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
    return airflow_command(*args, env=environment, timeout=180)


def test_airflow_providers_list_shows_sluice(airflow_db: None) -> None:
    listed = airflow("providers", "list", "--output", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    packages = {p["package_name"] for p in json.loads(listed.stdout)}
    assert "sluice-airflow" in packages


def test_airflow_connections_test_really_connects(
    airflow_db: None, noida_broker: Broker, set_connection: SetConnection
) -> None:
    set_connection("sluice_up", "sluice_kafka", noida_broker.host, noida_broker.port)
    set_connection(
        "sluice_down",
        "sluice_kafka",
        "127.0.0.1",
        free_port(),
        password="hunter2-secret",
        login="user",
        extra={"connection.protocol": "sasl_plaintext"},
    )

    up = airflow("connections", "test", "sluice_up")
    down = airflow("connections", "test", "sluice_down")

    assert up.returncode == 0 and "Connection success!" in up.stdout, up.stdout + up.stderr
    assert "Connection success!" not in down.stdout
    assert "Connection failed" in down.stdout + down.stderr
    assert "hunter2-secret" not in down.stdout + down.stderr
