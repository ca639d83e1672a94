"""ingest() refuses wrong input before it publishes or commits (issue 25): a batch that is
mostly quarantine, and a session whose Python workers cannot import what an ingest needs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sluice.batch import plan_batch
from sluice.errors import QuarantineLimitError
from sluice.spark import ingest
from sluice.spark.workers import PythonWorkersError, python_workers_checked
from tests.integration.spark.conftest import SCHEMA, KafkaTopic, reading


def test_max_quarantined_fails_the_batch_before_publish_and_commit(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(6)] + [b"not json"] * 4)
    spec = topic.plan()
    with pytest.raises(QuarantineLimitError, match=r"4 of 10 messages \(40%\).*'invalid JSON'"):
        ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA, max_quarantined=3)
    assert not list(tmp_path.glob("batch_id=*"))  # nothing published
    assert topic.plan().batch_id == spec.batch_id  # nothing committed: the same batch waits
    # the default (more than half) lets 40 % through
    result = ingest(spark, spec, tmp_path, source=topic.source, schema=SCHEMA)
    assert (result.written, result.quarantined, result.committed) == (6, 4, True)


@contextmanager
def bare_python_workers(spark: Any, where: Path) -> Iterator[Path]:
    """The session's Python workers run a Python without pyarrow, pandas or Sluice."""
    bare = where / "bare"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(bare)], check=True)
    context, saved = spark.sparkContext, spark.sparkContext.pythonExec
    checked = getattr(spark, "_sluice_python_workers_checked", False)
    try:
        context.pythonExec = str(bare / "bin" / "python")  # the Python the workers run
        spark._sluice_python_workers_checked = False
        spark._sluice_python_workers_failed = False
        yield bare
    finally:
        context.pythonExec = saved
        spark._sluice_python_workers_checked = checked
        spark._sluice_python_workers_failed = False


def test_workers_that_cannot_import_pyarrow_are_named_before_anything_is_read(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(3)])
    spec = topic.plan()
    lake = tmp_path / "lake"
    with (
        bare_python_workers(spark, tmp_path) as bare,
        pytest.raises(PythonWorkersError) as caught,
    ):  # a partitioned dataset is written by Python tasks (Spark's writer is not used)
        ingest(spark, spec, lake, source=topic.source, schema=SCHEMA, partition_by="device")
    said = str(caught.value)
    assert "cannot import pyarrow, pandas, sluice" in said and str(bare) in said, said
    assert "PYSPARK_PYTHON" in said and "Nothing was read or committed" in said
    assert topic.plan().batch_id == spec.batch_id  # nothing read or committed
    assert not list((tmp_path / "lake").glob("batch_id=*"))  # nothing published


@pytest.mark.parametrize("ingested", [False, True], ids=["first-ingest", "later-ingest"])
def test_a_batch_read_on_the_driver_needs_no_python_worker(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ingested: bool
) -> None:
    """Read on the driver, a JSON batch into a local sink is written by Spark's own writer:
    a session's first ingest never starts the workers' Python (a cold task saves their
    start and the check); a later one tries them, and when they cannot run an ingest, Spark's
    writer writes all the same."""
    monkeypatch.setattr(spark, "_sluice_ingested", ingested, raising=False)
    topic.send([reading(i) for i in range(5)] + [b"not json"])
    with bare_python_workers(spark, tmp_path):
        result = ingest(
            spark, topic.plan(), tmp_path / "lake", source=topic.source, schema=SCHEMA,
            mode="driver",
        )  # fmt: skip
        assert not python_workers_checked(spark)
    assert (result.written, result.quarantined, result.committed) == (5, 1, True)
    assert plan_batch(topic.queue) is None


#: The two ways a large batch is read by the Python workers' code: executor mode, and
#: Spark's Kafka source in ``mode="auto"`` (its threshold lowered to a small batch's size
#: here), whose rows Python's writer writes.
LARGE_BATCH_WAYS = ["executors", "spark"]


def large_batch(way: str, spark: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``mode`` to ingest with for ``way`` (:data:`LARGE_BATCH_WAYS`)."""
    if way == "executors":
        return "executors"
    ingest_module = sys.modules["sluice.spark.ingest"]
    monkeypatch.setattr(ingest_module, "AUTO_EXECUTOR_MESSAGES_COLD", 1)
    monkeypatch.setattr(ingest_module, "AUTO_SPARK_SOURCE_MESSAGES", 1)
    monkeypatch.setattr(spark, "_sluice_ingested", False, raising=False)
    return "auto"


@pytest.mark.parametrize("way", LARGE_BATCH_WAYS)
def test_a_large_batch_needs_no_probe_job(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """Read on the executors or by Spark's Kafka source for Python's writer, the batch's own
    tasks are the first Python to run there (0.5 s of a cold task saved): no probe job
    first, and the workers count as checked after it."""
    ingest_module = sys.modules["sluice.spark.ingest"]

    def no_probe(_: Any) -> None:
        raise AssertionError("the probe job ran")

    monkeypatch.setattr(ingest_module, "check_python_workers", no_probe)
    monkeypatch.setattr(spark, "_sluice_python_workers_checked", False, raising=False)
    mode = large_batch(way, spark, monkeypatch)
    topic.send([reading(i) for i in range(5)])
    result = ingest(spark, topic.plan(), tmp_path, source=topic.source, schema=SCHEMA, mode=mode)
    assert (result.mode, result.written, result.committed) == (way, 5, True)
    assert python_workers_checked(spark)


@pytest.mark.parametrize("way", LARGE_BATCH_WAYS)
def test_a_large_batch_names_workers_that_cannot_import_pyarrow(
    spark: Any, topic: KafkaTopic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """Without a probe job first, a task that fails for want of pyarrow, pandas or Sluice
    runs the probe then, which names all the workers lack."""
    topic.send([reading(i) for i in range(3)])
    spec = topic.plan()
    mode = large_batch(way, spark, monkeypatch)
    with bare_python_workers(spark, tmp_path) as bare:
        with pytest.raises(PythonWorkersError) as caught:
            ingest(
                spark, spec, tmp_path / "lake", source=topic.source, schema=SCHEMA, mode=mode
            )  # fmt: skip
        assert not python_workers_checked(spark)
    said = str(caught.value)
    assert "cannot import pyarrow, pandas, sluice" in said and str(bare) in said, said
    assert "PYSPARK_PYTHON" in said and "Nothing was read or committed" in said
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert topic.plan().batch_id == spec.batch_id  # nothing committed
    assert not list((tmp_path / "lake").glob("batch_id=*"))  # nothing published
