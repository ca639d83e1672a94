"""Sparkplug B (Eclipse Tahu) payloads on MQTT: one row per metric.

The topic namespace ``spBv1.0/GROUP/TYPE/EDGE_NODE[/DEVICE]`` gives the group, message type
(NBIRTH, NDATA, DBIRTH, DDATA, NDEATH, DDEATH, NCMD, DCMD) and the edge node and device; the
payload (``sparkplug_b.proto`` beside this module, loaded from its compiled descriptor set,
needing only the protobuf runtime) gives the payload's timestamp and seq and the metrics.

Each metric becomes a row (:data:`ROW_TYPE`); a payload without metrics (a death
certificate) becomes one row with no metric, so no message vanishes. Values go to the column
of their kind: integers (Int8..UInt64, signed as the data type says) to ``int_value``,
Float and Double to ``double_value``, ``boolean_value``, String/Text/UUID to
``string_value``, Bytes/File and the array types to ``bytes_value``, DateTime to
``datetime_value``. DataSet, Template and PropertySet metrics are not decoded: their message
is quarantined saying so.

Aliases. A birth certificate (NBIRTH for the edge node's metrics, DBIRTH for a device's)
names each metric and may give it an alias and a data type; data messages may then carry
the alias alone. :class:`AliasBook` holds the last birth of each edge node and device; it
is kept with the stream's state, so births of earlier batches name the aliases of later
ones. A metric whose alias no birth defined quarantines its message with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..wire import DecodeError

__all__ = [
    "DATA_TYPES",
    "NAMESPACE",
    "ROW_TYPE",
    "AliasBook",
    "SparkplugDecoder",
    "descriptor_set",
    "encode_payload",
    "parse_topic",
]

NAMESPACE = "spBv1.0"
DESCRIPTOR_SET = Path(__file__).with_name("sparkplug_b.desc")
PROTO = Path(__file__).with_name("sparkplug_b.proto")
_MESSAGE = "org.eclipse.tahu.protobuf.Payload"
MESSAGE_TYPES = ("NBIRTH", "NDEATH", "DBIRTH", "DDEATH", "NDATA", "DDATA", "NCMD", "DCMD")
DATA_TYPES = (
    "Unknown",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "UInt8",
    "UInt16",
    "UInt32",
    "UInt64",
    "Float",
    "Double",
    "Boolean",
    "String",
    "DateTime",
    "Text",
    "UUID",
    "DataSet",
    "Bytes",
    "File",
    "Template",
    "PropertySet",
    "PropertySetList",
    "Int8Array",
    "Int16Array",
    "Int32Array",
    "Int64Array",
    "UInt8Array",
    "UInt16Array",
    "UInt32Array",
    "UInt64Array",
    "FloatArray",
    "DoubleArray",
    "BooleanArray",
    "StringArray",
    "DateTimeArray",
)
_TYPE = {name: number for number, name in enumerate(DATA_TYPES)}
_SIGNED32 = {_TYPE["Int8"], _TYPE["Int16"], _TYPE["Int32"]}
_UNSIGNED32 = {_TYPE["UInt8"], _TYPE["UInt16"], _TYPE["UInt32"]}
_NOT_DECODED = {_TYPE["DataSet"], _TYPE["Template"], _TYPE["PropertySet"], _TYPE["PropertySetList"]}
_MILLIS = pa.timestamp("ms", tz="UTC")

ROW_TYPE = pa.struct(
    [
        ("namespace", pa.string()),
        ("group_id", pa.string()),
        ("message_type", pa.string()),
        ("edge_node_id", pa.string()),
        ("device_id", pa.string()),
        ("payload_timestamp", _MILLIS),
        ("seq", pa.int64()),
        ("metric_name", pa.string()),
        ("alias", pa.int64()),
        ("datatype", pa.string()),
        ("metric_timestamp", _MILLIS),
        ("is_historical", pa.bool_()),
        ("is_transient", pa.bool_()),
        ("is_null", pa.bool_()),
        ("int_value", pa.int64()),
        ("double_value", pa.float64()),
        ("boolean_value", pa.bool_()),
        ("string_value", pa.string()),
        ("bytes_value", pa.binary()),
        ("datetime_value", _MILLIS),
    ]
)
_EMPTY_METRIC = dict.fromkeys(
    (
        "metric_name",
        "alias",
        "datatype",
        "metric_timestamp",
        "is_historical",
        "is_transient",
        "is_null",
        "int_value",
        "double_value",
        "boolean_value",
        "string_value",
        "bytes_value",
        "datetime_value",
    )
)


def descriptor_set() -> bytes:
    return DESCRIPTOR_SET.read_bytes()


def _payload_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set()).file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(_MESSAGE))


def parse_topic(topic: str) -> tuple[str, str, str, str | None]:
    """(group, message type, edge node, device or None) of a Sparkplug B topic."""
    parts = topic.split("/")
    if len(parts) >= 3 and parts[0] == NAMESPACE and parts[1] == "STATE":
        raise DecodeError(
            f"'{topic}' is a STATE message of host application '{'/'.join(parts[2:])}', not a "
            "Sparkplug B payload: subscribe to spBv1.0/GROUP/# to leave those out"
        )
    if len(parts) not in (4, 5) or parts[0] != NAMESPACE or parts[2] not in MESSAGE_TYPES:
        raise DecodeError(
            f"topic '{topic}' is not in the Sparkplug B namespace "
            f"{NAMESPACE}/GROUP/TYPE/EDGE_NODE[/DEVICE] (TYPE one of {', '.join(MESSAGE_TYPES)})"
        )
    device = parts[4] if len(parts) == 5 else None
    if parts[2].startswith("D") and device is None:
        raise DecodeError(f"topic '{topic}' is a device message ({parts[2]}) without a device")
    return parts[1], parts[2], parts[3], device


class AliasBook:
    """The last birth of each edge node and device: alias -> (metric name, data type).
    ``to_json`` / ``from_json`` keep it in the stream's state."""

    def __init__(self, births: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.births: dict[str, dict[str, list[Any]]] = {
            owner: {str(a): list(v) for a, v in aliases.items()}
            for owner, aliases in (births or {}).items()
        }

    @staticmethod
    def owner(group: str, edge: str, device: str | None) -> str:
        return f"{group}/{edge}" + (f"/{device}" if device is not None else "")

    def born(self, owner: str, metrics: Iterable[Any], node: bool) -> None:
        """A birth of ``owner`` (an NBIRTH ends the session of the node's devices too)."""
        if node:
            for known in [k for k in self.births if k.startswith(owner + "/")]:
                del self.births[known]
        self.births[owner] = {
            str(m.alias): [m.name, int(m.datatype) if m.HasField("datatype") else 0]
            for m in metrics
            if m.HasField("alias") and m.HasField("name")
        }

    def name(self, owner: str, alias: int) -> tuple[str, int] | None:
        found = self.births.get(owner, {}).get(str(alias))
        return (str(found[0]), int(found[1])) if found else None

    def to_json(self) -> dict[str, Any]:
        return {owner: dict(sorted(a.items())) for owner, a in sorted(self.births.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> AliasBook:
        return cls(data or {})


def _metric_value(metric: Any, datatype: int) -> dict[str, Any]:
    """The value columns of a metric."""
    kind = metric.WhichOneof("value")
    out: dict[str, Any] = {}
    if kind is None or (metric.HasField("is_null") and metric.is_null):
        return out
    raw = getattr(metric, kind)
    if datatype in _NOT_DECODED or kind in ("dataset_value", "template_value"):
        name = DATA_TYPES[datatype] if datatype < len(DATA_TYPES) else kind
        raise DecodeError(
            f"metric '{metric.name}' is a {name}: Sluice does not decode DataSet, Template and "
            "PropertySet metrics"
        )
    if kind == "extension_value":
        raise DecodeError(f"metric '{metric.name}' holds an extension value Sluice cannot read")
    if datatype == _TYPE["DateTime"]:
        out["datetime_value"] = int(raw)
    elif kind == "int_value":
        out["int_value"] = raw - (1 << 32) if datatype in _SIGNED32 and raw >= 1 << 31 else raw
    elif kind == "long_value":
        value = int(raw)
        if datatype != _TYPE["UInt64"] and value >= 1 << 63:
            value -= 1 << 64
        if value >= 1 << 63:
            raise DecodeError(
                f"metric '{metric.name}': UInt64 value {value} does not fit the int_value "
                "column (BIGINT)"
            )
        out["int_value"] = value
    elif kind in ("float_value", "double_value"):
        out["double_value"] = float(raw)
    elif kind == "boolean_value":
        out["boolean_value"] = bool(raw)
    elif kind == "string_value":
        out["string_value"] = raw
    elif kind == "bytes_value":
        out["bytes_value"] = bytes(raw)
    return out


class SparkplugDecoder:
    """Decodes Sparkplug B messages in the order they arrived, keeping :attr:`book` (births
    update it as they come)."""

    def __init__(self, book: AliasBook | None = None) -> None:
        from google.protobuf.message import DecodeError as ProtobufDecodeError

        self.book = book or AliasBook()
        self._payload = _payload_class()
        self._errors = (ProtobufDecodeError, RuntimeError, ValueError)

    def parse(self, data: bytes) -> Any:
        try:
            return self._payload.FromString(data)
        except self._errors as exc:
            raise DecodeError(f"truncated or corrupt Sparkplug B payload: {exc}"[:300]) from None

    def decode(self, topic: str, data: bytes) -> list[dict[str, Any]]:
        """The rows of one message (or :class:`DecodeError`, the book left unchanged)."""
        group, kind, edge, device = parse_topic(topic)
        payload = self.parse(data)
        owner = AliasBook.owner(group, edge, device)
        head = {
            "namespace": NAMESPACE,
            "group_id": group,
            "message_type": kind,
            "edge_node_id": edge,
            "device_id": device,
            "payload_timestamp": payload.timestamp if payload.HasField("timestamp") else None,
            "seq": payload.seq if payload.HasField("seq") else None,
        }
        birth = kind in ("NBIRTH", "DBIRTH")
        rows = []
        for metric in payload.metrics:
            name = metric.name if metric.HasField("name") else None
            datatype = metric.datatype if metric.HasField("datatype") else None
            alias = metric.alias if metric.HasField("alias") else None
            if name is None and alias is not None and not birth:
                known = self.book.name(owner, alias)
                if known is None:
                    raise DecodeError(
                        f"metric alias {alias} of {owner} has no birth certificate "
                        f"({'DBIRTH' if device else 'NBIRTH'}) in this batch or an earlier one, "
                        "so it has no name; have the edge node publish its birth (a rebirth) "
                        "before its data"
                    )
                name, datatype = known[0], datatype if datatype is not None else known[1]
            if alias is not None and alias >= 1 << 63:
                raise DecodeError(f"metric '{name}': alias {alias} does not fit a BIGINT")
            number = datatype or 0
            row = {
                **head,
                **_EMPTY_METRIC,
                "metric_name": name,
                "alias": alias,
                "datatype": DATA_TYPES[number] if number < len(DATA_TYPES) else str(number),
                "metric_timestamp": metric.timestamp if metric.HasField("timestamp") else None,
                "is_historical": metric.is_historical if metric.HasField("is_historical") else None,
                "is_transient": metric.is_transient if metric.HasField("is_transient") else None,
                "is_null": metric.is_null if metric.HasField("is_null") else None,
            }
            row.update(_metric_value(metric, number))
            rows.append(row)
        if birth:
            self.book.born(owner, payload.metrics, node=kind == "NBIRTH")
        return rows or [{**head, **_EMPTY_METRIC}]


def _kind_of(value: Any) -> int:
    """The data type a value without one is sent as (data messages may leave it out)."""
    if isinstance(value, bool):
        return _TYPE["Boolean"]
    if isinstance(value, int):
        return _TYPE["Int64"]
    if isinstance(value, float):
        return _TYPE["Double"]
    if isinstance(value, bytes):
        return _TYPE["Bytes"]
    return _TYPE["String"]


def encode_payload(document: Mapping[str, Any]) -> bytes:
    """A Sparkplug B payload from ``{"timestamp": ms, "seq": n, "metrics": [{"name": ...,
    "alias": ..., "datatype": "Double", "value": ..., "timestamp": ms}, ...]}`` (for test data
    and ``sluice publish --format sparkplug_b``)."""
    payload = _payload_class()()
    for key in ("timestamp", "seq", "uuid"):
        if document.get(key) is not None:
            setattr(payload, key, document[key])
    for item in document.get("metrics", ()):
        metric = payload.metrics.add()
        for key in ("name", "alias", "timestamp", "is_historical", "is_transient", "is_null"):
            if item.get(key) is not None:
                setattr(metric, key, item[key])
        datatype = item.get("datatype")
        number = _TYPE[datatype] if isinstance(datatype, str) else datatype
        if number is not None:
            metric.datatype = number
        value = item.get("value")
        if value is None:
            continue
        kind = number or _kind_of(value)
        if kind in _SIGNED32 | _UNSIGNED32:
            metric.int_value = int(value) & 0xFFFFFFFF
        elif kind in (_TYPE["Int64"], _TYPE["UInt64"], _TYPE["DateTime"]):
            metric.long_value = int(value) & 0xFFFFFFFFFFFFFFFF
        elif kind == _TYPE["Float"]:
            metric.float_value = float(value)
        elif kind == _TYPE["Double"]:
            metric.double_value = float(value)
        elif kind == _TYPE["Boolean"]:
            metric.boolean_value = bool(value)
        elif kind in (_TYPE["Bytes"], _TYPE["File"]):
            metric.bytes_value = bytes(value)
        else:
            metric.string_value = str(value)
    return payload.SerializeToString()  # type: ignore[no-any-return]
