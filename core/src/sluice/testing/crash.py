"""Crash tests without a JVM per crash: a child process drives the test session's Spark.

Starting Spark takes seconds, and a crash matrix kills dozens of ingests. So the child that
is killed attaches to the JVM of the parent's SparkSession through its py4j gateway (as
spark-submit's Python does) instead of starting one: the child's SIGKILL ends the child, and
the parent's Spark goes on. :func:`run_child` starts such a child (``python -m
sluice.testing.crash ARGUMENTS_JSON``) and kills it at a failpoint or a moment;
:func:`gateway_environment` is what the parent gives the child; :func:`attached_session` is
what the child calls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["attached_session", "gateway_environment", "run_child", "run_command"]

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


def run_child(
    spark: Any,
    arguments: Mapping[str, Any],
    failpoint: str = "",
    kill_after: float | None = None,
    environment: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``ingest(**arguments)`` (``spec``, ``sink`` and its keyword arguments) in a child
    process attached to ``spark``; return its exit code and stderr. It dies by SIGKILL at
    ``failpoint``, or ``kill_after`` seconds after it started."""
    env = {
        **os.environ,
        **(environment or {}),
        **gateway_environment(spark),
        "SLUICE_FAILPOINTS": failpoint,
    }
    child = subprocess.Popen(
        [sys.executable, "-m", __name__, json.dumps(dict(arguments), default=str)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if kill_after is not None:
            deadline = time.monotonic() + kill_after
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=180)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(30)
    return child.returncode, stderr


def run_command(arguments: list[str], failpoint: str = "") -> tuple[int, str]:
    """Run ``sluice ARGUMENTS`` (``compact``, ``expire``: no Spark) in a child process that
    dies by SIGKILL at ``failpoint``; return its exit code and stderr."""
    env = {**os.environ, "SLUICE_FAILPOINTS": failpoint}
    child = subprocess.run(
        [sys.executable, "-c", "from sluice.cli import main; main()", *arguments],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=180,
    )
    return child.returncode, child.stderr


def main() -> None:
    """The child: one ingest on the parent's Spark; SLUICE_FAILPOINTS says where it dies."""
    from sluice.spark import ingest

    arguments = json.loads(sys.argv[1])
    ingest(attached_session(), arguments.pop("spec"), arguments.pop("sink"), **arguments)


if __name__ == "__main__":
    main()
