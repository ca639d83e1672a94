"""The nemesis suite on Kafka: every fault of docs/fault-model.md that applies to Kafka, once
per scenario, in an order a fixed seed chooses, on a Parquet dataset, an Iceberg table and a
Delta table, on Apache Kafka (one KRaft node, the reference broker); and the faults only a
replicated cluster has (a partition's leader killed, a node paused past its session timeout,
the group's coordinator moved) on three Apache Kafka nodes. Checked by ``sluice audit`` and
the exact multiset of payload ids; and the Parquet scenario again with Spark's own Kafka source
reading the batches (``options.reader`` "spark"). ``bench/nemesis.py --seeds N --broker
noida|kafka|cluster [--reader spark]`` runs more seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.kafka.config import DEFAULT_READER, SPARK_READER
from sluice.testing.nemesis import Scenario

from .helpers import assert_survives


@pytest.mark.parametrize(
    ("sink", "seed", "reader"),
    [
        ("parquet", 1, DEFAULT_READER),
        ("iceberg", 2, DEFAULT_READER),
        ("delta", 3, DEFAULT_READER),
        ("parquet", 5, SPARK_READER),
    ],
)
def test_kafka_ingests_survive_every_fault(
    spark: Any, sink: str, seed: int, reader: str, tmp_path: Path
) -> None:
    scenario = Scenario("kafka", sink, seed, broker="kafka", reader=reader)  # type: ignore[arg-type]
    assert_survives(spark, scenario, tmp_path)


def test_kafka_ingests_survive_a_clusters_faults(spark: Any, tmp_path: Path) -> None:
    """Three nodes (replication 3, min ISR 2), an acks=all producer: every acknowledged
    message arrives once whatever node fails."""
    scenario = Scenario(
        "kafka",
        "parquet",
        4,
        only=("leader-kill", "broker-pause", "coordinator-move"),
        broker="cluster",
    )
    outcome = assert_survives(spark, scenario, tmp_path)
    assert not outcome.unfired, outcome.report()  # each node failure happened mid-ingest
