"""The sink layout: staging, publishing and manifests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.queues import ConfigError
from sluice.spark.dataset import Dataset


def stage_rows(dataset: Dataset, output_id: str, data: int, bad: int = 0) -> Path:
    staging = dataset.stage(output_id)
    for name, rows in (("data", data), ("quarantine", bad)):
        if rows:
            (staging / name).mkdir()
            pq.write_table(pa.table({"x": list(range(rows))}), staging / name / "part-0.parquet")
    return staging


def test_publish_moves_the_output_into_place_and_records_the_manifest(tmp_path: Path) -> None:
    dataset = Dataset(tmp_path)
    staging = stage_rows(dataset, "b1", data=3, bad=1)
    assert dataset.manifest("b1") is None
    dataset.publish(
        staging,
        "b1",
        {
            "kind": "kafka",
            "topic": "t",
            "group_id": "g",
            "ranges": [{"partition": 0, "start": 0, "end": 4}],
        },
    )
    assert pq.read_table(tmp_path / "batch_id=b1").num_rows == 3
    assert pq.read_table(tmp_path / "_quarantine" / "batch_id=b1").num_rows == 1
    assert dataset.manifest("b1") is not None and not staging.exists()
    assert dataset.written_ends("t", "g") == {0: 4}
    assert dataset.written_ends("t", "other") == {}


def test_a_rerun_replaces_what_an_interrupted_run_left(tmp_path: Path) -> None:
    dataset = Dataset(tmp_path)
    leftover = tmp_path / "batch_id=b1"
    leftover.mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3, 4, 5]}), leftover / "stale.parquet")
    dataset.publish(stage_rows(dataset, "b1", data=2), "b1", {"kind": "kafka"})
    assert pq.read_table(leftover).num_rows == 2


def test_mqtt_manifests_give_the_ids_already_written(tmp_path: Path) -> None:
    dataset = Dataset(tmp_path)
    dataset.publish(
        stage_rows(dataset, "m1", data=2),
        "m1",
        {"kind": "mqtt", "topic": "s/#", "message_ids": ["a", "b"]},
    )
    assert dataset.written_message_ids("s/#") == {"a", "b"}
    assert dataset.written_message_ids("other") == set()


def test_a_sink_that_is_not_local_is_refused_with_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not a local directory.*file:///"):
        Dataset("hdfs://namenode/data")
    assert Dataset(f"file://{tmp_path}").root == tmp_path
