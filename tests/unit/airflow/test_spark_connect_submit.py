"""SparkIngestOperator refuses spark-submit of a Spark Connect URL, saying what to do."""

from __future__ import annotations

import pytest

from sluice_airflow.operators.spark import SparkIngestOperator


def test_submit_with_a_connect_url_is_refused_at_definition() -> None:
    with pytest.raises(ValueError, match=r"Leave submit=False"):
        SparkIngestOperator(
            task_id="ingest", sink="/tmp/out", submit=True, spark_master="sc://127.0.0.1:15002"
        )
