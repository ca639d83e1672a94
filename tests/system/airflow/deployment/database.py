"""The deployment's metadata database: a fresh database on a PostgreSQL server of the tests'
own (:mod:`sluice.testing.postgres`), queried directly, and the Fernet key Airflow encrypts
with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg2
from cryptography.fernet import Fernet

from sluice.testing.postgres import PostgresServer

__all__ = ["MetadataDatabase"]


class MetadataDatabase:
    """Queries for a deployment that has ``postgres``, ``db_name`` and ``fernet_key`` (see
    :class:`~tests.system.airflow.deployment.AirflowDeployment`)."""

    postgres: PostgresServer | None
    db_name: str
    fernet_key: str

    @property
    def database_uri(self) -> str:
        """The SQLAlchemy URL Airflow's components connect with."""
        return self._server().uri(self.db_name)

    def _server(self) -> PostgresServer:
        if self.postgres is None:
            raise RuntimeError("the deployment has no database yet: start() it first")
        return self.postgres

    def sql(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one query on the metadata database; its rows."""
        conn = psycopg2.connect(self._server().dsn(self.db_name))
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
