"""The schema registry of an Airflow connection: any connection type (``http`` is fine) whose
host (or a URL in it), port, schema (``https``), login and password name the registry. The
password is masked by Airflow and registered with :mod:`sluice.secrets`; it goes to the
ingest in-process, or to spark-submit in a private file, never into XCom or a log."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from sluice.formats.registry import RegistrySettings

__all__ = ["registry_settings"]


def registry_settings(conn_id: str | None, url: str | None = None) -> RegistrySettings | None:
    """The registry named by the connection ``conn_id`` (or by ``url``, which holds no
    password), or None when neither is given."""
    if conn_id is None:
        return None if url is None else RegistrySettings.of(url)
    if url is not None:
        raise ValueError("Give schema_registry (a URL) or schema_registry_conn_id, not both.")
    connection = BaseHook.get_connection(conn_id)
    host = str(connection.host or "")
    if "://" not in host:
        scheme = connection.schema if connection.schema in ("http", "https") else "http"
        host = f"{scheme}://{host}" + (f":{connection.port}" if connection.port else "")
    options: dict[str, Any] = {"url": host}
    if connection.login:
        options.update(username=connection.login, password=connection.password)
    from airflow.sdk.log import mask_secret

    if connection.password:
        mask_secret(connection.password)
    return RegistrySettings.of(options)
