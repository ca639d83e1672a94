"""The nemesis suite on Kafka (noida-db): every fault of docs/fault-model.md that applies to
Kafka, once per scenario, in an order a fixed seed chooses, on a Parquet dataset, an Iceberg
table and a Delta table; checked by ``sluice audit`` and the exact multiset of payload ids.
``bench/nemesis.py --seeds N`` runs more seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.testing.nemesis import Scenario

from .helpers import assert_survives


@pytest.mark.parametrize(("sink", "seed"), [("parquet", 1), ("iceberg", 2), ("delta", 3)])
def test_kafka_ingests_survive_every_fault(
    spark: Any, sink: str, seed: int, tmp_path: Path
) -> None:
    assert_survives(spark, Scenario("kafka", sink, seed), tmp_path)  # type: ignore[arg-type]
