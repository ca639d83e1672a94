"""Connection fields to config keys: how an Airflow Connection or a Dagster resource becomes
the one config vocabulary (docs/architecture.md).

A connection has a host, a port, a login, a password and a mapping of further keys (an Airflow
Connection's extra JSON, a Dagster resource's ``config`` field). :func:`config_from_fields`
turns them into config keys for :func:`sluice.queues.queue_from_config`; unlike a queue's own
``configure`` (which only warns), an unknown key here is an error naming it, because a
connection is written by hand once and read by every task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .queues.config import COMMON_KEYS, ConfigError, ConfigKey, did_you_mean
from .queues.uri import transports
from .secrets import is_secret_key

__all__ = [
    "KINDS",
    "check_keys",
    "check_no_secrets",
    "config_from_fields",
    "known_keys",
    "secret_keys",
]

#: The queue kinds a connection can name, as the transport scheme each stands for.
KINDS = ("kafka", "mqtt")


def known_keys(kind: str) -> dict[str, ConfigKey]:
    """Every config key a queue of ``kind`` ("kafka" or "mqtt") understands, by name."""
    if kind not in KINDS:
        raise ConfigError(f"Unknown queue kind {kind!r}: use one of {', '.join(KINDS)}.")
    cls = transports()[kind].load()
    return {k.name: k for k in (*COMMON_KEYS, *cls.CONFIG_KEYS)}


def secret_keys(kind: str) -> set[str]:
    """The names of the keys of ``kind`` whose values are secrets."""
    return {name for name, key in known_keys(kind).items() if key.secret or is_secret_key(name)}


def check_keys(kind: str, keys: Iterable[str], where: str) -> None:
    """Raise :class:`ConfigError` naming the first key of ``keys`` that ``kind`` does not know."""
    known = known_keys(kind)
    for key in keys:
        if key not in known:
            raise ConfigError(
                f"{where}: unknown config key '{key}' for a {kind} queue."
                f"{did_you_mean(key, known)} "
                f"Known keys: {', '.join(sorted(known))}."
            )


def check_no_secrets(config: Mapping[str, Any] | None, where: str) -> None:
    """Raise :class:`ConfigError` if ``config`` (a task's settings, which end up in serialized
    DAGs and triggers) holds a credential: those belong in the connection."""
    secret_names = {k.name for k in COMMON_KEYS if k.secret}
    for key in config or {}:
        if is_secret_key(str(key), secret_names):
            raise ConfigError(
                f"{where}: config key '{key}' is a secret; put it in the connection (its "
                "password field or extra), not in the task's config."
            )


def _strip_prefix(key: str, prefix: str | None) -> str:
    # Airflow's connection form stores custom fields as extra__<conn_type>__<name>.
    if prefix and key.startswith(prefix):
        return key[len(prefix) :]
    return key


def config_from_fields(
    kind: str,
    *,
    host: str | None = None,
    port: int | None = None,
    username: str | None = None,
    password: str | None = None,
    extra: Mapping[str, Any] | None = None,
    topic: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    where: str = "connection",
    field_prefix: str | None = None,
) -> dict[str, Any]:
    """Config keys for a ``kind`` queue from a connection's fields.

    ``host`` may be a host name, a list of servers (``h1:9092,h2:9092``) or a URI
    (``kafka://h:9092``); the latter two become ``connection.uri``. ``username``/``password``
    become ``credential.username``/``credential.password``. ``extra`` holds further config keys
    (``group_id``, ``options.qos`` ...); empty values are left out. ``overrides`` (a task's own
    settings) win over the connection; ``topic`` wins over both. A key ``kind`` does not know
    raises :class:`ConfigError` naming it and ``where`` it came from.
    """
    config: dict[str, Any] = {}
    if host:
        if "://" in host or "," in host:
            config["connection.uri"] = host
        else:
            config["connection.host"] = host
    if port:
        config["connection.port"] = int(port)
    if username:
        config["credential.username"] = username
    if password:
        config["credential.password"] = password
    extras = {
        _strip_prefix(str(key), field_prefix): value
        for key, value in (extra or {}).items()
        if value is not None and value != ""
    }
    check_keys(kind, extras, f"{where} extra")
    config.update(extras)
    if overrides:
        check_keys(kind, overrides, f"{where} overrides")
        config.update(overrides)
    if topic:
        config["topic"] = topic
    return config
