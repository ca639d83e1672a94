"""``sluice compact`` and ``sluice expire`` on a Parquet sink (issue 26): the audit, reruns and
MQTT de-duplication work the same before and after; an ingest committing during a compaction
is neither lost nor doubled; a compaction killed at any of its failpoints leaves the sink as
before or as after; expiry removes what a compaction replaced and crashed runs' staging, never
a live run's."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from sluice.audit import audit
from sluice.batch import BatchSpec
from sluice.datasets import read_dataset
from sluice.maintenance import compact, expire
from sluice.spark import ingest
from sluice.spark.failpoints import armed
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, compacted, open_sink
from sluice.spark.sinks.parquet import good_files
from sluice.testing.batches import publish_rows
from sluice.testing.crash import run_command

from .conftest import SCHEMA, KafkaTopic, dataset_rows, reading
from .crashes import assert_exactly_once

# The steps of a Parquet compaction (of MAINTENANCE_FAILPOINTS; the others are Delta's)
PARQUET_POINTS = [
    "compact.before_commit",
    "compact.after_intent",
    "compact.after_commit",
    "compact.after_supersede",
]
BY_HOUR = "hour(timestamp)"  # small_mqtt_sink's batches: 2 hours each, 5 in all for 4 batches
# On a partitioned dataset, the one point where the layout matters: after the commit, the
# most is left to roll forward (the entries, the partition directories moved aside); rolling
# back deletes the staged directory whatever its layout.
CRASHES = [(p, None) for p in PARQUET_POINTS] + [("compact.after_commit", BY_HOUR)]


def data_files(sink: Path) -> list[Path]:
    return sorted(f for directory in sink.glob("batch_id=*") for f in good_files(directory))


def hive_rows(sink: Path) -> list[tuple[str, str]]:
    """(hour directory, message id) of every good row, as pyarrow's hive discovery of the
    dataset's directory and ``sluice.read_dataset`` see them (they must agree)."""
    found = []
    for dataset in (ds.dataset(sink, partitioning="hive"), read_dataset(sink)):
        table = dataset.to_table(columns=["timestamp_hour", "message_id"])
        found.append(sorted(zip(*table.to_pydict().values(), strict=True)))
    assert found[0] == found[1]
    return found[0]


def batch_view(sink: Path, specs: list[BatchSpec]) -> dict[str, Any]:
    """What Sluice's readers see of each batch: its record, its rows' coordinates (the audit,
    MQTT de-duplication) and its quarantined rows (dead letters)."""
    opened = open_sink(sink)
    view = {}
    for spec in specs:
        record = opened.find(spec.batch_id)
        good = opened.row_coordinates(spec.batch_id, False).column("message_id").to_pylist()
        assert record is not None, spec.batch_id
        bad = []
        if record.counts.get("quarantined"):
            table = opened.quarantine_table(spec.batch_id)
            bad = sorted(table.column("message_id").to_pylist())
        view[spec.batch_id] = (record.to_json(), sorted(good), bad)
    return view


def test_compaction_keeps_the_audit_reruns_and_the_state(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    sink = tmp_path / "sink"
    options = {"source": topic.source, "schema": SCHEMA}
    specs = []
    for n in range(2):
        topic.send([reading(10 * n + i) for i in range(10)] + ([b"not json"] if n == 1 else []))
        specs.append(topic.plan())
        ingest(spark, specs[-1], sink, **options)
    assert_exactly_once(audit(sink, topic.source), 21)
    stream = StreamKey.of(specs[0])
    before = open_sink(sink).state(stream)
    assert len(data_files(sink)) >= 2

    result = compact(sink, "1MB", min_files=2)

    assert (result.batches, result.files_after) == (2, 1), result.lines()
    assert len(data_files(sink)) == 1
    assert open_sink(sink).state(stream).to_json() == before.to_json()
    assert_exactly_once(audit(sink, topic.source), 21)
    assert len(open_sink(sink).quarantine_table(specs[1].batch_id)) == 1

    expired = expire(sink, 0)

    assert expired.files_deleted > 0
    assert not list((sink / "_sluice" / "superseded").glob("*/*"))
    rerun = ingest(spark, specs[-1], sink, **options)  # the last batch, compacted and expired
    assert (rerun.written, rerun.skipped) == (0, specs[-1].message_count)
    assert open_sink(sink).find(specs[-1].batch_id) is not None
    temperatures = sorted(r["temperature"] for r in dataset_rows(sink) if r["temperature"])
    assert temperatures == [i / 10 for i in range(1, 20)]
    report = audit(sink, topic.source)
    assert_exactly_once(report, 21)
    assert report.streams[0].batches == 2


def test_an_ingest_committing_during_a_compaction_is_kept_once(
    spark: Any, topic: KafkaTopic, tmp_path: Path
) -> None:
    """An ingest publishes between the compaction's read and its commit: its batch is not part
    of the compaction and stays; nothing is lost or doubled."""
    sink = tmp_path / "sink"
    options = {"source": topic.source, "schema": SCHEMA}
    for n in range(3):
        topic.send([reading(10 * n + i) for i in range(10)])
        ingest(spark, topic.plan(), sink, **options)
    topic.send([reading(30 + i) for i in range(10)])
    during = topic.plan()

    with armed("compact.before_commit", lambda: ingest(spark, during, sink, **options)):
        result = compact(sink, "1MB", min_files=2)

    assert result.batches == 3 and not result.gave_up
    assert open_sink(sink).find(during.batch_id) is not None
    assert len(data_files(sink)) == 2
    assert_exactly_once(audit(sink, topic.source), 40)


def mqtt_rows(batch: int, count: int = 4) -> tuple[pa.Table, pa.Table | None]:
    """A batch's rows: 20 minutes apart from ``batch`` hours on (by hour, a batch's rows are
    in two partitions, and the next batch shares one of them)."""
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=batch)
    times = [moment + dt.timedelta(minutes=20 * i) for i in range(count)]
    good = pa.table(
        {
            "temperature": [float(batch * 10 + i) for i in range(count)],
            "timestamp": pa.array(times, pa.timestamp("us", tz="UTC")),
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array([-1] * count, pa.int64()),
            "message_id": [f"m{batch}-{i}" for i in range(count)],
        }
    )
    bad = None
    if batch % 2 == 0:
        bad = pa.table(
            {
                "value": [b"not json"],
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([-1], pa.int64()),
                "message_id": [f"bad{batch}"],
                "reason": ["invalid JSON"],
            }
        )
    return good, bad


def small_mqtt_sink(
    location: str | Path, batches: int = 4, partition_by: str | None = None, first: int = 0
) -> list[BatchSpec]:
    """``batches`` small MQTT batches published through the sink's publish path (no broker:
    the audit of MQTT batches needs none)."""
    sink = open_sink(location, partition_by)
    specs = []
    for n in range(first, first + batches):
        spec = BatchSpec("mqtt", "sensors/#", client_id="maintenance", max_messages=10, sequence=n)
        publish_rows(sink, spec, *mqtt_rows(n))
        specs.append(spec)
    return specs


def test_a_second_compaction_at_once_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    small_mqtt_sink(sink)
    refused: list[BaseException] = []

    def second() -> None:
        try:
            compact(sink, "1MB", min_files=2)
        except ConcurrentIngestError as exc:
            refused.append(exc)

    with armed("compact.before_commit", second):
        result = compact(sink, "1MB", min_files=2)

    assert refused and "Another sluice compact is running" in str(refused[0])
    assert (result.batches, result.files_written, result.gave_up) == (4, 1, None)
    assert not list((sink / "_sluice" / "compactions").glob("*")), "no staging left"
    report = audit(sink)
    assert report.ok and (report.streams[0].messages, report.streams[0].batches) == (18, 4)


@pytest.mark.parametrize(("point", "partition_by"), CRASHES)
def test_a_compaction_killed_at_each_failpoint_leaves_the_sink_before_or_after(
    tmp_path: Path, point: str, partition_by: str | None
) -> None:
    sink = tmp_path / "sink"
    specs = small_mqtt_sink(sink, partition_by=partition_by)
    before = audit(sink)
    assert before.ok
    rows, view = (hive_rows(sink) if partition_by else None), batch_view(sink, specs)

    code, stderr = run_command(["compact", str(sink), "--min-files", "2"], point)

    assert code == -9, stderr[-2000:]
    report = audit(sink)  # recovers: rolls the compaction forward or back
    assert report.ok, "\n".join(report.lines())
    assert (report.streams[0].messages, report.streams[0].batches) == (18, 4)
    merged = list(sink.glob("batch_id=compacted-*"))
    originals = [s for s in specs if (sink / f"batch_id={s.batch_id}").exists()]
    assert (len(merged), len(originals)) in ((0, 4), (1, 0)), "before or after"
    committed = point not in ("compact.before_commit", "compact.after_intent")
    assert (len(merged) == 1) == committed
    assert batch_view(sink, specs) == view
    result = compact(sink, "1MB", min_files=2)
    partitions = {f.parent for f in data_files(sink)}
    assert len(data_files(sink)) == len(partitions) == (5 if partition_by else 1), result.lines()
    assert audit(sink).ok
    assert batch_view(sink, specs) == view
    if partition_by:
        assert hive_rows(sink) == rows


def test_a_partitioned_dataset_is_compacted_per_partition_directory(tmp_path: Path) -> None:
    """The merged directory keeps the hive layout (one file per hour directory), a batch's
    entry has a slice in each file its rows are in, and every reader sees the same rows; a
    merged directory is merged again with newer batches."""
    sink = tmp_path / "sink"
    specs = small_mqtt_sink(sink, partition_by=BY_HOUR)
    stream = StreamKey.of(specs[0])
    rows, view, state = hive_rows(sink), batch_view(sink, specs), open_sink(sink).state(stream)
    hours = [f"timestamp_hour=2026-01-01-0{h}" for h in range(5)]

    result = compact(sink, "1MB", min_files=2)

    assert (result.batches, result.files_before, result.files_after) == (4, 8, 5)
    (merged,) = sink.glob("batch_id=compacted-*")
    assert [f.parent.relative_to(merged).as_posix() for f in good_files(merged)] == hours
    assert (merged / "_quarantine" / "part-00000.parquet").exists()
    entry = compacted.entry(sink, specs[1].batch_id)
    assert entry is not None
    assert [file for file, _, _ in compacted.slices(entry, False)] == [
        f"{hour}/part-00000.parquet" for hour in hours[1:3]
    ]
    assert hive_rows(sink) == rows
    assert batch_view(sink, specs) == view
    assert open_sink(sink).state(stream).to_json() == state.to_json()
    assert audit(sink).ok

    specs += small_mqtt_sink(sink, 2, first=4)
    rows, view = hive_rows(sink), batch_view(sink, specs)
    again = compact(sink, "1MB", min_files=2)

    assert (again.batches, again.files_after) == (6, 7), again.lines()
    assert len(list(sink.glob("batch_id=*"))) == 1
    assert hive_rows(sink) == rows
    assert batch_view(sink, specs) == view
    report = audit(sink)
    assert report.ok and (report.streams[0].messages, report.streams[0].batches) == (27, 6)


def test_a_merged_directory_of_the_first_format_is_still_read_and_merged(tmp_path: Path) -> None:
    """Entries and manifests written by the first release (``good``/``bad``: ``[start,
    rows]`` of the one file) are read, audited and compacted again."""
    sink = tmp_path / "sink"
    specs = small_mqtt_sink(sink)
    view = batch_view(sink, specs)
    compact(sink, "1MB", min_files=2)
    (merged,) = sink.glob("batch_id=compacted-*")
    manifest = json.loads((merged / compacted.MANIFEST_FILE).read_text())
    for batch in manifest["batches"]:
        for kind, quarantined in (("good", False), ("bad", True)):
            found = compacted.slices(batch, quarantined)
            batch[kind] = [found[0][1], found[0][2]] if found else [0, 0]
        compacted.write_json(
            compacted.entry_path(sink, batch["batch_id"]), {**batch, "directory": merged.name}
        )
    (merged / compacted.MANIFEST_FILE).write_text(json.dumps(manifest))
    assert compacted.entry(sink, specs[0].batch_id)["good"] == [0, 4]  # type: ignore[index]

    assert batch_view(sink, specs) == view
    assert audit(sink).ok
    specs += small_mqtt_sink(sink, 1, first=4)
    view = batch_view(sink, specs)
    result = compact(sink, "1MB", min_files=2)
    assert (result.batches, len(data_files(sink))) == (5, 1)
    assert batch_view(sink, specs) == view
    assert audit(sink).ok


def test_expiry_removes_crashed_runs_staging_but_never_a_live_runs(tmp_path: Path) -> None:
    sink_path = tmp_path / "sink"
    specs = small_mqtt_sink(sink_path, 2)
    sink = open_sink(sink_path)
    crashed = sink.stage("crashed-batch")
    (crashed.directory / "part-0.parquet").write_bytes(b"left by a killed run")
    an_hour_ago = time.time() - 3600
    for path in (crashed.directory, crashed.scratch, crashed.directory / "part-0.parquet"):
        os.utime(path, (an_hour_ago, an_hour_ago))
    live_spec = BatchSpec("mqtt", "other/#", client_id="live", max_messages=10, sequence=1)

    with sink.exclusive(StreamKey.of(live_spec)):
        live = sink.stage(live_spec.batch_id)
        (live.directory / "part-0.parquet").write_bytes(b"being written")
        dry = expire(sink_path, "30m", dry_run=True)
        result = expire(sink_path, "0s")  # even with no minimum age, the lock protects it
        assert live.directory.exists() and (live.directory / "part-0.parquet").exists()

    assert dry.orphans_deleted == result.orphans_deleted == 1
    assert not crashed.directory.exists() and not crashed.scratch.exists()
    assert audit(sink_path).ok and sink.find(specs[0].batch_id) is not None


def test_during_a_compactions_switch_plain_readers_see_batches_twice_and_read_dataset_once(
    tmp_path: Path,
) -> None:
    """The reader contract (sluice.datasets): a compaction paused between its merged
    directory's rename into place and the move of the directories it replaces. A plain
    reader's listing then holds those batches twice; read_dataset, listing under the sink's
    lock, waits out the switch and holds each row once."""
    sink = tmp_path / "sink"
    small_mqtt_sink(sink)
    expected = sorted(read_dataset(sink).to_table().column("message_id").to_pylist())
    in_switch, go_on = threading.Event(), threading.Event()
    listed: list[list[str]] = []

    def pause() -> None:
        in_switch.set()
        assert go_on.wait(60), "the test never let the compaction go on"

    def read() -> None:
        listed.append(read_dataset(sink).to_table().column("message_id").to_pylist())

    with armed("compact.after_commit", pause):
        compaction = threading.Thread(target=compact, args=(sink, "1MB"), kwargs={"min_files": 2})
        compaction.start()
        try:
            assert in_switch.wait(60), "the compaction never reached its switch"
            plain = ds.dataset(sink, partitioning="hive").to_table()
            assert len(plain) == 2 * len(expected), "a plain listing sees both directories"
            reader = threading.Thread(target=read)
            reader.start()
            reader.join(1.0)
            assert reader.is_alive(), "read_dataset must wait for the switch to finish"
        finally:
            go_on.set()
            compaction.join(60)
    reader.join(60)
    assert listed and sorted(listed[0]) == expected
    assert len(list(sink.glob("batch_id=*"))) == 1


def test_a_compaction_cannot_switch_while_read_dataset_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_dataset lists the batch directories under the sink's lock, which a compaction's
    switch takes: a compaction started while read_dataset is about to list cannot switch
    until the listing is done. (Before finding 8's change the listing came after the lock was
    released: a compaction that switched in that moment was read twice.)"""
    sink = tmp_path / "sink"
    small_mqtt_sink(sink)
    expected = sorted(read_dataset(sink).to_table().column("message_id").to_pylist())
    about_to_list, go_on, in_switch, switch_done = (threading.Event() for _ in range(4))
    real_glob = Path.glob

    def glob(self: Path, pattern: str, **kwargs: Any) -> Any:
        reader_lists = pattern == "batch_id=*" and threading.current_thread().name == "reader"
        if reader_lists and not about_to_list.is_set():
            about_to_list.set()
            assert go_on.wait(60), "the test never let the reader list"
        return real_glob(self, pattern, **kwargs)

    def pause() -> None:
        in_switch.set()
        assert switch_done.wait(60), "the test never let the compaction go on"

    monkeypatch.setattr(Path, "glob", glob)
    listed: list[list[str]] = []
    reader = threading.Thread(
        target=lambda: listed.append(
            read_dataset(sink).to_table().column("message_id").to_pylist()
        ),
        name="reader",
    )
    with armed("compact.after_commit", pause):
        reader.start()
        compaction = threading.Thread(target=compact, args=(sink, "1MB"), kwargs={"min_files": 2})
        try:
            assert about_to_list.wait(60), "read_dataset never listed"
            compaction.start()
            assert not in_switch.wait(2), "a compaction switched while read_dataset listed"
            go_on.set()
            reader.join(60)
            assert in_switch.wait(60), "the compaction never switched after the listing"
        finally:
            go_on.set()
            switch_done.set()
            reader.join(60)
            if compaction.ident is not None:
                compaction.join(60)
    assert listed and sorted(listed[0]) == expected
    assert sorted(read_dataset(sink).to_table().column("message_id").to_pylist()) == expected
