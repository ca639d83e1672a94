"""The SparkSession an ingest runs on: local by default, any master or Spark Connect by URL."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_MASTER", "MASTER_ENV", "spark_session"]

MASTER_ENV = "SLUICE_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"

#: Settings every Sluice session gets unless the caller overrides them: Arrow on, a quiet UI.
_DEFAULT_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def spark_session(
    master: str | None = None,
    app_name: str = "sluice",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Get or create a SparkSession.

    ``master`` is a Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``,
    ``k8s://...``) or a Spark Connect URL (``sc://host:15002``); by default the
    ``SLUICE_SPARK_MASTER`` environment variable, else ``local[*]``. An already active session
    is reused (a SparkSession is one per process).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get(MASTER_ENV)
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        # (under spark-submit, with no master given, spark-submit's --master stands)
        master = master or DEFAULT_MASTER
        if master.startswith("local"):
            # Local Python workers run this interpreter (its environment has sluice), and a
            # local Spark listens on loopback only, not on whatever the host name resolves to.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
        builder = builder.remote(master) if master.startswith("sc://") else builder.master(master)
    for key, value in {**_DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
