"""The nemesis suite on Kafka: every fault of docs/fault-model.md that applies to Kafka, once
per scenario, in an order a fixed seed chooses, on a Parquet dataset, an Iceberg table and a
Delta table, on Apache Kafka (one KRaft node, the reference broker); and the faults only a
replicated cluster has (a partition's leader killed, a node paused past its session timeout,
the group's coordinator moved) on three Apache Kafka nodes. Checked by ``sluice audit`` and
the exact multiset of payload ids; and the Parquet scenario again with Spark's own Kafka source
reading the batches (``options.reader`` "spark"). And change data capture: Debezium changes of
a simulated source table into current-state Iceberg and Delta tables (``write_mode="upsert"``),
every Apache Kafka fault that deletes no message, checked by the table against the source
table, the quarantine against the bad messages sent, and ``sluice audit``. And one topic, many
tables: batches routed by a field of the payloads to Iceberg, Delta and Parquet route tables
(``routes=True``), checked by ``sluice audit --routes`` and every id in its one place.
``bench/nemesis.py --seeds N --broker noida|kafka|cluster [--reader spark] [--write-mode
upsert] [--routes]`` runs more seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.kafka.config import DEFAULT_READER, SPARK_READER
from sluice.testing.nemesis import ROUTED_STEPS, Scenario
from sluice.testing.nemesis_cdc import BAD_KINDS, TABLE_BAD_KINDS
from sluice.testing.nemesis_routes import SHARES

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


@pytest.mark.parametrize(("sink", "seed"), [("iceberg", 6), ("delta", 7)])
def test_cdc_tables_equal_their_source_table_whatever_fails(
    spark: Any, sink: str, seed: int, tmp_path: Path
) -> None:
    """Inserts, updates, deletes, truncates and a new column of a source table, keyed as
    Debezium keys them (a key's changes move partition when the topic gains one), and bad
    messages of every kind, through every Apache Kafka fault that deletes no message: the
    table equals the source table, every bad message is quarantined once and nothing else."""
    scenario = Scenario("kafka", sink, seed, broker="kafka", write_mode="upsert")  # type: ignore[arg-type]
    outcome = assert_survives(spark, scenario, tmp_path)
    assert outcome.cdc is not None
    assert set(outcome.cdc.kinds) == {*BAD_KINDS, *TABLE_BAD_KINDS}, outcome.report()
    assert outcome.cdc.moved > 0 and outcome.cdc.truncates > 0, outcome.report()


@pytest.mark.timeout(600)  # 110 to 230 s of rounds under a load of 8 to 12 on two cores
def test_routed_messages_are_each_in_their_own_table_once_whatever_fails(
    spark: Any, tmp_path: Path
) -> None:
    """One topic into five route tables (two Iceberg, two Delta, a Parquet dataset) by a field
    of the payloads, the ingest's own sink a Delta table taking the messages with no route;
    every Apache Kafka fault, the catalog's on the Iceberg route tables, a kill between two
    tables' commits or inside one's publish: ``sluice audit --routes`` passes, every id is in
    the one place it belongs (its table, its table's quarantine, the ingest's own sink), once."""
    scenario = Scenario("kafka", "delta", 8, broker="kafka", routes=True)
    outcome = assert_survives(spark, scenario, tmp_path)
    assert outcome.routed is not None
    assert set(outcome.routed.sent) == {"routed", *(name for name, _ in SHARES)}, outcome.report()
    # the kill fell inside a route table's publish (a plain publish.* point fires in the
    # first table's) or between the tables' commits
    killed = [entry.removeprefix("kill@") for entry in outcome.injected if entry[:5] == "kill@"]
    routed = [step for step in killed if step in ROUTED_STEPS or step.startswith("publish.")]
    assert routed, outcome.report()
