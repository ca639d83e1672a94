"""The example DAGs import in a plain Airflow whose dags folder is ``dags_examples/airflow``
(issue 10, item 12): a fresh AIRFLOW_HOME, nothing on ``sys.path`` but what Airflow puts
there, and Airflow's own command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from sluice.brokers import BrokerProcess
from sluice.testing import wait_until
from sluice.testing.topics import create_kafka_topic
from tests.airflow_env import DAGS_FOLDER, airflow_command

EXAMPLES = {
    "kafka_event_driven",
    "kafka_to_parquet",
    "mqtt_to_parquet",
    "kafka_scheduled",
    "mqtt_scheduled",
}


def plain_environment(home: Path) -> dict[str, str]:
    """This process's environment without its Airflow settings, the test home and the examples'
    variables; Airflow in ``home`` with ``dags_examples/airflow`` as its dags folder."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "SLUICE_EXAMPLE_", "SLUICE_TEST_"))
        and key != "PYTHONPATH"
    }
    return {
        **kept,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
    }


def airflow(home: Path, *args: str) -> Any:
    """``airflow ARGS`` in ``home`` (run from there, so the repository is not importable by
    accident); its JSON output (Airflow prints warnings on stdout before it)."""
    done = airflow_command(*args, env=plain_environment(home), cwd=home, timeout=240)
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    if "-o" not in args:
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert lines, f"no JSON from airflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1])


def test_the_example_dags_import_in_a_plain_airflow(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    home.mkdir()
    airflow(home, "db", "migrate")
    errors = airflow(home, "dags", "list-import-errors", "-l", "-o", "json")
    assert errors == [], "\n".join(f"{e['filepath']}:\n{e['error']}" for e in errors)
    listed = airflow(home, "dags", "list", "-l", "-o", "json")
    assert {dag["dag_id"] for dag in listed} == EXAMPLES
    assert {Path(dag["fileloc"]).parent for dag in listed} == {DAGS_FOLDER}


def test_airflow_dags_test_stops_on_sigterm_while_the_trigger_waits(
    tmp_path: Path, noida_broker: BrokerProcess, unique_name: str
) -> None:
    """Nothing waits, so the sensor's first poke finds nothing, it defers, and its trigger
    runs inline and logs that it waits; SIGTERM then stops `airflow dags test` as Ctrl-C does
    (Airflow's task runner handler alone would only call the sensor's on_kill)."""
    home = tmp_path / "airflow"
    home.mkdir()
    airflow(home, "db", "migrate")
    create_kafka_topic(noida_broker.bootstrap, unique_name, 1)  # a missing topic is an error
    host, port = noida_broker.bootstrap.rsplit(":", 1)
    env = {
        **plain_environment(home),
        "AIRFLOW_CONN_SLUICE_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "sluice_kafka", "host": host, "port": int(port)}
        ),
        "SLUICE_EXAMPLE_KAFKA_TOPIC": unique_name,
        "SLUICE_EXAMPLE_SINK": str(tmp_path / "data"),
    }
    log = tmp_path / "dags-test.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", "dags", "test", "kafka_to_parquet"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=home,
            env=env,
        )
    try:
        wait_until(
            lambda: (
                # the trigger's line, not the sensor's first poke
                f"waiting: 0 of 1 messages on {unique_name}"
                in log.read_text().partition("running trigger in line")[2]
                or proc.poll() is not None
            ),
            timeout=180,
            message="the trigger to wait",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise AssertionError(f"SIGTERM did not stop it:\n{log.read_text()[-3000:]}")
    assert proc.returncode != 0 and "KeyboardInterrupt: SIGTERM" in log.read_text()
