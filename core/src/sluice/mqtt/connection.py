"""MqttConnection: one paho-mqtt 2.x client with manual acknowledgements, shareable by queues
through the reference ``*:connection:mqtt:*:1.0``."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pip_services3_commons.config import ConfigParams, IConfigurable
from pip_services3_commons.refer import IReferenceable, IReferences
from pip_services3_commons.run import IOpenable

from ..queues.config import read_config, to_config_params
from .config import CONNECTION_KEYS, broker_address, persistent

__all__ = ["MqttConnection", "MqttMessageListener"]

log = logging.getLogger("sluice.mqtt")


class MqttMessageListener(Protocol):
    """Receives a subscription's messages: pip-services' ``on_message(topic, data, packet)``."""

    def on_message(self, topic: str, data: bytes, packet: paho.MQTTMessage) -> None: ...


class MqttConnection(IReferenceable, IConfigurable, IOpenable):  # type: ignore[misc]
    """A connection to an MQTT broker (see the module docstring and sluice.mqtt.config)."""

    def __init__(self) -> None:
        self._config: dict[str, Any] = read_config({}, CONNECTION_KEYS, "MqttConnection")
        self._client: paho.Client | None = None
        self._lock = threading.Lock()
        # topic filter -> (QoS subscribed at, or None for dispatch only; its listeners)
        self._subscriptions: dict[str, tuple[int | None, list[MqttMessageListener]]] = {}
        self._connected = threading.Event()
        self._failure: str | None = None
        self._subacks: dict[int, threading.Event] = {}

    # ---- configuration -------------------------------------------------------------------

    def configure(self, config: ConfigParams | Mapping[str, Any]) -> None:
        self.use_config(read_config(to_config_params(config), CONNECTION_KEYS, "MqttConnection"))

    def use_config(self, values: Mapping[str, Any]) -> None:
        """Take already validated values (a queue that owns its connection passes its own)."""
        self._config = dict(values)

    def set_references(self, references: IReferences) -> None:
        """Nothing to resolve: connection and credentials come from the configuration."""

    @property
    def address(self) -> str:
        host, port, _ = broker_address(self._config)
        return f"{host}:{port}"

    @property
    def is_persistent(self) -> bool:
        return persistent(self._config)

    def __repr__(self) -> str:
        return f"MqttConnection({self.address}, open={self.is_open()})"

    # ---- lifecycle -----------------------------------------------------------------------

    def is_open(self) -> bool:
        return self._client is not None

    def open(self, correlation_id: str | None = None) -> None:
        """Connect and wait for the broker's CONNACK (``options.connect_timeout``)."""
        if self._client is not None:
            return
        config = self._config
        host, port, tls = broker_address(config)
        v5 = str(config["options.protocol_version"]).startswith("5")
        keep = self.is_persistent
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=config.get("client_id") or "",
            clean_session=None if v5 else not keep,
            protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
            reconnect_on_failure=bool(config["options.retry_connect"]),
            manual_ack=True,
        )
        if config.get("credential.username"):
            client.username_pw_set(config["credential.username"], config.get("credential.password"))
        if tls:
            client.tls_set(
                ca_certs=config.get("options.ssl_cafile"),
                certfile=config.get("options.ssl_certfile"),
                keyfile=config.get("options.ssl_keyfile"),
            )
            client.tls_insecure_set(bool(config["options.ssl_insecure"]))
        delay = max(1, math.ceil(config["options.reconnect_timeout"] / 1000))
        client.reconnect_delay_set(delay, max(delay, 30))
        client.on_connect = self._on_connect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        self._connected.clear()
        self._failure = None
        properties = None
        if v5:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = config["options.session_expiry"] if keep else 0
        keepalive = max(1, math.ceil(config["options.keepalive_timeout"] / 1000))
        try:
            client.connect(
                host,
                port,
                keepalive,
                clean_start=not keep if v5 else paho.MQTT_CLEAN_START_FIRST_ONLY,
                properties=properties,
            )
        except OSError as exc:
            raise ConnectionError(
                f"Cannot connect to the MQTT broker at {host}:{port}: {exc}. "
                "Check connection.host and connection.port (or connection.uri) "
                "and that the broker is running."
            ) from None
        client.loop_start()
        if not self._connected.wait(config["options.connect_timeout"] / 1000) or self._failure:
            client.disconnect()
            client.loop_stop()
            if self._failure:
                user = config.get("credential.username")
                raise ConnectionError(
                    f"The MQTT broker at {host}:{port} refused the connection"
                    f"{f' of user {user!r}' if user else ''}: {self._failure}. "
                    "Check credential.username and credential.password."
                )
            raise ConnectionError(
                f"No answer from the MQTT broker at {host}:{port} within "
                f"{config['options.connect_timeout']} ms. "
                "Check the address and options.connect_timeout."
            )
        self._client = client

    def close(self, correlation_id: str | None = None) -> None:
        """Disconnect. A persistent session keeps its subscriptions and unacknowledged messages."""
        client, self._client = self._client, None
        if client is not None:
            client.disconnect()
            client.loop_stop()
        self._subscriptions.clear()

    # ---- paho callbacks (network thread) -------------------------------------------------

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if reason.is_failure:
            self._failure = str(reason)
            client.disconnect()  # stops paho's reconnect loop: credentials will not get better
        else:
            with self._lock:
                filters = [
                    (t, qos) for t, (qos, _) in self._subscriptions.items() if qos is not None
                ]
            if filters:
                client.subscribe(filters)  # after a reconnect, whether or not a session survived
            log.info("connected to %s (session present: %s)", self.address, flags.session_present)
        self._connected.set()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if self._client is not None:
            log.warning("disconnected from %s (%s); reconnecting", self.address, reason)

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        with self._lock:
            event = self._subacks.pop(mid, None)
        if event is not None:
            event.set()

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        with self._lock:
            listeners = [
                listener
                for topic, (_, registered) in self._subscriptions.items()
                if paho.topic_matches_sub(topic, message.topic)
                for listener in registered
            ]
        for listener in listeners:
            listener.on_message(message.topic, bytes(message.payload), message)

    # ---- messaging -----------------------------------------------------------------------

    def _check_open(self) -> paho.Client:
        if self._client is None:
            raise ConnectionError("The MQTT connection is not opened; call open() first.")
        return self._client

    def publish(
        self,
        topic: str,
        payload: bytes | None,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Publish and, for QoS >= 1, wait until the broker has it.

        While the connection is down paho keeps a QoS >= 1 message and sends it on reconnect;
        this waits for that too (up to ``options.connect_timeout``).
        """
        info = self._check_open().publish(topic, payload, qos, retain, properties)
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            raise ConnectionError(f"Publishing to '{topic}' failed: {paho.error_string(info.rc)}")
        if qos == 0:
            return
        timeout = self._config["options.connect_timeout"] / 1000
        # wait_for_publish() gives up at once on a message queued while disconnected, so wait
        # on the same condition paho signals when the broker acknowledges it.
        with info._condition:
            if not info._condition.wait_for(lambda: info._published, timeout):
                raise TimeoutError(
                    f"The MQTT broker at {self.address} did not acknowledge a message on '{topic}' "
                    f"within {timeout:.0f} s; paho keeps it and sends it once reconnected."
                )

    def add_listener(self, topic: str, listener: MqttMessageListener) -> None:
        """Deliver messages matching ``topic`` to ``listener`` without subscribing at the broker.

        Registered before ``open()``, it receives what a persistent session redelivers at once.
        """
        with self._lock:
            _, listeners = self._subscriptions.setdefault(topic, (None, []))
            if listener not in listeners:
                listeners.append(listener)

    def subscribe(self, topic: str, qos: int, listener: MqttMessageListener) -> None:
        """Deliver messages matching ``topic`` (+ and # allowed) to ``listener``.

        Waits for the broker's SUBACK."""
        client = self._check_open()
        self.add_listener(topic, listener)
        with self._lock:
            subscribed, listeners = self._subscriptions[topic]
            if subscribed is not None and subscribed >= qos:
                return
            self._subscriptions[topic] = (qos, listeners)
            done = threading.Event()
            result, mid = client.subscribe(topic, qos)
            if result == MQTTErrorCode.MQTT_ERR_SUCCESS and mid is not None:
                self._subacks[mid] = done
            else:  # not connected right now: _on_connect subscribes when the connection is back
                done.set()
        if not done.wait(self._config["options.connect_timeout"] / 1000):
            raise ConnectionError(
                f"The MQTT broker at {self.address} did not confirm the subscription to '{topic}'."
            )

    def unsubscribe(self, topic: str, listener: MqttMessageListener) -> None:
        """Stop delivering to ``listener``; the broker subscription stays while others use it."""
        with self._lock:
            _, listeners = self._subscriptions.get(topic, (0, []))
            if listener in listeners:
                listeners.remove(listener)
            if not listeners:
                self._subscriptions.pop(topic, None)

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message (PUBACK / PUBREC); nothing to do for QoS 0."""
        if qos > 0 and self._client is not None:
            self._client.ack(mid, qos)
