"""sluice audit: a sink checked against the broker; it fails on a doubled or missing offset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from sluice.spark.sinks.parquet import RECORD_FILE
from tests.unit.cli.runner import assert_error, assert_ok, run

SCHEMA = "device STRING, temperature DOUBLE, humidity DOUBLE, ts STRING"


def ingested(kafka: str, unique_name: str, sink: Path) -> str:
    topic = f"{kafka}/{unique_name}"
    assert_ok(run("publish", topic, "--sample", "iot", "--count", "30", "--malformed", "3"))
    uri = f"{topic}?group_id={unique_name}"
    assert_ok(run("ingest", uri, "--sink", str(sink), "--schema", SCHEMA))
    return uri


def test_audit_of_a_clean_sink_passes_and_counts_per_partition(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    sink = tmp_path / "lake"
    ingested(kafka, unique_name, sink)

    out = assert_ok(run("audit", str(sink), "--source", kafka))
    assert f"kafka topic '{unique_name}', group '{unique_name}': 1 batch(es)" in out
    assert (
        "partition 0: log start 0, end 30, committed 30, written 27, quarantined 3, doubled 0, "
        "missing 0" in out
    )
    assert out.strip().endswith("OK: every message is in the sink once.")
    report = json.loads(assert_ok(run("audit", str(sink), "--source", kafka, "--json")))
    assert report["ok"] is True and report["streams"][0]["partitions"][0]["written"] == 27


def test_audit_finds_a_doubled_batch(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    sink = tmp_path / "lake"
    ingested(kafka, unique_name, sink)
    (published,) = sink.glob("batch_id=*")
    copy = sink / "batch_id=copy"
    shutil.copytree(published, copy)
    record = json.loads((copy / RECORD_FILE).read_text())
    (copy / RECORD_FILE).write_text(json.dumps({**record, "batch_id": "copy"}))

    result = run("audit", str(sink), "--source", kafka)
    assert result.exit_code == 1
    assert "doubled 30, missing 0" in result.stdout and "FAILED" in result.stdout


def test_audit_finds_offsets_committed_over_but_in_no_batch(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    sink = tmp_path / "lake"
    ingested(kafka, unique_name, sink)
    (published,) = sink.glob("batch_id=*")
    for part in published.glob("*.parquet"):
        part.unlink()  # the good rows are gone, the commit stays

    result = run("audit", str(sink), "--source", kafka)
    assert result.exit_code == 1 and "missing 27" in result.stdout, result.stderr


def test_audit_of_kafka_batches_needs_the_source(
    spark: Any, kafka: str, unique_name: str, tmp_path: Path
) -> None:
    sink = tmp_path / "lake"
    ingested(kafka, unique_name, sink)
    assert_error(run("audit", str(sink)), 1, "give the source", "--source kafka://")
    assert_error(run("audit", str(tmp_path / "none")), 2, "is not a directory")
