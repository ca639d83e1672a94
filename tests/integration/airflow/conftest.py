"""Airflow against real brokers: a private Airflow home (set before Airflow is imported), its
sqlite DB migrated once per session, and connections given as ``AIRFLOW_CONN_*`` variables."""

from __future__ import annotations

from tests.airflow_env import configure

configure()

import json  # noqa: E402
import secrets  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from sluice.brokers import BrokerProcess  # noqa: E402
from tests.airflow_env import migrate_db  # noqa: E402

SetConnection = Callable[..., str]


@pytest.fixture(scope="session")
def airflow_db() -> None:
    migrate_db()


@pytest.fixture
def set_connection(monkeypatch: pytest.MonkeyPatch) -> Iterator[SetConnection]:
    """``set_connection(conn_id, conn_type, host, port, **fields)``: an Airflow connection in
    the environment for this test; returns its id."""

    def set_(conn_id: str, conn_type: str, host: str, port: int, **fields: Any) -> str:
        value = {"conn_type": conn_type, "host": host, "port": port, **fields}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value))
        return conn_id

    yield set_


@pytest.fixture
def kafka_conn(noida_broker: BrokerProcess, set_connection: SetConnection) -> str:
    """The connection ``sluice_kafka_default`` (the example DAGs' default) to the session's
    noida-db broker; its id."""
    return set_connection(
        "sluice_kafka_default", "sluice_kafka", noida_broker.host, noida_broker.port
    )


@pytest.fixture
def password() -> str:
    """A fresh password, to look for where it must not show (noida-db accepts any SASL/PLAIN
    password)."""
    return f"pw-{secrets.token_hex(8)}"
