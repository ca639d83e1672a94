"""A PostgreSQL server of the tests' own: ``initdb`` in a temporary directory, ``postgres`` on a
free loopback port, stopped by its pid. Nothing here connects to a server of the machine.

It runs Debian's ``postgresql`` package (``make setup`` installs it). PostgreSQL refuses to run
as root, so a root process starts it as the ``postgres`` user the package creates. Every
connection, over TCP and over the Unix socket in the server's own directory, logs in with
SCRAM-SHA-256 as ``postgres`` and a password generated for the server: ``initdb`` reads it from
a file of the server's directory (mode 0600, removed once the cluster exists), never from its
command line, and :class:`PostgresServer` hands it out only inside :meth:`~PostgresServer.dsn`
and :meth:`~PostgresServer.uri` (its ``repr`` leaves it out). The server skips fsync: it holds
test catalogs and Airflow's metadata, never data whose durability a test checks.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

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
    password: str = field(default="", repr=False)

    @property
    def port(self) -> int:
        return self.process.port

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string (psycopg2.connect), with the password."""
        return (
            f"host={self.host} port={self.port} user={self.user} password={self.password} "
            f"dbname={database}"
        )

    def uri(self, database: str, driver: str = "postgresql+psycopg2") -> str:
        """A SQLAlchemy URL (pyiceberg's SQL catalog, Airflow's metadata database), with the
        password (:mod:`sluice.secrets` redacts a URL's password wherever Sluice shows one)."""
        secret = quote(self.password, safe="")
        return f"{driver}://{self.user}:{secret}@{self.host}:{self.port}/{database}"

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


#: What a server setting's name may hold (``postgresql.conf`` names, ``pg_stat_statements.max``).
_SETTING_NAME = re.compile(r"[a-z_][a-z0-9_.]*")


def start_postgres(
    port: int | None = None,
    timeout: float = 60.0,
    settings: Mapping[str, str | int] | None = None,
) -> PostgresServer:
    """A fresh cluster in a temporary directory (removed on :meth:`PostgresServer.close`),
    serving on ``port`` (a free one by default) of 127.0.0.1 once this returns.

    ``settings``: server settings by their ``postgresql.conf`` names, over the defaults here
    (``-c name=value`` on the server's command line: no secrets), e.g. logical replication
    for a change data capture connector: ``{"wal_level": "logical",
    "max_replication_slots": "4"}``. Replication connections log in as every other does."""
    bin_dir, user = _bin_dir(), _run_as()
    given = dict(settings or {})
    for name in given:
        if not _SETTING_NAME.fullmatch(name):
            raise ValueError(f"start_postgres: {name!r} is not a PostgreSQL setting's name")
    port = port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-postgres-"))
    if user is not None:
        shutil.chown(workdir, user, user)
    data = workdir / "data"
    password = secrets.token_urlsafe(24)
    password_file = workdir / "initdb.password"
    descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(password + "\n")
    if user is not None:
        shutil.chown(password_file, user, user)
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER]
    initdb += ["--auth=scram-sha-256", f"--pwfile={password_file}"]
    try:
        done = subprocess.run(
            [*initdb, "--encoding=UTF8", "--no-sync", "--no-instructions"],
            user=user,
            group=user,
            extra_groups=[] if user else None,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        password_file.unlink(missing_ok=True)
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise BrokerError(f"initdb failed ({done.returncode}):\n{done.stderr.strip()}")
    argv = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port)]
    defaults = {
        "listen_addresses": HOST,
        "unix_socket_directories": str(workdir),
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "200",
    }
    for name, value in {**defaults, **given}.items():
        argv += ["-c", f"{name}={value}"]
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
        server = PostgresServer(process, password=password)
        wait_until(lambda: _accepts_queries(server), timeout, 0.1, "PostgreSQL to accept queries")
    except BaseException:
        process.stop(signal.SIGINT)
        process.close()
        raise
    return server
