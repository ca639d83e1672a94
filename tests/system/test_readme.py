"""Every code block of README.md, run as written, in README order, as a new user would.

The session is one terminal (``readme_blocks.Session``): ``export`` and ``cd`` carry from one
block to the next. It starts in a fresh working directory that looks like the root of a clone
(a symlink to each top-level entry of the repository, so ``./core``, ``dags_examples/``,
``Makefile`` are there, while everything the blocks write lands in the temporary directory),
with a fresh ``HOME``, ``AIRFLOW_HOME``, ``DAGSTER_HOME`` and ``SLUICE_HOME``, nothing of the
test run's own Airflow, Dagster, Spark or Sluice settings, and the workspace venv's ``bin``
first on ``PATH``: what ``source .venv/bin/activate`` after ``uv sync`` gives. (Kept, as they
change how fast the JVMs start and run, not what they do: the machine's cache of Spark's
classes, ``SLUICE_CACHE_DIR``, and ``make test``'s ``SPARK_SUBMIT_OPTS``.)

``pip install ./core ./providers/...`` is not run against the shared venv (it would replace
its editable installs with copies, under other running tests, and needs the network). A
``pip`` placed first on ``PATH`` checks instead that each path is a project of this clone and
that the venv has that project installed from exactly that path; it refuses anything else.

Bash blocks run with ``bash`` (``set -eo pipefail``: any failing command fails the test),
python blocks with the venv's ``python``, the Airflow DAG is saved where the text says and run
by the real ``airflow dags test``, the Dagster Definitions are loaded by the real ``dagster``
CLI and ``dagster dev`` runs until its sensor's run has written the batch, then gets Ctrl-C
and must stop with all its child processes. The brokers are the README's own
(``sluice brokers up`` on the fixed ports the snippets use), stopped at the end with
``sluice brokers down``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sluice.spark.class_archive import CACHE_ENV, cache_dir

from .readme_blocks import Block, Session, clean_environment, parse, running, write_pip_shim

pytestmark = [pytest.mark.kafka, pytest.mark.mqtt]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
#: The fixed ports of the README: Kafka, MQTT, and the Dagster UI of ``dagster dev``.
PORTS = (19092, 11883, 3000)
BLOCK_TIMEOUT = 420.0


def blocks() -> list[Block]:
    return parse(README.read_text())


def test_every_block_is_tagged_and_runnable() -> None:
    found = blocks()
    langs = {b.lang for b in found}
    assert {"bash", "python"} <= langs, langs
    assert any(b.directive == "save-as" for b in found), "the DAG and Definitions files"
    assert any(b.directive == "until" for b in found), "dagster dev"


def clone_like(folder: Path) -> Path:
    """A directory that looks like the root of a fresh clone (see the module docstring)."""
    folder.mkdir()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for top in sorted({path.split("/", 1)[0] for path in tracked}):
        (folder / top).symlink_to(ROOT / top)
    return folder


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def new_user(tmp_path: Path) -> Session:
    homes = {name: tmp_path / name for name in ("home", "airflow", "dagster", "sluice")}
    for home in homes.values():
        home.mkdir()
    scratch = tmp_path / "scratch"
    write_pip_shim(scratch / "bin", sys.executable)
    env = clean_environment(os.environ)
    env.update(
        {
            "HOME": str(homes["home"]),
            "AIRFLOW_HOME": str(homes["airflow"]),
            "DAGSTER_HOME": str(homes["dagster"]),
            "SLUICE_HOME": str(homes["sluice"]),
            # The machine's class archive of Spark's classes, not one of its own: a new HOME
            # would have its first JVM write a new one (about 20 s of CPU on the test run,
            # for what tests/integration/spark/test_class_archive.py already covers).
            CACHE_ENV: str(cache_dir()),
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "PATH": os.pathsep.join(
                [str(scratch / "bin"), str(VENV_BIN), "/usr/sbin", env.get("PATH", "")]
            ),
        }
    )
    if "SPARK_SUBMIT_OPTS" in os.environ:  # make test's JIT setting: how fast, not what happens
        env["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]
    return Session(cwd=clone_like(tmp_path / "clone"), env=env, scratch=scratch)


def brokers_down(session: Session) -> None:
    """``sluice brokers down``, then check that no broker it recorded still runs."""
    sluice = shutil.which("sluice", path=session.env["PATH"]) or "sluice"
    state = subprocess.run(
        [sluice, "brokers", "status", "--json"],
        env=session.env,
        capture_output=True,
        text=True,
        check=False,
    )
    pids = [b["pid"] for b in json.loads(state.stdout or "{}").get("brokers", [])]
    subprocess.run([sluice, "brokers", "down"], env=session.env, check=False, timeout=60)
    left = [pid for pid in pids if running(pid)]
    assert not left, f"brokers still running after 'sluice brokers down': {left}"


@pytest.mark.timeout(1500)
def test_readme_runs_as_written(tmp_path: Path) -> None:
    busy = [port for port in PORTS if not port_free(port)]
    if busy:
        pytest.fail(f"the README's fixed ports {busy} are taken on 127.0.0.1: free them first")
    session = new_user(tmp_path)
    try:
        for block in blocks():
            started = time.monotonic()
            session.run(block, BLOCK_TIMEOUT)
            print(f"{block.name}: {time.monotonic() - started:.1f} s")
    finally:
        brokers_down(session)
