"""spark_session's checks and the zip that ships Sluice to executors (no Spark started)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sluice.jars import CACHE_ENV
from sluice.spark.session import PROVIDED, _with_kafka_source, sluice_pyfiles


def test_the_zip_holds_sluice_and_its_pure_python_requirements_only(tmp_path: Path) -> None:
    path = sluice_pyfiles(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {"sluice", "kafka", "pip_services3_messaging"} <= tops
    assert "sluice/spark/kafka_source.py" in names
    assert not tops & PROVIDED  # the cluster's Python has those
    assert not [n for n in names if n.endswith((".so", ".pyd", ".pyc"))]
    assert sluice_pyfiles(tmp_path) == path  # built once, then reused
    assert list(tmp_path.iterdir()) == [path]


def test_the_zip_alone_imports_the_executor_code(tmp_path: Path) -> None:
    """What an executor does with it: sluice's Kafka reading imports from the zip (isolated
    from this environment's site-packages, which still provide pyarrow)."""
    path = sluice_pyfiles(tmp_path)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import sluice.spark.kafka_source as m; print(m.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().startswith(str(path))


def test_a_session_for_a_large_batch_gets_the_kafka_source_only_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session started for a batch that ``mode="auto"`` reads with Spark's Kafka source
    gets its jars when the cache has them; never a download for it (an empty cache: none),
    nor for a smaller batch, nor when kafka_source=False says no."""
    from sluice.spark import connector

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setattr(connector, "_resolved", {})
    assert connector.cached_kafka_source_jars() is None
    big = connector.AUTO_SPARK_SOURCE_MESSAGES
    assert _with_kafka_source({}, None, big) == {}, "nothing cached, nothing fetched"

    cached = [tmp_path / "spark-sql-kafka.jar", tmp_path / "kafka-clients.jar"]
    monkeypatch.setattr(connector, "cached_kafka_source_jars", lambda: cached)
    given = {"spark.jars": "/mine.jar"}
    assert _with_kafka_source(given, None, big)["spark.jars"].split(",") == [
        "/mine.jar",
        *map(str, cached),
    ]
    assert _with_kafka_source(given, None, big - 1) == given
    assert _with_kafka_source(given, None, None) == given
    assert _with_kafka_source(given, False, big) == given
