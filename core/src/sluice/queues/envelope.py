"""MessageEnvelope: pip-services' envelope, fixed for bytes payloads, with broker metadata."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

from pip_services3_commons.convert import DateTimeConverter
from pip_services3_messaging.queues import MessageEnvelope as _PipEnvelope

__all__ = [
    "Header",
    "MessageEnvelope",
    "as_envelope",
    "is_envelope_document",
    "normalize_headers",
    "to_bytes",
]

Header = tuple[str, bytes]


def to_bytes(value: object) -> bytes | None:
    """``value`` as bytes: bytes-like as is, anything else as its UTF-8 text; None stays None."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode("utf-8")


class MessageEnvelope(_PipEnvelope):  # type: ignore[misc]
    """A message plus the information needed to trace, route and acknowledge it.

    ``message`` may be ``bytes`` (kept as is), ``str`` (UTF-8 encoded) or any JSON-serialisable
    object (encoded as JSON). pip-services' own envelope fails on ``bytes``; this one does not.

    Besides the pip-services fields (``correlation_id``, ``message_type``, ``message_id``,
    ``sent_time``, ``message``) an envelope carries broker metadata: ``key`` and ``headers`` that
    a sender may set, and ``topic``, ``partition``, ``offset`` and ``timestamp`` (ms since the
    epoch) that a receiving queue fills in, and ``wire`` (MQTT: ``envelope`` or ``raw``).
    ``None`` means "not known / not applicable".
    """

    def __init__(
        self,
        correlation_id: str | None,
        message_type: str | None,
        message: Any,
        *,
        key: str | bytes | None = None,
        headers: list[Header] | dict[str, str | bytes] | None = None,
    ) -> None:
        super().__init__(correlation_id, message_type, None)
        self.message: bytes | None = None
        if isinstance(message, (bytes, bytearray, memoryview)):
            self.message = bytes(message)
        elif isinstance(message, str):
            self.set_message_as_string(message)
        else:
            self.set_message_as_object(message)
        self.message_id: str = str(self.message_id)
        self.key: bytes | None = to_bytes(key)
        self.headers: list[Header] = normalize_headers(headers)
        self.topic: str | None = None
        self.partition: int | None = None
        self.offset: int | None = None
        self.timestamp: int | None = None
        #: How a received MQTT message travelled: "envelope" (a Sluice or pip-services
        #: envelope document, unwrapped), "raw" (the payload as published); None otherwise.
        self.wire: str | None = None

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    def get_message_as_string(self) -> str | None:
        return None if self.message is None else self.message.decode("utf-8")

    def to_string(self) -> str:
        payload = "---" if not self.message else self.message[:50].decode("utf-8", "replace")
        return f"[{self.correlation_id or '---'},{self.message_type or '---'},{payload}]"

    def to_json(self) -> dict[str, Any]:
        """The envelope as a JSON-ready dict; payload and headers are base64 (so bytes survive)."""
        sent = self.sent_time or datetime.datetime.now(datetime.UTC)
        doc: dict[str, Any] = {
            "message_id": self.message_id,
            "correlation_id": self.correlation_id,
            "message_type": self.message_type,
            "sent_time": sent.isoformat(),
            "message": None if self.message is None else _b64(self.message),
        }
        if self.key is not None:
            doc["key"] = _b64(self.key)
        if self.headers:
            doc["headers"] = {name: _b64(value) for name, value in self.headers}
        return doc

    @staticmethod
    def from_json(value: str | bytes | dict[str, Any] | None) -> MessageEnvelope | None:
        """Parse what :meth:`to_json` (or pip-services' envelope) produced; None when
        ``value`` is not such a document.

        An envelope is recognised by its whole shape (:func:`is_envelope_document`), never by
        one field: a device's raw JSON that happens to carry a ``message_id`` stays raw.
        """
        if value is None:
            return None
        try:
            doc = value if isinstance(value, dict) else json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return None
        if not is_envelope_document(doc):
            return None
        envelope = MessageEnvelope(doc["correlation_id"], doc["message_type"], None)
        envelope.message_id = str(doc["message_id"])
        payload = doc["message"]
        try:
            envelope.message = None if payload is None else base64.b64decode(payload, validate=True)
            envelope.key = None if doc.get("key") is None else base64.b64decode(doc["key"])
            headers = doc.get("headers") or {}
            envelope.headers = [(str(n), base64.b64decode(v)) for n, v in headers.items()]
        except (ValueError, TypeError):
            return None
        envelope.sent_time = DateTimeConverter.to_nullable_datetime(doc["sent_time"])
        return envelope


#: The fields every envelope document has (pip-services writes exactly these) ...
ENVELOPE_DOCUMENT_FIELDS = frozenset(
    {"message_id", "correlation_id", "message_type", "sent_time", "message"}
)
#: ... and the ones Sluice may add.
ENVELOPE_OPTIONAL_FIELDS = frozenset({"key", "headers"})


def is_envelope_document(doc: object) -> bool:
    """Whether ``doc`` (parsed JSON) has an envelope's whole shape: every field of
    :data:`ENVELOPE_DOCUMENT_FIELDS`, no field beyond them and
    :data:`ENVELOPE_OPTIONAL_FIELDS`, and each of the right type (the payload base64 text)."""
    if not isinstance(doc, dict) or not doc.keys() >= ENVELOPE_DOCUMENT_FIELDS:
        return False
    if doc.keys() - ENVELOPE_DOCUMENT_FIELDS - ENVELOPE_OPTIONAL_FIELDS:
        return False
    text_or_none = ("correlation_id", "message_type", "sent_time", "message", "key")
    if any(doc.get(name) is not None and not isinstance(doc[name], str) for name in text_or_none):
        return False
    if not isinstance(doc["message_id"], str) or not doc["message_id"]:
        return False
    headers = doc.get("headers")
    if headers is not None and not (
        isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())
    ):
        return False
    return doc["sent_time"] is None or (
        DateTimeConverter.to_nullable_datetime(doc["sent_time"]) is not None
    )


#: What an object needs to be sent: pip-services' MessageEnvelope and look-alikes have these.
ENVELOPE_FIELDS = ("message_id", "message_type", "correlation_id", "message")


def as_envelope(message: object) -> MessageEnvelope:
    """``message`` as Sluice's envelope: itself if it is one, else a copy of its fields.

    Accepts pip-services' own ``MessageEnvelope`` and any object with ``message_id``,
    ``message_type``, ``correlation_id`` and ``message`` (``sent_time``, ``key`` and ``headers``
    are copied when present), so pip-services code can send what it always sent.
    """
    if isinstance(message, MessageEnvelope):
        return message
    missing = [name for name in ENVELOPE_FIELDS if not hasattr(message, name)]
    if missing:
        raise TypeError(
            f"Cannot send a {type(message).__name__}: a message needs the attributes "
            f"{', '.join(ENVELOPE_FIELDS)} (missing: {', '.join(missing)}). Wrap the payload "
            "in a MessageEnvelope(correlation_id, message_type, payload), or use send_as_object."
        )
    fields: Any = message
    copy = MessageEnvelope(
        fields.correlation_id,
        fields.message_type,
        fields.message,
        key=getattr(fields, "key", None),
        headers=getattr(fields, "headers", None),
    )
    if fields.message_id is not None:
        copy.message_id = str(fields.message_id)
    sent_time = getattr(fields, "sent_time", None)
    if isinstance(sent_time, datetime.datetime):
        copy.sent_time = sent_time
    return copy


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def normalize_headers(headers: list[Header] | dict[str, str | bytes] | None) -> list[Header]:
    """Headers as a list of (name, bytes) pairs, the form Kafka clients use."""
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    result: list[Header] = []
    for name, value in items:
        encoded = to_bytes(value)
        result.append((str(name), b"" if encoded is None else encoded))
    return result
