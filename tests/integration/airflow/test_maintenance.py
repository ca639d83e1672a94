"""CompactOperator >> ExpireOperator in a real ``dag.test()`` run on a Parquet sink of small
batches: one merged data file afterwards, the superseded directories expired, the audit
clean, and the results in XCom."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.audit import audit
from tests.integration.airflow import dag_runs
from tests.integration.spark.test_compaction import small_mqtt_sink

pytestmark = pytest.mark.usefixtures("airflow_db")

MAINTENANCE_DAG = """
from sluice_airflow.operators.maintenance import CompactOperator, ExpireOperator

with {dag} as dag:
    compact = CompactOperator(
        task_id="compact", sink={sink!r}, target_file_size="1MB", min_files=2
    )
    expire = ExpireOperator(task_id="expire", sink={sink!r}, older_than="0s")
    compact >> expire
"""


def test_compact_then_expire_in_a_dag(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    small_mqtt_sink(sink)

    run = dag_runs.run_test_dag("sluice_maintenance", MAINTENANCE_DAG, sink=str(sink))

    run.raise_for_state()
    xcoms = run.xcoms()
    assert xcoms["compact"]["files_before"] == 4 and xcoms["compact"]["files_after"] == 1
    assert xcoms["expire"]["files_deleted"] > 0
    assert len(list(sink.glob("batch_id=*/*.parquet"))) == 1
    assert not list((sink / "_sluice" / "superseded").glob("*"))
    report = audit(sink)
    assert report.ok and report.streams[0].batches == 4
