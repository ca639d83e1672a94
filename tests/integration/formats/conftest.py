"""Schemas and helpers of the payload-format tests (a topic of the test's own comes from the
Spark tests' ``topic`` fixture; the registry is the plugin's ``schema_registry``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.airflow_env import configure

configure()

from tests.integration.iceberg.conftest import sqlite_lake  # noqa: E402
from tests.integration.spark.conftest import dataset_rows, quarantine_rows, topic  # noqa: E402

__all__ = [
    "READING_AVRO",
    "READING_JSON_SCHEMA",
    "READING_PROTO",
    "batch_tables",
    "dataset_rows",
    "quarantine_rows",
    "reading",
    "sqlite_lake",
    "topic",
]

READING_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "sluice.test",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "temperature", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "room", "type": "string"}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "extra", "type": {"type": "map", "values": "long"}},
        {
            "name": "kind",
            "type": {"type": "enum", "name": "Kind", "symbols": ["INDOOR", "OUTDOOR"]},
        },
    ],
}

#: Version 2 adds an optional field (BACKWARD compatible).
READING_AVRO_V2: dict[str, Any] = {
    **READING_AVRO,
    "fields": [
        *READING_AVRO["fields"],
        {"name": "humidity", "type": ["null", "double"], "default": None},
    ],
}

#: Version 3 changes a field's type (registered with compatibility NONE).
READING_AVRO_V3: dict[str, Any] = {
    **READING_AVRO,
    "fields": [
        {**f, "type": "string"} if f["name"] == "temperature" else f for f in READING_AVRO["fields"]
    ],
}

READING_PROTO = """
syntax = "proto3";
package sluice.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Reading {
  string id = 1;
  double temperature = 2;
  google.protobuf.Timestamp ts = 3;
  google.protobuf.DoubleValue humidity = 4;
  enum Kind { UNKNOWN = 0; INDOOR = 1; OUTDOOR = 2; }
  Kind kind = 5;
  repeated int32 samples = 6;
  map<string, string> labels = 7;
  message Place { string room = 1; optional int32 floor = 2; }
  Place place = 8;
}
"""

READING_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "temperature": {"type": "number"},
        "ts": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "place": {"type": "object", "properties": {"room": {"type": "string"}}},
    },
    "required": ["id", "temperature"],
}


def reading(i: int, **more: Any) -> dict[str, Any]:
    """A reading as the Avro schema wants it (JSON-like)."""
    return {
        "id": f"r{i}",
        "temperature": i / 2,
        "ts": f"2024-01-01T00:00:{i % 60:02d}+00:00",
        "price": f"{i}.25",
        "day": "2024-02-03",
        "uuid": "6a2f41a3-c54c-fce8-32d2-0324e1c32e22",
        "place": {"room": f"room-{i % 3}"},
        "tags": ["a", "b"][: i % 3],
        "extra": {"n": i},
        "kind": "INDOOR" if i % 2 else "OUTDOOR",
        **more,
    }


def write_schema(directory: Path, name: str, schema: Any) -> Path:
    path = directory / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return path


def batch_tables(sink: Path) -> list[Any]:
    """The good rows' table of each published batch, oldest first."""
    batches = sorted(
        sink.glob("batch_id=*"), key=lambda d: (d / "_sluice_batch.json").stat().st_mtime
    )
    return [pq.read_table(list(d.glob("*.parquet"))) for d in batches if list(d.glob("*.parquet"))]
