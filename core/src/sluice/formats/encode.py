"""Writing payloads in a format: what ``sluice publish --format`` and ``QueuePublishOperator``
use, so that test data is written the way the ingest reads it. With a schema registry the
schema is registered under the topic's subject (``<topic>-value``) and each payload framed
with its id (the Confluent wire format); without, payloads are unframed."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..queues.config import ConfigError
from . import SCHEMA_FORMATS, canonical_format
from .plan import load_schema
from .registry import RegistrySettings, SchemaRegistry
from .wire import frame

__all__ = ["Encoder"]

_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


class Encoder:
    """Encodes documents (JSON-like dicts) as ``value_format`` payloads for ``topic``."""

    def __init__(
        self,
        value_format: str,
        topic: str,
        schema: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        registry: RegistrySettings | str | Mapping[str, Any] | None = None,
    ) -> None:
        self.format = canonical_format(value_format)
        self.codec: Any = None
        self.schema_id: int | None = None
        self.indexes: tuple[int, ...] | None = None
        self.registry = None if registry is None else RegistrySettings.of(registry)
        if self.format in SCHEMA_FORMATS:
            if schema is None:
                raise ConfigError(
                    f"Publishing {self.format} needs the schema to write with: --schema FILE "
                    "(.avsc, .proto or a descriptor set, a JSON Schema)."
                )
            source = load_schema(self.format, schema)
            self.codec = source.codec()
            if self.format == "protobuf":
                self.indexes = self.codec.indexes()
            if self.registry is not None:
                self.schema_id = self._register(source, topic)
        elif schema is not None:
            raise ConfigError(
                f"--schema goes with avro, protobuf or json_schema, not {self.format}"
            )

    def _register(self, source: Any, topic: str) -> int:
        assert self.registry is not None
        client = SchemaRegistry(self.registry)
        subject = self.registry.value_subject or f"{topic}-value"
        if self.format == "protobuf":
            import base64

            from google.protobuf import descriptor_pb2

            files = descriptor_pb2.FileDescriptorSet.FromString(source.descriptors).file
            main = files[-1]
            for dependency in main.dependency:
                if not dependency.startswith("google/protobuf/"):
                    raise ConfigError(
                        f"{source.where} imports {dependency}: register imported files as "
                        "references first (Sluice registers single-file schemas)"
                    )
            text = base64.b64encode(main.SerializeToString()).decode()
        else:
            text = str(source.text)
        return client.register(subject, text, _TYPES[self.format])

    def encode(self, document: Any) -> bytes:
        """One payload. ``document``: a dict (a str/bytes for string and bytes formats, any
        JSON value for json)."""
        if self.format == "sparkplug_b":
            from .sparkplug import encode_payload

            return encode_payload(document)
        if self.codec is None:
            if isinstance(document, bytes):
                return document
            if isinstance(document, str) and self.format != "json":
                return document.encode()
            return json.dumps(document).encode()
        payload: bytes = self.codec.encode(document)
        if self.schema_id is None:
            return payload
        return frame(self.schema_id, payload, self.indexes)
