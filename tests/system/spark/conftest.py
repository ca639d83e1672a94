"""Real Spark for the system tests: one standalone cluster (a master and two one-core
workers) and one Spark Connect server per test session, each started by the first test that
needs it and stopped by pid at the end; a bare virtualenv (pyarrow and pandas, no Sluice) for
executors that must be sent Sluice; and drivers that run in processes of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.spark.connector import kafka_source_jars
from sluice.testing.spark_cluster import (
    ConnectServer,
    StandaloneCluster,
    bare_python,
    start_cluster,
    start_connect_server,
)

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = "device STRING, temperature DOUBLE"

#: Settings of every test driver: on loopback, small executors, few shuffle partitions.
DRIVER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "512m",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
}


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with pyarrow and pandas but no Sluice (the cluster's Python)."""
    return bare_python(tmp_path_factory.getbasetemp() / "bare-venv")


# The cluster and the Connect server serve one file each: module scope stops their JVMs when
# it ends, not when the session does.
@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = start_cluster(2, tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def connect_server(
    tmp_path_factory: pytest.TempPathFactory, bare_venv: Path
) -> Iterator[ConnectServer]:
    """pyspark's Connect server, whose Python workers run the bare virtualenv: clients ship
    Sluice to it. Spark's Kafka source is on its class path (options.reader 'spark')."""
    server = start_connect_server(
        "local[2]",
        python=str(bare_venv),
        workdir=tmp_path_factory.mktemp("spark-connect"),
        jars=kafka_source_jars(),
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def two_workers(spark_cluster: StandaloneCluster) -> StandaloneCluster:
    """The cluster with two live workers (a test before may have killed one)."""
    while len(spark_cluster.live_workers) < 2:
        spark_cluster.add_worker()
    return spark_cluster


@dataclass
class Driver:
    """A driver process started by :func:`start_driver`."""

    proc: subprocess.Popen[str]
    stderr: str = ""

    def result(self, timeout: float = 180) -> list[dict[str, Any]]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(
                f"the driver did not finish in {timeout} s:\n{err[-4000:]}"
            ) from None
        self.stderr = err
        assert self.proc.returncode == 0, f"the driver failed:\n{out[-2000:]}\n{err[-6000:]}"
        results: list[dict[str, Any]] = json.loads(out.strip().splitlines()[-1])
        return results


def start_driver(
    kind: str, job: dict[str, Any], python: str | None = None, **env_vars: str
) -> Driver:
    """Run ``tests.system.spark.drivers`` in a process of its own; ``python`` is what the
    executors run (PYSPARK_PYTHON; default this interpreter)."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": python or sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **env_vars,
    }
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.system.spark.drivers", kind, json.dumps(job)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Driver(proc)


def run_driver(
    kind: str, job: dict[str, Any], python: str | None = None, **env_vars: str
) -> list[dict[str, Any]]:
    return start_driver(kind, job, python, **env_vars).result()


def sink_offsets(sink: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every published row, sorted, duplicates kept."""
    table = pq.read_table(sink, columns=["partition", "offset"])
    return sorted(zip(*table.to_pydict().values(), strict=True))
