"""The Iceberg step: one flow written into an Iceberg table, and its snapshots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .settings import KAFKA_TOPIC
from .summary import describe


def ingest_into_iceberg(spark: Any, kafka_url: str, schema: str, lake: Path) -> list[str]:
    """The Kafka topic read again, by a consumer group of its own, into an Iceberg table of an
    embedded SQLite catalog; then the table's snapshots, each naming its batch."""
    from sluice.batch import plan_batch
    from sluice.kafka import KafkaMessageQueue
    from sluice.spark import ingest
    from sluice.spark.sinks.iceberg import IcebergSink

    lake.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "PYICEBERG_CATALOG__DEMO__TYPE": "sql",
            "PYICEBERG_CATALOG__DEMO__URI": f"sqlite:///{lake / 'catalog.db'}",
            "PYICEBERG_CATALOG__DEMO__WAREHOUSE": (lake / "warehouse").as_uri(),
        }
    )
    table = "iceberg://demo/demo.readings"
    queue = KafkaMessageQueue(KAFKA_TOPIC)
    queue.configure(
        {
            "connection.uri": kafka_url.split("://", 1)[1],
            "topic": KAFKA_TOPIC,
            "group_id": "demo-iceberg",
            "from_beginning": True,
        }
    )
    queue.open(None)
    lines = []
    try:
        while (spec := plan_batch(queue)) is not None:
            result = ingest(spark, spec, table, source=kafka_url, schema=schema)
            lines.append(describe(result.to_dict()))
    finally:
        queue.close(None)
    return lines + IcebergSink(table).snapshot_lines()
