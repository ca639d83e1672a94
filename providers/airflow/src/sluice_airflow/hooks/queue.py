"""QueueHook: an Airflow Connection (``sluice_kafka`` or ``sluice_mqtt``) as Sluice config keys
and an opened core queue.

The Connection's fields map onto Sluice's config keys (docs/reference/configuration.md):
host and port become ``connection.host``/``connection.port`` (a host such as
``h1:9092,h2:9092`` or ``kafka://h:9092`` becomes ``connection.uri``), login and password
``credential.username``/``credential.password``, and every key of the extra JSON is a config
key (``group_id``, ``client_id``, ``options.session_timeout`` ...). An unknown extra key is an
error that names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from airflow.sdk import BaseHook, Connection

from sluice.connection_fields import config_from_fields
from sluice.queues import MessageQueue, queue_from_config
from sluice.queues.config import COMMON_KEYS
from sluice.secrets import redact_config, redact_text, remember_config, secrets_in_config

from ..get_provider_info import KAFKA_CONN_TYPE, MQTT_CONN_TYPE, UI_FIELD_BEHAVIOUR

__all__ = ["MqttQueueHook", "QueueHook", "config_from_connection", "mask_config", "queue_kind"]

Kind = Literal["kafka", "mqtt"]

_KINDS: dict[str, Kind] = {KAFKA_CONN_TYPE: "kafka", MQTT_CONN_TYPE: "mqtt"}


def queue_kind(conn: Connection) -> Kind:
    """ "kafka" or "mqtt", from the connection type."""
    kind = _KINDS.get(str(conn.conn_type))
    if kind is None:
        raise ValueError(
            f"Connection '{conn.conn_id}' has type {conn.conn_type!r}; Sluice needs "
            f"{KAFKA_CONN_TYPE!r} or {MQTT_CONN_TYPE!r}. Change the connection type."
        )
    return kind


def config_from_connection(
    conn: Connection, topic: str | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The config keys ``conn`` stands for, with ``overrides`` and ``topic`` on top."""
    kind = queue_kind(conn)
    return config_from_fields(
        kind,
        host=conn.host,
        port=conn.port,
        username=conn.login,
        password=conn.password,
        extra=conn.extra_dejson,
        topic=topic,
        overrides=overrides,
        where=f"Airflow connection '{conn.conn_id}'",
        field_prefix=f"extra__{conn.conn_type}__",
    )


def mask_config(config: Mapping[str, Any]) -> None:
    """Register the secrets of ``config`` (passwords, also inside a host URI) with
    :mod:`sluice.secrets` and with Airflow's secrets masker, which then hides them in every
    task log line, rendered field and exception Airflow shows."""
    remember_config(config)
    from airflow.sdk.log import mask_secret

    for secret in secrets_in_config(config):
        mask_secret(secret)


class QueueHook(BaseHook):
    """A Sluice queue on an Airflow Connection (see the module docstring).

    :param queue_conn_id: the Connection, of type ``sluice_kafka`` or ``sluice_mqtt``.
    :param config: config keys that override the connection's (never credentials: those belong
        in the connection).
    """

    conn_name_attr = "queue_conn_id"
    default_conn_name = "sluice_default"
    conn_type = KAFKA_CONN_TYPE
    hook_name = "Sluice Kafka queue"

    def __init__(
        self,
        queue_conn_id: str = default_conn_name,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.queue_conn_id = queue_conn_id
        self.overrides = dict(config or {})
        self._connection: Connection | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form (also declared in the provider info, which Airflow 3.2+ reads)."""
        behaviour = UI_FIELD_BEHAVIOUR[cls.conn_type]
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = self.get_connection(self.queue_conn_id)
        return self._connection

    @property
    def kind(self) -> Kind:
        return queue_kind(self.connection)

    def config(self, topic: str | None = None, **overrides: Any) -> dict[str, Any]:
        """Config keys of the connection, the hook's ``config`` and ``overrides`` (secrets
        included: log :meth:`safe_config` instead). Its secrets are masked in Airflow's logs."""
        config = config_from_connection(self.connection, topic, {**self.overrides, **overrides})
        mask_config(config)
        return config

    def safe_config(self, topic: str | None = None, **overrides: Any) -> dict[str, Any]:
        """:meth:`config` with secrets replaced by ``***``."""
        return redact_config(self.config(topic, **overrides))

    def get_conn(self) -> MessageQueue:
        """A configured, not yet opened queue (no topic: for publishing give one to get_queue)."""
        return queue_from_config(self.kind, self.config())

    def get_queue(self, topic: str, **overrides: Any) -> MessageQueue:
        """An opened queue on ``topic``; the caller closes it (or use :meth:`queue`)."""
        queue = queue_from_config(self.kind, self.config(topic, **overrides))
        queue.open(None)
        return queue

    @contextlib.contextmanager
    def queue(self, topic: str, **overrides: Any) -> Iterator[MessageQueue]:
        """An opened queue on ``topic``, closed when the block ends."""
        queue = self.get_queue(topic, **overrides)
        try:
            yield queue
        finally:
            queue.close(None)

    def test_connection(self) -> tuple[bool, str]:
        """Connect for real: Kafka lists the topics, MQTT connects (as a throwaway client, so a
        running ingest's session is left alone). The message never holds the password."""
        config: dict[str, Any] = {}
        try:
            config = self.config()
            if self.kind == "kafka":
                return True, _test_kafka(config)
            return True, _test_mqtt(config)
        except Exception as exc:  # the UI shows the reason, whatever it is
            return False, redact_text(f"{type(exc).__name__}: {exc}", config)


def _connection_only(config: Mapping[str, Any], keys: tuple[Any, ...]) -> dict[str, Any]:
    names = {k.name for k in (*COMMON_KEYS, *keys)}
    return {k: v for k, v in config.items() if k in names}


def _test_kafka(config: Mapping[str, Any]) -> str:
    from sluice.kafka import KafkaConnection
    from sluice.kafka.config import CONNECTION_KEYS

    connection = KafkaConnection()
    connection.configure({**_connection_only(config, CONNECTION_KEYS), "options.max_retries": 1})
    connection.open(None)
    try:
        topics = connection.read_queue_names()
    finally:
        connection.close(None)
    return f"Connected to Kafka at {','.join(connection.servers)}: {len(topics)} topic(s)."


def _test_mqtt(config: Mapping[str, Any]) -> str:
    from sluice.mqtt import MqttConnection
    from sluice.mqtt.config import CONNECTION_KEYS

    settings = _connection_only(config, CONNECTION_KEYS)
    settings.pop("client_id", None)  # the session's owner may be connected right now
    settings.update({"options.clean_session": True, "options.retry_connect": False})
    settings["options.connect_timeout"] = min(
        int(settings.get("options.connect_timeout", 10000)), 10000
    )
    connection = MqttConnection()
    connection.configure(settings)
    connection.open(None)
    connection.close(None)
    return f"Connected to the MQTT broker at {connection.address}."


class MqttQueueHook(QueueHook):
    """:class:`QueueHook` registered for the ``sluice_mqtt`` connection type."""

    conn_type = MQTT_CONN_TYPE
    hook_name = "Sluice MQTT queue"
