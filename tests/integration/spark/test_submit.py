"""The spark-submit entry point, run through the real spark-submit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sluice.batch import plan_batch
from sluice.spark import submit_script_path

from .conftest import SCHEMA, KafkaTopic, dataset_rows, reading


def test_spark_submit_ingests_a_batch_with_the_source_kept_off_the_command_line(
    topic: KafkaTopic, tmp_path: Path
) -> None:
    topic.send([reading(i) for i in range(15)] + [b"{oops"])
    spec = topic.plan()
    spec_file = tmp_path / "batch.json"
    spec_file.write_text(spec.to_json())
    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert spark_submit is not None, "pyspark installs spark-submit next to python"
    environment = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SLUICE_SOURCE": json.dumps({"connection.uri": topic.broker.bootstrap}),
    }

    finished = subprocess.run(
        [
            spark_submit,
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            submit_script_path(),
            "--spec",
            f"@{spec_file}",
            "--sink",
            str(tmp_path / "out"),
            "--source",
            "env:SLUICE_SOURCE",
            "--schema",
            SCHEMA,
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert (result["written"], result["quarantined"], result["committed"]) == (15, 1, True)
    # spark-submit passes the Python program's stderr on to its own stdout
    assert f"sluice: committed: batch {spec.batch_id} is done" in finished.stdout + finished.stderr
    assert len(dataset_rows(tmp_path / "out")) == 15
    assert plan_batch(topic.queue) is None


def test_python_m_sluice_spark_names_a_missing_argument() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "sluice.spark", "--sink", "/tmp/x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert "--spec" in finished.stderr and "Traceback" not in finished.stderr
