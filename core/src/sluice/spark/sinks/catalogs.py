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

A REST catalog's every request waits at most ``connection.timeout`` seconds (the catalog
property :data:`REST_TIMEOUT_PROPERTY`, pyiceberg's own spelling for it; default
:data:`DEFAULT_REST_TIMEOUT_S`): pyiceberg's REST client sets no timeout, so a catalog that
stopped answering held an ingest (and its Airflow task) until something outside killed it. A
request that times out raises :class:`CatalogTimeoutError`; a commit that times out raises
pyiceberg's ``CommitStateUnknownException``: the catalog may have committed it, so the sink
treats it as it treats a lost answer (it deletes nothing; the next run reads the catalog).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...queues.config import ConfigError
from ...secrets import install_log_filter, redact_text, remember_config

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = [
    "CATALOG_PROPERTIES",
    "DEFAULT_REST_TIMEOUT_S",
    "REST_TIMEOUT_PROPERTY",
    "SECRET_PROPERTIES",
    "CatalogTimeoutError",
    "catalog_error",
    "load_iceberg_catalog",
    "remember_catalog",
    "rest_timeout",
    "with_s3_defaults",
]

#: The catalog property that bounds each request of a REST catalog, in seconds.
REST_TIMEOUT_PROPERTY = "connection.timeout"
DEFAULT_REST_TIMEOUT_S = 60.0

#: The catalog properties Sluice itself reads (beside pyiceberg's), for the configuration
#: reference: (property, type, default, meaning).
CATALOG_PROPERTIES: tuple[tuple[str, type, Any, str], ...] = (
    (
        REST_TIMEOUT_PROPERTY,
        float,
        DEFAULT_REST_TIMEOUT_S,
        "REST catalogs: seconds each request may wait for the catalog's answer "
        "(PYICEBERG_CATALOG__<NAME>__CONNECTION__TIMEOUT; in .pyiceberg.yaml "
        "connection.timeout or connection: {timeout: ...}). A commit that times out is one of "
        "unknown outcome: its files are kept and the next run reads the catalog.",
    ),
)


class CatalogTimeoutError(TimeoutError):
    """A REST catalog did not answer a request within its ``connection.timeout``."""


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
                if _is_rest(name, properties):
                    _catalogs[key] = _timed_rest_catalog()(name, **properties)
                else:
                    _catalogs[key] = load_catalog(name, **properties)  # type: ignore[arg-type]
            except (CatalogTimeoutError, ConfigError):
                raise
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


def rest_timeout(name: str, properties: Mapping[str, Any]) -> float:
    """The REST catalog ``name``'s request timeout in seconds: its ``connection.timeout``
    property (flat, as environment variables give it, or nested, as YAML may), else
    :data:`DEFAULT_REST_TIMEOUT_S`."""
    given = properties.get(REST_TIMEOUT_PROPERTY)
    nested = properties.get("connection")
    if given is None and isinstance(nested, Mapping):
        given = nested.get("timeout")
    if given is None:
        return DEFAULT_REST_TIMEOUT_S
    try:
        seconds = float(given)
    except (TypeError, ValueError):
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(
            f"The Iceberg catalog '{name}': property {REST_TIMEOUT_PROPERTY} must be a number "
            f"of seconds above 0, not {given!r}."
        )
    return seconds


def _is_rest(name: str, properties: Mapping[str, Any]) -> bool:
    """Whether pyiceberg would open ``properties`` as a REST catalog (and not a class of the
    user's, ``py-catalog-impl``)."""
    from pyiceberg.catalog import TYPE, CatalogType, infer_catalog_type

    if properties.get("py-catalog-impl"):
        return False
    kind = properties.get(TYPE)
    if kind is not None:
        return str(kind).lower() == CatalogType.REST.value
    try:
        return infer_catalog_type(name, dict(properties)) == CatalogType.REST
    except ValueError:
        return False


@functools.cache
def _timed_rest_catalog() -> Callable[..., Catalog]:
    """pyiceberg's ``RestCatalog`` whose every request waits at most its timeout (module
    docstring), built once, when a REST catalog is first opened."""
    import requests
    from pyiceberg.catalog.rest import RestCatalog

    class TimedRestCatalog(RestCatalog):
        def __init__(self, name: str, **properties: str) -> None:
            self._sluice_timeout_s = rest_timeout(name, properties)
            super().__init__(name, **properties)

        def _create_session(self) -> requests.Session:
            session = super()._create_session()
            send = session.request
            timeout, catalog = self._sluice_timeout_s, self.name

            def timed(method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
                kwargs.setdefault("timeout", timeout)
                try:
                    return send(method, url, *args, **kwargs)
                except requests.Timeout:
                    raise CatalogTimeoutError(
                        f"The Iceberg REST catalog '{catalog}' did not answer {method} "
                        f"{redact_text(urlsplit(str(url)).path)} within {timeout:g} s (catalog "
                        f"property {REST_TIMEOUT_PROPERTY}). Check that it runs and answers; "
                        "raise the property for a slow one."
                    ) from None

            session.request = timed  # type: ignore[method-assign,assignment]
            return session

        def commit_table(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().commit_table(*args, **kwargs)
            except CatalogTimeoutError as exc:
                raise commit_timed_out(exc) from None

    return TimedRestCatalog


def commit_timed_out(exc: CatalogTimeoutError) -> Exception:
    """pyiceberg's ``CommitStateUnknownException`` for a commit request that timed out."""
    from pyiceberg.exceptions import CommitStateUnknownException

    return CommitStateUnknownException(
        f"{exc} The commit's outcome is unknown: the catalog may have committed it. "
        "Nothing was deleted; the next run reads the catalog and finishes the batch "
        "if it is there, or writes it again."
    )


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
