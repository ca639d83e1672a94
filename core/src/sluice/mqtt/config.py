"""The MQTT configuration keys (seed 002 plus Sluice's session, TLS and acknowledgement keys)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..queues.config import ConfigKey

#: Keys of MqttConnection; a queue that owns its connection accepts them too.
CONNECTION_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "client_id",
        str,
        None,
        "MQTT client id. Give one (stable across restarts) for a persistent session.",
    ),
    ConfigKey(
        "options.protocol_version",
        str,
        "3.1.1",
        "MQTT protocol: '3.1.1' or '5'.",
        choices=("3.1.1", "5", "5.0", "3.1"),
    ),
    ConfigKey(
        "options.clean_session",
        bool,
        None,
        "Start a fresh session. Default: false when client_id is given (persistent session), "
        "true otherwise. MQTT 5: clean_start.",
    ),
    ConfigKey(
        "options.session_expiry",
        int,
        86400,
        "MQTT 5: seconds the broker keeps a persistent session while the client is away.",
    ),
    ConfigKey(
        "options.retry_connect", bool, True, "Reconnect automatically when the connection drops."
    ),
    ConfigKey(
        "options.connect_timeout", int, 30000, "Milliseconds open() waits for the broker's CONNACK."
    ),
    ConfigKey(
        "options.reconnect_timeout", int, 1000, "Milliseconds between reconnection attempts."
    ),
    ConfigKey(
        "options.keepalive_timeout",
        int,
        3000,
        "Milliseconds between keep-alive pings (MQTT counts whole seconds, at least 1).",
    ),
    ConfigKey("options.ssl_cafile", str, None, "CA certificate file for TLS (mqtts)."),
    ConfigKey("options.ssl_certfile", str, None, "Client certificate file for TLS."),
    ConfigKey("options.ssl_keyfile", str, None, "Client private key file for TLS."),
    ConfigKey(
        "options.ssl_insecure", bool, False, "Do not check the broker's host name (tests only)."
    ),
)

#: Keys of MqttMessageQueue (seed 002), beyond the connection's.
QUEUE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("topic", str, None, "MQTT topic to publish to; as a filter it may hold + and #."),
    ConfigKey("queue", str, None, "pip-services alias of 'topic'."),
    ConfigKey(
        "autocommit",
        bool,
        True,
        "True: a message is acknowledged when receive() hands it out. False: only complete().",
    ),
    ConfigKey(
        "options.serialize_envelope",
        bool,
        True,
        "Publish the whole envelope as JSON (ids, type, headers survive); false: the payload only.",
    ),
    ConfigKey(
        "options.autosubscribe",
        bool,
        True,
        "Subscribe when the queue opens (default; the seed's is false), so nothing published "
        "after open() is missed. False: at the first read (for queues that only publish).",
    ),
    ConfigKey("options.qos", int, 0, "Quality of service: 0, 1 or 2.", choices=(0, 1, 2)),
    ConfigKey("options.retain", bool, False, "Publish retained messages."),
    ConfigKey(
        "options.dead_letter_topic",
        str,
        None,
        "Topic of move_to_dead_letter (default '<topic>/dlq').",
    ),
)

_TLS_PROTOCOLS = {"mqtts", "ssl", "tls", "wss"}


def broker_address(config: dict[str, Any]) -> tuple[str, int, bool]:
    """(host, port, tls) from connection.uri or connection.host/port/protocol."""
    uri = config.get("connection.uri")
    protocol = str(config.get("connection.protocol") or "").lower()
    if uri:
        parts = urlsplit(uri if "://" in uri else f"mqtt://{uri}")
        protocol = protocol or parts.scheme
        host, port = parts.hostname or "localhost", parts.port
    else:
        host, port = config.get("connection.host") or "localhost", config.get("connection.port")
    tls = protocol in _TLS_PROTOCOLS or bool(config.get("options.ssl_cafile"))
    return str(host), int(port or (8883 if tls else 1883)), tls


def persistent(config: dict[str, Any]) -> bool:
    """Whether the session outlives the connection (a stable client id and no clean session)."""
    clean = config.get("options.clean_session")
    if clean is None:
        clean = not config.get("client_id")
    return bool(config.get("client_id")) and not clean
