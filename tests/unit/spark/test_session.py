"""spark_session's checks and the zip that ships Sluice to executors (no Spark started)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sluice.spark.session import PROVIDED, sluice_pyfiles


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
