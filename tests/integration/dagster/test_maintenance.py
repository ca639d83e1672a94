"""make_maintenance_job (compact, then expire) executed in process on a Parquet sink of small
batches, and its schedule factory."""

from __future__ import annotations

from pathlib import Path

from sluice.audit import audit
from sluice_dagster import make_maintenance_job, make_maintenance_schedule

from ..spark.test_compaction import small_mqtt_sink


def test_the_maintenance_job_compacts_and_expires(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    small_mqtt_sink(sink)
    job = make_maintenance_job(
        "readings_maintenance", str(sink), target_file_size="1MB", min_files=5, older_than="0s"
    )
    schedule = make_maintenance_schedule(job, "0 3 * * *")
    assert (schedule.cron_schedule, schedule.job_name) == ("0 3 * * *", "readings_maintenance")

    run_config = {"ops": {"readings_maintenance_compact": {"config": {"min_files": 2}}}}
    result = job.execute_in_process(run_config=run_config)

    assert result.success
    compacted = result.output_for_node("readings_maintenance_compact")
    assert (compacted["files_before"], compacted["files_after"]) == (4, 1)
    assert result.output_for_node("readings_maintenance_expire")["files_deleted"] > 0
    assert len(list(sink.glob("batch_id=*/*.parquet"))) == 1
    report = audit(sink)
    assert report.ok and report.streams[0].batches == 4
