"""The Parquet sink: atomic publish, recovery, bounded stream state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.batch import BatchSpec, OffsetRange
from sluice.queues import ConfigError
from sluice.spark.failpoints import FailpointError, armed
from sluice.spark.sinks import (
    BatchRecord,
    ConcurrentIngestError,
    Coverage,
    ParquetSink,
    Staging,
    StreamKey,
)
from sluice.spark.sinks.base import DEDUP_WINDOW, StreamState

SPEC = BatchSpec("kafka", "t", group_id="g", ranges=(OffsetRange(0, 0, 4),))


def staged(sink: ParquetSink, batch_id: str, good: int, bad: int = 0) -> Staging:
    staging = sink.stage(batch_id)
    pq.write_table(pa.table({"x": list(range(good))}), staging.data / "part-0.parquet")
    if bad:
        staging.quarantine.mkdir()
        pq.write_table(pa.table({"x": list(range(bad))}), staging.quarantine / "part-0.parquet")
    return staging


def record(batch_id: str, start: int, end: int) -> BatchRecord:
    return BatchRecord(batch_id, SPEC.to_dict(), ranges=[OffsetRange(0, start, end)])


def test_publish_makes_rows_quarantine_and_record_appear_together(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.publish(staged(sink, "b1", good=3, bad=1), record("b1", 0, 4))

    assert pq.read_table(tmp_path).num_rows == 3, "readers see the good rows only"
    assert pq.read_table(sink.quarantine_dir("b1")).num_rows == 1
    assert sink.find("b1") is not None and sink.find("b2") is None
    assert sink.state(StreamKey("kafka", "t", "g")).written == Coverage({0: [(0, 4)]})
    assert not list((tmp_path / "_sluice" / "staging").iterdir())


def test_a_crash_before_the_rename_leaves_nothing_visible(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    with armed("publish.after_intent"), pytest.raises(FailpointError):
        sink.publish(staged(sink, "b1", good=3), record("b1", 0, 4))
    sink.recover()
    assert sink.find("b1") is None and not (tmp_path / "batch_id=b1").exists()
    assert sink.state(StreamKey("kafka", "t", "g")).written == Coverage()


def test_a_crash_after_the_rename_is_folded_in_by_recover(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    with armed("publish.after_rename"), pytest.raises(FailpointError):
        sink.publish(staged(sink, "b1", good=3), record("b1", 0, 4))
    assert sink.state(StreamKey("kafka", "t", "g")).written == Coverage()
    sink.recover()
    assert sink.state(StreamKey("kafka", "t", "g")).written == Coverage({0: [(0, 4)]})
    sink.recover()
    assert sink.state(StreamKey("kafka", "t", "g")).batches == 1, "folding is idempotent"


def test_publishing_offsets_another_run_published_is_refused(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.publish(staged(sink, "b1", good=3), record("b1", 0, 4))
    with pytest.raises(ConcurrentIngestError, match="partition 0 offsets 2-3"):
        sink.publish(staged(sink, "b2", good=3), record("b2", 2, 6))
    assert sink.find("b2") is None


def test_an_overlapping_batch_is_refused_even_when_a_crashed_run_left_its_state_unfolded(
    tmp_path: Path,
) -> None:
    """The finding: publish checked overlaps against the stream state without folding the
    intents of crashed runs first, so a run killed between the rename and the fold let an
    overlapping batch publish the same offsets again."""
    sink = ParquetSink(tmp_path)
    with armed("publish.after_rename"), pytest.raises(FailpointError):
        sink.publish(staged(sink, "b1", good=3), record("b1", 0, 4))
    overlapping = staged(sink, "b2", good=3)  # a run that started before the crash
    with pytest.raises(ConcurrentIngestError, match="partition 0 offsets 2-3"):
        sink.publish(overlapping, record("b2", 2, 6))
    assert sink.find("b2") is None and sink.find("b1") is not None


def test_a_record_planned_on_an_older_state_is_refused(tmp_path: Path) -> None:
    """I7: another run of the stream published after this one planned (even offsets that do
    not overlap): nothing is published."""
    sink = ParquetSink(tmp_path)
    sink.publish(staged(sink, "b1", good=3), record("b1", 0, 4))
    later = record("b2", 10, 14)
    later.planned_on = 0  # planned before b1 was published
    with pytest.raises(ConcurrentIngestError, match="1 batch"):
        sink.publish(staged(sink, "b2", good=3), later)
    assert sink.find("b2") is None


def test_stream_state_stays_small_however_many_batches() -> None:
    state = StreamState()
    for n in range(5_000):
        spec = BatchSpec("mqtt", "s/#", client_id="c", max_messages=50)
        ids = [f"{n}-{i}" for i in range(50)]
        state.fold(BatchRecord(f"m{n}", spec.to_dict(), message_ids=ids))
        state.fold(record(f"k{n}", n * 10, n * 10 + 10))
    assert state.written.intervals == {0: [(0, 50_000)]}
    assert len(state.recent_ids) == DEDUP_WINDOW and "4999-49" in state.recent_ids
    assert len(state.to_json()["recent_batches"]) <= 1_000


def test_a_sink_that_is_not_local_is_refused_with_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not a local directory.*file:///"):
        ParquetSink("hdfs://namenode/data")
    assert ParquetSink(f"file://{tmp_path}").root == tmp_path
