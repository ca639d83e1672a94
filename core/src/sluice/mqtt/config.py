"""The MQTT configuration keys (pip-services' MqttMessageQueue keys plus Sluice's session, TLS
and acknowledgement keys), and what they mean for the client: the broker's address, the protocol
and the session."""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTProtocolVersion

from ..queues import tls as rule
from ..queues.config import ConfigError, ConfigKey

#: options.protocol_version's accepted spellings and paho's protocol constants.
PROTOCOL_VERSIONS: dict[str, MQTTProtocolVersion] = {
    "3.1": paho.MQTTv31,
    "3.1.1": paho.MQTTv311,
    "5": paho.MQTTv5,
    "5.0": paho.MQTTv5,
}

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
        "MQTT protocol: '3.1.1' or '5' ('3.1' for old brokers).",
        choices=tuple(PROTOCOL_VERSIONS),
    ),
    ConfigKey(
        "options.clean_session",
        bool,
        None,
        "Start a fresh session. Default: false when client_id is given (persistent session), "
        "true otherwise.",
    ),
    ConfigKey(
        "options.clean_start",
        bool,
        None,
        "MQTT 5 name of options.clean_session (it wins over clean_session under MQTT 5).",
    ),
    ConfigKey(
        "options.session_expiry",
        int,
        86400,
        "MQTT 5: seconds the broker keeps a persistent session while the client is away "
        "(0: the session ends with the connection).",
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
    ConfigKey(
        "options.ssl_cafile",
        str,
        None,
        "CA certificate file for TLS (switches TLS on, port 8883 by default; an error with a "
        "plaintext connection.protocol).",
    ),
    ConfigKey("options.ssl_certfile", str, None, "Client certificate file (switches TLS on)."),
    ConfigKey("options.ssl_keyfile", str, None, "Client private key file (switches TLS on)."),
    ConfigKey(
        "options.ssl_insecure", bool, False, "Do not check the broker's host name (tests only)."
    ),
    *rule.KEYS,
    ConfigKey("options.ws_path", str, "/mqtt", "HTTP path of an MQTT-over-WebSocket (ws, wss)."),
)

#: Keys of MqttMessageQueue (as pip-services' MqttMessageQueue), beyond the connection's.
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
        "Topic of move_to_dead_letter (default '<topic>/dlq'; for a filter, its part before "
        "the first wildcard + '/dlq').",
    ),
)

_PROTOCOLS = {
    # connection.protocol or URI scheme -> (TLS, paho transport)
    "mqtt": (False, "tcp"),
    "tcp": (False, "tcp"),
    "mqtts": (True, "tcp"),
    "ssl": (True, "tcp"),
    "tls": (True, "tcp"),
    "ws": (False, "websockets"),
    "wss": (True, "websockets"),
}

_DEFAULT_PORTS = {
    (False, "tcp"): 1883,
    (True, "tcp"): 8883,
    (False, "websockets"): 80,
    (True, "websockets"): 443,
}


class Endpoint(NamedTuple):
    """Where and how to reach the broker."""

    host: str
    port: int
    tls: bool
    transport: str  # paho's "tcp" or "websockets"
    #: the TLS files that switched TLS on, where the protocol named none
    tls_switched_by: tuple[str, ...] = ()


def _known_protocol(protocol: str, where: str) -> str:
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"{where} '{protocol}' is not an MQTT protocol; "
            f"use one of {', '.join(sorted(_PROTOCOLS))}."
        )
    return protocol


def _describe(protocol: str) -> str:
    tls, transport = _PROTOCOLS[protocol]
    return f"{'TLS' if tls else 'no TLS'}, {'WebSocket' if transport == 'websockets' else 'TCP'}"


def broker_address(config: dict[str, Any]) -> Endpoint:
    """The broker's endpoint from connection.uri or connection.host/port/protocol.

    An explicit ``connection.protocol`` and the scheme of ``connection.uri`` must agree (TLS
    and transport): ``mqtts://`` with ``connection.protocol`` mqtt is a :class:`ConfigError`,
    never a silent downgrade to plaintext; ``mqtts://`` with ssl or tls passes. A TLS file
    (``options.ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``) switches TLS on, or is an
    error with a plaintext ``connection.protocol`` (:func:`sluice.queues.tls.tls_switched_on`).
    """
    uri = config.get("connection.uri")
    protocol = explicit = str(config.get("connection.protocol") or "").lower()
    if protocol:
        _known_protocol(protocol, "connection.protocol")
    if uri:
        parts = urlsplit(uri if "://" in uri else f"mqtt://{uri}")
        if "://" in uri:
            scheme = _known_protocol(parts.scheme.lower(), "The scheme of connection.uri")
            if protocol and _PROTOCOLS[protocol] != _PROTOCOLS[scheme]:
                raise ConfigError(
                    f"config key 'connection.protocol' is '{protocol}' ({_describe(protocol)}) "
                    f"but the scheme of config key 'connection.uri' is '{scheme}://' "
                    f"({_describe(scheme)}): they must agree. Leave out connection.protocol, "
                    "or make the two match (e.g. mqtts:// with ssl or mqtts, mqtt:// with tcp "
                    "or mqtt)."
                )
            protocol = protocol or scheme
        host, port = parts.hostname, parts.port
    else:
        host, port = config.get("connection.host"), config.get("connection.port")
    named, transport = _PROTOCOLS[protocol or "mqtt"]
    tls = rule.tls_switched_on(
        config,
        "MqttConnection",
        tls=named,
        plaintext_chosen=f"config key 'connection.protocol' is '{explicit}'" if explicit else None,
    )
    return Endpoint(
        str(host or "localhost"),
        int(port or _DEFAULT_PORTS[tls, transport]),
        tls,
        transport,
        rule.switched_on_by(config, tls=named),
    )


def credentials(config: dict[str, Any]) -> tuple[str | None, str | None]:
    """(username, password): credential.* keys, else the user info of connection.uri."""
    username, password = config.get("credential.username"), config.get("credential.password")
    uri = config.get("connection.uri")
    if not username and uri and "@" in uri:
        parts = urlsplit(uri if "://" in uri else f"mqtt://{uri}")
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
    return username, password


def checked_address(config: dict[str, Any]) -> Endpoint:
    """:func:`broker_address`, once the rule of every transport holds for the credentials
    (:func:`sluice.queues.tls.check_credentials`): an MQTT CONNECT carries the password as it
    is, so a password without TLS needs ``options.allow_plaintext_credentials``."""
    endpoint = broker_address(config)
    protocol = str(config.get("connection.protocol") or "").lower()
    uri = str(config.get("connection.uri") or "")
    if protocol:
        where = f"config key 'connection.protocol' is '{protocol}'"
    elif "://" in uri:
        where = f"the scheme of config key 'connection.uri' is '{urlsplit(uri).scheme}://'"
    else:
        where = "no protocol is configured (the default is plaintext)"
    rule.check_credentials(
        config,
        "MqttConnection",
        tls=endpoint.tls,
        sends_password=bool(credentials(config)[1]),
        where=where,
        use_tls="an mqtts:// (or wss://) URI, or config key 'connection.protocol' mqtts, or "
        "config key 'options.ssl_cafile' (the CA of the broker's certificate; it switches TLS "
        "on)",
    )
    return endpoint


def protocol_version(config: dict[str, Any]) -> MQTTProtocolVersion:
    """paho's protocol constant for options.protocol_version (3.1.1 when it is not set).

    An unknown version is a :class:`ConfigError` (a queue's ``configure`` refuses it already;
    this guards configs that did not go through it), never a silent 3.1.1.
    """
    value = config.get("options.protocol_version")
    version = "3.1.1" if value is None or value == "" else str(value)
    if version not in PROTOCOL_VERSIONS:
        raise ConfigError(
            f"config key 'options.protocol_version' must be one of "
            f"{', '.join(map(repr, PROTOCOL_VERSIONS))}, got {version!r}."
        )
    return PROTOCOL_VERSIONS[version]


def persistent(config: dict[str, Any]) -> bool:
    """Whether the session outlives the connection: a stable client id, no clean session/start
    and, under MQTT 5, a session expiry above 0."""
    v5 = protocol_version(config) == paho.MQTTv5
    clean = config.get("options.clean_start") if v5 else None
    if clean is None:
        clean = config.get("options.clean_session")
    if clean is None:
        clean = not config.get("client_id")
    if v5 and not config.get("options.session_expiry"):
        return False
    return bool(config.get("client_id")) and not clean


def whole_seconds(milliseconds: int) -> int:
    """MQTT and paho count keep-alive and reconnect delays in whole seconds: round up, min 1."""
    return max(1, math.ceil(milliseconds / 1000))


def check_topic_filter(topic: str, key: str = "topic") -> str:
    """``topic`` if it is a valid MQTT topic filter (``+`` a whole level, ``#`` the last one)."""
    levels = topic.split("/")
    for index, level in enumerate(levels):
        bad_plus = "+" in level and level != "+"
        bad_hash = "#" in level and (level != "#" or index != len(levels) - 1)
        if bad_plus or bad_hash:
            raise ConfigError(
                f"config key '{key}': '{topic}' is not a valid MQTT topic filter: '+' must be a "
                "whole level and '#' the whole last level (e.g. 'plant/+/temp', 'plant/#')."
            )
    if not topic or "\x00" in topic:
        raise ConfigError(f"config key '{key}': an MQTT topic cannot be empty or contain NUL.")
    return topic


def is_filter(topic: str) -> bool:
    """Whether ``topic`` holds a wildcard (so it can be subscribed to but not published to)."""
    return "+" in topic or "#" in topic


def dead_letter_topic(config: dict[str, Any], topic: str) -> str:
    """options.dead_letter_topic, or ``<topic>/dlq``; for a filter, its part before the first
    wildcard plus ``/dlq``. Never a topic the queue's own filter would read back."""
    configured = config.get("options.dead_letter_topic")
    key = "options.dead_letter_topic"
    if configured:
        name = check_topic_filter(str(configured), key)
    elif is_filter(topic):
        prefix = topic.split("+", 1)[0].split("#", 1)[0].rstrip("/")
        name = f"{prefix}/dlq" if prefix else "dlq"
    else:
        name = f"{topic}/dlq"
    if is_filter(name):
        raise ConfigError(f"config key '{key}': '{name}' holds a wildcard; name one topic.")
    if paho.topic_matches_sub(topic, name):
        raise ConfigError(
            f"The dead-letter topic '{name}' matches the queue's own filter '{topic}', so dead "
            f"letters would come back to it: set '{key}' to a topic outside the filter."
        )
    return name
