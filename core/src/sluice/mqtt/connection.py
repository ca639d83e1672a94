"""MqttConnection: one paho-mqtt 2.x client with manual acknowledgements, shareable by queues
through the reference ``*:connection:mqtt:*:1.0``.

Every successful CONNACK starts a new *generation* of the connection. A message is
acknowledged only on the generation it arrived on, while that connection is up: after a
reconnect its packet id may belong to another message, and a persistent session redelivers
it anyway. :class:`sluice.mqtt.acks.AckLedger` makes that check and the PUBACK one step.

Queues sharing a connection may listen to overlapping filters. A message handed to several
of them is acknowledged when the last one acknowledges it. Under MQTT 5 every filter is
subscribed with its own subscription identifier, because mosquitto sends one copy per
matching subscription: each copy goes only to the listeners of the filter it names. (Under
MQTT 3.1.1 mosquitto sends one copy; a broker that sends one per subscription would
deliver duplicates, which at-least-once consumers de-duplicate by envelope message_id.)
"""

from __future__ import annotations

import logging
import ssl
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pip_services3_commons.config import ConfigParams, IConfigurable
from pip_services3_commons.refer import IReferenceable, IReferences
from pip_services3_commons.run import IOpenable

from ..queues import tls as rule
from ..queues.config import read_config, to_config_params
from ..queues.references import resolve_references
from .acks import AckLedger
from .config import (
    CONNECTION_KEYS,
    Endpoint,
    broker_address,
    checked_address,
    credentials,
    persistent,
    protocol_version,
    whole_seconds,
)

__all__ = ["MqttConnection", "MqttMessageListener"]

log = logging.getLogger("sluice.mqtt")

_CREDENTIAL_REFUSALS = {134, 135, 140}  # bad user name or password, not authorized, bad method
_FAILURE = 0x80
_MAX_SUBSCRIPTION_ID = 268_435_455  # the largest MQTT variable byte integer


def subscription_id(topic: str) -> int:
    """The MQTT 5 subscription identifier of ``topic``: the same in every process, so the
    messages a persistent session kept from an earlier run still find their filter."""
    return zlib.crc32(topic.encode("utf-8")) % _MAX_SUBSCRIPTION_ID + 1


class MqttMessageListener(Protocol):
    """Receives a subscription's messages: pip-services' ``on_message(topic, data, packet)``.

    A listener may also define ``on_connected(session_present: bool)``, called on paho's
    network thread after every (re)connection, before the messages of the new connection.
    A listener that sets ``manual_ack = True`` acknowledges QoS >= 1 messages itself through
    :meth:`MqttConnection.ack` (Sluice's queues do); for any other listener (pip-services
    code) the connection acknowledges a message once the listener's ``on_message`` returns.
    """

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None: ...


@dataclass
class _Pending:
    """A SUBSCRIBE waiting for its SUBACK."""

    done: threading.Event = field(default_factory=threading.Event)
    reasons: list[Any] = field(default_factory=list)


class MqttConnection(IReferenceable, IConfigurable, IOpenable):  # type: ignore[misc]
    """A connection to an MQTT broker (see the module docstring and sluice.mqtt.config)."""

    def __init__(self) -> None:
        self._config: dict[str, Any] = read_config({}, CONNECTION_KEYS, "MqttConnection")
        self._client: paho.Client | None = None
        self._lock = threading.Lock()
        # topic filter -> (QoS subscribed at, or None for dispatch only; its listeners)
        self._subscriptions: dict[str, tuple[int | None, list[MqttMessageListener]]] = {}
        self._connected = threading.Event()
        self._refusal: Any = None  # the CONNACK reason code of a refused connection
        self._pending: dict[int, _Pending] = {}
        self._acks = AckLedger()  # generations and acknowledgements, under their own lock

    # ---- configuration -------------------------------------------------------------------

    def configure(self, config: ConfigParams | Mapping[str, Any]) -> None:
        self.use_config(read_config(to_config_params(config), CONNECTION_KEYS, "MqttConnection"))

    def use_config(self, values: Mapping[str, Any]) -> None:
        """Take already validated values (a queue that owns its connection passes its own)."""
        self._config = dict(values)
        checked_address(self._config)  # a wrong protocol, or a password in clear, fails here

    def set_references(self, references: IReferences) -> None:
        """Resolve ``connection.discovery_key`` and ``credential.store_key`` through the
        discovery services and credential stores in ``references`` (configure first)."""
        self._config = resolve_references(self._config, references, None, "MqttConnection")

    @property
    def address(self) -> str:
        endpoint = broker_address(self._config)
        return f"{endpoint.host}:{endpoint.port}"

    @property
    def is_persistent(self) -> bool:
        return persistent(self._config)

    @property
    def generation(self) -> int:
        """How many times the broker has accepted this connection (see the module docstring)."""
        return self._acks.generation

    @property
    def is_connected(self) -> bool:
        """Whether the connection of the current generation is up (not lost, not closed)."""
        return self._acks.live

    def redelivers(self, generation: int) -> bool:
        """Whether the broker sends again the QoS 1 messages left unacknowledged on connection
        ``generation``: true when the session has survived every reconnection since (the broker
        resends unacknowledged messages on a resumed session), and while disconnected when
        the session is persistent (they come to the next connection)."""
        return self._acks.redelivers(generation)

    def __repr__(self) -> str:
        return f"MqttConnection({self.address}, open={self.is_open()})"

    # ---- lifecycle -----------------------------------------------------------------------

    def is_open(self) -> bool:
        return self._client is not None

    def open(self, correlation_id: str | None = None) -> None:
        """Connect and wait for the broker's CONNACK (``options.connect_timeout``)."""
        if self._client is not None:
            return
        endpoint = checked_address(self._config)  # credentials may come from references
        client = self._new_client(endpoint)
        self._connected.clear()
        self._refusal = None
        self._connect(client, endpoint)
        client.loop_start()
        timeout = self._config["options.connect_timeout"]
        if self._connected.wait(timeout / 1000) and self._refusal is None:
            self._client = client
            return
        client.disconnect()  # also stops paho's reconnect loop
        client.loop_stop()
        if self._refusal is not None:
            raise self._refused(self._refusal)
        raise ConnectionError(
            f"No answer from the MQTT broker at {self.address} within {timeout} ms. "
            "Check the address and options.connect_timeout."
        )

    def _new_client(self, endpoint: Endpoint) -> paho.Client:
        config = self._config
        v5 = protocol_version(config) == paho.MQTTv5
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=config.get("client_id") or "",
            clean_session=None if v5 else not self.is_persistent,
            protocol=protocol_version(config),
            transport="websockets" if endpoint.transport == "websockets" else "tcp",
            reconnect_on_failure=bool(config["options.retry_connect"]),
            manual_ack=True,
        )
        username, password = credentials(config)
        if username:
            client.username_pw_set(username, password)
        if endpoint.tls:
            client.tls_set(
                ca_certs=config.get("options.ssl_cafile"),
                certfile=config.get("options.ssl_certfile"),
                keyfile=config.get("options.ssl_keyfile"),
            )
            client.tls_insecure_set(bool(config["options.ssl_insecure"]))
        if endpoint.transport == "websockets":
            client.ws_set_options(path=config["options.ws_path"])
        delay = whole_seconds(config["options.reconnect_timeout"])
        client.reconnect_delay_set(delay, max(delay, 30))
        client.connect_timeout = config["options.connect_timeout"] / 1000
        client.on_connect = self._on_connect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        return client

    def _connect(self, client: paho.Client, endpoint: Endpoint) -> None:
        config = self._config
        v5 = protocol_version(config) == paho.MQTTv5
        properties = None
        if v5:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = (
                config["options.session_expiry"] if self.is_persistent else 0
            )
        keepalive = whole_seconds(config["options.keepalive_timeout"])
        try:
            client.connect(
                endpoint.host,
                endpoint.port,
                keepalive,
                clean_start=not self.is_persistent if v5 else paho.MQTT_CLEAN_START_FIRST_ONLY,
                properties=properties,
            )
        except OSError as exc:  # ssl.SSLError too
            if endpoint.tls and rule.answered_in_plaintext(exc):
                raise ConnectionError(
                    rule.plaintext_answer(self.address, endpoint.tls_switched_by, exc)
                ) from None
            if not isinstance(exc, ssl.SSLError):
                raise ConnectionError(
                    f"Cannot connect to the MQTT broker at {self.address}: {exc}. "
                    "Check connection.host and connection.port (or connection.uri) "
                    "and that the broker is running."
                ) from None
            raise ConnectionError(
                f"The TLS handshake with the MQTT broker at {self.address} failed: {exc}. "
                "Check options.ssl_cafile (the CA that signed the broker's certificate), "
                "options.ssl_certfile/ssl_keyfile, and that the port speaks TLS."
            ) from None

    def _refused(self, reason: Any) -> ConnectionError:
        """The error for a refused CONNECT, saying what to change (never showing a password)."""
        username, _ = credentials(self._config)
        where = f"The MQTT broker at {self.address}"
        if reason.value in _CREDENTIAL_REFUSALS:
            if not username:
                return ConnectionError(
                    f"{where} refused an anonymous connection ({reason}). "
                    "Set credential.username and credential.password."
                )
            return ConnectionError(
                f"{where} refused the credentials of user {username!r} ({reason}). "
                "Check credential.username and credential.password."
            )
        if reason.value == 132:
            return ConnectionError(
                f"{where} does not speak MQTT {self._config['options.protocol_version']} "
                f"({reason}). Set options.protocol_version."
            )
        if reason.value == 133:
            return ConnectionError(
                f"{where} rejected client_id {self._config.get('client_id')!r} ({reason}). "
                "Choose another client_id."
            )
        return ConnectionError(f"{where} refused the connection ({reason}).")

    def close(self, correlation_id: str | None = None) -> None:
        """Disconnect. A persistent session keeps its subscriptions and unacknowledged messages."""
        client, self._client = self._client, None
        if client is not None:
            self._acks.disconnected(self.is_persistent)  # PUBACKs queued so far go before it
            client.disconnect()
            client.loop_stop()
        with self._lock:
            self._subscriptions.clear()

    def get_connection(self) -> paho.Client | None:
        """The paho client; None before ``open`` and after ``close``, as in pip-services."""
        return self._client

    def read_queue_names(self) -> list[str]:
        """MQTT brokers do not list their topics: always empty, as in pip-services."""
        return []

    def create_queue(self, name: str) -> None:
        """Nothing to do: MQTT topics exist as soon as someone publishes to them."""

    def delete_queue(self, name: str) -> None:
        """Nothing to do: MQTT topics cannot be deleted."""

    # ---- paho callbacks (network thread) -------------------------------------------------

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if reason.is_failure:
            self._refusal = reason
            if self._client is not None:  # a reconnection: paho keeps trying
                log.error("%s", self._refused(reason))
            self._connected.set()
            return
        generation = self._acks.connected(flags.session_present)
        if generation > 1 and self.is_persistent and not flags.session_present:
            log.warning(
                "the MQTT broker at %s lost the persistent session of client %r: "
                "QoS 1/2 messages published while disconnected are lost; subscribing again",
                self.address,
                self._config.get("client_id"),
            )
        with self._lock:
            filters = [(t, qos) for t, (qos, _) in self._subscriptions.items() if qos is not None]
            listeners = [x for _, registered in self._subscriptions.values() for x in registered]
        for topic, qos in filters:  # every time: a clean session has forgotten them
            self._send_subscribe(client, topic, qos)
        for listener in dict.fromkeys(listeners):
            notify = getattr(listener, "on_connected", None)
            if notify is not None:
                notify(flags.session_present)
        log.info("connected to %s (session present: %s)", self.address, flags.session_present)
        self._connected.set()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        # Before paho's reconnect() empties its outgoing queue: no PUBACK of this connection
        # can be queued after it and reach the next connection.
        self._acks.disconnected(self.is_persistent)
        if self._client is None:
            return
        if self._config["options.retry_connect"]:
            log.warning("disconnected from %s (%s); reconnecting", self.address, reason)
        else:
            log.error(
                "disconnected from %s (%s); not reconnecting (options.retry_connect is false)",
                self.address,
                reason,
            )

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        with self._lock:
            pending = self._pending.pop(mid, None)
        if pending is None:  # a subscription renewed after a reconnection
            for reason in reasons:
                if reason.value >= _FAILURE:
                    log.error(
                        "the MQTT broker at %s refused a subscription: %s", self.address, reason
                    )
            return
        pending.reasons = list(reasons)
        pending.done.set()

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        # MQTT 5: mosquitto sends one copy per matching subscription, each naming its own
        ids = getattr(getattr(message, "properties", None), "SubscriptionIdentifier", None) or []
        with self._lock:
            listeners = [
                listener
                for topic, (_, registered) in self._subscriptions.items()
                if paho.topic_matches_sub(topic, message.topic)
                and (not ids or subscription_id(topic) in ids)
                for listener in registered
            ]
        generation = self._acks.generation
        if message.qos > 0:
            self._acks.share(message.mid, generation, len(listeners))
        if not listeners:
            log.debug(
                "no queue listens to %r; message %d left unacknowledged", message.topic, message.mid
            )
        for listener in listeners:
            listener.on_message(message.topic, bytes(message.payload), message)
            if message.qos > 0 and not getattr(listener, "manual_ack", False):
                self.ack(message.mid, message.qos, generation)

    # ---- messaging -----------------------------------------------------------------------

    def _check_open(self) -> paho.Client:
        if self._client is None:
            raise ConnectionError("The MQTT connection is not opened; call open() first.")
        return self._client

    def publish(
        self,
        topic: str,
        payload: bytes | str | None,
        qos: int | Mapping[str, Any] = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Publish and, for QoS >= 1, wait until the broker has it.

        ``qos`` may also be pip-services3-mqtt's options dict (``{"qos": 1, "retain": False}``).

        While the connection is down paho keeps a QoS >= 1 message and sends it on reconnect;
        this waits for that too (up to ``options.connect_timeout``). A QoS 0 message cannot
        wait: publishing one while disconnected raises ``ConnectionError``.
        """
        if isinstance(qos, Mapping):
            options = qos
            qos, retain = int(options.get("qos", 0)), bool(options.get("retain", retain))
        info = self._check_open().publish(topic, payload, qos, retain, properties)
        queued = qos > 0 and info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS and not queued:
            raise ConnectionError(
                f"Publishing to '{topic}' at {self.address} failed: {paho.error_string(info.rc)}"
            )
        if qos > 0:
            self._wait_published(info, topic)

    def _wait_published(self, info: paho.MQTTMessageInfo, topic: str) -> None:
        timeout = self._config["options.connect_timeout"] / 1000
        # info.wait_for_publish() gives up at once on a message queued while disconnected, so
        # wait on the condition paho signals when the broker acknowledges it (paho 2.2).
        with info._condition:
            if not info._condition.wait_for(lambda: info._published, timeout):
                raise TimeoutError(
                    f"The MQTT broker at {self.address} did not acknowledge a message on "
                    f"'{topic}' within {timeout:.0f} s; paho keeps it and sends it once "
                    "reconnected."
                )

    def add_listener(self, topic: str, listener: MqttMessageListener) -> None:
        """Deliver messages matching ``topic`` to ``listener`` without subscribing at the broker.

        Registered before ``open()``, it receives what a persistent session redelivers at once.
        """
        with self._lock:
            _, listeners = self._subscriptions.setdefault(topic, (None, []))
            if listener not in listeners:
                listeners.append(listener)

    def subscribe(
        self, topic: str, qos: int | Mapping[str, Any], listener: MqttMessageListener
    ) -> None:
        """Deliver messages matching ``topic`` (+ and # allowed) to ``listener``.

        ``qos`` may also be pip-services3-mqtt's options dict (``{"qos": 1}``).

        Waits for the broker's SUBACK; raises ``ConnectionError`` if the broker refuses."""
        if isinstance(qos, Mapping):
            qos = int(qos.get("qos", 0))
        client = self._check_open()
        self.add_listener(topic, listener)
        with self._lock:
            subscribed, listeners = self._subscriptions[topic]
            if subscribed is not None and subscribed >= qos:
                return
            self._subscriptions[topic] = (qos, listeners)
            pending = _Pending()
            result, mid = self._send_subscribe(client, topic, qos)
            if result == MQTTErrorCode.MQTT_ERR_SUCCESS and mid is not None:
                self._pending[mid] = pending
            else:  # not connected right now: _on_connect subscribes when the connection is back
                pending.done.set()
        if not pending.done.wait(self._config["options.connect_timeout"] / 1000):
            raise ConnectionError(
                f"The MQTT broker at {self.address} did not confirm the subscription to '{topic}'."
            )
        self._check_granted(topic, qos, pending.reasons)

    def _send_subscribe(
        self, client: paho.Client, topic: str, qos: int
    ) -> tuple[MQTTErrorCode, int | None]:
        if protocol_version(self._config) != paho.MQTTv5:
            return client.subscribe(topic, qos)
        properties = Properties(PacketTypes.SUBSCRIBE)  # type: ignore[no-untyped-call]
        properties.SubscriptionIdentifier = subscription_id(topic)
        return client.subscribe(topic, qos, properties=properties)

    def _check_granted(self, topic: str, qos: int, reasons: list[Any]) -> None:
        for reason in reasons:
            if reason.value >= _FAILURE:
                with self._lock:
                    self._subscriptions.pop(topic, None)
                raise ConnectionError(
                    f"The MQTT broker at {self.address} refused the subscription to '{topic}' "
                    f"({reason}). Check the broker's access rules for this user and topic."
                )
            if reason.value < qos:
                log.warning(
                    "the MQTT broker at %s granted QoS %d, not %d, on '%s'",
                    self.address,
                    reason.value,
                    qos,
                    topic,
                )

    def unsubscribe(
        self, topic: str, listener: MqttMessageListener, at_broker: bool = True
    ) -> None:
        """Stop delivering to ``listener``. With ``at_broker`` (a connection that stays open)
        the last listener of ``topic`` also unsubscribes at the broker, so the broker stops
        sending what nobody would acknowledge."""
        with self._lock:
            subscribed, listeners = self._subscriptions.get(topic, (None, []))
            if listener in listeners:
                listeners.remove(listener)
            if listeners:
                return
            self._subscriptions.pop(topic, None)
        if at_broker and subscribed is not None and self._client is not None:
            self._client.unsubscribe(topic)

    def ack(self, mid: int, qos: int, generation: int) -> bool:
        """Acknowledge a message (PUBACK, or PUBCOMP for QoS 2) that arrived on ``generation``.

        Does nothing (and returns False) for QoS 0, on a closed or lost connection, when the
        connection has been re-established since (the packet id may then be another
        message's), or while other listeners still hold the message."""
        client = self._client
        if client is None:
            return False
        return self._acks.ack(mid, qos, generation, client.ack)
