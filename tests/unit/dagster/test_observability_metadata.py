"""Lag metadata is valid Dagster metadata for every measurement, caught up ones included."""

from __future__ import annotations

from dagster import AssetKey, FloatMetadataValue

from sluice.metrics import PartitionLag, StreamLag
from sluice_dagster.observability import lag_metadata, lag_observation


def _lag(partitions: list[PartitionLag], last_batch_at: float | None) -> StreamLag:
    return StreamLag(
        kind="kafka",
        topic="orders",
        group="lake",
        measured_at=1000,
        partitions=partitions,
        last_batch_id="b1" if last_batch_at is not None else None,
        last_batch_at=last_batch_at,
    )


def test_a_caught_up_stream_has_float_ages() -> None:
    # Nothing waits, and times are whole seconds: ages must still be floats (Dagster's float
    # metadata refuses int 0, and a sensor tick failed on it).
    caught_up = _lag([PartitionLag(0, committed=5, end=5, lag=0)], last_batch_at=900)
    metadata = lag_metadata(caught_up)
    assert metadata["lag"].value == 0
    assert isinstance(metadata["oldest_waiting_age_seconds"], FloatMetadataValue)
    assert metadata["oldest_waiting_age_seconds"].value == 0.0
    assert isinstance(metadata["last_batch_age_seconds"], FloatMetadataValue)
    assert metadata["last_batch_age_seconds"].value == 100.0
    observation = lag_observation(AssetKey("orders"), caught_up)
    assert observation.metadata["lag"].value == 0


def test_waiting_messages_report_the_oldest_age() -> None:
    behind = _lag([PartitionLag(0, committed=2, end=5, lag=3, oldest_timestamp=990)], None)
    metadata = lag_metadata(behind)
    assert metadata["oldest_waiting_age_seconds"].value == 10.0
    assert metadata["lag_by_partition"].value == {"0": 3}
    assert "last_batch_age_seconds" not in metadata
