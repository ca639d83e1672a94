"""A real Airflow 3 deployment on this machine, for system tests and benchmarks.

:class:`AirflowDeployment` creates a fresh PostgreSQL database (dropped again on close), runs
``airflow db migrate`` and starts ``airflow api-server``, ``scheduler`` (LocalExecutor),
``dag-processor`` and ``triggerer`` as separate processes, or a subset of them. Each runs in
a process group of its own with its output in ``AIRFLOW_HOME/processes/<name>.log``, and is
stopped by its pid and process group (which holds the scheduler's executor workers and the
triggerer's trigger runner). Ports come from the OS.

To look at it: :meth:`~AirflowDeployment.api` (REST API v2; the simple auth manager treats
everyone as admin), :meth:`~AirflowDeployment.sql` (the metadata database directly) and
:meth:`~AirflowDeployment.processes_mentioning` (which processes run a task instance: its id
is in the process titles of the executor worker and the task runner).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg2
from cryptography.fernet import Fernet

from sluice.testing import free_port, wait_until

__all__ = ["COMPONENTS", "AirflowDeployment", "ComponentProcess", "DeploymentError"]

PG_DSN = os.environ.get("SLUICE_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")
AIRFLOW = str(Path(sys.executable).parent / "airflow")
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: The ``job`` table's name for each component that heartbeats there.
JOB_TYPES = {
    "scheduler": "SchedulerJob",
    "dag-processor": "DagProcessorJob",
    "triggerer": "TriggererJob",
}
HEARTBEAT_SECONDS = 2


class DeploymentError(RuntimeError):
    """A component did not start or stay up; the message carries the tail of its log."""


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _readable(line: str) -> str:
    """A task log line (JSON) as one line of text, an exception with its last frames."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    text = f"{entry.get('level', '')}: {entry.get('event', '')}"
    for error in entry.get("error_detail") or []:
        frames = [f"{f['filename']}:{f['lineno']} {f['name']}" for f in error["frames"][-6:]]
        text += f"\n  {error['exc_type']}: {error['exc_value']}\n    " + "\n    ".join(frames)
    return text


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@dataclass
class ComponentProcess:
    """One Airflow component (or ``airflow db migrate``): argv, environment, log file, pid."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    starts: int = 0
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ComponentProcess:
        if self.running:
            raise DeploymentError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a process group of its own, stopped with it
            )
        return self

    def wait(self, timeout: float) -> int:
        """Wait for a one-off command (``db migrate``) to finish; its exit code."""
        if self._proc is None:
            raise DeploymentError(f"{self.name} was not started")
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise DeploymentError(f"airflow {self.name} took over {timeout:.0f} s") from None

    def processes(self) -> list[psutil.Process]:
        """The component's process and all its descendants."""
        if not self.running or self.pid is None:
            return []
        try:
            leader = psutil.Process(self.pid)
            return [leader, *leader.children(recursive=True)]
        except psutil.Error:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the component's process group; SIGKILL what is left after ``timeout`` s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            family = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        _signal_group(proc.pid, sig)  # start_new_session made the pid the group id
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
        # Descendants that left the group, or outlived the leader.
        _gone, alive = psutil.wait_procs(family, timeout=timeout)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()

    def kill(self) -> None:
        """SIGKILL the component and everything in its process group, as a crash would."""
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise DeploymentError(
                f"airflow {self.name} exited with code {self._proc.returncode}. "
                f"Its log ({self.log_path}):\n{self.log_tail()}"
            )


@dataclass
class AirflowDeployment:
    """An Airflow deployment in ``home`` (see the module docstring).

    ``extra_env`` goes to every component (connections as ``AIRFLOW_CONN_*``, settings the
    DAGs read, Airflow settings to override). Use it as a context manager, or call
    :meth:`start` and :meth:`close`.
    """

    home: Path
    dags_folder: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 4
    db_name: str = field(default_factory=lambda: f"sluice_airflow_{secrets.token_hex(4)}")
    api_port: int = field(default_factory=free_port)
    fernet_key: str = field(default_factory=lambda: Fernet.generate_key().decode())
    # Every component must sign and check the JWTs with the same secret.
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    api_secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    log_server_ports: tuple[int, int] = field(default_factory=lambda: (free_port(), free_port()))
    components: dict[str, ComponentProcess] = field(default_factory=dict)
    _job_floor: dict[str, int] = field(default_factory=dict)
    _token: str | None = None
    _db_created: bool = False

    # -- set-up ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def logs_folder(self) -> Path:
        return self.home / "logs"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__FERNET_KEY": self.fernet_key,
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
                    f"postgresql+psycopg2://postgres@127.0.0.1:5432/{self.db_name}"
                ),
                # Airflow would derive a postgresql+asyncpg URL, and asyncpg is not installed;
                # none of these components needs the async engine (multi-team mode is off).
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "",
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__SECRET_KEY": self.api_secret_key,
                "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
                "AIRFLOW__API_AUTH__JWT_ISSUER": "sluice-system-test",
                # Every component serves logs on a port of its own; the defaults could clash.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_server_ports[0]),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.log_server_ports[1]),
                # Quick turnarounds: the tests wait on conditions, these make them true sooner.
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": str(HEARTBEAT_SECONDS),
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": str(HEARTBEAT_SECONDS),
                # A killed triggerer's triggers go to another one after this many seconds.
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _component(self, name: str, argv: Sequence[str]) -> ComponentProcess:
        logs = self.home / "processes"
        logs.mkdir(parents=True, exist_ok=True)
        return ComponentProcess(name, [AIRFLOW, *argv], self.environment(), logs / f"{name}.log")

    def start(
        self, components: Sequence[str] = COMPONENTS, timeout: float = 240.0
    ) -> AirflowDeployment:
        """Create and migrate the database, start ``components``, wait until they are up."""
        unknown = set(components) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}; choose from {COMPONENTS}")
        self.home.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        self._admin(f'CREATE DATABASE "{self.db_name}"')
        self._db_created = True
        migrate = self._component("db-migrate", ["db", "migrate"]).start()
        if migrate.wait(timeout) != 0:
            raise DeploymentError(f"airflow db migrate failed:\n{migrate.log_tail()}")
        argv = {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(self.api_port)],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer"],
        }
        for name in components:
            self.components[name] = self._component(name, argv[name])
            self.start_component(name, wait=False)
        self.wait_healthy(components, max(10.0, deadline - time.monotonic()))
        return self

    def __enter__(self) -> AirflowDeployment:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every component (by pid and process group) and drop the database."""
        for name in reversed(COMPONENTS):
            if name in self.components:
                self.components[name].stop()
        if self._db_created:
            self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            self._db_created = False

    def _admin(self, statement: str) -> None:
        conn = psycopg2.connect(f"{PG_DSN} dbname=postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    # -- components and their health -------------------------------------------------------

    def start_component(self, name: str, wait: bool = True, timeout: float = 60.0) -> None:
        """Start component ``name`` (again); with ``wait``, until it is up."""
        job_type = JOB_TYPES.get(name)
        if job_type is not None:  # its new job must be newer than any it had
            self._job_floor[name] = self.sql(
                "SELECT coalesce(max(id), 0) FROM job WHERE job_type = %s", (job_type,)
            )[0][0]
        self.components[name].start()
        if wait:
            self.wait_healthy([name], timeout)

    def check_alive(self) -> None:
        for component in self.components.values():
            component.check_alive()

    def is_up(self, name: str) -> bool:
        """The api-server answers; any other component heartbeats in a job started after
        :meth:`start_component` last started it."""
        if name == "api-server":
            try:
                return bool(self.api("GET", "/api/v2/monitor/health", auth=False))
            except (OSError, DeploymentError):
                return False
        fresh = self.sql(
            "SELECT count(*) FROM job WHERE job_type = %s AND id > %s AND state = 'running' "
            "AND latest_heartbeat > now() - make_interval(secs => %s)",
            (JOB_TYPES[name], self._job_floor.get(name, 0), 5 * HEARTBEAT_SECONDS),
        )
        return bool(fresh[0][0])

    def wait_healthy(self, components: Sequence[str] = COMPONENTS, timeout: float = 120.0) -> None:
        """Wait until every one of ``components`` is up (see :meth:`is_up`)."""

        def ready() -> bool:
            self.check_alive()
            return all(self.is_up(name) for name in components)

        try:
            wait_until(ready, timeout, interval=0.5, message=f"{list(components)} up")
        except TimeoutError as exc:
            logs = "\n".join(
                f"--- {c.name} ---\n{c.log_tail(15)}" for c in self.components.values()
            )
            raise DeploymentError(f"{exc}\n{logs}") from None

    # -- REST API v2 -----------------------------------------------------------------------

    def token(self) -> str:
        if self._token is None:
            self._token = str(self.api("GET", "/auth/token", auth=False)["access_token"])
        return self._token

    def api(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        """Call the api-server; the decoded JSON answer (DeploymentError on an HTTP error)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise DeploymentError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(raw) if raw else None

    def wait_for_dags(self, dag_ids: Sequence[str], timeout: float = 120.0) -> None:
        """Wait until the dag processor has parsed ``dag_ids``; a DAG file that does not
        import fails at once, with its import error."""

        def parsed() -> bool:
            self.check_alive()
            errors = self.api("GET", "/api/v2/importErrors")["import_errors"]
            if errors:
                raise DeploymentError(f"DAG import errors: {json.dumps(errors, indent=1)}")
            found = {d["dag_id"] for d in self.api("GET", "/api/v2/dags?limit=100")["dags"]}
            return set(dag_ids) <= found

        wait_until(parsed, timeout, interval=1.0, message=f"DAGs {list(dag_ids)} parsed")

    def unpause(self, dag_id: str) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger_dag(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        body = {"logical_date": None, "conf": dict(conf or {})}
        return str(self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"])

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
        return list(answer["dag_runs"])

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        return dict(self.api("GET", path))

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.api("GET", path)["value"]

    def pool(self, name: str = "default_pool") -> dict[str, Any]:
        return dict(self.api("GET", f"/api/v2/pools/{name}"))

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 180.0) -> str:
        """Wait until the run finishes; its final state ('success' or 'failed')."""

        def finished() -> str | None:
            self.check_alive()
            state = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            return str(state) if state in ("success", "failed") else None

        state = wait_until(finished, timeout, interval=1.0, message=f"run {dag_id}/{run_id} done")
        assert state is not None
        return state

    def wait_for_task_state(
        self, dag_id: str, run_id: str, task_id: str, states: Sequence[str], timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait until the task instance is in one of ``states``; it, as the API shows it."""

        def reached() -> dict[str, Any] | None:
            self.check_alive()
            try:
                ti = self.task_instance(dag_id, run_id, task_id)
            except DeploymentError:
                return None  # the run's task instances are not created yet
            if ti["state"] in states:
                return ti
            if ti["state"] in ("failed", "upstream_failed") and "failed" not in states:
                raise DeploymentError(f"{dag_id}.{task_id} {ti['state']}:\n{self.task_log(ti)}")
            return None

        ti = wait_until(
            reached, timeout, interval=0.5, message=f"{dag_id}.{task_id} in {list(states)}"
        )
        assert ti is not None
        return ti

    # -- task logs and failures ------------------------------------------------------------

    def task_log(self, ti: Mapping[str, Any], lines: int = 30) -> str:
        """The end of a task's log files (worker and triggerer parts), readably."""
        folder = (
            self.logs_folder / f"dag_id={ti['dag_id']}" / f"run_id={ti['dag_run_id']}"
        ) / f"task_id={ti['task_id']}"
        files = sorted(folder.rglob("*.log")) if folder.exists() else []
        parts = []
        for path in files:
            text = "\n".join(_readable(line) for line in _tail(path, lines).splitlines())
            parts.append(f"--- {path.name}\n{text}")
        return "\n".join(parts) or "(no task log)"

    def check_no_failed_tasks(self, dag_id: str) -> None:
        """Raise, with the task's log, if a task of ``dag_id`` failed (a continuous DAG goes
        on to its next run, which would hide it)."""
        failed = self.sql(
            "SELECT task_id, run_id FROM task_instance WHERE dag_id = %s AND state = 'failed'",
            (dag_id,),
        )
        if failed:
            task_id, run_id = failed[0]
            log = self.task_log({"dag_id": dag_id, "dag_run_id": run_id, "task_id": task_id})
            raise DeploymentError(f"{dag_id}.{task_id} failed in run {run_id}:\n{log}")

    # -- the metadata database -------------------------------------------------------------

    def sql(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one query on the metadata database; its rows."""
        conn = psycopg2.connect(f"{PG_DSN} dbname={self.db_name}")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(query, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def decrypt(self, token: str) -> str:
        """A value Airflow encrypted with the deployment's Fernet key (trigger kwargs ...)."""
        return Fernet(self.fernet_key.encode()).decrypt(token.encode()).decode()

    # -- processes and files ---------------------------------------------------------------

    def processes_mentioning(self, text: str) -> list[str]:
        """``pid: command line`` of this deployment's processes whose title contains ``text``."""
        found = []
        for component in self.components.values():
            for proc in component.processes():
                try:
                    cmdline = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if text in cmdline:
                    found.append(f"{proc.pid}: {cmdline}")
        return found

    @staticmethod
    def files_under(*roots: Path) -> Iterator[Path]:
        for root in roots:
            if root.exists():
                yield from (p for p in root.rglob("*") if p.is_file())

    def files_containing(self, text: str, *roots: Path) -> list[Path]:
        """Files under ``roots`` (default: AIRFLOW_HOME) whose bytes contain ``text``."""
        needle = text.encode()
        return [p for p in self.files_under(*(roots or (self.home,))) if needle in p.read_bytes()]
