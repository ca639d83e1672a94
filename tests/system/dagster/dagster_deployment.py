"""A real Dagster deployment on this machine, for system tests: a code server for a
Definitions file (``dagster code-server start``), and ``dagster-webserver`` and
``dagster-daemon run`` on a workspace that points at it, with a ``DAGSTER_HOME`` of the
test's own. Sharing one code server (as ``dagster dev`` does) loads the code once, and
restarting the daemon does not reload it.

Each process starts in its own process group (its code server and the run workers it
launches are in it too) with SIGINT/SIGTERM reset to their defaults (a process started from
a non-interactive shell inherits them ignored, and Dagster's CLIs then never stop), and is
stopped by its process group id. :meth:`DagsterDeployment.graphql` queries the webserver;
:func:`selector_of` and :func:`runs` find a sensor or schedule and the runs tagged so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from dagster import DagsterInstance

from sluice.testing import free_port, wait_until

BIN = Path(sys.executable).parent

#: The examples' instance settings (telemetry off, as the README says), and the tests' own.
DAGSTER_YAML = (Path(__file__).resolve().parents[3] / "dags_examples" / "dagster.yaml").read_text()
DAGSTER_YAML += "sensors:\n  use_threads: false\n"


REPOSITORIES = """{ repositoriesOrError { __typename ... on RepositoryConnection { nodes {
  name location { name } sensors { name } schedules { name } } } } }"""
START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
  __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""
RUNS = """query($k: String!, $v: String!) { runsOrError(filter: {tags: [{key: $k, value: $v}]})
  { __typename ... on Runs { results { runId status creationTime startTime endTime
    tags { key value } } } } }"""


def _running(process: psutil.Process) -> bool:
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _reset_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass
class Component:
    """One process of the deployment, its log file and how to stop it."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str], cwd: Path) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=dict(env),
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_reset_signals,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the process group, SIGKILL if it has not exited within ``timeout``;
        then every process it had started must be gone (also one that left the group)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the process leads its own group
        try:
            started = psutil.Process(pgid).children(recursive=True)
        except psutil.NoSuchProcess:
            started = []
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # what the group started goes with it
            os.killpg(pgid, signal.SIGKILL)
        _, remaining = psutil.wait_procs(started, timeout=10)
        left = [p for p in remaining if _running(p)]
        if left:
            for p in left:
                p.kill()
            raise RuntimeError(
                f"{self.name}: processes it started outlived it: {[p.pid for p in left]}"
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class DagsterDeployment:
    """Webserver and daemon on ``defs_file`` (see the module docstring)."""

    defs_file: Path
    home: Path
    env: Mapping[str, str]
    cwd: Path
    location: str = "sluice_example"
    port: int = field(default_factory=free_port)
    code_port: int = field(default_factory=free_port)
    code_server: Component = field(init=False)
    webserver: Component = field(init=False)
    daemon: Component = field(init=False)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(DAGSTER_YAML)
        workspace = self.home / "workspace.yaml"
        workspace.write_text(
            "load_from:\n  - grpc_server:\n      host: 127.0.0.1\n"
            f"      port: {self.code_port}\n      location_name: {self.location}\n"
        )
        self.code_server = Component(
            "code-server",
            [
                *(str(BIN / "dagster"), "code-server", "start", "-f", str(self.defs_file)),
                *("-h", "127.0.0.1", "-p", str(self.code_port), "--location-name", self.location),
            ],
            self.home / "code-server.log",
        )
        target = ["-w", str(workspace)]
        self.webserver = Component(
            "webserver",
            [str(BIN / "dagster-webserver"), *target, "-h", "127.0.0.1", "-p", str(self.port)],
            self.home / "webserver.log",
        )
        self.daemon = Component(
            "daemon", [str(BIN / "dagster-daemon"), "run", *target], self.home / "daemon.log"
        )

    @property
    def process_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "DAGSTER_HOME": str(self.home)}

    def start(self, timeout: float = 90.0) -> DagsterDeployment:
        # The instance's SQLite storage is created here, once, before any process opens it:
        # processes creating it at the same moment collide ("table alembic_version already
        # exists") or stamp its schema version twice, and then the daemon refuses to start
        # ("alembic_version has more than one head").
        with DagsterInstance.from_config(str(self.home)):
            pass
        self.code_server.start(self.process_env, self.cwd)
        self.webserver.start(self.process_env, self.cwd)
        try:
            wait_until(self._webserver_up, timeout, 0.5, "the Dagster webserver to answer")
        except TimeoutError:
            raise RuntimeError(f"webserver did not start:\n{self.webserver.log_tail()}") from None
        self.daemon.start(self.process_env, self.cwd)
        return self

    def restart_daemon(self) -> float:
        """Stop the daemon and start it again; returns when (epoch seconds) the old one was
        gone: a tick it began while it shut down is left STARTED, and the new daemon marks
        it SKIPPED without a reason, so a test looks at ticks from then on."""
        self.daemon.stop()
        stopped = time.time()
        self.daemon.start(self.process_env, self.cwd)
        return stopped

    def stop(self) -> None:
        self.daemon.stop()
        self.webserver.stop()
        self.code_server.stop()

    def _webserver_up(self) -> bool:
        if not self.webserver.running():
            raise RuntimeError(f"the webserver exited:\n{self.webserver.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """POST a GraphQL query to the webserver; its ``data`` (errors raise)."""
        body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
        if answer.get("errors"):
            raise RuntimeError(f"GraphQL errors: {answer['errors']}")
        data: dict[str, Any] = answer["data"]
        return data


def wait_for(condition: Any, timeout: float, message: str, *logs: Component) -> Any:
    """:func:`wait_until`, failing with the tails of ``logs`` so a hang can be diagnosed."""
    started = time.monotonic()
    try:
        return wait_until(condition, timeout, 0.5, message)
    except TimeoutError as exc:
        tails = "\n".join(f"--- {c.name} log ---\n{c.log_tail()}" for c in logs)
        waited = time.monotonic() - started
        raise TimeoutError(f"{exc} (after {waited:.0f} s)\n{tails}") from None


def selector_of(deployment: DagsterDeployment, name: str, kind: str) -> dict[str, str] | None:
    """The GraphQL selector of the sensor or schedule ``name`` (``kind``: sensors or
    schedules), once the code location is loaded."""
    data = deployment.graphql(REPOSITORIES)["repositoriesOrError"]
    for repo in data.get("nodes", []):
        if name in [s["name"] for s in repo[kind]]:
            return {
                "repositoryName": repo["name"],
                "repositoryLocationName": repo["location"]["name"],
                ("sensorName" if kind == "sensors" else "scheduleName"): name,
            }
    return None


def runs(deployment: DagsterDeployment, key: str, value: str) -> list[dict[str, Any]]:
    """The runs tagged ``key: value``, newest first."""
    answer = deployment.graphql(RUNS, {"k": key, "v": value})["runsOrError"]
    found: list[dict[str, Any]] = answer["results"]
    return found
