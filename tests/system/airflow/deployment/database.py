"""The deployment's metadata database: a fresh PostgreSQL database of this machine's server,
created and dropped by name, queried directly, and the Fernet key Airflow encrypts with."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg2
from cryptography.fernet import Fernet

__all__ = ["PG_DSN", "MetadataDatabase", "admin"]

PG_DSN = os.environ.get("SLUICE_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")


def admin(statement: str) -> None:
    """One statement on the server's ``postgres`` database (CREATE / DROP DATABASE)."""
    conn = psycopg2.connect(f"{PG_DSN} dbname=postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


class MetadataDatabase:
    """Queries for a deployment that has ``db_name`` and ``fernet_key`` (see
    :class:`~tests.system.airflow.deployment.AirflowDeployment`)."""

    db_name: str
    fernet_key: str

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
