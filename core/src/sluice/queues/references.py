"""``connection.discovery_key`` and ``credential.store_key``: resolved through references.

pip-services components may name their connection by a key that a discovery service
(``*:discovery:*:*:1.0``, e.g. ``MemoryDiscovery``) resolves, and their credential by a key
that a credential store (``*:credential-store:*:*:1.0``, e.g. ``MemoryCredentialStore``)
resolves. :func:`resolve_references` turns such a configuration into one with plain
``connection.*`` and ``credential.*`` values, the only ones the clients understand.

Unlike pip-services' own resolvers, a key that nothing resolves is an error that says what
to register: pip-services silently falls back to no connection or no credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pip_services3_commons.refer import Descriptor, IReferences
from pip_services3_components.auth import CredentialParams, ICredentialStore
from pip_services3_components.connect import ConnectionParams, IDiscovery

from .config import ConfigError

__all__ = ["apply_connections", "apply_credential", "resolve_references"]

DISCOVERY = Descriptor("*", "discovery", "*", "*", "*")
CREDENTIAL_STORE = Descriptor("*", "credential-store", "*", "*", "*")
_CONNECTION_FIELDS = ("protocol", "host", "port", "uri")
_CREDENTIAL_FIELDS = ("username", "password", "access_id", "access_key", "mechanism")


def resolve_references(
    config: Mapping[str, Any],
    references: IReferences | None,
    correlation_id: str | None,
    component: str,
    *,
    join_servers: bool = False,
) -> dict[str, Any]:
    """``config`` with its discovery and store keys resolved (unchanged if it has neither).

    ``join_servers`` (Kafka): several connections found under one discovery key become one
    ``connection.uri`` listing every ``host:port``; otherwise the first one is used.
    """
    resolved = dict(config)
    discovery_key = config.get("connection.discovery_key")
    if discovery_key:
        found = _discover(str(discovery_key), references, correlation_id, component)
        resolved = apply_connections(resolved, found, join_servers=join_servers)
    store_key = config.get("credential.store_key")
    if store_key:
        credential = _look_up(str(store_key), references, correlation_id, component)
        resolved = apply_credential(resolved, credential)
    return resolved


def apply_connections(
    config: Mapping[str, Any], connections: list[ConnectionParams], *, join_servers: bool = False
) -> dict[str, Any]:
    """``config`` with its ``connection.*`` values taken from ``connections`` (configured
    values stay where the found connection has none, as pip-services merges them)."""
    result = dict(config)
    if not connections:
        return result
    first = connections[0]
    for name in _CONNECTION_FIELDS:
        value = first.get_as_nullable_string(name)
        if value:
            result[f"connection.{name}"] = int(value) if name == "port" else value
    if first.get_as_nullable_string("uri"):
        result["connection.host"] = result["connection.port"] = None
    if join_servers and len(connections) > 1:
        result["connection.uri"] = ",".join(_server(c, config) for c in connections)
        result["connection.host"] = result["connection.port"] = None
    return result


def apply_credential(
    config: Mapping[str, Any], credential: CredentialParams | None
) -> dict[str, Any]:
    """``config`` with the ``credential.*`` values ``credential`` has (keys ``config`` knows)."""
    result = dict(config)
    if credential is None:
        return result
    for name in _CREDENTIAL_FIELDS:
        key = f"credential.{name}"
        value = credential.get_as_nullable_string(name)
        if key in result and value:
            result[key] = value
    if credential.get_username():  # pip-services also accepts "user" and "pass"
        result["credential.username"] = credential.get_username()
    if credential.get_password():
        result["credential.password"] = credential.get_password()
    return result


def _server(connection: ConnectionParams, config: Mapping[str, Any]) -> str:
    uri = connection.get_as_nullable_string("uri")
    if uri:
        return str(uri).rpartition("://")[2].split("/", 1)[0]
    host = connection.get_as_nullable_string("host") or config.get("connection.host")
    port = connection.get_as_nullable_string("port") or config.get("connection.port")
    return f"{host or 'localhost'}:{port or 9092}"


def _discover(
    key: str, references: IReferences | None, correlation_id: str | None, component: str
) -> list[ConnectionParams]:
    services = [
        s for s in (references.get_optional(DISCOVERY) if references else []) if _is(s, IDiscovery)
    ]
    if not services:
        raise ConfigError(
            f"{component}: connection.discovery_key '{key}' needs a discovery service. Put one "
            "(e.g. pip-services' MemoryDiscovery, descriptor pip-services:discovery:memory:"
            "default:1.0) in the references passed to set_references(), or configure "
            "connection.host/port or connection.uri instead."
        )
    found: list[ConnectionParams] = []
    for service in services:
        found += service.resolve_all(correlation_id, key) or []
    if not found:
        raise ConfigError(
            f"{component}: no discovery service knows connection.discovery_key '{key}'. "
            f"Register the connection under '{key}' (discovery.register(...) or its "
            f"'connections.{key}.*' configuration), or fix the key."
        )
    return found


def _look_up(
    key: str, references: IReferences | None, correlation_id: str | None, component: str
) -> CredentialParams:
    stores = [
        s
        for s in (references.get_optional(CREDENTIAL_STORE) if references else [])
        if _is(s, ICredentialStore)
    ]
    if not stores:
        raise ConfigError(
            f"{component}: credential.store_key '{key}' needs a credential store. Put one "
            "(e.g. pip-services' MemoryCredentialStore, descriptor pip-services:"
            "credential-store:memory:default:1.0) in the references passed to "
            "set_references(), or configure credential.username/password instead."
        )
    for store in stores:
        credential = store.lookup(correlation_id, key)
        if credential:  # MemoryCredentialStore answers an unknown key with empty params
            return credential
    raise ConfigError(
        f"{component}: no credential store knows credential.store_key '{key}'. Store the "
        f"credential under '{key}' (store.store(...) or its '{key}.*' configuration), "
        "or fix the key."
    )


def _is(component: object, interface: type) -> bool:
    """pip-services' interfaces are plain classes, but a look-alike without the base counts."""
    method = "resolve_all" if interface is IDiscovery else "lookup"
    return isinstance(component, interface) or callable(getattr(component, method, None))
