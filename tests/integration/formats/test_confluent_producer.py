"""The producer side a user writes: confluent-kafka's own ``AvroSerializer`` (a client we did
not write) registers the schema in a registry and frames each record; Sluice reads those
records back through the same registry. Issue 37, finding 10: the formats section had no
producer to show, and ``confluent_kafka.schema_registry`` needs confluent-kafka's
``schemaregistry`` and ``avro`` extras (authlib, httpx, fastavro)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.registry_server import SchemaRegistryServer
from sluice.spark import ingest

from ..spark.conftest import KafkaTopic
from .conftest import dataset_rows

READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "example.sensors",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "temperature", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def test_records_from_confluent_kafkas_avro_serializer_are_ingested_through_the_registry(
    spark: Any, topic: KafkaTopic, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(
        SchemaRegistryClient({"url": schema_registry.url}), json.dumps(READING)
    )
    producer = Producer({"bootstrap.servers": topic.broker.bootstrap, "acks": "all"})
    context = SerializationContext(topic.name, MessageField.VALUE)
    sent = [
        {"device": f"dev-{i % 3}", "temperature": 20 + i / 4, "note": None if i % 2 else f"n{i}"}
        for i in range(30)
    ]
    for record in sent:
        producer.produce(topic.name, value=serializer(record, context))
    assert producer.flush(30) == 0, "every record acknowledged"

    result = ingest(
        spark,
        topic.plan(),
        tmp_path / "sink",
        source=topic.source,
        value_format="avro",
        schema_registry=schema_registry.url,
    )

    assert (result.written, result.quarantined, result.committed) == (30, 0, True)
    rows = dataset_rows(tmp_path / "sink")
    got = sorted((r["device"], r["temperature"], r["note"]) for r in rows)
    assert got == sorted((r["device"], r["temperature"], r["note"]) for r in sent)
    assert schema_registry.requests[f"POST /subjects/{topic.name}-value/versions"] >= 1
