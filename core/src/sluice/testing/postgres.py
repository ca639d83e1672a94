"""A PostgreSQL server of the tests' own: ``initdb`` in a temporary directory, ``postgres`` on a
free loopback port, stopped by its pid. Nothing here connects to a server of the machine.

It runs Debian's ``postgresql`` package (``make setup`` installs it). PostgreSQL refuses to run
as root, so a root process starts it as the ``postgres`` user the package creates. The server
trusts every local connection (user ``postgres``, any password), and skips fsync: it holds test
catalogs and Airflow's metadata, never data whose durability a test checks.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..brokers import BrokerError, BrokerProcess, free_port
from .waiting import wait_until

__all__ = ["PostgresServer", "start_postgres"]

HOST = "127.0.0.1"
SUPERUSER = "postgres"
INSTALL_HINT = "Install Debian's package: apt-get install -y postgresql (or run `make setup`)."


def _bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres``: on PATH, else the newest of Debian's
    ``/usr/lib/postgresql/<version>/bin`` (Debian keeps them off PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise BrokerError(f"PostgreSQL's initdb is not installed. {INSTALL_HINT}")
    return versions[-1]


def _run_as() -> str | None:
    """The user to run PostgreSQL as: ``postgres`` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise BrokerError(
            f"PostgreSQL does not run as root, and there is no '{SUPERUSER}' user to run it "
            f"as. {INSTALL_HINT}"
        ) from None
    return SUPERUSER


@dataclass
class PostgresServer:
    """A running server: its address, and how to make databases on it and stop it."""

    process: BrokerProcess
    host: str = HOST
    user: str = SUPERUSER

    @property
    def port(self) -> int:
        return self.process.port

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string (psycopg2.connect)."""
        return f"host={self.host} port={self.port} user={self.user} dbname={database}"

    def uri(self, database: str, driver: str = "postgresql+psycopg2") -> str:
        """A SQLAlchemy URL (pyiceberg's SQL catalog, Airflow's metadata database)."""
        return f"{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def execute(self, statement: str, database: str = "postgres") -> None:
        """One statement outside a transaction (CREATE / DROP DATABASE)."""
        import psycopg2

        conn = psycopg2.connect(self.dsn(database))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def create_database(self, name: str) -> None:
        self.execute(f'CREATE DATABASE "{name}"')

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        # SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for every client to leave.
        self.process.stop(signal.SIGINT)
        self.process.close()


def _accepts_queries(server: PostgresServer) -> bool:
    import psycopg2

    try:
        psycopg2.connect(server.dsn(), connect_timeout=2).close()
    except psycopg2.OperationalError:  # "the database system is starting up"
        return False
    return True


def start_postgres(
    port: int | None = None,
    timeout: float = 60.0,
    settings: Mapping[str, str] | None = None,
) -> PostgresServer:
    """A fresh cluster in a temporary directory (removed on :meth:`PostgresServer.close`),
    serving on ``port`` (a free one by default) of 127.0.0.1 once this returns.
    ``settings``: server settings beside (or instead of) the defaults, e.g.
    ``{"wal_level": "logical"}``."""
    bin_dir, user = _bin_dir(), _run_as()
    port = port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-postgres-"))
    if user is not None:
        shutil.chown(workdir, user, user)
    data = workdir / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust"]
    done = subprocess.run(
        [*initdb, "--encoding=UTF8", "--no-sync", "--no-instructions"],
        user=user,
        group=user,
        extra_groups=[] if user else None,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise BrokerError(f"initdb failed ({done.returncode}):\n{done.stderr.strip()}")
    argv = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port)]
    for setting in (
        f"listen_addresses={HOST}",
        f"unix_socket_directories={workdir}",
        "fsync=off",
        "synchronous_commit=off",
        "full_page_writes=off",
        "max_connections=200",
        *(f"{name}={value}" for name, value in (settings or {}).items()),
    ):
        argv += ["-c", setting]
    process = BrokerProcess(
        name="postgres",
        scheme="postgresql",
        port=port,
        argv=argv,
        workdir=workdir,
        log_path=workdir / "postgres.log",
        run_as=user,
        _owns_workdir=True,
    )
    try:
        process.start(timeout)
        server = PostgresServer(process)
        wait_until(lambda: _accepts_queries(server), timeout, 0.1, "PostgreSQL to accept queries")
    except BaseException:
        process.stop(signal.SIGINT)
        process.close()
        raise
    return server
