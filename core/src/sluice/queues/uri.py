"""Queues from URIs: ``kafka://host:9092/topic?group_id=g``, ``mqtt://host/sensors/%23?qos=1``.

Transports are registered by scheme and imported only when a URI uses them, so the core runs
without kafka-python or paho-mqtt installed; a missing client library is reported with the
extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..secrets import redact_uri
from .base import MessageQueue
from .config import ConfigError

__all__ = [
    "Transport",
    "config_from_uri",
    "queue_from_config",
    "queue_from_uri",
    "register_transport",
    "transports",
    "uri_to_config",
]


@dataclass(frozen=True)
class Transport:
    """A queue class named by import path, plus what must be installed for it."""

    scheme: str
    target: str  # "package.module:ClassName"
    requires: str | None = None  # client library module that must be importable
    extra: str | None = None  # sluice-core extra that installs it
    protocol: str | None = None  # value for connection.protocol, when the scheme implies one

    def load(self) -> type[MessageQueue]:
        if self.requires and importlib.util.find_spec(self.requires) is None:
            raise ImportError(
                f"The '{self.scheme}://' transport needs the '{self.requires}' package. "
                f"Install it with: pip install 'sluice-core[{self.extra}]'"
            )
        module_name, _, class_name = self.target.partition(":")
        cls: type[MessageQueue] = getattr(importlib.import_module(module_name), class_name)
        return cls


_REGISTRY: dict[str, Transport] = {}


def register_transport(
    scheme: str,
    target: str,
    *,
    requires: str | None = None,
    extra: str | None = None,
    protocol: str | None = None,
) -> None:
    """Make ``scheme://`` URIs build instances of ``target`` ("module:Class")."""
    _REGISTRY[scheme.lower()] = Transport(scheme.lower(), target, requires, extra, protocol)


def transports() -> dict[str, Transport]:
    """The registered transports by scheme."""
    return dict(_REGISTRY)


register_transport("memory", "sluice.queues.memory:MemoryMessageQueue")
register_transport("kafka", "sluice.kafka:KafkaMessageQueue", requires="kafka", extra="kafka")
register_transport(
    "kafka+ssl", "sluice.kafka:KafkaMessageQueue", requires="kafka", extra="kafka", protocol="ssl"
)
register_transport("mqtt", "sluice.mqtt:MqttMessageQueue", requires="paho", extra="mqtt")
register_transport(
    "mqtts", "sluice.mqtt:MqttMessageQueue", requires="paho", extra="mqtt", protocol="mqtts"
)


#: connection.protocol values that keep TLS (the protocols a TLS scheme may be given with).
_TLS_PROTOCOLS = frozenset({"ssl", "tls", "sasl_ssl", "mqtts", "wss", "kafka+ssl"})


def _keep_tls(scheme: str, transport: Transport, given: Any) -> None:
    """A TLS scheme (``kafka+ssl://``, ``mqtts://``) is never undone by a connection.protocol
    (in the URI's query or the config) that has no TLS: that is an error naming both."""
    if transport.protocol and given and str(given).lower() not in _TLS_PROTOCOLS:
        raise ConfigError(
            f"The scheme '{scheme}://' asks for TLS, but connection.protocol is {given!r}, "
            "which has none: leave out connection.protocol, or use a TLS one "
            f"({', '.join(sorted(_TLS_PROTOCOLS))}), or the plain scheme."
        )


def _transport_for(scheme: str) -> Transport:
    transport = _REGISTRY.get(scheme.lower())
    if transport is None:
        known = ", ".join(f"{s}://" for s in sorted(_REGISTRY))
        raise ValueError(f"Unknown queue URI scheme '{scheme}://'. Use one of: {known}.")
    return transport


def uri_to_config(uri: str, known_keys: set[str] | None = None) -> dict[str, Any]:
    """The config keys a URI stands for.

    Host and port become ``connection.host``/``connection.port`` (several servers,
    ``h1:9092,h2:9092``, become ``connection.uri``), user info becomes
    ``credential.username``/``credential.password``, the path (percent-decoded, so ``%23`` is
    ``#``) becomes ``topic``, and each query parameter becomes a key: as written when it is a
    known top-level key or contains a dot, otherwise ``options.<name>``.
    """
    parts = urlsplit(uri)
    if not parts.scheme:
        raise ValueError(
            f"Queue URI '{redact_uri(uri)}' has no scheme; write e.g. kafka://localhost:9092/topic"
        )
    config: dict[str, Any] = {}
    transport = _REGISTRY.get(parts.scheme.lower())
    if transport is not None and transport.protocol:
        config["connection.protocol"] = transport.protocol
    hosts = parts.netloc.rpartition("@")[2]
    if "," in hosts:  # kafka://user:pw@h1:9092,h2:9092/topic: the servers stay a list
        config["connection.uri"] = f"{parts.scheme}://{parts.netloc}"
    else:
        if parts.hostname:
            config["connection.host"] = parts.hostname
        try:
            port = parts.port
        except ValueError:
            raise ValueError(
                f"Queue URI '{redact_uri(uri)}' has an invalid port: write host:port, "
                "e.g. kafka://localhost:9092/topic."
            ) from None
        if port is not None:
            config["connection.port"] = port
    if parts.username:
        config["credential.username"] = unquote(parts.username)
    if parts.password:
        config["credential.password"] = unquote(parts.password)
    topic = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    if topic:
        config["topic"] = topic
    known = known_keys or set()
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        key = name if ("." in name or name in known) else f"options.{name}"
        if key == "connection.protocol" and transport is not None:
            _keep_tls(parts.scheme, transport, value)
        config[key] = value
    return config


def config_from_uri(uri: str) -> tuple[str, dict[str, Any]]:
    """(scheme, config keys) of a queue URI; top-level keys are those of its transport."""
    scheme = urlsplit(uri).scheme
    if not scheme:
        raise ValueError(
            f"Queue URI '{redact_uri(uri)}' has no scheme; write e.g. kafka://localhost:9092/topic"
        )
    cls = _transport_for(scheme).load()
    top_level = {k.name for k in cls.CONFIG_KEYS if not k.name.startswith("options.")}
    return scheme, uri_to_config(uri, top_level)


def source_from(source: str | Mapping[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    """(scheme, config keys) of an ingest's source: a queue URI, or config keys of a ``kind``
    queue. A URI naming several Kafka servers stays whole, as ``connection.uri``."""
    if not isinstance(source, str):
        return kind, dict(source)
    scheme = urlsplit(source).scheme.lower()
    if not scheme:
        raise ConfigError(
            f"source {redact_uri(source)!r} has no scheme; write e.g. kafka://localhost:9092"
        )
    try:
        return scheme, config_from_uri(source)[1]
    except ValueError:  # several Kafka servers: the queue reads them from connection.uri
        return scheme, {"connection.uri": source}


def queue_from_uri(uri: str, name: str | None = None) -> MessageQueue:
    """A configured (not yet opened) queue for ``uri``; the transport is chosen by scheme."""
    scheme, config = config_from_uri(uri)
    return queue_from_config(scheme, config, name)


def queue_from_config(
    scheme: str, config: Mapping[str, Any], name: str | None = None
) -> MessageQueue:
    """A configured (not yet opened) queue of the ``scheme`` transport (``kafka``, ``mqtt``,
    ``kafka+ssl`` ...) from config keys, as an Airflow connection or a Dagster resource has them."""
    transport = _transport_for(scheme)
    values = dict(config)
    if transport.protocol:
        _keep_tls(scheme, transport, values.get("connection.protocol"))
        values.setdefault("connection.protocol", transport.protocol)
    queue = transport.load()(name or values.get("topic"))
    queue.configure(values)
    return queue
