"""``sluice compact`` on a Delta sink SIGKILLed at each of its failpoints (before anything, after
the table's optimize commit, after its checkpoint, after the quarantine table's commit): each
table is as before or as after, every row is there once, the stream's ``txn`` versions and
state are intact, the audit passes, the next batch and a rerun of the last one are exactly
once, and a second compaction completes. The batches go through the sink's publish path
(``sluice.testing.batches``, no Spark); the compaction runs as the command, in a child."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from sluice.audit import audit
from sluice.maintenance import compact
from sluice.spark.sinks import ConcurrentIngestError, StreamKey, open_sink
from sluice.spark.sinks.delta import app_id
from sluice.testing.batches import publish_rows
from sluice.testing.crash import run_command

from ..spark.test_compaction import mqtt_rows, small_mqtt_sink

# Where the table's and the quarantine table's compactions are when the kill comes: (table
# compacted, its checkpoint written, quarantine table compacted).
DELTA_POINTS = {
    "compact.before_commit": (False, False, False),
    "compact.after_commit": (True, False, False),
    "compact.after_checkpoint": (True, True, False),
    "compact.after_quarantine_commit": (True, True, True),
}


def both(table: Path) -> tuple[DeltaTable, DeltaTable]:
    """The table and its quarantine table."""
    return DeltaTable(str(table)), DeltaTable(str(table / "_quarantine"))


def message_ids(table: Path) -> tuple[list[str], ...]:
    """Every message id of the table and of its quarantine table (multisets: sorted)."""
    return tuple(
        sorted(t.to_pyarrow_table(columns=["message_id"]).column(0).to_pylist())
        for t in both(table)
    )


def files(table: Path) -> tuple[int, ...]:
    return tuple(len(t.file_uris()) for t in both(table))


def versions(table: Path, stream: StreamKey) -> tuple[int | None, ...]:
    return tuple(t.transaction_version(app_id(stream)) for t in both(table))


@pytest.mark.parametrize("point", list(DELTA_POINTS))
def test_a_delta_compaction_killed_at_each_failpoint_leaves_the_table_before_or_after(
    tmp_path: Path, point: str
) -> None:
    table = tmp_path / "t"
    location = f"delta://{table}"
    specs = small_mqtt_sink(location)
    stream = StreamKey.of(specs[0])
    ids, state = message_ids(table), open_sink(location).state(stream).to_json()
    assert (files(table), versions(table, stream)) == ((4, 2), (4, 3))

    code, stderr = run_command(["compact", location, "--min-files", "2"], point)

    assert code == -9, stderr[-2000:]
    compacted, checkpointed, quarantine_compacted = DELTA_POINTS[point]
    assert files(table) == (1 if compacted else 4, 1 if quarantine_compacted else 2)
    assert bool(list((table / "_delta_log").glob("*.checkpoint.parquet"))) == checkpointed
    assert message_ids(table) == ids
    assert versions(table, stream) == (4, 3)
    sink = open_sink(location)
    assert sink.state(stream).to_json() == state
    report = audit(location)
    assert report.ok, "\n".join(report.lines())
    assert (report.streams[0].messages, report.streams[0].batches) == (18, 4)

    # a rerun of the last batch is recognised, and its rows cannot be published twice
    last = specs[-1]
    assert sink.find(last.batch_id) is not None
    assert last.batch_id in sink.state(stream).recent_batches
    with pytest.raises(ConcurrentIngestError):
        publish_rows(sink, last, *mqtt_rows(3))
    # the next batch lands once, then a second compaction completes
    specs += small_mqtt_sink(location, 1, first=4)
    assert versions(table, stream) == (5, 5)
    result = compact(location, "1MB", min_files=2)
    assert files(table) == (1, 1), result.lines()
    good, bad = message_ids(table)
    assert (good, bad) == (
        sorted([*ids[0], *(f"m4-{i}" for i in range(4))]),
        sorted([*ids[1], "bad4"]),
    )
    report = audit(location)
    assert report.ok and (report.streams[0].messages, report.streams[0].batches) == (23, 5)
