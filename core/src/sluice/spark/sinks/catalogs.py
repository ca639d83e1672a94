"""The Iceberg sinks' catalogs: opened once per configuration, their secrets kept out of logs
and errors.

A catalog is configured the pyiceberg way (``.pyiceberg.yaml``, or
``PYICEBERG_CATALOG__<NAME>__*`` environment variables), read afresh each time a sink asks for
it; a configuration already opened in this process reuses its catalog. Before a catalog
opens, its secret properties are registered with :mod:`sluice.secrets` (the one place that
redacts), so they show as ``***`` in every redacted text and in the logs of Sluice,
kafka-python and pyiceberg: properties whose names say so (``password``, ``token``,
``s3.secret-access-key``, ``s3.session-token``, ...), those listed in
:data:`SECRET_PROPERTIES` (``credential``, ``adls.account-key`` ...) and the password inside
a URI (``postgresql+psycopg2://user:PASSWORD@host/db``). A catalog's error becomes a
:class:`ConfigError` with its text redacted (:func:`catalog_error`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...queues.config import ConfigError
from ...secrets import install_log_filter, redact_text, remember_config

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = [
    "SECRET_PROPERTIES",
    "catalog_error",
    "load_iceberg_catalog",
    "remember_catalog",
    "with_s3_defaults",
]

#: pyiceberg catalog properties that hold a secret although their names contain none of the
#: words :func:`sluice.secrets.is_secret_key` looks for (password, secret, token...).
SECRET_PROPERTIES = (
    "credential",  # REST: client_id:client_secret
    "header.authorization",  # REST: a header sent with every request
    "adls.account-key",
    "adls.connection-string",
    "adlfs.account-key",  # older spellings
    "adlfs.connection-string",
)

_catalogs: dict[str, Catalog] = {}
_catalogs_lock = threading.Lock()


def remember_catalog(properties: Mapping[str, Any]) -> None:
    """Register the secrets of a catalog's ``properties`` with :mod:`sluice.secrets`, and
    put its log filter on pyiceberg's loggers (those that exist: call it again once the
    catalog's modules are imported)."""
    remember_config(properties, SECRET_PROPERTIES)
    install_log_filter("pyiceberg")


def catalog_error(name: str, problem: str, exc: BaseException, fix: str) -> ConfigError:
    """A :class:`ConfigError` saying that the catalog ``name`` ``problem`` because of ``exc``
    (its text redacted) and how to ``fix`` it; raise it ``from None`` (the cause's text is
    not redacted)."""
    return ConfigError(
        f"The Iceberg catalog '{name}' {problem} ({type(exc).__name__}: "
        f"{redact_text(str(exc))}): {fix}"
    )


def load_iceberg_catalog(name: str) -> Catalog:
    """The pyiceberg catalog ``name``, its configuration read now (not at import)."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config

    properties = Config().get_catalog_config(name)
    if not properties:
        env = f"PYICEBERG_CATALOG__{name.upper()}__"
        raise ConfigError(
            f"The Iceberg catalog '{name}' is not configured: add it to .pyiceberg.yaml (in "
            f"$PYICEBERG_HOME, your home or the current directory) or set {env}URI and "
            f"{env}WAREHOUSE (and {env}TYPE), e.g. {env}URI=sqlite:///lake/catalog.db and "
            f"{env}WAREHOUSE=file:///lake/warehouse."
        )
    remember_catalog(properties)
    properties = with_s3_defaults(name, properties)
    key = f"{name}\0{json.dumps(properties, sort_keys=True, default=str)}"
    with _catalogs_lock:
        if key not in _catalogs:
            try:
                _catalogs[key] = load_catalog(name, **properties)  # type: ignore[arg-type]
            except Exception as exc:
                raise catalog_error(
                    name,
                    "could not be opened",
                    exc,
                    "check its configuration (uri, warehouse, credentials).",
                ) from None
            finally:
                install_log_filter("pyiceberg")  # the loggers of the modules it imported
        return _catalogs[key]


def with_s3_defaults(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A catalog on S3 (an ``s3://`` warehouse, or s3.* properties) with the ``s3.endpoint``
    and ``s3.region`` it lacks taken from the AWS chain (``AWS_ENDPOINT_URL``, the profile,
    ``AWS_REGION``): pyiceberg reads neither, and without a region it asks AWS where the
    bucket is, which a custom endpoint cannot answer (a long wait, then an error)."""
    on_s3 = str(properties.get("warehouse", "")).lower().startswith(("s3://", "s3a://"))
    if not on_s3 and not any(str(k).startswith("s3.") for k in properties):
        return properties
    try:
        from .s3 import S3Settings

        found = S3Settings.resolve(properties, f"catalog '{name}'").catalog_properties()
    except ImportError:  # no botocore: the catalog as it is
        return properties
    return {**found, **properties}
