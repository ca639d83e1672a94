"""The README's pip lines give a venv where pip check passes and everything the quickstarts
use is there (issue 25: `sluice brokers up` lacked noida-db, `dagster dev` lacked
dagster-webserver, and installing it afterwards broke dagster-pyspark's pin).

The README runs both quickstarts in one terminal, so one venv gets both lines, and every
other install line of the README and the docs (the extras: formats, iceberg, delta...) too;
each quickstart line's own closure is checked to hold what its quickstart uses. Offline, from
a wheelhouse of the workspace's locked versions: see :mod:`.pip_path`. What pip would choose
from the index for an extra installed after a quickstart is checked on the metadata: none of
our requirements may admit a version that the quickstart's packages exclude (issue 37:
`[formats]` after the Dagster quickstart upgraded protobuf to 7 and broke dagster's pin)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.system.pip_path import (
    closure,
    fresh_venv,
    install_lines,
    looser_than_the_others,
    pip,
    roots_of,
    wheelhouse,
)

ROOT = Path(__file__).resolve().parents[2]
#: pip install ./core './providers/airflow[quickstart]'
AIRFLOW = [("sluice-core", ()), ("sluice-airflow", ("quickstart",))]
#: pip install ./core './providers/dagster[quickstart]'
DAGSTER = [("sluice-core", ()), ("sluice-dagster", ("quickstart",))]


def _documented_lines() -> list[list[str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return install_lines(page.read_text() for page in pages)


LINES = _documented_lines()
EXTRAS = [line for line in LINES if not any("[quickstart]" in word for word in line)]


def test_the_install_lines_are_the_quickstarts_and_extras_from_the_clone() -> None:
    """One install style: Sluice's packages from the clone (they are not on an index)."""
    quickstarts = [roots_of(line) for line in LINES if line not in EXTRAS]
    # the README and the install page repeat the quickstart pages' lines, word for word
    assert AIRFLOW in quickstarts and DAGSTER in quickstarts
    assert all(line in (AIRFLOW, DAGSTER) for line in quickstarts), quickstarts
    assert EXTRAS, "the docs name the extras' install lines"
    by_name = [w for line in LINES for w in line if w.startswith("sluice")]
    assert by_name == [], f"install Sluice from the clone (./core[extra]), not {by_name}"


@pytest.mark.parametrize("quickstart", [AIRFLOW, DAGSTER], ids=["airflow", "dagster"])
def test_no_extra_installed_after_a_quickstart_can_upgrade_past_its_pins(
    quickstart: list[tuple[str, tuple[str, ...]]],
) -> None:
    problems = {
        " ".join(line): found
        for line in EXTRAS
        if (found := looser_than_the_others(quickstart, roots_of(line)))
    }
    assert problems == {}


def test_the_readme_pip_lines_install_everything_the_quickstarts_use(tmp_path: Path) -> None:
    # `sluice brokers up` (noida-db, the CLI), `airflow`, `dagster dev` (the webserver)
    assert {"noida-db", "typer", "apache-airflow"} <= set(closure(AIRFLOW))
    assert {"noida-db", "typer", "dagster-webserver", "dagster-pyspark"} <= set(closure(DAGSTER))
    started = time.monotonic()
    extras = [root for line in EXTRAS for root in roots_of(line)]
    wheels = wheelhouse([*AIRFLOW, *DAGSTER, *extras], tmp_path / "wheels")
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
