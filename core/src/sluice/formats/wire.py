"""The Confluent wire format: magic byte 0, a 4-byte big-endian schema id, for Protobuf the
message indexes (a zigzag varint array naming the message in the schema's file), then the
payload. :func:`unframe` reads a frame and says plainly what is wrong with a bad one."""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["MAGIC", "DecodeError", "Frame", "frame", "unframe"]

MAGIC = 0
_HEADER = struct.Struct(">bI")


class DecodeError(ValueError):
    """A record that cannot be decoded; the message is the quarantine reason."""


@dataclass(frozen=True)
class Frame:
    schema_id: int
    indexes: tuple[int, ...]  # Protobuf: the message's path in the file; () for other formats
    offset: int  # where the payload starts


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise DecodeError("truncated: the Protobuf message indexes end before the payload")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise DecodeError("corrupt: a Protobuf message index is not a valid varint")


def frame(schema_id: int, payload: bytes, indexes: tuple[int, ...] | None = None) -> bytes:
    """``payload`` in the wire format (``indexes`` for Protobuf: ``(0,)`` is the first message)."""
    head = _HEADER.pack(MAGIC, schema_id)
    if indexes is None:
        return head + payload
    if tuple(indexes) == (0,):
        return head + b"\x00" + payload
    body = _varint(_zigzag(len(indexes))) + b"".join(_varint(_zigzag(i)) for i in indexes)
    return head + body + payload


def unframe(data: bytes, protobuf: bool = False) -> Frame:
    """The frame of ``data``, or :class:`DecodeError` naming what is wrong."""
    if len(data) < _HEADER.size:
        raise DecodeError(
            f"truncated: {len(data)} byte(s), the Confluent wire format needs at least 5 (magic "
            "byte 0 and a 4-byte schema id)"
        )
    if data[0] != MAGIC:
        shown = repr(bytes(data[:1]))[1:]
        raise DecodeError(
            f"wrong magic byte {shown} (0x{data[0]:02x}): not the Confluent wire format, whose "
            "first byte is 0; was it written without a schema registry? Give the schema "
            "(value_schema) instead of schema_registry for unframed payloads"
        )
    schema_id = _HEADER.unpack_from(data)[1]
    at = _HEADER.size
    if not protobuf:
        return Frame(schema_id, (), at)
    count, at = _read_varint(data, at)
    count = _unzigzag(count)
    if count == 0:
        return Frame(schema_id, (0,), at)
    if count < 0 or count > 100:
        raise DecodeError(f"corrupt: {count} Protobuf message indexes (schema id {schema_id})")
    indexes = []
    for _ in range(count):
        value, at = _read_varint(data, at)
        indexes.append(_unzigzag(value))
    return Frame(schema_id, tuple(indexes), at)
