"""A real Airflow 3 deployment on this machine, for system tests and benchmarks.

:class:`AirflowDeployment` creates a fresh PostgreSQL database (dropped again on close) on the
server it is given, or on a server of its own (:mod:`sluice.testing.postgres`), runs
``airflow db migrate`` and starts ``airflow api-server``, ``scheduler`` (LocalExecutor),
``dag-processor`` and ``triggerer`` as separate processes, or a subset of them. Each runs in
a process group of its own with its output in ``AIRFLOW_HOME/processes/<name>.log``, and is
stopped by its pid and process group (which holds the scheduler's executor workers and the
triggerer's trigger runner). Ports come from the OS.

To look at it: :meth:`~AirflowDeployment.api` (REST API v2; the simple auth manager treats
everyone as admin; ``rest_api``), :meth:`~AirflowDeployment.sql` (the metadata database
directly; ``database``) and :meth:`~AirflowDeployment.processes_mentioning` (which processes
run a task instance: its id is in the process titles of the executor worker and the task
runner), task logs and files (``inspection``). The component processes: ``process``.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet

from sluice.testing import free_port, wait_until
from sluice.testing.postgres import PostgresServer, start_postgres

from .database import MetadataDatabase
from .inspection import Inspection
from .process import ComponentProcess, DeploymentError
from .rest_api import RestApi

__all__ = ["COMPONENTS", "AirflowDeployment", "ComponentProcess", "DeploymentError"]

AIRFLOW = str(Path(sys.executable).parent / "airflow")
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: The ``job`` table's name for each component that heartbeats there.
JOB_TYPES = {
    "scheduler": "SchedulerJob",
    "dag-processor": "DagProcessorJob",
    "triggerer": "TriggererJob",
}
HEARTBEAT_SECONDS = 2


@dataclass
class AirflowDeployment(MetadataDatabase, Inspection, RestApi):
    """An Airflow deployment in ``home`` (see the module docstring).

    ``extra_env`` goes to every component (connections as ``AIRFLOW_CONN_*``, settings the
    DAGs read, Airflow settings to override). ``postgres``: the server of the metadata
    database (a test session's ``postgres_server``); without one the deployment starts its own
    and stops it on close. Use it as a context manager, or call :meth:`start` and :meth:`close`.
    """

    home: Path
    dags_folder: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 4
    postgres: PostgresServer | None = None
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
    _owns_postgres: bool = False

    # -- set-up ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

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
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_uri,
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
        if self.postgres is None:
            self.postgres, self._owns_postgres = start_postgres(), True
        self.postgres.create_database(self.db_name)
        self._db_created = True
        migrate = self._component("db-migrate", ["db", "migrate"]).start()
        if migrate.wait(timeout) != 0:
            raise DeploymentError(f"airflow db migrate failed:\n{migrate.logtail()}")
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
        if self._db_created and self.postgres is not None:
            self.postgres.drop_database(self.db_name)
            self._db_created = False
        if self._owns_postgres and self.postgres is not None:
            self.postgres.close()
            self.postgres, self._owns_postgres = None, False

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
            logs = "\n".join(f"--- {c.name} ---\n{c.logtail(15)}" for c in self.components.values())
            raise DeploymentError(f"{exc}\n{logs}") from None
