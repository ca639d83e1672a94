"""Airflow for the tests: a private AIRFLOW_HOME (sqlite DB, the example DAGs folder and a
folder for DAGs the tests write), set up
before Airflow is first imported (Airflow reads its configuration at import).

The conftest of every test directory that imports Airflow calls :func:`configure` at module
level; pytest loads a conftest before the test modules beside it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = ROOT / "dags_examples" / "airflow"
_MARK = "SLUICE_TEST_AIRFLOW_HOME"
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
_migrated: list[Path] = []


def configure() -> Path:
    """Point Airflow at a fresh temporary home, once per process; return it."""
    if os.environ.get(_MARK):
        return Path(os.environ[_MARK])
    if "airflow" in sys.modules:
        raise RuntimeError(
            "Airflow was imported before tests/airflow_env.configure(): its settings would "
            "point at the wrong AIRFLOW_HOME. Call configure() in a conftest."
        )
    home = Path(tempfile.mkdtemp(prefix="sluice-airflow-"))
    atexit.register(shutil.rmtree, home, True)
    (home / "test_dags").mkdir()
    bundles = [
        {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
        {
            "name": "sluice-tests",
            "classpath": LOCAL_BUNDLE,
            "kwargs": {"path": str(home / "test_dags")},
        },
    ]
    os.environ.update(
        {
            _MARK: str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
    )
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.append(str(DAGS_FOLDER))
    return home


def test_dags_folder() -> Path:
    """A second DAG bundle, for DAGs a test writes (``dag.test()`` needs the file in a bundle)."""
    return configure() / "test_dags"


def airflow_command(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``airflow ARGS`` with this Python, its output captured (in this process's environment
    unless ``env`` is given); the caller checks its return code."""
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=None if env is None else dict(env),
    )


def migrate_db() -> None:
    """``airflow db migrate`` on the test home, once per process (~3 s)."""
    home = configure()
    if home in _migrated:
        return
    done = airflow_command("db", "migrate")
    if done.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{done.stdout}\n{done.stderr}")
    _migrated.append(home)
