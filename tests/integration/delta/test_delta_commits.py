"""The Delta sink's commit protocol on a real delta-rs, without Spark (the files a run stages are
written here with pyarrow): another writer's commit landing between a run's read of the log and
its commit, from another stream (retried, both land) and from the same stream (refused, nothing
of the refused run is left); a rerun after the commit recognised from the log; and a stream's
state file lost or corrupt, rebuilt from the log and the records, or named with its repair."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from sluice.audit import audit
from sluice.batch import BatchSpec, OffsetRange
from sluice.errors import StreamStateError
from sluice.maintenance import expire
from sluice.spark.failpoints import FailpointError, armed
from sluice.spark.sinks import BatchRecord, ConcurrentIngestError, StreamKey
from sluice.spark.sinks.delta import DeltaSink, app_id
from sluice.testing.batches import publish_rows
from tests.unit.cli.runner import assert_ok, run

from ..spark.test_compaction import mqtt_rows, small_mqtt_sink
from .test_ingest_delta import commits

GOOD = pa.schema([("id", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
BAD = pa.schema(
    [
        ("value", pa.binary()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("message_id", pa.string()),
        ("reason", pa.string()),
    ]
)


def staged(sink: DeltaSink, group: str, start: int, end: int, planned_on: int = 0) -> Any:
    """A run of a one-partition Kafka batch with its rows written, and its record."""
    spec = BatchSpec("kafka", "t", group_id=group, ranges=(OffsetRange(0, start, end),))
    staging = sink.stage(spec.batch_id)
    targets = sink.targets(staging, GOOD, BAD)
    rows = pa.table(
        {
            "id": [f"{group}-{i}" for i in range(start, end)],
            "partition": pa.array([0] * (end - start), pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "batch_id": [spec.batch_id] * (end - start),
        }
    )
    Path(targets.data).mkdir(parents=True)
    pq.write_table(rows, f"{targets.data}/part-0.parquet")
    record = BatchRecord(
        spec.batch_id, spec.to_dict(), ranges=[OffsetRange(0, start, end)], planned_on=planned_on
    )
    return staging, record


class Interleaved(DeltaSink):
    """A sink whose first commit lets another run publish first (a real commit, between this
    run's read of the log and its own commit)."""

    other: tuple[DeltaSink, Any, BatchRecord] | None = None

    def _commit_batch(self, *args: Any) -> None:
        if self.other is not None:
            sink, staging, record = self.other
            self.other = None
            sink.publish(staging, record)
        super()._commit_batch(*args)


def test_a_commit_of_another_stream_in_between_is_retried_and_both_land(tmp_path: Path) -> None:
    location = f"delta://{tmp_path / 't'}"
    mine, theirs = Interleaved(location), DeltaSink(location)
    staging, record = staged(mine, "a", 0, 5)
    mine.other = (theirs, *staged(theirs, "b", 0, 3))
    mine.publish(staging, record)

    table = DeltaTable(str(tmp_path / "t"))
    ids = sorted(table.to_pyarrow_table().column("id").to_pylist())
    assert ids == sorted([f"a-{i}" for i in range(5)] + [f"b-{i}" for i in range(3)])
    for group in ("a", "b"):
        stream = StreamKey("kafka", "t", group)
        assert table.transaction_version(app_id(stream)) == 1
        assert mine.state(stream).written.to_json() == {"0": [[0, 5 if group == "a" else 3]]}
    assert mine.find(record.batch_id) == record


def test_a_commit_of_the_same_stream_in_between_is_refused_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    location = f"delta://{tmp_path / 't'}"
    mine, theirs = Interleaved(location), DeltaSink(location)
    staging, record = staged(mine, "a", 0, 5)
    mine.other = (theirs, *staged(theirs, "a", 0, 4))
    with pytest.raises(ConcurrentIngestError, match="published while batch"):
        mine.publish(staging, record)
    mine.discard(staging)

    table = DeltaTable(str(tmp_path / "t"))
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [f"a-{i}" for i in range(4)]
    assert table.transaction_version(app_id(StreamKey("kafka", "t", "a"))) == 1
    assert mine.find(record.batch_id) is None
    assert not Path(staging.run.data).exists(), "the refused run's files are deleted"


def test_a_rerun_after_the_commit_is_recognised_from_the_log(tmp_path: Path) -> None:
    location = f"delta://{tmp_path / 't'}"
    sink = DeltaSink(location)
    staging, record = staged(sink, "a", 0, 5)
    sink.publish(staging, record)
    # the crash: the record file and the quarantine of a committed batch are not there yet
    (tmp_path / "t" / "_sluice" / "batches").rename(tmp_path / "gone")
    fresh = DeltaSink(location)
    assert fresh.find(record.batch_id) is None
    fresh.recover()
    assert fresh.find(record.batch_id) == record, "finished from the state the log names"
    assert fresh.state(record.stream).batches == 1


def test_the_stream_state_survives_sluice_compact_and_expire(
    tmp_path: Path,
) -> None:
    location = f"delta://{tmp_path / 't'}"
    sink = DeltaSink(location)
    for start, end in ((0, 3), (3, 6)):
        staging, record = staged(sink, "a", start, end, planned_on=start // 3)
        sink.publish(staging, record)
    # files of crashed runs: an old one is removed, a young one (a live run's?) is kept; and
    # a file a killed compaction wrote at the table's root, never committed
    # and an upsert's staged messages, which no commit ever names (issue 44)
    runs = tmp_path / "t" / "sluice"
    old, young = runs / "x" / "old.parquet", runs / "y.parquet"
    killed = tmp_path / "t" / "part-00000-0c0a7e1e-9d1b-4c4e-8f5e-000000000000-c000.zstd.parquet"
    staged_old = tmp_path / "t" / "sluice-staged" / "b-1" / "run" / "part-0.parquet"
    staged_young = tmp_path / "t" / "sluice-staged" / "b-2" / "run" / "part-0.parquet"
    for orphan in (old, young, killed, staged_old, staged_young):
        orphan.parent.mkdir(parents=True, exist_ok=True)
        orphan.write_bytes(b"PAR1")
        if orphan not in (young, staged_young):
            os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    # through the command, as a user runs it: one file replaces the batches' files
    command = ["compact", location, "--target-file-size", "1MB", "--min-files", "2", "--json"]
    compacted = json.loads(assert_ok(run(*command)))
    assert compacted["tables"]["table"] == {"before": 2, "after": 1}, compacted
    assert len(DeltaTable(str(tmp_path / "t")).file_uris()) == 1
    expired = expire(location, 0, min_age="1h")
    assert expired.files_deleted == 2 and expired.orphans_deleted == 3, expired.lines()
    assert not old.exists() and not killed.exists() and young.exists()
    assert not staged_old.exists() and staged_young.exists()

    fresh = DeltaSink(location)
    stream = StreamKey("kafka", "t", "a")
    assert DeltaTable(str(tmp_path / "t")).transaction_version(app_id(stream)) == 2
    assert fresh.state(stream).written.to_json() == {"0": [[0, 6]]}
    assert fresh.find(record.batch_id) == record
    assert fresh.row_coordinates(record.batch_id, False).column("offset").to_pylist() == [3, 4, 5]
    staging, record = staged(fresh, "a", 6, 9, planned_on=2)
    fresh.publish(staging, record)
    assert fresh.state(stream).batches == 3
    ids = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().column("id").to_pylist()
    assert sorted(ids) == sorted(f"a-{i}" for i in range(9))


def test_a_filter_on_any_column_finds_its_rows_through_pyarrow(tmp_path: Path) -> None:
    """delta-rs's ``to_pyarrow_dataset`` prunes files by their add actions' bounds, and takes a
    column without bounds as matching nothing: every column the sink's files have bounds for
    must have them in the log."""
    small_mqtt_sink(f"delta://{tmp_path / 't'}")
    dataset = DeltaTable(str(tmp_path / "t")).to_pyarrow_dataset()
    hour = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    time = pc.field("timestamp")

    def ids(where: Any) -> list[str]:
        return sorted(dataset.to_table(columns=["message_id"], filter=where)[0].to_pylist())

    assert ids((time >= hour) & (time < hour + dt.timedelta(hours=1))) == [
        "m0-3",
        "m1-0",
        "m1-1",
        "m1-2",
    ]
    assert ids(pc.field("temperature") >= 30.0) == [f"m3-{i}" for i in range(4)]
    assert ids(pc.field("message_id") == "m2-1") == ["m2-1"]


def state_file(table: Path, stream: StreamKey, version: int) -> Path:
    return table / "_sluice" / "streams" / stream.slug / f"{version}.json"


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_lost_or_corrupt_state_file_is_rebuilt_from_the_log_and_the_records(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "t"
    location = f"delta://{table}"
    specs = small_mqtt_sink(location, 2)
    # the third batch is committed, then its run dies: its quarantine commit and record file
    # are not done, and only its state file says what they are
    with armed("publish.after_rename"), pytest.raises(FailpointError):
        small_mqtt_sink(location, 1, first=2)
    stream = StreamKey.of(specs[0])
    path = state_file(table, stream, 3)
    before = json.loads(path.read_text())
    if damage == "deleted":
        path.unlink()
    else:
        path.write_text('{"state": {"written": ')
    last_commit = commits(table)[-1]["version"]

    sink = DeltaSink(location)
    with caplog.at_level(logging.WARNING, logger="sluice.spark.sinks.delta"):
        assert sink.state(stream).to_json() == before["state"]
    problem = "missing:" if damage == "deleted" else "unreadable (Expecting value"
    assert f"The stream state file {path} was {problem}" in caplog.text
    assert f"2 from record files in {table / '_sluice' / 'batches'}" in caplog.text
    assert f"1 from the commitInfo of Delta version(s) {last_commit} of {table}" in caplog.text
    assert json.loads(path.read_text()) == before, "the file as it was, pending batch included"
    assert path.with_name("3.json.bad").exists() == (damage == "corrupt")

    sink.recover()  # the crashed batch is finished from the rebuilt state
    report = audit(location)
    assert report.ok, "\n".join(report.lines())
    assert (report.streams[0].messages, report.streams[0].batches) == (14, 3)
    with pytest.raises(ConcurrentIngestError):  # its redelivery is known: MQTT de-duplication
        publish_rows(sink, BatchSpec("mqtt", "sensors/#", client_id="maintenance"), *mqtt_rows(2))
    small_mqtt_sink(location, 1, first=3)
    assert DeltaSink(location).state(stream).batches == 4


def test_a_state_file_that_cannot_be_rebuilt_is_named_with_its_repair(tmp_path: Path) -> None:
    table = tmp_path / "t"
    location = f"delta://{table}"
    (spec, _) = small_mqtt_sink(location, 2)
    stream = StreamKey.of(spec)
    state_file(table, stream, 2).unlink()
    # the first batch's record file is gone, and log clean-up removed its commit
    for record in (table / "_sluice" / "batches").glob("*.json"):
        record.unlink()
    DeltaTable(str(table)).create_checkpoint()
    (table / "_delta_log" / f"{commits(table)[0]['version']:020}.json").unlink()

    with pytest.raises(StreamStateError) as failure:
        DeltaSink(location).state(stream)
    message = str(failure.value)
    assert f"The stream state file {state_file(table, stream, 2)} is missing" in message
    assert "hold 1 of the stream's 2 batches" in message
    assert f"Restore the file from a backup of {table / '_sluice'}" in message
