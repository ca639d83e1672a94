"""The nemesis on the store "s3": a Parquet dataset on a real S3 server of the scenario's own
(SeaweedFS) behind the fault proxy, while the server is killed and started again mid-write and
answers 500s and 503s, composed by a fixed seed; checked by ``sluice audit`` and the exact
multiset of payload ids. ``bench/nemesis.py --store s3`` runs more seeds, with every fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.testing.nemesis import Scenario, faults_for

from .helpers import assert_survives


def test_the_store_faults_apply_to_s3_only() -> None:
    local = {f.name for f in faults_for("kafka", "parquet")}
    on_s3 = {f.name for f in faults_for("kafka", "parquet", "s3")}
    assert on_s3 - local == {"s3-restart", "s3-error"}
    assert local <= on_s3


def test_kafka_ingests_into_parquet_on_s3_survive_its_restarts_and_errors(
    spark: Any, tmp_path: Path
) -> None:
    scenario = Scenario("kafka", "parquet", 3, store="s3", only=("s3-restart", "s3-error"))
    assert_survives(spark, scenario, tmp_path)
