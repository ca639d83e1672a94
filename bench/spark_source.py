"""The batch as a Spark user's job reads it: Spark's Kafka source over offsets 0 to each
partition's end, read_committed (side j of ``bench/ingest.py``, the filtered jobs of
``bench/routes.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def read_batch(spark: Any, bootstrap: str, topic: str, ends: Mapping[int, int]) -> Any:
    """The DataFrame of ``topic``'s messages [0, end) of each partition in ``ends``."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps({topic: list(ends)}))
        .option("startingOffsets", json.dumps({topic: {str(p): 0 for p in ends}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}}))
        .load()
    )
