"""The README's pip lines give a venv where pip check passes and everything the quickstarts
use is there (issue 25: `sluice brokers up` lacked noida-db, `dagster dev` lacked
dagster-webserver, and installing it afterwards broke dagster-pyspark's pin).

The README runs both quickstarts in one terminal, so one venv gets both lines; each line's
own closure is checked to hold what its quickstart uses. Offline, from a wheelhouse of the
workspace's locked versions: see :mod:`.pip_path`."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.system.pip_path import closure, fresh_venv, pip, wheelhouse

#: pip install ./core './providers/airflow[quickstart]'
AIRFLOW = [("sluice-core", ()), ("sluice-airflow", ("quickstart",))]
#: pip install ./core './providers/dagster[quickstart]'
DAGSTER = [("sluice-core", ()), ("sluice-dagster", ("quickstart",))]


def test_the_readme_pip_lines_install_everything_the_quickstarts_use(tmp_path: Path) -> None:
    # `sluice brokers up` (noida-db, the CLI), `airflow`, `dagster dev` (the webserver)
    assert {"noida-db", "typer", "apache-airflow"} <= set(closure(AIRFLOW))
    assert {"noida-db", "typer", "dagster-webserver", "dagster-pyspark"} <= set(closure(DAGSTER))
    started = time.monotonic()
    wheels = wheelhouse([*AIRFLOW, *DAGSTER], tmp_path / "wheels")
    python = fresh_venv(tmp_path / "venv")
    installed = pip(python, "install", "--no-deps", "--no-index", *map(str, wheels))
    assert installed.returncode == 0, installed.stderr[-3000:]
    checked = pip(python, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr  # the pins agree
    for command in (
        [str(python), "-c", "import noida_db, dagster_webserver, sluice_airflow, sluice_dagster"],
        [str(python.parent / "sluice"), "brokers", "--help"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    print(
        f"pip path: {len(wheels)} wheels installed and checked "
        f"in {time.monotonic() - started:.0f} s"
    )
