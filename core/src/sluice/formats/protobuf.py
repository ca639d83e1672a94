"""Protobuf: descriptors from a registry, a descriptor set or a .proto file; a message's Arrow
type; decoding messages into Python values for Arrow; encoding from JSON-like dicts.

Types map as Spark's own Protobuf source maps them: int32/sint32/sfixed32 -> int,
int64/sint64/sfixed64/uint32/fixed32/uint64/fixed64 -> bigint, float, double, bool, string,
bytes -> binary, enum -> string (the value's name), message -> struct, repeated -> array,
map -> map; the well-known types ``google.protobuf.Timestamp`` -> timestamp (UTC),
``Duration`` -> interval, and the wrappers (``DoubleValue``, ``StringValue``...) -> their
nullable value. A field with presence (proto2 optional, proto3 ``optional``, messages, oneof
members) is null when unset; a proto3 scalar without presence has its default. A recursive
message has no column type and is a :class:`~sluice.queues.config.ConfigError`.
"""

from __future__ import annotations

import base64
import operator
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..queues.config import ConfigError
from .wire import DecodeError

__all__ = [
    "ProtobufCodec",
    "compile_proto",
    "descriptor_set_of",
    "file_set",
    "message_arrow_type",
    "message_by_indexes",
    "registry_files",
]

_UTC = pa.timestamp("us", tz="UTC")
_WRAPPERS = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.int64(),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"


def _scalar_types() -> dict[int, pa.DataType]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.TYPE_DOUBLE: pa.float64(),
        F.TYPE_FLOAT: pa.float32(),
        F.TYPE_INT64: pa.int64(),
        F.TYPE_UINT64: pa.int64(),
        F.TYPE_INT32: pa.int32(),
        F.TYPE_FIXED64: pa.int64(),
        F.TYPE_FIXED32: pa.int64(),
        F.TYPE_BOOL: pa.bool_(),
        F.TYPE_STRING: pa.string(),
        F.TYPE_BYTES: pa.binary(),
        F.TYPE_UINT32: pa.int64(),
        F.TYPE_ENUM: pa.string(),
        F.TYPE_SFIXED32: pa.int32(),
        F.TYPE_SFIXED64: pa.int64(),
        F.TYPE_SINT32: pa.int32(),
        F.TYPE_SINT64: pa.int64(),
    }


# ---- descriptors ---------------------------------------------------------------------------


def _well_known(name: str) -> bytes | None:
    """The serialized FileDescriptorProto of a google/protobuf/*.proto file, if it is one."""
    # importing the modules registers the files in the default pool
    from google.protobuf import (  # noqa: F401
        any_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    if not name.startswith("google/protobuf/"):
        return None
    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        return None
    return bytes(found.serialized_pb)


def file_set(files: list[bytes]) -> bytes:
    """A serialized FileDescriptorSet of serialized FileDescriptorProtos, in dependency order,
    with the well-known types they import added."""
    from google.protobuf import descriptor_pb2

    protos = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
    by_name = {p.name: p for p in protos}
    ordered: list[Any] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        proto = by_name.get(name)
        if proto is None:
            known = _well_known(name)
            if known is None:
                raise ConfigError(
                    f"the Protobuf schema imports {name}, which is neither given nor a "
                    "well-known type: register it as a reference, or include it in the "
                    "descriptor set (protoc --include_imports)"
                )
            proto = descriptor_pb2.FileDescriptorProto.FromString(known)
        for dependency in proto.dependency:
            visit(dependency)
        ordered.append(proto)

    for proto in protos:
        visit(proto.name)
    return descriptor_pb2.FileDescriptorSet(file=ordered).SerializeToString()  # type: ignore[no-any-return]


def compile_proto(path: Path) -> bytes:
    """A .proto file compiled to a serialized FileDescriptorSet (imports included), with
    grpcio-tools' protoc (``pip install 'sluice-core[protobuf]'``)."""
    try:
        import grpc_tools
    except ImportError:
        raise ConfigError(
            f"{path} is a .proto file, which Sluice compiles with grpcio-tools: pip install "
            "'sluice-core[protobuf]' (or give a descriptor set: protoc --include_imports "
            "--descriptor_set_out=FILE.desc)"
        ) from None
    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.desc"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{path.parent.resolve()}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            path.name,
        ]
        done = subprocess.run(command, capture_output=True, text=True, cwd=path.parent, check=False)
        if done.returncode != 0 or not out.exists():
            raise ConfigError(f"{path} does not compile: {done.stderr.strip() or done.stdout}")
        return out.read_bytes()


class _Pool:
    """A descriptor pool of one FileDescriptorSet, with its message classes."""

    def __init__(self, descriptor_set: bytes) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool

        self.files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
        self.pool = descriptor_pool.DescriptorPool()
        for proto in self.files:
            self.pool.Add(proto)
        self.main = self.pool.FindFileByName(self.files[-1].name)

    def message(self, name: str | None) -> Any:
        if name is None:
            if not self.main.message_types_by_name:
                raise ConfigError(f"the Protobuf file {self.main.name} defines no message")
            return next(iter(self.main.message_types_by_name.values()))
        for candidate in (name, f"{self.main.package}.{name}"):
            try:
                return self.pool.FindMessageTypeByName(candidate)
            except KeyError:
                continue
        names = ", ".join(self.main.message_types_by_name)
        raise ConfigError(f"the Protobuf schema has no message {name!r} (it has: {names})")


def message_by_indexes(main: Any, indexes: tuple[int, ...]) -> Any:
    """The message descriptor the wire format's message indexes name in file ``main``."""
    try:
        descriptor = list(main.message_types_by_name.values())[indexes[0]]
        for index in indexes[1:]:
            descriptor = descriptor.nested_types[index]
    except IndexError:
        raise DecodeError(
            f"corrupt: message indexes {list(indexes)} name no message of {main.name}"
        ) from None
    return descriptor


# ---- Arrow types and values ----------------------------------------------------------------


def message_arrow_type(descriptor: Any, seen: tuple[str, ...] = ()) -> pa.StructType:
    """The Arrow struct of a message's values."""
    if descriptor.full_name in seen:
        raise ConfigError(
            f"Protobuf message {descriptor.full_name} is recursive ({' -> '.join(seen)}), "
            "which has no column type: give a schema (Spark DDL) without the recursive field"
        )
    seen = (*seen, descriptor.full_name)
    return pa.struct([pa.field(f.name, _field_type(f, seen)) for f in descriptor.fields])


def _is_map(field: Any) -> bool:
    message = field.message_type
    return bool(message is not None and message.GetOptions().map_entry)


def _field_type(field: Any, seen: tuple[str, ...]) -> pa.DataType:

    if _is_map(field):
        entry = field.message_type
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return pa.map_(_single_type(key, seen), _single_type(value, seen))
    single = _single_type(field, seen)
    return pa.list_(single) if _repeated(field) else single


def _single_type(field: Any, seen: tuple[str, ...]) -> pa.DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        name = field.message_type.full_name
        if name == _TIMESTAMP:
            return _UTC
        if name == _DURATION:
            return pa.duration("us")
        if name in _WRAPPERS:
            return _WRAPPERS[name]
        return message_arrow_type(field.message_type, seen)
    return _scalar_types()[field.type]


def _repeated(field: Any) -> bool:
    if hasattr(type(field), "is_repeated"):  # protobuf 6 deprecates label
        return bool(field.is_repeated)
    from google.protobuf.descriptor import FieldDescriptor as F

    return bool(field.label == F.LABEL_REPEATED)


def _has_presence(field: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    if _repeated(field):
        return False
    return bool(getattr(field, "has_presence", field.type == F.TYPE_MESSAGE))


Getter = Callable[[Any], Any]


def _value_of(field: Any) -> Callable[[Any], Any]:
    """The function turning one (non-repeated) value of ``field`` into its Python value."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v, str(v))
    if field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        name = field.message_type.full_name
        if name == _TIMESTAMP:
            return lambda v: v.seconds * 1_000_000 + v.nanos // 1000
        if name == _DURATION:
            return lambda v: v.seconds * 1_000_000 + v.nanos // 1000
        if name in _WRAPPERS:
            return lambda v: v.value
        return extractor(field.message_type)
    return lambda v: v


def _getter(field: Any) -> Getter:
    """The function reading ``field``'s Python value from a message."""
    from google.protobuf.descriptor import FieldDescriptor as F

    name = field.name
    if _is_map(field):
        entry = field.message_type
        key = _value_of(entry.fields_by_name["key"])
        value = _value_of(entry.fields_by_name["value"])

        def pairs(m: Any) -> list[tuple[Any, Any]]:
            return [(key(a), value(b)) for a, b in getattr(m, name).items()]

        return pairs
    convert = _value_of(field)
    plain = field.type not in (F.TYPE_MESSAGE, F.TYPE_GROUP, F.TYPE_ENUM)
    if _repeated(field):

        def items(m: Any) -> list[Any]:
            return list(getattr(m, name)) if plain else [convert(x) for x in getattr(m, name)]

        return items
    if _has_presence(field):

        def present(m: Any) -> Any:
            return convert(getattr(m, name)) if m.HasField(name) else None

        return present
    if plain:
        return operator.attrgetter(name)

    def converted(m: Any) -> Any:
        return convert(getattr(m, name))

    return converted


def extractor(descriptor: Any) -> Callable[[Any], dict[str, Any]]:
    """The function turning a message of ``descriptor`` into a dict of Python values of its
    Arrow type (:func:`message_arrow_type`)."""

    getters: list[tuple[str, Getter]] = []
    for field in descriptor.fields:
        getters.append((field.name, _getter(field)))

    def extract(message: Any) -> dict[str, Any]:
        return {name: get(message) for name, get in getters}

    return extract


# ---- the codec -----------------------------------------------------------------------------


class ProtobufCodec:
    """Decodes and encodes the messages of one schema (a FileDescriptorSet): the message named
    ``message`` (None: the first of the file), or, decoding framed payloads, the one the
    message indexes name."""

    def __init__(self, descriptor_set: bytes, message: str | None = None, where: str = "") -> None:
        self.descriptor_set = descriptor_set
        self.where = where or "the Protobuf schema"
        self._pool = _Pool(descriptor_set)
        self.descriptor = self._pool.message(message)
        self.type: pa.StructType = message_arrow_type(self.descriptor)
        self._classes: dict[str, tuple[Any, Callable[[Any], dict[str, Any]]]] = {}

    @property
    def main(self) -> Any:
        return self._pool.main

    def indexes(self) -> tuple[int, ...]:
        """The message indexes of the codec's message (for framing)."""
        path: list[int] = []
        descriptor = self.descriptor
        while descriptor.containing_type is not None:
            path.append(list(descriptor.containing_type.nested_types).index(descriptor))
            descriptor = descriptor.containing_type
        path.append(list(self.main.message_types_by_name.values()).index(descriptor))
        return tuple(reversed(path))

    def _class(self, descriptor: Any) -> tuple[Any, Callable[[Any], dict[str, Any]]]:
        found = self._classes.get(descriptor.full_name)
        if found is None:
            from google.protobuf import message_factory

            found = (message_factory.GetMessageClass(descriptor), extractor(descriptor))
            self._classes[descriptor.full_name] = found
        return found

    def decode(self, data: bytes, descriptor: Any = None) -> dict[str, Any]:
        from google.protobuf.message import DecodeError as ProtobufDecodeError
        from google.protobuf.unknown_fields import UnknownFieldSet

        descriptor = descriptor or self.descriptor
        cls, extract = self._class(descriptor)
        try:
            message = cls.FromString(data)
        except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
            raise DecodeError(
                f"truncated or corrupt Protobuf payload ({self.where}, message "
                f"{descriptor.full_name}): {exc}"[:300]
            ) from None
        unknown = UnknownFieldSet(message)
        if len(unknown):
            numbers = sorted({field.field_number for field in unknown})
            raise DecodeError(
                f"corrupt Protobuf payload: it holds field number(s) {numbers[:5]} that message "
                f"{descriptor.full_name} ({self.where}) does not define: it was not written "
                "with this schema, or its bytes are damaged"
            )
        return extract(message)

    def encode(self, document: Mapping[str, Any]) -> bytes:
        from google.protobuf import json_format

        cls, _ = self._class(self.descriptor)
        try:
            message = json_format.ParseDict(dict(document), cls())
        except json_format.ParseError as exc:
            raise ValueError(
                f"cannot write {dict(document)!r} as {self.descriptor.full_name}: {exc}"
            ) from None
        return message.SerializeToString()  # type: ignore[no-any-return]


def descriptor_set_of(source: Path) -> bytes:
    """A file's FileDescriptorSet: a .proto file compiled, else the file as a descriptor set."""
    if source.suffix == ".proto":
        return compile_proto(source)
    return source.read_bytes()


def registry_files(registry: Any, schema: Any, depth: int = 0) -> list[bytes]:
    """The serialized FileDescriptorProtos of a registered Protobuf schema and of the schemas
    it references (registered under their subjects), referenced ones first."""
    if depth > 20:
        raise ConfigError("the Protobuf schema's references nest deeper than 20 levels")
    files: list[bytes] = []
    for _, subject, version in schema.references:
        files += registry_files(registry, registry.version(subject, version, True), depth + 1)
    files.append(base64.b64decode(schema.schema))
    return files
