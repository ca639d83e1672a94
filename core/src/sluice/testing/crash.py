"""Crash tests without a JVM per crash: a child process drives the test session's Spark.

Starting Spark takes seconds, and a crash matrix kills dozens of ingests. So the child that
is killed attaches to the JVM of the parent's SparkSession through its py4j gateway (as
spark-submit's Python does) instead of starting one: the child's SIGKILL ends the child, and
the parent's Spark goes on. :func:`gateway_environment` is what the parent gives the child;
:func:`attached_session` is what the child calls.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["attached_session", "gateway_environment"]

PORT, SECRET = "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"


def gateway_environment(spark: Any) -> dict[str, str]:
    """Environment variables that let a child process attach to ``spark``'s JVM."""
    parameters = spark.sparkContext._gateway.gateway_parameters
    return {PORT: str(parameters.port), SECRET: str(parameters.auth_token)}


def attached_session() -> Any:
    """The SparkSession of the JVM named by :func:`gateway_environment` in this process's
    environment. Never stop it: it belongs to the parent."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if PORT not in os.environ:
        raise RuntimeError(f"attached_session() needs {PORT} and {SECRET} from the parent")
    gateway = launch_gateway()  # type: ignore[no-untyped-call]
    jvm = gateway.jvm
    jsc = jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(
        jvm.org.apache.spark.SparkContext.getOrCreate()
    )
    conf = SparkConf(_jvm=jvm).setMaster(jsc.sc().master()).setAppName(jsc.sc().appName())
    return SparkSession(SparkContext(conf=conf, gateway=gateway, jsc=jsc))
