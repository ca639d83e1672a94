"""The tests' own PostgreSQL: a login with a password of its own on every connection (it
trusted any local user, who could run commands as the test runner through ``COPY ... TO
PROGRAM``), the password nowhere it could leak, and server settings of the caller's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from sluice.testing.postgres import PostgresServer, start_postgres


@pytest.fixture(scope="module")
def logical() -> Iterator[PostgresServer]:
    """A server with logical replication on, as a change data capture connector needs."""
    server = start_postgres(settings={"wal_level": "logical", "max_replication_slots": 4})
    try:
        yield server
    finally:
        server.close()


def _query(dsn: str, statement: str) -> list[tuple[object, ...]]:
    conn = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_every_connection_needs_the_servers_password(logical: PostgresServer) -> None:
    without = f"host={logical.host} port={logical.port} user={logical.user} dbname=postgres"
    socket = logical.process.workdir  # its Unix socket's directory
    over_socket_without = f"host={socket} port={logical.port} user=postgres dbname=postgres"
    for dsn in (without, over_socket_without, f"{without} password=not-the-password"):
        with pytest.raises(psycopg2.OperationalError, match="password"):
            psycopg2.connect(dsn, connect_timeout=10).close()
    assert _query(logical.dsn(), "SELECT current_user") == [("postgres",)]
    over_socket = f"host={socket} port={logical.port} user=postgres password={logical.password}"
    assert _query(f"{over_socket} dbname=postgres", "SELECT 1") == [(1,)]
    methods = {m for (m,) in _query(logical.dsn(), "SELECT auth_method FROM pg_hba_file_rules")}
    assert methods == {"scram-sha-256"}


def test_the_password_is_in_no_command_line_log_file_or_repr(logical: PostgresServer) -> None:
    secret = logical.password
    assert len(secret) >= 24 and secret in logical.uri("postgres")
    assert secret not in repr(logical)
    pid = logical.process.pid
    assert pid is not None
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for process in [str(pid), *children]:
        try:
            cmdline = Path(f"/proc/{process}/cmdline").read_bytes()
        except FileNotFoundError:  # a backend that ended meanwhile shows no command line
            assert process != str(pid), "the server itself is gone"
            continue
        assert secret not in cmdline.decode(errors="replace")
    workdir = logical.process.workdir
    assert not list(workdir.glob("*password*")), "initdb's password file is removed"
    for found in workdir.rglob("*"):
        if found.is_file() and found.suffix in (".log", ".conf", ".opts", ""):
            assert secret not in found.read_text(errors="replace"), found


def test_the_callers_settings_reach_the_server(logical: PostgresServer) -> None:
    shown = {
        name: value
        for name, value in _query(
            logical.dsn(),
            "SELECT name, setting FROM pg_settings "
            "WHERE name IN ('wal_level', 'max_replication_slots', 'fsync')",
        )
    }
    assert shown == {"wal_level": "logical", "max_replication_slots": "4", "fsync": "off"}
    with pytest.raises(ValueError, match="not a PostgreSQL setting"):
        start_postgres(settings={"wal_level = logical; ": "x"})
