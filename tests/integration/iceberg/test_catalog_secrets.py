"""An Iceberg catalog's secrets (a password in its uri, S3 keys, a REST credential) never
show in a sink's errors or logs, on a real PostgreSQL (the session's own): they are
registered with sluice.secrets when the catalog opens, and a catalog's error is redacted
before it becomes a ConfigError."""

from __future__ import annotations

import logging
import re
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.queues import ConfigError
from sluice.secrets import redact_text
from sluice.spark.sinks import iceberg, open_sink
from sluice.spark.sinks.catalogs import load_iceberg_catalog
from sluice.testing.postgres import PostgresServer

from .conftest import _drop


def fresh(prefix: str) -> str:
    """A secret no other test of this process has registered."""
    return f"{prefix}-{secrets.token_hex(6)}"


def configure(monkeypatch: pytest.MonkeyPatch, warehouse: Path, **properties: str) -> str:
    """A new catalog named by ``PYICEBERG_CATALOG__<NAME>__*`` variables; its name."""
    name = f"sec{uuid.uuid4().hex[:8]}"
    properties = {"warehouse": warehouse.as_uri(), **properties}
    for key, value in properties.items():
        variable = key.upper().replace(".", "__").replace("-", "_")
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{variable}", value)
    return name


def with_password(uri: str, password: str, user: str = "postgres") -> str:
    """``uri`` with ``user`` and ``password`` in place of its own user info."""
    return re.sub(r"//[^/@]*@", lambda _: f"//{user}:{password}@", uri, count=1)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):
        yield caplog


def test_the_secrets_of_a_catalog_that_opens_are_registered(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    debug_logs: pytest.LogCaptureFixture,
    postgres_server: PostgresServer,
    postgres_uri: str,
) -> None:
    """A login of its own with a fresh password opens the catalog; from then on every secret
    property shows as *** in redacted texts and pyiceberg's logs."""
    password, user = fresh("pg-pw"), f"sec_{secrets.token_hex(4)}"
    postgres_server.execute(f"CREATE ROLE {user} LOGIN SUPERUSER PASSWORD '{password}'")
    s3_secret, session_token = fresh("s3-secret"), fresh("s3-token")
    credential, account_key = f"client:{fresh('rest-secret')}", fresh("adls-key")
    name = configure(
        monkeypatch,
        tmp_path / "warehouse",
        type="sql",
        uri=with_password(postgres_uri, password, user),
        **{
            "s3.secret-access-key": s3_secret,
            "s3.session-token": session_token,
            "credential": credential,
            "adls.account-key": account_key,
        },
    )
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    shown = [password, s3_secret, session_token, credential, account_key]
    assert redact_text(" ".join(shown)) == " ".join(shown), "registered before the test"

    sink = open_sink(f"iceberg://{name}/{namespace}.readings")
    assert isinstance(sink, iceberg.IcebergSink)
    try:
        sink.check()  # opens the catalog, creates the namespace
        assert redact_text(" ".join(shown)) == " ".join(["***"] * len(shown))
        logging.getLogger("pyiceberg.catalog.sql").warning("props %s", " ".join(shown))
        assert "props *** *** *** *** ***" in debug_logs.text
        assert not [secret for secret in shown if secret in debug_logs.text]
    finally:
        _drop(sink.catalog, namespace)


@pytest.mark.parametrize(
    ("user", "password", "reported"),
    [
        # An unencoded '@': SQLAlchemy ends the password at the first one and psycopg2 names
        # the rest as the host ('could not translate host name "<rest>@127.0.0.1"').
        ("postgres", f"{fresh('head')}@{fresh('tail')}", "***@127.0.0.1"),
        # A wrong password for a login PostgreSQL does not know.
        (
            "sluice_no_such_role",
            fresh("wrong-pw"),
            'password authentication failed for user "sluice_no_such_role"',
        ),
    ],
    ids=["unencoded-at", "unknown-login"],
)
def test_a_catalog_that_cannot_open_is_reported_without_its_password(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    debug_logs: pytest.LogCaptureFixture,
    postgres_uri: str,
    user: str,
    password: str,
    reported: str,
) -> None:
    uri = with_password(postgres_uri, password, user)
    name = configure(monkeypatch, tmp_path / "warehouse", type="sql", uri=uri)
    sink = open_sink(f"iceberg://{name}/ns_{uuid.uuid4().hex[:8]}.readings")
    with pytest.raises(ConfigError) as refused:
        sink.check()
    message = str(refused.value)
    assert f"The Iceberg catalog '{name}' could not be opened" in message
    assert reported in message, message
    leaked = [piece for piece in (password, *password.split("@")) if piece in message]
    assert leaked == [], message
    assert not [piece for piece in password.split("@") if piece in debug_logs.text]
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_an_error_of_pyiceberg_that_quotes_the_uri_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a type, pyiceberg infers one from the uri and, when it cannot, quotes the uri
    in its error: password included."""
    password = fresh("quoted-pw")
    name = configure(
        monkeypatch, tmp_path / "warehouse", uri=f"mysql+pymysql://svc:{password}@db:3306/lake"
    )
    with pytest.raises(ConfigError) as refused:
        load_iceberg_catalog(name)
    message = str(refused.value)
    assert "mysql+pymysql://svc:***@db:3306/lake" in message
    assert password not in message
    assert iceberg.load_iceberg_catalog is load_iceberg_catalog  # still importable from there
