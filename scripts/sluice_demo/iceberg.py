"""The Iceberg step: the Kafka readings again, wave by wave, into an Iceberg table whose
warehouse is on the demo's S3 server (``sluice brokers up --s3``), and its snapshots."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .settings import KAFKA_TOPIC
from .summary import describe

CATALOG, TABLE = "demo", "demo.readings"
#: The table's warehouse: a prefix of the bucket ``sluice brokers up --s3`` creates.
WAREHOUSE = "s3://lake/demo-warehouse"
GROUP = "demo-iceberg"


@dataclass
class Snapshot:
    """One snapshot of the table or of its quarantine table, naming the batch it holds."""

    table: str
    snapshot_id: int
    batch_id: str
    added_records: int
    total_records: int
    timestamp_ms: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class IcebergLake:
    """An Iceberg table ``demo.readings`` in an embedded SQLite catalog (``<lake>/catalog.db``)
    with its data and metadata files on S3, configured as pyiceberg users configure a catalog
    (``PYICEBERG_CATALOG__DEMO__S3__ENDPOINT`` ...); its own consumer group reads the topic."""

    def __init__(self, lake: Path, endpoint: str, access_key: str, secret_key: str) -> None:
        lake.mkdir(parents=True, exist_ok=True)
        self.lake = lake
        prefix = f"PYICEBERG_CATALOG__{CATALOG.upper()}__"
        os.environ.update(
            {
                f"{prefix}TYPE": "sql",
                f"{prefix}URI": f"sqlite:///{lake / 'catalog.db'}",
                f"{prefix}WAREHOUSE": WAREHOUSE,
                f"{prefix}S3__ENDPOINT": endpoint,
                f"{prefix}S3__REGION": "us-east-1",
                f"{prefix}S3__ACCESS_KEY_ID": access_key,
                f"{prefix}S3__SECRET_ACCESS_KEY": secret_key,
            }
        )
        self.sink = f"iceberg://{CATALOG}/{TABLE}"
        self.results: list[dict[str, Any]] = []
        self._queue: Any = None

    def ingest(self, spark: Any, kafka_url: str, schema: str) -> list[str]:
        """What waits for the table's group, as one batch (one snapshot)."""
        from sluice.batch import plan_batch
        from sluice.spark import ingest

        queue = self._open(kafka_url)
        lines = []
        while (spec := plan_batch(queue)) is not None:
            result = ingest(spark, spec, self.sink, source=kafka_url, schema=schema).to_dict()
            self.results.append(result)
            lines.append(describe(result))
        return lines

    def _open(self, kafka_url: str) -> Any:
        from sluice.kafka import KafkaMessageQueue

        if self._queue is None:
            queue = KafkaMessageQueue(KAFKA_TOPIC)
            queue.configure(
                {
                    "connection.uri": kafka_url.split("://", 1)[1],
                    "topic": KAFKA_TOPIC,
                    "group_id": GROUP,
                    "from_beginning": True,
                }
            )
            queue.open(None)
            self._queue = queue
        return self._queue

    def snapshot_lines(self) -> list[str]:
        from sluice.spark.sinks.iceberg import IcebergSink

        return IcebergSink(self.sink).snapshot_lines()

    def snapshots(self) -> list[Snapshot]:
        """The snapshots of the table and of its quarantine table, oldest first, read back
        from the catalog (their metadata on S3)."""
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(CATALOG)
        found = []
        for name in (TABLE, f"{TABLE}__quarantine"):
            if not catalog.table_exists(name):
                continue
            table = catalog.load_table(name)
            for snapshot in table.snapshots():
                summary = snapshot.summary.additional_properties if snapshot.summary else {}
                if "sluice.batch-id" not in summary:
                    continue
                found.append(
                    Snapshot(
                        name,
                        snapshot.snapshot_id,
                        summary["sluice.batch-id"],
                        int(summary.get("added-records", 0)),
                        int(summary.get("total-records", 0)),
                        snapshot.timestamp_ms,
                    )
                )
        return sorted(found, key=lambda s: s.timestamp_ms)

    def rows(self) -> int:
        """The table's rows, scanned from S3."""
        from pyiceberg.catalog import load_catalog

        return int(load_catalog(CATALOG).load_table(TABLE).scan().to_arrow().num_rows)

    def metadata_location(self) -> str:
        from pyiceberg.catalog import load_catalog

        return str(load_catalog(CATALOG).load_table(TABLE).metadata_location)

    def close(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None:
            queue.close(None)
