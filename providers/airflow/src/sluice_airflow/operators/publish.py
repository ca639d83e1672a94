"""QueuePublishOperator: sends messages to a Kafka topic or an MQTT topic.

With apache-airflow-providers-openlineage installed, its OpenLineage events name the topic
as the output (``kafka://host:port`` + topic, :mod:`sluice.lineage`) with the messages sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from sluice.connection_fields import check_no_secrets
from sluice.queues import MessageEnvelope, queue_from_config
from sluice.secrets import redacted_errors

from ..hooks.queue import QueueHook
from ..rendered import parse_rendered

__all__ = ["QueuePublishOperator", "to_envelope"]

#: The keys that make a dict a message description rather than a payload.
ENVELOPE_KEYS = frozenset({"value", "key", "headers", "message_type", "correlation_id"})

Messages = Iterable[Any] | Callable[[], Iterable[Any]] | str


def to_envelope(message: Any, message_type: str | None = None) -> MessageEnvelope:
    """A message as an envelope: a dict with a ``value`` and only the keys of
    :data:`ENVELOPE_KEYS` describes one; anything else (a dict, str, bytes, number) is the
    payload itself."""
    if isinstance(message, dict) and "value" in message and set(message) <= ENVELOPE_KEYS:
        return MessageEnvelope(
            message.get("correlation_id"),
            message.get("message_type", message_type),
            message["value"],
            key=message.get("key"),
            headers=message.get("headers"),
        )
    return MessageEnvelope(None, message_type, message)


class QueuePublishOperator(BaseOperator):
    """Publish ``messages`` to ``topic``; return how many were sent.

    :param conn_id: a ``sluice_kafka`` or ``sluice_mqtt`` connection.
    :param topic: the topic (templated).
    :param messages: a list, a callable returning an iterable (called with no arguments), an
        XComArg, or a template rendering to a JSON list. Each item is a payload (dict, str,
        bytes, number) or a dict ``{"value": ..., "key": ..., "headers": {...},
        "message_type": ...}``.
    :param message_type: the message type of items that do not name one.
    :param config: config keys on top of the connection's (templated; never credentials).
    :param value_format: write each payload as "json" (default), "avro", "protobuf",
        "json_schema" (with ``value_schema``), "string", "bytes" or "sparkplug_b", the way
        ``sluice publish --format`` does (:class:`sluice.formats.encode.Encoder`).
    :param value_schema: the writer schema: a file (.avsc, .proto[#Message], a descriptor set,
        a JSON Schema) or inline JSON (templated).
    :param schema_registry: a Schema Registry URL without a password, or
    :param schema_registry_conn_id: an Airflow connection naming the registry: the schema is
        registered under ``<topic>-value`` and payloads are framed with its id.
    """

    template_fields: Sequence[str] = ("topic", "messages", "config", "value_schema")
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        conn_id: str = QueueHook.default_conn_name,
        topic: str,
        messages: Messages,
        message_type: str | None = None,
        config: dict[str, Any] | None = None,
        value_format: str = "json",
        value_schema: str | None = None,
        schema_registry: str | None = None,
        schema_registry_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_no_secrets(config, f"QueuePublishOperator({self.task_id})")
        self.conn_id = conn_id
        self.topic = topic
        self.messages = messages
        self.message_type = message_type
        self.config = dict(config or {})
        self.value_format = value_format
        self.value_schema = value_schema
        self.schema_registry = schema_registry
        self.schema_registry_conn_id = schema_registry_conn_id
        self._sent: int | None = None  # for the lineage events

    def _encoded(self, envelopes: list[MessageEnvelope]) -> None:
        """Write each payload in ``value_format`` (in place)."""
        if self.value_format == "json" and self.value_schema is None:
            return
        from sluice.formats.encode import Encoder

        from ..hooks.schema_registry import registry_settings

        registry = registry_settings(self.schema_registry_conn_id, self.schema_registry)
        with redacted_errors():
            encoder = Encoder(self.value_format, self.topic, self.value_schema, registry)
            for envelope in envelopes:
                document = envelope.message  # an envelope keeps a dict payload as JSON bytes
                if isinstance(document, bytes) and self.value_format not in ("string", "bytes"):
                    document = json.loads(document)
                envelope.message = encoder.encode(document)

    def _items(self) -> list[Any]:
        messages = self.messages
        if callable(messages):
            messages = messages()
        if isinstance(messages, str):
            messages = parse_rendered(messages, "QueuePublishOperator: 'messages'")
        if isinstance(messages, (dict, bytes)) or not isinstance(messages, Iterable):
            raise TypeError(
                f"QueuePublishOperator: 'messages' must be a list of messages, got "
                f"{type(messages).__name__}."
            )
        return list(messages)

    def execute(self, context: Context) -> int:
        self._sent = None
        envelopes = [to_envelope(m, self.message_type) for m in self._items()]
        self._encoded(envelopes)
        hook = QueueHook(self.conn_id)
        kind = hook.kind
        config = hook.config(self.topic, **self.config)
        if kind == "mqtt":
            # A publisher must not take over the ingest's session, nor subscribe; QoS 1 so that
            # an offline persistent session gets the messages queued.
            if "client_id" not in self.config:
                config.pop("client_id", None)
            config.setdefault("options.autosubscribe", False)
            config.setdefault("options.qos", 1)
        with redacted_errors(config):
            queue = queue_from_config(kind, config)
            queue.open(None)
            try:
                for envelope in envelopes:
                    queue.send(None, envelope)
            finally:
                queue.close(None)
        self.log.info("Published %d message(s) to %s", len(envelopes), self.topic)
        self._sent = len(envelopes)
        return len(envelopes)

    # ---- OpenLineage (apache-airflow-providers-openlineage calls these) -----------------------

    def get_openlineage_facets_on_start(self) -> Any:
        """The topic, as the output."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The topic, with the messages sent."""
        return self._lineage()

    def _lineage(self) -> Any:
        from sluice.lineage import source_dataset

        from ..lineage import publish_lineage

        hook = QueueHook(self.conn_id)
        config = hook.config(self.topic, **self.config)
        with redacted_errors(config):
            return publish_lineage(source_dataset(hook.kind, config), self._sent)
