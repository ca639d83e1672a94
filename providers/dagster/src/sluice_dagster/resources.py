"""Dagster resources: a Kafka topic or an MQTT session as a queue, and a SparkSession.

A queue resource's typed fields map onto Sluice's one config vocabulary (``config()`` gives
the core keys). At ``setup_for_execution`` it builds its queue from them (a wrong key or
value fails there, naming the key); the queue connects on first use and is closed at
``teardown_after_execution``. It connects lazily because an ingest run only needs the
config (``source``), and for MQTT a second connection with the session's ``client_id``
would take the session away from the ingest's own.

Timeouts are short by default (2 s to connect, 5 s per request, one connection attempt) so
that a sensor tick against a broker that is down ends in seconds with a clear message,
well within Dagster's 60 s limit for a tick. Pass secrets as ``dagster.EnvVar``: their values
then never appear in run config, and Sluice never puts them in logs, metadata or errors.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from dagster import ConfigurableResource, InitResourceContext
from kafka.errors import KafkaConnectionError, KafkaTimeoutError
from pydantic import ConfigDict, Field, PrivateAttr

from sluice.batch import BatchSpec
from sluice.connection_fields import check_keys, known_keys
from sluice.kafka.watch import watch_topic
from sluice.queues.base import MessageQueue
from sluice.queues.uri import queue_from_config
from sluice.secrets import redact_config, redact_exception, redact_text
from sluice.sensing import wait_for_batch

from .fields import StrictFields

__all__ = [
    "UNREACHABLE",
    "KafkaQueueResource",
    "MqttQueueResource",
    "QueueResource",
    "QueueUnavailableError",
    "SparkResource",
]


class QueueUnavailableError(ConnectionError):
    """The broker could not be reached; the message names it and says what to check."""


#: What the clients raise when the broker cannot be reached.
UNREACHABLE: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    KafkaConnectionError,
    KafkaTimeoutError,
)


class QueueResource(StrictFields, ConfigurableResource, ABC):  # type: ignore[type-arg]
    """What the Kafka and MQTT resources share (abstract: use one of those)."""

    # a validation error never quotes the values given: one of them may be the password
    model_config = ConfigDict(**ConfigurableResource.model_config, hide_input_in_errors=True)

    KIND: ClassVar[str] = ""
    #: Keys the BatchSpec carries (or makes moot); ``source`` leaves them out.
    SPEC_KEYS: ClassVar[tuple[str, ...]] = ("topic",)

    topic: str = Field(description="Topic to ingest (for MQTT a topic filter, e.g. 'plant/#').")
    username: str | None = Field(
        default=None, description="User name (credential.username), if the broker needs one."
    )
    password: str | None = Field(
        default=None,
        description="Password (credential.password). Pass dagster.EnvVar('NAME'): it is never "
        "logged or put in metadata.",
    )
    connect_timeout_ms: int = Field(
        default=2000, description="Milliseconds to wait for the broker to accept a connection."
    )
    request_timeout_ms: int = Field(
        default=5000, description="Milliseconds to wait for the broker to answer a request."
    )
    dead_letter_topic: str | None = Field(
        default=None,
        description="Topic the ingest's dead letters go to (default: the topic's name + '.dlq').",
    )
    ssl_cafile: str | None = Field(
        default=None, description="CA certificate file (PEM) to verify the broker with."
    )
    ssl_certfile: str | None = Field(
        default=None, description="Client certificate file (PEM), for brokers that ask for one."
    )
    ssl_keyfile: str | None = Field(
        default=None, description="Private key file (PEM) of the client certificate."
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Further Sluice config keys, e.g. {'keepalive_timeout': '30000'}; a name "
        "that is not a top-level key gets 'options.' in front. An unknown key is an error.",
    )

    _queue: MessageQueue | None = PrivateAttr(default=None)
    _opened: bool = PrivateAttr(default=False)

    # ---- configuration -------------------------------------------------------------------

    @abstractmethod
    def _connection_keys(self) -> dict[str, Any]:
        """The connection's config keys (broker address, session or group, protocol)."""

    def config(self) -> dict[str, Any]:
        """The core config keys these fields stand for (secrets included: never log it)."""
        config: dict[str, Any] = {
            "topic": self.topic,
            "autocommit": False,
            **self._connection_keys(),
            "options.connect_timeout": self.connect_timeout_ms,
        }
        typed_options = {
            "options.dead_letter_topic": self.dead_letter_topic,
            "options.ssl_cafile": self.ssl_cafile,
            "options.ssl_certfile": self.ssl_certfile,
            "options.ssl_keyfile": self.ssl_keyfile,
        }
        config.update({k: v for k, v in typed_options.items() if v is not None})
        if self.username:
            config["credential.username"] = self.username
        if self.password:
            config["credential.password"] = self.password
        known = known_keys(self.KIND)
        extras = {
            key if key in known or key.startswith("options.") else f"options.{key}": value
            for key, value in self.options.items()
        }
        check_keys(self.KIND, extras, f"{type(self).__name__}.options")
        config.update(extras)
        return config

    @property
    def source(self) -> dict[str, Any]:
        """The config for :func:`sluice.spark.ingest`'s ``source``: everything but what the
        BatchSpec carries (topic, group, session)."""
        return {k: v for k, v in self.config().items() if k not in self.SPEC_KEYS}

    def redacted_config(self) -> dict[str, Any]:
        """``config()`` with secrets replaced by ``***``: safe to log."""
        return redact_config(self.config())

    @property
    @abstractmethod
    def address(self) -> str:
        """The broker's ``host:port`` (or servers), for messages."""

    def _plan_wait_seconds(self) -> float:
        """How long planning waits for messages to show up (MQTT: the session's redelivery)."""
        return 0.0

    # ---- lifecycle -----------------------------------------------------------------------

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._queue = queue_from_config(self.KIND, self.config())
        self._opened = False

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        queue, self._queue = self._queue, None
        if queue is not None and self._opened:
            self._opened = False
            queue.close(None)

    @property
    def queue(self) -> MessageQueue:
        """The live queue, connected on first use (raises :class:`QueueUnavailableError`)."""
        if self._queue is None:  # used outside of Dagster's setup, e.g. in a script
            self._queue = queue_from_config(self.KIND, self.config())
        if not self._opened:
            try:
                self._queue.open(None)
            except UNREACHABLE as exc:
                raise self.unavailable(exc) from None
            self._opened = True
        return self._queue

    def _secret_fields(self) -> dict[str, Any]:
        # The fields that can hold a secret, read without config()'s checks (this runs while
        # an error is being reported).
        fields = {"credential.password": self.password}
        for name in ("bootstrap", "uri", "host"):
            fields[f"connection.{name}"] = getattr(self, name, None)
        return fields

    def scrub(self, text: str) -> str:
        """``text`` with the password (also one inside a URI field) replaced by ``***``, and
        any other secret :mod:`sluice.secrets` knows."""
        return redact_text(text, self._secret_fields())

    def scrubbed(self, exc: BaseException) -> BaseException | None:
        """None when no secret shows in ``exc`` or its causes, else the exception to raise
        instead, ``from None`` (the causes may hold the secret)."""
        shown = "".join(traceback.format_exception(exc))
        if self.scrub(shown) == shown:
            return None
        return redact_exception(exc)

    def unavailable(self, exc: BaseException) -> QueueUnavailableError:
        """The error to raise for ``exc``, a failure to reach the broker (secrets hidden)."""
        detail = self.scrub(str(exc)).rstrip(".")
        if not detail.startswith(type(exc).__name__):
            detail = f"{type(exc).__name__}: {detail}"
        hint = (
            ""
            if "Check" in detail
            else " Check that the broker is running and reachable at that address (the "
            "resource's address fields)."
        )
        return QueueUnavailableError(
            f"Cannot reach the {self.KIND} broker at {self.address} (topic '{self.topic}'): "
            f"{detail}.{hint}"
        )

    # ---- planning ------------------------------------------------------------------------

    def plan_batch(
        self, max_messages: int | None = None, min_messages: int = 1
    ) -> BatchSpec | None:
        """The next batch once ``min_messages`` wait, else None; commits nothing (see
        :func:`sluice.batch.plan_batch`). MQTT counts what the session delivers within
        ``probe_seconds``, unacknowledged, so the ingest's connection gets it again."""
        try:
            return wait_for_batch(self.queue, min_messages, max_messages, self._plan_wait_seconds())
        except QueueUnavailableError:
            raise
        except UNREACHABLE as exc:
            raise self.unavailable(exc) from None


class KafkaQueueResource(QueueResource):
    """A Kafka topic read through a consumer group.

    Example::

        KafkaQueueResource(bootstrap="broker:9092", topic="orders", group_id="lake",
                           username="svc", password=EnvVar("KAFKA_PASSWORD"))
    """

    KIND: ClassVar[str] = "kafka"
    SPEC_KEYS: ClassVar[tuple[str, ...]] = ("topic", "group_id", "from_beginning")

    bootstrap: str = Field(
        description="Bootstrap servers, 'host:9092' or 'h1:9092,h2:9092' (a kafka:// or "
        "kafka+ssl:// URI works too)."
    )
    group_id: str = Field(
        default="sluice", description="Consumer group whose committed offsets mark progress."
    )
    from_beginning: bool = Field(
        default=True,
        description="A new group starts at the beginning of the topic (else only messages "
        "published after the first plan are ingested).",
    )
    client_id: str | None = Field(default=None, description="Kafka client id (optional).")
    protocol: str | None = Field(
        default=None,
        description="connection.protocol: tcp (default), ssl, sasl_plaintext or sasl_ssl. With "
        "a username on a plaintext bootstrap, say sasl_plaintext (else refused: SASL/PLAIN "
        "sends the password unencrypted); prefer sasl_ssl.",
    )
    mechanism: str | None = Field(
        default=None, description="SASL mechanism: plain, scram-sha-256 or scram-sha-512."
    )
    session_timeout_ms: int | None = Field(
        default=None,
        description="Milliseconds the group coordinator waits for a consumer's heartbeat "
        "before it gives the partitions to another (Kafka's default: 10000).",
    )
    ssl_check_hostname: bool | None = Field(
        default=None,
        description="Check the broker's host name against its certificate (default: true).",
    )
    max_buffer: int | None = Field(
        default=None,
        description="Messages fetched ahead into the local buffer before fetching pauses "
        "(default: 1000).",
    )

    def _connection_keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {
            "connection.uri": self.bootstrap,
            "group_id": self.group_id,
            "from_beginning": self.from_beginning,
            "options.request_timeout": self.request_timeout_ms,
            "options.max_retries": 1,
            "options.retry_timeout": 500,
        }
        optional = {
            "client_id": self.client_id,
            "connection.protocol": self.protocol,
            "credential.mechanism": self.mechanism,
            "options.session_timeout": self.session_timeout_ms,
        }
        keys.update({k: v for k, v in optional.items() if v})
        flags = {
            "options.ssl_check_hostname": self.ssl_check_hostname,
            "options.max_buffer": self.max_buffer,
        }
        keys.update({k: v for k, v in flags.items() if v is not None})
        return keys

    def plan_batch(
        self, max_messages: int | None = None, min_messages: int = 1
    ) -> BatchSpec | None:
        """The next batch once ``min_messages`` wait, else None; commits nothing. Asked of the
        process's shared watch of the cluster (:mod:`sluice.kafka.watch`): every sensor of a
        code server shares one client, which keeps the ends of the topic between ticks."""
        try:
            backlog = watch_topic(self.config(), blocking=True).backlog(fresh=True)
        except UNREACHABLE as exc:
            raise self.unavailable(exc) from None
        spec = backlog.limited(max_messages)
        return spec if spec.message_count >= max(1, min_messages) else None

    @property
    def address(self) -> str:
        return self.bootstrap.rpartition("@")[2].split("/")[0].rpartition("://")[2]


class MqttQueueResource(QueueResource):
    """An MQTT topic filter read through a persistent session (``client_id``, QoS 1).

    The broker keeps messages for the session only once it exists: a message published
    before the session's first connection (the sensor's first tick) is not kept.
    mosquitto hands a client at most ``max_inflight_messages`` (default 20) unacknowledged
    messages, so a sensor sees at most that many waiting.
    """

    KIND: ClassVar[str] = "mqtt"
    SPEC_KEYS: ClassVar[tuple[str, ...]] = ("topic", "client_id")

    uri: str | None = Field(
        default=None,
        description="Broker URI, e.g. mqtt://host:1883 or mqtts://host:8883 (or use host/port).",
    )
    host: str | None = Field(default=None, description="Broker host (when no uri is given).")
    port: int | None = Field(default=None, description="Broker port (default 1883, TLS 8883).")
    client_id: str = Field(
        description="Client id of the persistent session that holds the waiting messages; "
        "stable across runs, used by nothing else."
    )
    qos: int = Field(default=1, description="Subscription QoS; 1 for at-least-once batches.")
    protocol_version: str = Field(default="3.1.1", description="MQTT protocol: '3.1.1' or '5'.")
    probe_seconds: float = Field(
        default=1.0,
        description="How long a sensor tick listens to the session for waiting messages.",
    )
    keepalive_ms: int | None = Field(
        default=None,
        description="Milliseconds between keep-alive pings (MQTT counts whole seconds, at "
        "least 1; default: 3000).",
    )
    session_expiry_seconds: int | None = Field(
        default=None,
        description="MQTT 5: seconds the broker keeps the session while no client is connected "
        "(default: 86400). Keep it longer than the time between sensor ticks.",
    )
    ssl_insecure: bool | None = Field(
        default=None, description="Do not check the broker's host name (tests only)."
    )
    ws_path: str | None = Field(
        default=None,
        description="HTTP path of MQTT over WebSocket, ws:// or wss:// (default /mqtt).",
    )

    def _connection_keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {
            "client_id": self.client_id,
            "options.qos": self.qos,
            "options.protocol_version": self.protocol_version,
            "options.retry_connect": False,
        }
        if self.uri:
            keys["connection.uri"] = self.uri
        if self.host:
            keys["connection.host"] = self.host
        if self.port:
            keys["connection.port"] = self.port
        optional = {
            "options.keepalive_timeout": self.keepalive_ms,
            "options.session_expiry": self.session_expiry_seconds,
            "options.ssl_insecure": self.ssl_insecure,
            "options.ws_path": self.ws_path,
        }
        keys.update({k: v for k, v in optional.items() if v is not None})
        return keys

    @property
    def address(self) -> str:
        from sluice.mqtt.config import broker_address

        endpoint = broker_address(self.config())
        return f"{endpoint.host}:{endpoint.port}"

    def _plan_wait_seconds(self) -> float:
        return self.probe_seconds


class SparkResource(StrictFields, ConfigurableResource):  # type: ignore[type-arg]
    """The SparkSession an ingest runs on, from :func:`sluice.spark.spark_session`.

    Created on first use; an active session in the process is reused (tests, notebooks).
    dagster-pyspark's ``PySparkResource`` works in its place (anything with a
    ``spark_session`` attribute does); this one adds Spark Connect (``sc://``) masters,
    the ``SLUICE_SPARK_MASTER`` default and Sluice's Arrow settings.
    """

    master: str | None = Field(
        default=None,
        description="Spark master: local[*], spark://host:7077, yarn, k8s://..., or a Spark "
        "Connect URL sc://host:15002. Default: $SLUICE_SPARK_MASTER, else local[*].",
    )
    app_name: str = Field(default="sluice", description="Spark application name.")
    conf: dict[str, str] = Field(
        default_factory=dict, description="Spark settings, e.g. {'spark.executor.memory': '2g'}."
    )
    ship_sluice: bool = Field(
        default=False,
        description="Send Sluice to the executors (a zip on their sys.path), for clusters or "
        "Spark Connect servers whose Python has pyarrow and pandas but not Sluice.",
    )

    _session: Any = PrivateAttr(default=None)

    @property
    def spark_session(self) -> Any:
        return self.session_for(None)

    def session_for(self, batch_messages: int | None) -> Any:
        """The session, started (if it is not yet) for a batch of ``batch_messages``: a small
        batch's JVM compiles with C1 only (:data:`sluice.spark.session.SHORT_JVM_MESSAGES`)."""
        if self._session is None:
            from sluice.spark import spark_session

            self._session = spark_session(
                self.master,
                self.app_name,
                self.conf,
                ship_sluice=self.ship_sluice or None,
                batch_messages=batch_messages,
            )
        return self._session
