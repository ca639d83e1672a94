"""The demo's one local SparkSession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .settings import SPARK_MASTER


def warm_up_spark(spark: Any, scratch: Path) -> None:
    """A first small Parquet write: Spark's first job loads and compiles much (tens of
    seconds on a busy machine); done in the background, the first ingest does not wait."""
    frame = spark.createDataFrame([("sensor-000", 21.0)], "device STRING, temperature DOUBLE")
    frame.write.mode("overwrite").parquet(str(scratch / "spark-warm-up"))


def start_spark() -> Any:
    from sluice.spark import spark_session

    spark = spark_session(
        SPARK_MASTER,
        "sluice-demo",
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
