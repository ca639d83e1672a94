"""``sluice compact`` and ``sluice expire`` on an Iceberg sink (issue 26), on a real SQLite
catalog and on the REST catalog: one overwrite snapshot replaces the small files; the audit,
reruns and the stream state are the same before and after, and after snapshot expiry; an ingest
committing between the compaction's read and its commit makes it commit again, a compaction
whose files were replaced gives up and deletes its own; killed at each failpoint, the table is
as before or as after (on the REST catalog too); expiry deletes the files of expired snapshots
and of crashed runs, never a young unreferenced file (a live run's)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.audit import audit
from sluice.maintenance import compact, expire
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.sinks import StreamKey, open_sink
from sluice.testing.crash import run_command

from ..spark.conftest import SCHEMA, KafkaTopic, reading
from ..spark.crashes import assert_exactly_once
from ..spark.test_compaction import small_mqtt_sink
from .conftest import Lake, data_files, file_exists, table_rows


@pytest.mark.parametrize("catalog", ["sqlite", "rest"])
def test_compaction_and_expiry_keep_the_audit_reruns_and_the_state(
    spark: Any, topic: KafkaTopic, catalog: str, request: pytest.FixtureRequest
) -> None:
    lake: Lake = request.getfixturevalue(f"{catalog}_lake")
    sink = lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    specs = []
    for n in range(3):
        topic.send([reading(10 * n + i) for i in range(10)] + ([b"not json"] if n == 1 else []))
        specs.append(topic.plan())
        ingest(spark, specs[-1], sink, **options)
    stream = StreamKey.of(specs[0])
    before = open_sink(sink).state(stream)
    files = data_files(lake)
    assert len(files) >= 3
    assert_exactly_once(audit(sink, topic.source), 31)

    result = compact(sink, "1MB", min_files=2)

    assert result.tables[f"{lake.namespace}.readings"]["after"] == 1, result.lines()
    assert len(data_files(lake)) == 1
    summary = lake_summary(lake)
    assert summary["operation"] == "overwrite" and "sluice.compaction" in summary
    assert "sluice.batch-id" not in summary
    assert open_sink(sink).state(stream).to_json() == before.to_json()
    assert_exactly_once(audit(sink, topic.source), 31)

    expired = expire(sink, 0)

    assert expired.snapshots_expired >= 3 and expired.files_deleted >= len(files)
    assert not any(file_exists(lake, f) for f in files), "the replaced files are deleted"
    assert len(lake.table().snapshots()) == 1
    assert open_sink(sink).state(stream).to_json() == before.to_json()
    rerun = ingest(spark, specs[-1], sink, **options)  # its snapshot is expired
    assert (rerun.written, rerun.skipped) == (0, specs[-1].message_count)
    temperatures = sorted(r["temperature"] for r in table_rows(lake))
    assert temperatures == [i / 10 for i in range(30)]
    report = audit(sink, topic.source)
    assert_exactly_once(report, 31)
    assert report.streams[0].batches == 3


def lake_summary(lake: Lake) -> dict[str, str]:
    snapshot = lake.table().current_snapshot()
    return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}


def test_an_ingest_committing_during_a_compaction_makes_it_commit_again(
    spark: Any, topic: KafkaTopic, sqlite_lake: Lake
) -> None:
    sink = sqlite_lake.sink()
    options = {"source": topic.source, "schema": SCHEMA}
    for n in range(3):
        topic.send([reading(10 * n + i) for i in range(10)])
        ingest(spark, topic.plan(), sink, **options)
    topic.send([reading(30 + i) for i in range(10)])
    during = topic.plan()

    with armed("compact.before_commit", lambda: ingest(spark, during, sink, **options)):
        result = compact(sink, "1MB", min_files=2)

    assert result.retries == 1 and not result.gave_up, result.lines()
    assert len(data_files(sqlite_lake)) == 2, "the merged file and the new batch's"
    assert open_sink(sink).find(during.batch_id) is not None
    assert_exactly_once(audit(sink, topic.source), 40)


def test_a_compaction_whose_files_were_replaced_gives_up_and_deletes_its_own(
    sqlite_lake: Lake,
) -> None:
    sink = sqlite_lake.sink()
    small_mqtt_sink(sink)

    result = _compact_with_a_rival(sink)

    assert result.gave_up and "replaced meanwhile" in result.gave_up
    warehouse = Path(sqlite_lake.table().location().removeprefix("file://"))
    live = {Path(f.removeprefix("file://")) for f in data_files(sqlite_lake)}
    written = set(warehouse.glob("data/*.parquet"))
    assert written == live, "the files the loser wrote are deleted"
    report = audit(sink)
    assert report.ok and (report.streams[0].messages, report.streams[0].batches) == (18, 4)


def _compact_with_a_rival(sink: str) -> Any:
    """A compaction during whose commit another one replaces the same files."""
    rival_done: list[Any] = []

    def rival() -> None:
        if not rival_done:
            rival_done.append(None)
            rival_done.append(compact(sink, "1MB", 2))

    with armed("compact.before_commit", rival):
        return compact(sink, "1MB", min_files=2)


#: (point, catalog): each point on SQLite; on the REST catalog, killed once the server committed
COMPACTION_KILLS = [
    ("compact.before_commit", "sqlite"),
    ("compact.after_commit", "sqlite"),
    ("compact.after_commit", "rest"),
]


@pytest.mark.parametrize(("point", "catalog"), COMPACTION_KILLS)
def test_a_compaction_killed_at_each_failpoint_leaves_the_table_before_or_after(
    point: str, catalog: str, request: pytest.FixtureRequest
) -> None:
    sqlite_lake: Lake = request.getfixturevalue(f"{catalog}_lake")
    sink = sqlite_lake.sink()
    small_mqtt_sink(sink)
    files = data_files(sqlite_lake)

    code, stderr = run_command(["compact", sink, "--min-files", "2"], point)

    assert code == -9, stderr[-2000:]
    after = data_files(sqlite_lake)
    assert after == files if point == "compact.before_commit" else len(after) == 1
    report = audit(sink)
    assert report.ok and (report.streams[0].messages, report.streams[0].batches) == (18, 4)
    compact(sink, "1MB", min_files=2)
    assert len(data_files(sqlite_lake)) == 1
    assert audit(sink).ok


def test_expiry_killed_after_its_commit_then_run_again_deletes_what_is_left(
    sqlite_lake: Lake,
) -> None:
    sink = sqlite_lake.sink()
    small_mqtt_sink(sink)
    compact(sink, "1MB", min_files=2)
    old = list(Path(sqlite_lake.table().location().removeprefix("file://")).rglob("*"))

    code, stderr = run_command(["expire", sink, "--older-than", "0s"], "expire.after_commit")

    assert code == -9, stderr[-2000:]
    assert audit(sink).ok
    result = expire(sink, 0)
    assert result.files_deleted > 0 and audit(sink).ok
    report = audit(sink)
    assert (report.streams[0].messages, report.streams[0].batches) == (18, 4)
    assert sum(1 for f in old if f.exists()) < len(old)


def test_expiry_deletes_a_crashed_runs_files_but_not_a_young_unreferenced_one(
    sqlite_lake: Lake,
) -> None:
    sink_uri = sqlite_lake.sink()
    small_mqtt_sink(sink_uri, 2)
    sink = open_sink(sink_uri)
    schema = pa.schema([("temperature", pa.float64()), ("message_id", pa.string())])
    staged = []
    for _ in range(2):  # what a run killed before its commit leaves, and a live run's files
        staging = sink.stage("unpublished")
        targets = sink.targets(staging, schema, pa.schema([("reason", pa.string())]))
        directory = Path(targets.data.removeprefix("file://"))
        directory.mkdir(parents=True)
        pq.write_table(pa.table({"temperature": [1.0]}), directory / "part-0.parquet")
        staged.append(directory / "part-0.parquet")
    two_hours_ago = time.time() - 7200
    os.utime(staged[0], (two_hours_ago, two_hours_ago))

    dry = expire(sink_uri, "90m", dry_run=True)
    result = expire(sink_uri, "90m")

    assert dry.orphans_deleted == result.orphans_deleted == 1
    assert result.kept_young >= 1 and result.snapshots_expired == 0
    assert not staged[0].exists() and staged[1].exists()
    assert audit(sink_uri).ok
